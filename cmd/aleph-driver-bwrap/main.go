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
	"runtime/debug"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/initmain"
)

func main() {
	if code, ok := bwrap.Main(os.Args[1:], os.Stdin, os.Stdout); ok {
		os.Exit(code)
	}
	if initmain.IsInitMode(os.Args[1:]) {
		os.Exit(initmain.Main(os.Args[1:]))
	}
	// Nothing may reach stdout before the go-plugin handshake: log to stderr.
	if os.Getenv(driverapi.OneCommandEnv) == "1" {
		// A driver for one command (the CLI's exec) exits after it: as
		// for the CLI itself, the runtime's first collection at 4 MB
		// costs CPU beside the command and frees nothing that matters.
		// GOGC 400 moves it to 16 MB; a long or large command is still
		// collected, its heap bounded by five times what is live.
		debug.SetGCPercent(400)
	}
	lg := hclog.New(&hclog.LoggerOptions{Name: "aleph-driver-bwrap", Output: os.Stderr, JSONFormat: true})
	d, err := bwrap.NewFromEnv(lg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "aleph-driver-bwrap:", err)
		os.Exit(125)
	}
	d.MarkTrace("serving")
	// Serve starts d.Prepare (the host probe) in the background, so it
	// overlaps the handshake.
	driverapi.Serve(d)
	d.MarkTrace("exit")
}
