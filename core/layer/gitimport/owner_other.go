//go:build !unix

package gitimport

import "os/exec"

// runAs: on systems without uids, git runs as this process.
type runAs struct{}

func workspaceOwner(string) *runAs { return nil }

func (r *runAs) apply(*exec.Cmd) {}
