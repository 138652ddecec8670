//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// The session supervisor's fork path (sandboxinit/sessionserve_linux.go):
// a command of a session sandbox whose PID 1 is a reaper cloned by the
// supervisor, not a sandbox-init of its own.

// sessionRunOn runs argv as a command of session that asks for its
// session's sandbox (a CommandID, so its violations are reported).
func sessionRunOn(d *Driver, ws, session string) spawnRun {
	return func(t *testing.T, caps driverapi.Capabilities, argv []string) drvResult {
		t.Helper()
		ctx := context.Background()
		prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws})
		if err != nil {
			return drvResult{err: err}
		}
		var out, errb bytes.Buffer
		spec := driverapi.RunSpec{
			Program: argv[0], Args: argv[1:], Cwd: ws, Profile: prof, SessionID: session, CommandID: t.Name(),
			Env:     []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "HOME", Value: ws}},
			Timeout: 20 * time.Second, MaxOutputBytes: 1 << 20,
		}
		setSessionSandbox(&spec)
		exit, err := d.Run(ctx, spec, driverapi.Streams{Stdout: &out, Stderr: &errb})
		return drvResult{exit: exit, stdout: out.String(), stderr: errb.String(), err: err}
	}
}

// parentScript prints the command's pid in its own namespace and its
// parent's name, with shell builtins only (it runs without spawn too):
// the parent's pid as the session's /proc numbers it, from the shell's own
// status.
const parentScript = `while read k v rest; do [ "$k" = PPid: ] && pp=$v; done < /proc/self/status; ` +
	`read name < /proc/$pp/comm; echo "$$ $name"`

// TestSessionForkPathTaken: a session's command runs under the reaper
// (its parent, PID 1 of its namespace, is named aleph-reaper), with and
// without spawn; the same script outside a session (the control) finds
// another parent, so the name is not what every sandbox shows.
func TestSessionForkPathTaken(t *testing.T) {
	d := testDriver(t, options{})
	needForkPath(t, d)
	ws := newWorkspace(t)
	run := sessionRunOn(d, ws, "fork")
	for _, caps := range []driverapi.Capabilities{spawnCaps, {}} {
		for i := range 2 { // the first command and one reusing the sandbox
			r := run(t, caps, []string{"/bin/sh", "-c", parentScript})
			expectOK(t, r)
			if want := "2 " + sandboxinit.ReaperName + "\n"; r.stdout != want {
				t.Fatalf("spawn=%v command %d: %q, want %q (stderr %q)", caps.SpawnSubprocess, i, r.stdout, want, r.stderr)
			}
		}
	}
	r := drvRun(t, context.Background(), d, ws, spawnCaps, nil, "/bin/sh", "-c", parentScript)
	expectOK(t, r)
	if r.stdout == "" || strings.Contains(r.stdout, sandboxinit.ReaperName) {
		t.Fatalf("control outside a session: %q (stderr %q)", r.stdout, r.stderr)
	}
}

// TestSessionForkProtected: on the fork path the protected entries are
// mounted for the command (by its reaper): an existing .git is read-only
// while the workspace beside it is written (the control), and a write
// there reaches the host.
func TestSessionForkProtected(t *testing.T) {
	d := testDriver(t, options{})
	needForkPath(t, d)
	ws := newWorkspace(t)
	if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := sessionRunOn(d, ws, "prot")
	for i := range 2 {
		r := run(t, spawnCaps, []string{"/bin/sh", "-c", parentScript + `; echo ok > ok; echo no > .git/x 2>/dev/null || echo refused`})
		expectOK(t, r)
		if want := "2 " + sandboxinit.ReaperName + "\nrefused\n"; r.stdout != want {
			t.Fatalf("command %d: %q, want %q (stderr %q)", i, r.stdout, want, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(ws, ".git", "x")); err == nil {
			t.Fatalf("command %d wrote into the protected .git", i)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "ok")); err != nil || string(b) != "ok\n" {
			t.Fatalf("command %d: the control write did not reach the host: %q %v", i, b, err)
		}
	}
}

// TestSessionForkStatusAndSignals: on the fork path the exit status is
// the command's (a code, and a death by signal told apart), a program not
// found is the driver's not-run answer, and the usage is reported.
func TestSessionForkStatusAndSignals(t *testing.T) {
	d := testDriver(t, options{})
	needForkPath(t, d)
	ws := newWorkspace(t)
	run := sessionRunOn(d, ws, "st")
	r := run(t, spawnCaps, []string{"/bin/sh", "-c", parentScript + `; exit 7`})
	if r.err != nil || r.exit.ExitCode != 7 || !strings.Contains(r.stdout, sandboxinit.ReaperName) {
		t.Fatalf("exit 7: err=%v exit=%+v stdout=%q", r.err, r.exit, r.stdout)
	}
	r = run(t, spawnCaps, []string{"/bin/sh", "-c", `kill -TERM $$`})
	if r.err != nil || r.exit.Signal != int32(syscall.SIGTERM) {
		t.Fatalf("killed by SIGTERM: err=%v exit=%+v", r.err, r.exit)
	}
	r = run(t, spawnCaps, []string{"/nonexistent/program"})
	if r.err == nil && r.exit.ExitCode == 0 {
		t.Fatalf("missing program: exit %+v", r.exit)
	}
	// The control: the same session still runs commands, on the path.
	r = run(t, spawnCaps, []string{"/bin/sh", "-c", parentScript})
	expectOK(t, r)
	if !strings.Contains(r.stdout, sandboxinit.ReaperName) {
		t.Fatalf("after: %q", r.stdout)
	}
}

// TestViolationsSession: spawn and syscall violations of commands on the
// fork path are refused and reported as on every other path (the
// notification filter's listener reaches the driver), each beside its
// positive control.
func TestViolationsSession(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := newWorkspace(t)
	checkViolations(t, sessionRunOn(d, ws, "viol"), true)
	checkSpawnRefused(t, sessionRunOn(d, ws, "viol"), driverapi.Capabilities{})
	r := sessionRunOn(d, ws, "viol")(t, driverapi.Capabilities{}, []string{"/bin/sh", "-c", parentScript})
	expectOK(t, r)
	// Unprivileged, the same checks ran on the sandbox-init path, which
	// is the only one there (needForkPath).
	if onFork := strings.Contains(r.stdout, sandboxinit.ReaperName); onFork == d.probe().sessionUser || sessionOf(r) != driverapi.SessionSandboxReused {
		t.Fatalf("fork path %v where it should be %v: %q %v", onFork, !d.probe().sessionUser, r.stdout, r.exit.Details)
	}
}

// TestSessionForkSignalled: a signal asked for while a command runs on the
// fork path reaches it: TERM through the reaper to the command's trap
// (its exit status says the trap ran), and KILL, which the reaper cannot
// catch and pass on, ends the command with status "killed by SIGKILL"
// rather than a sandbox that ended without a status. The session still
// runs commands on the path afterwards (the control).
func TestSessionForkSignalled(t *testing.T) {
	d := testDriver(t, options{})
	needForkPath(t, d)
	ws := newWorkspace(t)
	ctx := context.Background()
	for _, tc := range []struct {
		sig  driverapi.Signal
		want func(driverapi.Exit) bool
	}{
		{driverapi.SignalTERM, func(e driverapi.Exit) bool { return e.ExitCode == 9 && e.Signal == 0 }},
		{driverapi.SignalKILL, func(e driverapi.Exit) bool { return e.Signal == int32(syscall.SIGKILL) }},
	} {
		t.Run(string(tc.sig), func(t *testing.T) {
			prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: spawnCaps, Workspace: ws, Cwd: ws})
			if err != nil {
				t.Fatal(err)
			}
			var out lockedBuf
			spec := driverapi.RunSpec{
				Program: "/bin/sh", Args: []string{"-c", parentScript + `; trap 'echo got-term; exit 9' TERM; echo ready; while :; do sleep 0.05; done`},
				Cwd: ws, Profile: prof, SessionID: "sig", CommandID: t.Name(),
				Env:     []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "HOME", Value: ws}},
				Timeout: 20 * time.Second, MaxOutputBytes: 1 << 20,
			}
			setSessionSandbox(&spec)
			type result struct {
				exit driverapi.Exit
				err  error
			}
			done := make(chan result, 1)
			go func() {
				exit, err := d.Run(ctx, spec, driverapi.Streams{Stdout: &out, Stderr: io.Discard})
				done <- result{exit, err}
			}()
			waitOutput(t, &out, "ready")
			if !strings.Contains(out.String(), sandboxinit.ReaperName) {
				t.Fatalf("not on the fork path: %q", out.String())
			}
			if err := d.Signal(ctx, t.Name(), tc.sig); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || !tc.want(r.exit) {
				t.Fatalf("after %s: err=%v exit=%+v output %q", tc.sig, r.err, r.exit, out.String())
			}
		})
	}
	r := sessionRunOn(d, ws, "sig")(t, spawnCaps, []string{"/bin/sh", "-c", parentScript})
	expectOK(t, r)
	if !strings.Contains(r.stdout, sandboxinit.ReaperName) {
		t.Fatalf("after: %q", r.stdout)
	}
}

// TestSessionForkRelativePathEntry: a program found through a relative
// PATH entry is refused the same way on the fork path as by a command's
// own sandbox-init (exit 125, exec's reason on stderr, not "not found"),
// the first command of a session and later ones alike; the control puts
// the same directory on the PATH by its absolute name, and the program
// runs on both paths. The refusal is repeated: the supervisor's record
// once raced the reaper's end, which the driver took for the session
// sandbox's (one run in ten).
func TestSessionForkRelativePathEntry(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := newWorkspace(t)
	if err := os.MkdirAll(filepath.Join(ws, "tools"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "tools", "hello"), []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(session, path string) drvResult {
		t.Helper()
		ctx := context.Background()
		prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: spawnCaps, Workspace: ws, Cwd: ws})
		if err != nil {
			t.Fatal(err)
		}
		var out, errb bytes.Buffer
		spec := driverapi.RunSpec{
			Program: "hello", Cwd: ws, Profile: prof, SessionID: session, CommandID: t.Name(),
			Env:     []driverapi.EnvVar{{Name: "PATH", Value: path}, {Name: "HOME", Value: ws}},
			Timeout: 20 * time.Second, MaxOutputBytes: 1 << 20,
		}
		if session != "" {
			setSessionSandbox(&spec)
		}
		exit, err := d.Run(ctx, spec, driverapi.Streams{Stdout: &out, Stderr: &errb})
		return drvResult{exit: exit, stdout: out.String(), stderr: errb.String(), err: err}
	}
	const reason = `program "hello": exec: "hello": cannot run executable found relative to current directory`
	for _, session := range []string{"", "rel", "rel", "rel", "rel", "rel", "rel", "rel", "rel"} {
		r := run(session, "tools:/usr/bin:/bin")
		if r.err != nil || r.exit.ExitCode != sandboxinit.SandboxInitExitCode || !strings.Contains(r.stderr, reason) || r.stdout != "" {
			t.Fatalf("session %q, relative entry: %+v (error %v), stdout %q, stderr %q, want exit %d and %q",
				session, r, r.err, r.stdout, r.stderr, sandboxinit.SandboxInitExitCode, reason)
		}
		if session != "" && sessionOf(r) == "" {
			t.Fatalf("session %q: not run in a session sandbox: %v", session, r.exit.Details)
		}
		r = run(session, filepath.Join(ws, "tools")+":/usr/bin:/bin")
		expectOK(t, r)
		if r.stdout != "ran\n" {
			t.Fatalf("session %q, absolute entry (control): stdout %q, stderr %q", session, r.stdout, r.stderr)
		}
	}
}
