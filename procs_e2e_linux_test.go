//go:build linux

package alephsandbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// bwrapRuntime is a runtime over the real bubblewrap driver, built from
// this checkout, with private data, workspace and audit paths.
func bwrapRuntime(t *testing.T) (*alephsandbox.Runtime, string) {
	t.Helper()
	return bwrapRuntimeWith(t, nil)
}

// bwrapRuntimeWith is bwrapRuntime with the configuration changed by edit.
func bwrapRuntimeWith(t *testing.T, edit func(*core.Config)) (*alephsandbox.Runtime, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the driver and runs the real sandbox; skipped with -short")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap (bwrap) is not installed: this test runs real sandboxed processes")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin+"/",
		"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-driver-bwrap",
		"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox-init")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cfg := testConfig(t)
	cfg.Sandbox.Driver = filepath.Join(bin, "aleph-driver-bwrap")
	if edit != nil {
		edit(&cfg)
	}
	rt, err := alephsandbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	return rt, cfg.Sandbox.AuditLog
}

// readUntil reads a process's output from offset 0 until it holds want or
// the process ends.
func readUntil(t *testing.T, rt *alephsandbox.Runtime, id, want string) core.ProcessRead {
	t.Helper()
	var all []byte
	var off int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := rt.ReadProcess(context.Background(), id, off, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		all, off = append(all, r.Data...), r.Next
		if bytes.Contains(all, []byte(want)) || r.Exited || time.Now().After(deadline) {
			r.Data = all
			return r
		}
	}
}

// TestRuntimeProcesses: the runtime's process API over the real driver.
// cat echoes what is written to its stdin and exits 0 at EOF; sleep ends
// by the signal sent; a written process shows in the list and leaves it
// once waited for; calls on an ended or unknown process fail typed; a
// deleted session's process is killed; each process is one audit record.
func TestRuntimeProcesses(t *testing.T) {
	rt, audit := bwrapRuntime(t)
	ctx := context.Background()

	id, err := rt.StartProcess(ctx, core.Command{SessionID: "p", Program: "/bin/cat"})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := rt.WriteProcess(ctx, id, []byte("hello\n")); err != nil || n != 6 {
		t.Fatalf("write: %d %v", n, err)
	}
	if r := readUntil(t, rt, id, "hello\n"); string(r.Data) != "hello\n" || r.Exited {
		t.Fatalf("read: %q exited %v", r.Data, r.Exited)
	}
	if l := rt.ListProcesses("p"); len(l) != 1 || l[0].ID != id || l[0].Exited || l[0].Program != "/bin/cat" {
		t.Fatalf("list: %+v", l)
	}
	if err := rt.CloseProcessStdin(id); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.WriteProcess(ctx, id, []byte("late")); !errors.Is(err, core.ErrStdinClosed) && !errors.Is(err, core.ErrProcessEnded) {
		t.Fatalf("write after close: %v", err)
	}
	res, err := rt.WaitProcess(ctx, id)
	if err != nil || res.Err != nil || res.Output == nil || res.Output.Exit.ExitCode != 0 || res.Output.Backend != "bwrap" || string(res.Output.Stdout) != "hello\n" {
		t.Fatalf("wait: %+v %v", res, err)
	}
	var nf *core.ProcessNotFoundError
	if _, err := rt.ReadProcess(ctx, id, 0, 0); !errors.As(err, &nf) {
		t.Fatalf("read after wait: %v", err)
	}
	if l := rt.ListProcesses("p"); len(l) != 0 {
		t.Fatalf("list after wait: %+v", l)
	}

	// A signal ends a process that would run for ever; the result says
	// which.
	id, err = rt.StartProcess(ctx, core.Command{SessionID: "p", Program: "/bin/sh", Args: []string{"-c", "echo ready; exec sleep 1000"}})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, rt, id, "ready\n")
	if err := rt.SignalProcess(id, driverapi.SignalTERM); err != nil {
		t.Fatal(err)
	}
	res, err = rt.WaitProcess(ctx, id)
	if err != nil || res.Output == nil || res.Output.Exit.Signal != 15 {
		t.Fatalf("sleep after TERM: %+v %v", res, err)
	}

	// A command that exits by itself: its status, and a signal to it
	// once ended is ErrProcessEnded.
	id, err = rt.StartProcess(ctx, core.Command{SessionID: "p", Program: "/usr/bin/false"})
	if err != nil {
		t.Fatal(err)
	}
	if r := readUntil(t, rt, id, "\x00never"); !r.Exited || r.Result == nil || r.Result.Output.Exit.ExitCode != 1 {
		t.Fatalf("false: %+v", r)
	}
	if err := rt.SignalProcess(id, driverapi.SignalTERM); !errors.Is(err, core.ErrProcessEnded) {
		t.Fatalf("signal to an ended process: %v", err)
	}
	if _, err := rt.WaitProcess(ctx, id); err != nil {
		t.Fatal(err)
	}

	// Deleting the session kills its processes.
	id, err = rt.StartProcess(ctx, core.Command{SessionID: "gone", Program: "/bin/sh", Args: []string{"-c", "echo ready; exec sleep 1000"}})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, rt, id, "ready\n")
	if err := rt.DeleteSession("gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.ReadProcess(ctx, id, 0, 0); !errors.As(err, &nf) {
		t.Fatalf("a deleted session's process: %v", err)
	}
	if l := rt.ListProcesses(""); len(l) != 0 {
		t.Fatalf("processes left: %+v", l)
	}

	// Bad input is typed, before anything runs.
	var ic *core.InvalidCommandError
	if _, err := rt.StartProcess(ctx, core.Command{Program: "/bin/cat"}); !errors.As(err, &ic) || ic.Field != "session" {
		t.Fatalf("no session: %v", err)
	}
	if _, err := rt.StartProcess(ctx, core.Command{SessionID: "p", Program: "/bin/cat", Stdin: []byte("x")}); !errors.As(err, &ic) || ic.Field != "stdin" {
		t.Fatalf("stdin given up front: %v", err)
	}

	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `"program":"/bin/cat"`); n != 1 {
		t.Fatalf("%d audit records of cat, want 1:\n%s", n, b)
	}
}
