//go:build !unix

package main

import "os/exec"

// ownGroup leaves cmd as it is: without a Job Object, cancel and timeout
// kill the command itself (exec.CommandContext's default).
func ownGroup(*exec.Cmd) {}
