//go:build !linux

package sandboxinit

import (
	"fmt"
	"os"
)

// SandboxInit confines the process and execs the target; it exists only on
// Linux. Elsewhere it refuses, so a misrouted launch never runs unconfined.
func SandboxInit(args []string) int {
	fmt.Fprintln(os.Stderr, "aleph-sandbox: sandbox-init: only supported on linux")
	return SandboxInitExitCode
}

// SessionUserTrial refuses off Linux (SessionUserTrialCommand).
func SessionUserTrial(args []string) int {
	fmt.Fprintln(os.Stderr, "aleph-sandbox: "+SessionUserTrialCommand+": only supported on linux")
	return SandboxInitExitCode
}

// LayeredView refuses off Linux (LayeredViewCommand).
func LayeredView(args []string) int {
	fmt.Fprintln(os.Stderr, "aleph-sandbox: "+LayeredViewCommand+": only supported on linux")
	return SandboxInitExitCode
}

// LandlockABI is 0 off Linux.
func LandlockABI() int { return 0 }

// SeccompAvailable is false off Linux.
func SeccompAvailable() bool { return false }
