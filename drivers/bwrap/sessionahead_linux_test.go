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

// waitAheadWaiting waits (bounded) until n session sandboxes built ahead
// wait, and fails the test if they do not.
func waitAheadWaiting(t testing.TB, d *Driver, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, waiting := d.AheadStats()
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d session sandboxes built ahead wait, want %d (%+v)", waiting, n, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drainAhead ends the session sandboxes built ahead, those being built
// included once they are ready: what is left after it is a session's.
func drainAhead(t testing.TB, d *Driver) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d.emptyAhead()
		s := &d.sessions
		s.mu.Lock()
		busy := len(s.ahead.building) > 0 || s.ahead.total > 0
		s.mu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("session sandboxes still being built ahead")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSessionAheadTaken: the first command of a new session takes the
// session sandbox built ahead for its profile; it sees its own workspace
// (its file there, and it can write) and an empty /tmp, never another
// session's workspace or /tmp, and the workspace's parent holds nothing
// else and is read-only. The pool refills for the next session.
func TestSessionAheadTaken(t *testing.T) {
	d := testDriver(t, Options{})
	needSessions(t, d)
	wsA, wsB := newWorkspace(t), newWorkspace(t)
	if filepath.Dir(wsA) != filepath.Dir(wsB) {
		t.Fatalf("control: workspaces %s and %s do not share a parent", wsA, wsB)
	}
	for ws, name := range map[string]string{wsA: "a-file", wsB: "b-file"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := sessRun(t, d, wsA, "A", spawnCaps, `echo a > /tmp/markA && cat a-file`)
	expectOK(t, r)
	if r.stdout != "a-file\n" || sessionOf(r) != driverapi.SessionSandboxNew {
		t.Fatalf("session A: %q %v", r.stdout, r.exit.Details)
	}
	waitAheadWaiting(t, d, 1)
	root := filepath.Dir(wsB)
	r = sessRun(t, d, wsB, "B", spawnCaps, `cat b-file
echo written > new && echo wrote
test -e `+wsA+`/a-file && echo "sees A's workspace"
test -e /tmp/markA && echo "sees A's tmp"
ls -A `+root+`
touch `+root+`/planted 2>/dev/null && echo "root writable"
echo b > /tmp/markB && echo tmp ok`)
	expectOK(t, r)
	want := "b-file\nwrote\n" + filepath.Base(wsB) + "\ntmp ok\n"
	if r.stdout != want || sessionOf(r) != driverapi.SessionSandboxNew {
		t.Fatalf("session B from the pool: %q (want %q) %v %s", r.stdout, want, r.exit.Details, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(wsB, "new")); err != nil || string(b) != "written\n" {
		t.Fatalf("B's write did not reach its workspace: %q %v", b, err)
	}
	st, _ := d.AheadStats()
	if st.Taken != 1 {
		t.Fatalf("session B did not take the sandbox built ahead: %+v", st)
	}
	// Its next command runs in the same sandbox (its /tmp), over its
	// workspace.
	r = sessRun(t, d, wsB, "B", spawnCaps, `cat /tmp/markB new`)
	expectOK(t, r)
	if r.stdout != "b\nwritten\n" || sessionOf(r) != driverapi.SessionSandboxReused {
		t.Fatalf("B's second command: %q %v", r.stdout, r.exit.Details)
	}
	// Refilled for the next new session.
	waitAheadWaiting(t, d, 1)
	if strings.Contains(r.stderr, "sandbox-init") {
		t.Fatal(r.stderr)
	}
	_ = context.Background()
}
