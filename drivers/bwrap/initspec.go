package bwrap

import "github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"

// The sandbox-init contract lives in the leaf package sandboxinit (so a
// small binary can carry it without the driver's gRPC stack); these names
// keep it reachable as part of the driver's API.

// SandboxInitCommand is the hidden subcommand that runs sandbox-init.
const SandboxInitCommand = sandboxinit.SandboxInitCommand

// SandboxInitExitCode is sandbox-init's status when it refuses or fails.
const SandboxInitExitCode = sandboxinit.SandboxInitExitCode

// SocketMode selects the seccomp socket gate and Landlock TCP rules.
type SocketMode = sandboxinit.SocketMode

// Socket modes, named as in the seed.
const (
	SocketUnrestricted = sandboxinit.SocketUnrestricted
	SocketUnixOnly     = sandboxinit.SocketUnixOnly
	SocketProxyRouted  = sandboxinit.SocketProxyRouted
	SocketLoopback     = sandboxinit.SocketLoopback
)

// InitSpec is what the launcher tells sandbox-init to enforce.
type InitSpec = sandboxinit.InitSpec

// InitSpecError is returned for a spec or argv sandbox-init refuses.
type InitSpecError = sandboxinit.InitSpecError

// MarshalInitSpec validates s and encodes it for the sandbox-init argv.
func MarshalInitSpec(s InitSpec) ([]byte, error) { return sandboxinit.MarshalInitSpec(s) }

// ParseInitSpec decodes and validates one JSON document strictly.
func ParseInitSpec(data []byte) (InitSpec, error) { return sandboxinit.ParseInitSpec(data) }

// InitArgs builds `<initspec-json> -- PROGRAM ARGS...` for sandbox-init.
func InitArgs(s InitSpec, program string, args ...string) ([]string, error) {
	return sandboxinit.InitArgs(s, program, args...)
}

// CommandInitArgs builds `<initspec-json>` for sandbox-init, for a spec
// whose command is on InitSpec.CommandFD.
func CommandInitArgs(s InitSpec) ([]string, error) { return sandboxinit.CommandInitArgs(s) }

// ParseInitArgs is the inverse of InitArgs.
func ParseInitArgs(argv []string) (InitSpec, []string, error) { return sandboxinit.ParseInitArgs(argv) }

// SandboxInit confines this process and execs the target (Linux only); it
// returns SandboxInitExitCode only on failure.
func SandboxInit(args []string) int { return sandboxinit.SandboxInit(args) }

// LandlockABI is the Landlock ABI level sandbox-init enforces here (0: none).
func LandlockABI() int { return sandboxinit.LandlockABI() }

// SeccompAvailable reports whether sandbox-init can install its filter here.
func SeccompAvailable() bool { return sandboxinit.SeccompAvailable() }
