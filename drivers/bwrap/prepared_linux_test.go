//go:build linux

package bwrap

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func preparedOpts(mode PreparedMode) Options { return Options{Prepared: mode} }

// TestPreparedHandover runs commands through prepared sandboxes: output,
// exit status, environment, cwd and stdin arrive with the hand-over, and
// the exit says it ran prepared.
func TestPreparedHandover(t *testing.T) {
	d := testDriver(t, preparedOpts(PreparedAlways))
	ws := newWorkspace(t)
	if err := os.Mkdir(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := drvSh(t, d, ws, `echo "out $FOO $(pwd)"; echo err >&2; exit 7`)
	if r.err != nil || r.exit.ExitCode != 7 || r.stderr != "err\n" || r.exit.Details["prepared"] != "1" {
		t.Fatalf("got %+v", r)
	}
	if !strings.HasPrefix(r.stdout, "out  "+ws) {
		t.Fatalf("stdout %q", r.stdout)
	}
	st := d.PreparedStats()
	if st.Built+st.Hits == 0 && st.Misses == 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPreparedOnce: a prepared sandbox serves one command. Two commands of
// one profile back to back run in different sandboxes (PID namespaces),
// both prepared, and the pool hit.
func TestPreparedOnce(t *testing.T) {
	d := testDriver(t, preparedOpts(PreparedAuto))
	ws := newWorkspace(t)
	seen := map[string]bool{}
	prepared := 0
	for i := 0; i < 6; i++ {
		r := drvSh(t, d, ws, `readlink /proc/self/ns/pid`)
		expectOK(t, r)
		if seen[r.stdout] {
			t.Fatalf("command %d ran in a PID namespace seen before: %s", i, r.stdout)
		}
		seen[r.stdout] = true
		if r.exit.Details["prepared"] == "1" {
			prepared++
		}
		// Give the refill time to finish (auto: from the second run on).
		waitUntil(t, func() bool { return i < 1 || d.PreparedStats().Waiting > 0 })
	}
	if st := d.PreparedStats(); st.Hits < 3 || prepared < 3 {
		t.Fatalf("prepared %d of 6, stats %+v", prepared, st)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPreparedTimeoutFromHandover: a sandbox that waited longer than the
// command's timeout does not shorten it, and the timeout still applies.
func TestPreparedTimeoutFromHandover(t *testing.T) {
	d := testDriver(t, preparedOpts(PreparedAuto))
	ws := newWorkspace(t)
	ctx := context.Background()
	caps := driverapi.Capabilities{SpawnSubprocess: true}
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	run := func(script string, timeout time.Duration) driverapi.Exit {
		exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", script}, Env: pathEnv(), Cwd: ws,
			Profile: prof, Timeout: timeout, MaxOutputBytes: 1 << 20}, driverapi.Streams{Stdout: &lockedBuf{}, Stderr: &lockedBuf{}})
		if err != nil {
			t.Fatal(err)
		}
		return exit
	}
	run("true", time.Second)
	run("true", time.Second)
	waitUntil(t, func() bool { return d.PreparedStats().Waiting >= 2 })
	time.Sleep(1500 * time.Millisecond) // longer than the timeout below
	if e := run("sleep 0.3", time.Second); e.TimedOut || e.ExitCode != 0 || e.Details["prepared"] != "1" {
		t.Fatalf("a command well within its timeout: %+v", e)
	}
	if e := run("sleep 5", 500*time.Millisecond); !e.TimedOut || e.Details["prepared"] != "1" || e.Duration > 4*time.Second {
		t.Fatalf("a command past its timeout: %+v", e)
	}
}
