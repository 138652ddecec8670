//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// NetSupervisorCommand is the hidden mode of the driver binary that runs
// first inside an allow_hosts sandbox:
//
//	sandbox-net --socket PATH --listen ADDR... -- [sandbox-pwd ARG] sandbox-init ...
//
// It binds the bridge's listeners in the sandbox's network namespace (so
// they are there before the command starts), then runs the rest of its
// argv (the usual sandbox-init chain) as its child, relays for as long as
// that child lives and exits with its status. The bridge makes no decisions;
// the host proxy behind the socket does.
const NetSupervisorCommand = "sandbox-net"

// NetSupervisorMain implements NetSupervisorCommand (args exclude it).
func NetSupervisorMain(args []string) int {
	fail := func(f string, a ...any) int {
		fmt.Fprintf(os.Stderr, "aleph-sandbox: %s: %s\n", NetSupervisorCommand, fmt.Sprintf(f, a...))
		return SandboxInitExitCode
	}
	var socket string
	var listen, rest []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "--":
			rest = args[i+1:]
			i = len(args)
		case args[i] == "--socket" && i+1 < len(args):
			i++
			socket = args[i]
		case args[i] == "--listen" && i+1 < len(args):
			i++
			listen = append(listen, args[i])
		default:
			return fail("bad argument %q", args[i])
		}
	}
	if socket == "" || len(listen) == 0 || len(rest) == 0 {
		return fail("usage: --socket PATH --listen ADDR... -- COMMAND...")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := StartBridge(ctx, listen, socket)
	if err != nil {
		return fail("%v", err)
	}
	defer b.Close()
	self, err := os.Executable()
	if err != nil {
		return fail("%v", err)
	}
	cmd := exec.Command(self, rest...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	default:
		return fail("%v", err)
	}
}
