//go:build linux

package bwrap

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// protCounts is how many commands of session's sandbox took the kept
// protection and how many scanned.
func protCounts(t *testing.T, d *Driver, session string) (reused, scanned int) {
	t.Helper()
	d.sessions.mu.Lock()
	defer d.sessions.mu.Unlock()
	for k, ss := range d.sessions.m {
		if k.session == session {
			ss.prot.mu.Lock()
			defer ss.prot.mu.Unlock()
			return ss.prot.reused, ss.prot.scanned
		}
	}
	t.Fatalf("no session sandbox for %s", session)
	return 0, 0
}

// TestSessionProtectedKept: with session_placeholders = "session", a
// session sandbox keeps its protected entries
// between commands while the host's tree is as it was, and a protected
// entry that appears on the host between two commands (a nested .git, a
// real .git where the placeholder was) is protected in the next one: its
// write is refused, the top-level placeholder reads empty, while an
// ordinary file the same command writes in the workspace reaches the host
// (the positive control).
func TestSessionProtectedKept(t *testing.T) {
	// Control: by default a session's command leaves no placeholder.
	d0 := testDriver(t, options{})
	needSessions(t, d0)
	ws0 := newWorkspace(t)
	expectOK(t, sessRun(t, d0, ws0, "per-command", spawnCaps, `true`))
	if ents, err := os.ReadDir(ws0); err != nil || len(ents) != 0 {
		t.Fatalf("a session command left %v in the workspace (%v)", ents, err)
	}

	d := testDriver(t, options{SessionPlaceholders: sessionPlaceholdersSession})
	ws := newWorkspace(t)
	run := func(script string) drvResult { return sessRun(t, d, ws, "kept", spawnCaps, script) }
	expectOK(t, run(`true`))
	if _, err := os.Lstat(filepath.Join(ws, ".aleph")); err != nil {
		t.Fatalf("the session keeps no placeholder: %v", err)
	}
	// Past the margin, the next scan's fingerprint is trusted (the first
	// one's placeholders had just changed the workspace's ctime).
	time.Sleep(2 * racyMargin)
	expectOK(t, run(`true`))
	_, scanned := protCounts(t, d, "kept")
	r := run(`echo one > ok1`)
	expectOK(t, r)
	reused, scanned2 := protCounts(t, d, "kept")
	if reused == 0 || scanned2 != scanned {
		t.Fatalf("an unchanged workspace was scanned again: reused %d, scanned %d then %d", reused, scanned, scanned2)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "ok1")); err != nil || string(b) != "one\n" {
		t.Fatalf("ok1 on the host: %q %v", b, err)
	}

	// A nested repository appears on the host.
	if err := os.MkdirAll(filepath.Join(ws, "sub", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "sub", ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = run(`echo two > ok2; if echo evil > sub/.git/config 2>/dev/null; then echo WROTE; fi; ` +
		`if echo evil > .git 2>/dev/null; then echo WROTE-TOP; fi; printf '[%s]' "$(cat .git)"`)
	expectOK(t, r)
	if r.stdout != "[]" {
		t.Fatalf("after a nested .git appeared: %q (stderr %q)", r.stdout, r.stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "sub", ".git", "config")); string(b) != "[core]\n" {
		t.Fatalf("nested .git/config changed: %q", b)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "ok2")); err != nil || string(b) != "two\n" {
		t.Fatalf("ok2 on the host: %q %v", b, err)
	}
	if _, s := protCounts(t, d, "kept"); s == scanned2 {
		t.Fatalf("a changed workspace was not scanned again")
	}

	// The host replaces the top-level placeholder with a real repository.
	time.Sleep(2 * racyMargin)
	expectOK(t, run(`true`))
	if err := os.Remove(filepath.Join(ws, ".git")); err != nil {
		t.Fatalf("the placeholder kept for the session: %v", err)
	}
	if err := os.MkdirAll(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = run(`echo three > ok3; if echo evil > .git/config 2>/dev/null; then echo WROTE; fi; cat .git/config`)
	expectOK(t, r)
	if r.stdout != "[core]\n" {
		t.Fatalf("after .git was made on the host: %q (stderr %q)", r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "ok3")); err != nil || string(b) != "three\n" {
		t.Fatalf("ok3 on the host: %q %v", b, err)
	}
	// Forgotten, the session lets go of its placeholders.
	if err := d.ForgetSession(t.Context(), "kept"); err != nil {
		t.Fatal(err)
	}
	d.pool.WaitIdle()
	for _, name := range driverapi.DefaultProtectedEntries()[1:] { // .git is the host's now
		if _, err := os.Lstat(filepath.Join(ws, name)); err == nil {
			t.Errorf("placeholder %s left after the session ended", name)
		}
	}
}

// TestSessionIdleDropsAhead: an idle session ends the command's
// sandbox-init it kept waiting ahead (counted: there was one), holds then
// only bwrap and its supervisor, and its next command still runs in it.
func TestSessionIdleDropsAhead(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	d.sessions.aheadIdle = 300 * time.Millisecond
	ws := newWorkspace(t)
	expectOK(t, sessRun(t, d, ws, "s", spawnCaps, `echo > /tmp/mark`))
	dropped := func() int {
		d.sessions.mu.Lock()
		defer d.sessions.mu.Unlock()
		for k, ss := range d.sessions.m {
			if k.session == "s" {
				ss.mu.Lock()
				defer ss.mu.Unlock()
				if ss.ahead != nil {
					return -1
				}
				return ss.dropped
			}
		}
		return 0
	}
	waitUntil(t, func() bool { return dropped() > 0 })
	var all []string
	waitUntil(t, func() bool {
		var sup []string
		sup, all = sessionProcs(ws)
		return len(sup) == 1 && len(all) <= 2
	})
	// The processes report ready before their Go runtimes settle.
	time.Sleep(300 * time.Millisecond)
	_, all = sessionProcs(ws)
	t.Logf("one idle session sandbox, nothing waiting ahead: %d processes, %d KiB PSS", len(all), pssOf(t, all))
	r := sessRun(t, d, ws, "s", spawnCaps, `cat /tmp/mark && echo again`)
	expectOK(t, r)
	if r.stdout != "\nagain\n" || sessionOf(r) != driverapi.SessionSandboxReused {
		t.Fatalf("after the drop: %q %v", r.stdout, r.exit.Details)
	}
}
