//go:build unix

// Command standin is a test-only driver: the Seatbelt driver's real
// plumbing (profile, argv, shim, process group, budgets, timeouts) with
// itself as a stand-in for sandbox-exec, so the conformance suite's
// protocol and exec cases can run against that plumbing on a host without
// Seatbelt. It enforces no isolation and claims none: it reports only
// env_isolation, which the plumbing alone provides.
package main

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/seatbelt"
)

type standin struct{ *seatbelt.Driver }

func (s standin) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	return driverapi.HostCapabilities{
		Backend: seatbelt.Backend, DriverVersion: seatbelt.Version + "-standin",
		ProtocolVersion: driverapi.ProtocolVersion,
		// Not memory_limit: the shim is real, but this stand-in launcher
		// is a Go program, and the Go runtime cannot start under a small
		// RLIMIT_AS (the real sandbox-exec is C).
		Features: []string{driverapi.FeatureEnvIsolation},
		OS:       "standin", Arch: "standin",
	}, nil
}

func main() {
	switch {
	case len(os.Args) > 1 && os.Args[1] == seatbelt.ShimArg:
		os.Exit(seatbelt.ShimMain(os.Args[2:]))
	case len(os.Args) > 1 && os.Args[1] == "-p":
		os.Exit(launcher(os.Args[1:]))
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(125)
	}
	driverapi.Serve(standin{seatbelt.New(seatbelt.Config{SandboxExec: exe, GOOS: "darwin",
		ProbeMemoryLimit: func(context.Context) error { return nil }})})
}

// launcher takes sandbox-exec's arguments (-p PROFILE, -D NAME=VALUE...,
// then the command) and execs the command with the environment untouched.
func launcher(args []string) int {
	args = args[2:]
	for len(args) >= 2 && args[0] == "-D" {
		args = args[2:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "standin: no command")
		return 71
	}
	err := syscall.Exec(args[0], args, os.Environ())
	fmt.Fprintln(os.Stderr, "standin: exec:", err)
	return 71
}
