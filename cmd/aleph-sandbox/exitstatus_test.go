package main

import (
	"bytes"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// TestExecStatusKeepsAFailureAFailure: exec's status is the command's exit
// code where a status can hold it (0-255, the controls); a code beyond
// that (Windows' 32-bit codes, or a service on another host) is cut to its
// low byte as shells do, except that a failure never becomes 0: 256 would
// otherwise tell a script that a failed command succeeded.
func TestExecStatusKeepsAFailureAFailure(t *testing.T) {
	for _, c := range []struct {
		exit driverapi.Exit
		want int
	}{
		{driverapi.Exit{ExitCode: 0}, 0},
		{driverapi.Exit{ExitCode: 3}, 3},
		{driverapi.Exit{ExitCode: 255}, 255},
		{driverapi.Exit{ExitCode: 137, Signal: 9}, 137},
		{driverapi.Exit{ExitCode: 257}, 1},
		{driverapi.Exit{ExitCode: -1073741819}, 5}, // 0xC0000005
		{driverapi.Exit{ExitCode: 256}, 255},
		{driverapi.Exit{ExitCode: 512}, 255},
		{driverapi.Exit{ExitCode: -256}, 255},
	} {
		var out, errb bytes.Buffer
		got := reportExec(stdio{Out: &out, Err: &errb}, false, &core.Output{Exit: c.exit}, "", nil)
		if got != c.want {
			t.Errorf("exit code %d (signal %d): status %d, want %d", c.exit.ExitCode, c.exit.Signal, got, c.want)
		}
	}
}
