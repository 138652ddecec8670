//go:build linux

// Command aleph-driver-bwrap is the Linux sandbox driver plugin. Started by
// the host it serves the driver over go-plugin; started by bwrap inside a
// sandbox as `aleph-driver-bwrap [sandbox-pwd ARG] sandbox-init <spec> --
// PROGRAM ARGS...` it confines itself (Landlock, rlimits, seccomp) and execs
// the program.
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap"
)

func main() {
	args := os.Args[1:]
	if len(args) >= 2 && args[0] == bwrap.PWDCommand {
		if err := bwrap.RestorePWD(args[1]); err != nil {
			fmt.Fprintln(os.Stderr, "aleph-sandbox: sandbox-init:", err)
			os.Exit(bwrap.SandboxInitExitCode)
		}
		args = args[2:]
		if len(args) == 0 || args[0] != bwrap.SandboxInitCommand {
			fmt.Fprintln(os.Stderr, "aleph-sandbox: sandbox-init: "+bwrap.PWDCommand+" must be followed by "+bwrap.SandboxInitCommand)
			os.Exit(bwrap.SandboxInitExitCode)
		}
	}
	if len(args) > 0 && args[0] == bwrap.SandboxInitCommand {
		os.Exit(bwrap.SandboxInit(args[1:]))
	}
	// Nothing may reach stdout before the go-plugin handshake: log to stderr.
	lg := hclog.New(&hclog.LoggerOptions{Name: "aleph-driver-bwrap", Output: os.Stderr, JSONFormat: true})
	d, err := bwrap.NewFromEnv(lg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "aleph-driver-bwrap:", err)
		os.Exit(125)
	}
	driverapi.Serve(d)
}
