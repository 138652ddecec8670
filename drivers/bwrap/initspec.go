package bwrap

import "github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"

// The sandbox-init contract lives in the leaf package sandboxinit (so a
// small binary can carry it without the driver's gRPC stack); these names
// keep it reachable as part of the driver's API.

// sandboxInitCommand is the hidden subcommand that runs sandbox-init.
const sandboxInitCommand = sandboxinit.SandboxInitCommand

// sandboxInitExitCode is sandbox-init's status when it refuses or fails.
const sandboxInitExitCode = sandboxinit.SandboxInitExitCode

// socketMode selects the seccomp socket gate and Landlock TCP rules.
type socketMode = sandboxinit.SocketMode

// Socket modes, named as in the seed.
const (
	socketUnrestricted = sandboxinit.SocketUnrestricted
	socketUnixOnly     = sandboxinit.SocketUnixOnly
	socketProxyRouted  = sandboxinit.SocketProxyRouted
	socketLoopback     = sandboxinit.SocketLoopback
)

// initSpec is what the launcher tells sandbox-init to enforce.
type initSpec = sandboxinit.InitSpec

// initSpecError is returned for a spec or argv sandbox-init refuses.
type initSpecError = sandboxinit.InitSpecError

// marshalInitSpec validates s and encodes it for the sandbox-init argv.
func marshalInitSpec(s initSpec) ([]byte, error) { return sandboxinit.MarshalInitSpec(s) }

// parseInitSpec decodes and validates one JSON document strictly.
func parseInitSpec(data []byte) (initSpec, error) { return sandboxinit.ParseInitSpec(data) }

// initArgs builds `<initspec-json> -- PROGRAM ARGS...` for sandbox-init.
func initArgs(s initSpec, program string, args ...string) ([]string, error) {
	return sandboxinit.InitArgs(s, program, args...)
}

// commandInitArgs builds `<initspec-json>` for sandbox-init, for a spec
// whose command is on initSpec.CommandFD.
func commandInitArgs(s initSpec) ([]string, error) { return sandboxinit.CommandInitArgs(s) }

// parseInitArgs is the inverse of initArgs.
func parseInitArgs(argv []string) (initSpec, []string, error) { return sandboxinit.ParseInitArgs(argv) }

// sandboxInit confines this process and execs the target (Linux only); it
// returns sandboxInitExitCode only on failure.
func sandboxInit(args []string) int { return sandboxinit.SandboxInit(args) }

// landlockABI is the Landlock ABI level sandbox-init enforces here (0: none).
func landlockABI() int { return sandboxinit.LandlockABI() }

// seccompAvailable reports whether sandbox-init can install its filter here.
func seccompAvailable() bool { return sandboxinit.SeccompAvailable() }
