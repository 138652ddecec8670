//go:build linux

package bwrap

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	d := testDriver(t, options{})
	needAhead(t, d)
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
}

// netInode is the network namespace a command of session sees.
func netInode(t *testing.T, d *Driver, ws, session string, caps driverapi.Capabilities) string {
	t.Helper()
	r := sessRun(t, d, ws, session, caps, `readlink /proc/self/ns/net`)
	expectOK(t, r)
	return strings.TrimSpace(r.stdout)
}

// TestSessionAheadProfiles: a sandbox built ahead for one profile never
// serves another (a no-spawn session after spawn ones builds its own, and
// cannot spawn); under network none the taken sandbox's namespace is its
// session's own, which the session's commands of another profile share,
// and another session's is another; a session that holds a namespace
// already leaves the waiting sandbox untouched for the next new session.
func TestSessionAheadProfiles(t *testing.T) {
	d := testDriver(t, options{})
	needAhead(t, d)
	wsA, wsB, wsC, wsD := newWorkspace(t), newWorkspace(t), newWorkspace(t), newWorkspace(t)
	expectOK(t, sessRun(t, d, wsA, "A", spawnCaps, `:`))
	waitAheadWaiting(t, d, 1)
	// Profile B (no spawn): nothing built ahead for it.
	r := sessRun(t, d, wsB, "B", driverapi.Capabilities{}, `/bin/true && echo spawned`)
	if r.err != nil || strings.Contains(r.stdout, "spawned") || r.exit.SpawnRefused == 0 {
		t.Fatalf("no-spawn session: %+v %q", r.exit, r.stdout)
	}
	if st, waiting := d.AheadStats(); st.Taken != 0 || waiting < 1 {
		t.Fatalf("a no-spawn session took the spawn profile's sandbox: %+v, %d waiting", st, waiting)
	}
	// Session C holds a network namespace (a no-spawn command first): the
	// spawn sandbox waiting, with its own, is not for it.
	// (It may take one built ahead for the no-spawn profile after B.)
	expectOK(t, sessRun(t, d, wsC, "C", driverapi.Capabilities{}, `:`))
	before, _ := d.AheadStats()
	netC := netInode(t, d, wsC, "C", spawnCaps)
	if st, waiting := d.AheadStats(); st.Taken != before.Taken || waiting < 1 {
		t.Fatalf("session C took it: %+v (before %+v), %d waiting", st, before, waiting)
	}
	// Session D, new: takes it, and its namespace is D's own.
	netD := netInode(t, d, wsD, "D", spawnCaps)
	if st, _ := d.AheadStats(); st.Taken != before.Taken+1 {
		t.Fatalf("session D did not take the sandbox built ahead: %+v (before %+v)", st, before)
	}
	if netD == netC || netD == "" || !strings.HasPrefix(netD, "net:[") {
		t.Fatalf("network namespaces: C %s, D %s", netC, netD)
	}
	held := false
	for _, ino := range d.heldInodes() {
		if netD == "net:["+strconv.FormatUint(ino, 10)+"]" {
			held = true
		}
	}
	if d.probe().sessionNet == sessionNetSetns && !held {
		t.Fatalf("D's namespace %s is not the one held for session D (%v)", netD, d.heldInodes())
	}
}

// TestSessionAheadIdleDropped: a sandbox built ahead that no session takes
// ends after session_ahead_idle_ms and leaves nothing (processes, cgroups);
// a session taken from one and forgotten leaves nothing either.
func TestSessionAheadIdleDropped(t *testing.T) {
	d := testDriver(t, options{SessionAheadIdleMS: 1500})
	needAhead(t, d)
	wsA, wsB := newWorkspace(t), newWorkspace(t)
	root := filepath.Dir(wsA)
	expectOK(t, sessRun(t, d, wsA, "A", spawnCaps, `:`))
	waitAheadWaiting(t, d, 1)
	// Control: it is there, processes and all.
	if _, all := sessionProcs(root); len(all) < 3 {
		t.Fatalf("control: %d session processes under %s, want A's and the one built ahead", len(all), root)
	}
	// Taken by B.
	expectOK(t, sessRun(t, d, wsB, "B", spawnCaps, `:`))
	if st, _ := d.AheadStats(); st.Taken != 1 {
		t.Fatalf("B did not take it: %+v", st)
	}
	// B's take built another ahead: unused while A and B live, it is
	// dropped.
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, waiting := d.AheadStats()
		if st.Expired >= 1 && waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not dropped: %+v, %d waiting", st, waiting)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := d.liveSessions(); n != 2 {
		t.Fatalf("control: %d session sandboxes live, want A's and B's", n)
	}
	// Forgetting the last session ends what is built ahead at once (none
	// waits now, but B's forget must not leave one being built either).
	for _, s := range []string{"A", "B"} {
		if err := d.ForgetSession(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	if _, all := sessionProcs(root); len(all) != 0 {
		t.Fatalf("processes left right after the last forget: %v", all)
	}
	expectNothingLeft(t, d, root)
}

// TestSessionAheadLastForget: once the last session is forgotten, the
// sandboxes built ahead end with it: the driver holds no process of its
// own (the conformance suite's robust cases check this).
func TestSessionAheadLastForget(t *testing.T) {
	d := testDriver(t, options{})
	needAhead(t, d)
	ws := newWorkspace(t)
	root := filepath.Dir(ws)
	expectOK(t, sessRun(t, d, ws, "A", spawnCaps, `:`))
	waitAheadWaiting(t, d, 1)
	if err := d.ForgetSession(context.Background(), "A"); err != nil {
		t.Fatal(err)
	}
	if _, all := sessionProcs(root); len(all) != 0 {
		t.Fatalf("processes left right after the last forget: %v", all)
	}
	if _, waiting := d.AheadStats(); waiting != 0 {
		t.Fatalf("%d still waiting", waiting)
	}
}

// TestSessionAheadClose: Close ends the sandboxes built ahead with the
// sessions' and leaves nothing; the pool can be emptied, and 0 builds none.
func TestSessionAheadClose(t *testing.T) {
	d := testDriver(t, options{})
	needAhead(t, d)
	ws := newWorkspace(t)
	root := filepath.Dir(ws)
	expectOK(t, sessRun(t, d, ws, "A", spawnCaps, `:`))
	waitAheadWaiting(t, d, 1)
	d.Close()
	if _, waiting := d.AheadStats(); waiting != 0 {
		t.Fatalf("%d still waiting after Close", waiting)
	}
	expectNothingLeft(t, d, root)

	off := testDriver(t, options{SessionAhead: new(uint64)})
	ws = newWorkspace(t)
	expectOK(t, sessRun(t, off, ws, "A", spawnCaps, `:`))
	expectOK(t, sessRun(t, off, newWorkspace(t), "B", spawnCaps, `:`))
	if st, waiting := off.AheadStats(); st.Built != 0 || waiting != 0 || st.Taken != 0 {
		t.Fatalf("session_ahead = 0 built some: %+v, %d waiting", st, waiting)
	}
}

// TestSessionAheadDriverDeath: the driver killed, the session sandboxes it
// built ahead end with its sessions' (their lifelines hang up).
func TestSessionAheadDriverDeath(t *testing.T) {
	needAhead(t, testDriver(t, options{}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := driverapi.LaunchDriver(ctx, driverapi.LaunchConfig{Path: driverBin,
		Env: []string{optionsEnv + `={"session_sandbox":"always","cgroup":"none","session_ahead":2}`}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	d := p.Driver()
	ws := newWorkspace(t)
	root := filepath.Dir(ws)
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: spawnCaps, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	spec := driverapi.RunSpec{Program: "/bin/true", Cwd: ws, Profile: prof, Env: pathEnv(),
		Timeout: 30 * time.Second, MaxOutputBytes: 1024, SessionID: "s"}
	setSessionSandbox(&spec)
	if exit, err := d.Run(ctx, spec, driverapi.Streams{}); err != nil || exit.ExitCode != 0 {
		t.Fatalf("%v %+v", err, exit)
	}
	// Control: beside the session's own processes, those of the two
	// built ahead (bwrap, a supervisor and a command's sandbox-init each).
	waitUntil(t, func() bool {
		_, session := sessionProcs(ws)
		_, all := sessionProcs(root)
		return len(all)-len(session) >= 6
	})
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, all := sessionProcs(root)
		if len(all) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session sandboxes built ahead outlived their driver: %v", all)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
