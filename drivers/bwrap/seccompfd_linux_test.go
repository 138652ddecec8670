//go:build linux

package bwrap

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Every sandbox-init of a command is handed the driver's precompiled
// programs (seccomp_fd in its spec), one memfd per program key for the
// driver's lifetime; the command still runs filtered (Seccomp: 2). (That
// the programs given are the ones loaded: sandboxinit's
// TestSandboxInitLoadsPrecompiled; that they deny what they must: the
// hardening tests, which run through this path.)
func TestPrecompiledSeccompReachesSandboxInit(t *testing.T) {
	// sandbox-init is found by the workspace in its spec (the command's
	// argv is on a descriptor); a prepared sandbox's is another
	// (TestPreparedChain checks theirs).
	d := testDriver(t, options{Prepared: preparedOff})
	ws := newWorkspace(t)
	marker := uniqueMarker()
	done := make(chan drvResult, 1)
	go func() {
		done <- drvRun(t, context.Background(), d, ws, driverapi.Capabilities{}, pathEnv(), "/bin/sleep", marker)
	}()
	var initArgv string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && initArgv == ""; time.Sleep(10 * time.Millisecond) {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err == nil && strings.Contains(string(b), ws) && strings.Contains(string(b), sandboxInitCommand) && !strings.HasPrefix(string(b), "bwrap") {
				initArgv = string(b)
			}
		}
	}
	if !strings.Contains(initArgv, `"seccomp_fd":`) {
		t.Fatalf("sandbox-init's spec carries no seccomp_fd: %q", initArgv)
	}
	if len(d.progs.files) != 1 {
		t.Fatalf("%d program memfds, want 1", len(d.progs.files))
	}
	// Kill the sleep: the lifeline's signal request.
	if err := d.signalCommand(t.Name(), syscall.SIGKILL); err != nil {
		t.Fatalf("signal: %v", err)
	}
	if r := <-done; r.err != nil || r.exit.Signal != int32(syscall.SIGKILL) {
		t.Fatalf("the sleep did not end by the signal: %+v", r)
	}
	r := drvRun(t, context.Background(), d, ws, driverapi.Capabilities{}, pathEnv(), "/bin/cat", "/proc/self/status")
	if r.err != nil || !strings.Contains(r.stdout, "Seccomp:\t2") {
		t.Fatalf("default profile under precompiled programs: %+v", r)
	}
	// The same key again: still one memfd.
	if len(d.progs.files) != 1 {
		t.Fatalf("%d program memfds after a second command, want 1", len(d.progs.files))
	}
}
