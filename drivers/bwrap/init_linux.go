//go:build linux

package bwrap

import (
	"fmt"
	"os"
)

// SandboxInit is being written; until then it refuses (fail closed).
func SandboxInit(args []string) int {
	fmt.Fprintln(os.Stderr, "aleph-sandbox: sandbox-init: not implemented")
	return SandboxInitExitCode
}

// LandlockABI reports the kernel's Landlock ABI version (0: unavailable).
func LandlockABI() int { return 0 }

// SeccompAvailable reports whether seccomp filters can be installed.
func SeccompAvailable() bool { return false }
