// Package initmain is the entry point of the in-sandbox half of the bwrap
// driver, shared by the driver binary (hidden mode) and the small
// aleph-sandbox-init binary. It imports only the confinement package, so a
// binary built from it starts without the driver's gRPC stack.
package initmain

import (
	"fmt"
	"os"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// PWDCommand is an optional prefix: `sandbox-pwd ARG sandbox-init ...`.
// bwrap always sets PWD to the working directory; the child must see
// exactly the environment it was given, so the launcher says what PWD
// should be ("" for unset, "=VALUE" for VALUE) and it is restored here
// before sandbox-init execs the target.
const PWDCommand = "sandbox-pwd"

// IsInitMode reports whether args (os.Args[1:]) ask for the in-sandbox mode.
func IsInitMode(args []string) bool {
	return len(args) > 0 && (args[0] == PWDCommand || args[0] == sandboxinit.SandboxInitCommand || args[0] == sandboxinit.SessionUserTrialCommand || args[0] == sandboxinit.LayeredViewCommand)
}

// Main runs the in-sandbox mode for args (os.Args[1:]) and returns the exit
// status; on success it does not return (the target replaces the process).
func Main(args []string) int {
	if len(args) >= 2 && args[0] == PWDCommand {
		if err := RestorePWD(args[1]); err != nil {
			fmt.Fprintln(os.Stderr, "aleph-sandbox: sandbox-init:", err)
			return sandboxinit.SandboxInitExitCode
		}
		args = args[2:]
	}
	if len(args) > 0 && args[0] == sandboxinit.SessionUserTrialCommand {
		return sandboxinit.SessionUserTrial(args[1:])
	}
	if len(args) > 0 && args[0] == sandboxinit.LayeredViewCommand {
		return sandboxinit.LayeredView(args[1:])
	}
	if len(args) == 0 || args[0] != sandboxinit.SandboxInitCommand {
		fmt.Fprintln(os.Stderr, "aleph-sandbox: sandbox-init: usage: ["+PWDCommand+" ARG] "+sandboxinit.SandboxInitCommand+" <initspec-json> -- PROGRAM [ARGS...]")
		return sandboxinit.SandboxInitExitCode
	}
	return sandboxinit.SandboxInit(args[1:])
}

// PWDArg encodes the PWD of env (NAME=VALUE entries) for PWDCommand.
func PWDArg(env []string) string {
	for _, kv := range env {
		if strings.HasPrefix(kv, "PWD=") {
			return "=" + strings.TrimPrefix(kv, "PWD=")
		}
	}
	return ""
}

// RestorePWD applies a PWDCommand argument to this process's environment.
func RestorePWD(arg string) error {
	if arg == "" {
		return os.Unsetenv("PWD")
	}
	if !strings.HasPrefix(arg, "=") {
		return fmt.Errorf("%s: argument %q is neither empty nor =VALUE", PWDCommand, arg)
	}
	return os.Setenv("PWD", arg[1:])
}
