//go:build !unix

package main

import "os/exec"

// ownGroup leaves cmd as it is: Windows has no process group a driver can
// kill, so cancel and timeout kill the command itself (exec.CommandContext's
// default). A Job Object would take its children too (process_tree_kill).
func ownGroup(*exec.Cmd) {}
