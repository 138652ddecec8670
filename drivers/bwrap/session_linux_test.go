//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// needSessions skips where the driver keeps per-command sandboxes by
// design (root drivers only, bwrap tier), after checking it says so.
func needSessions(t *testing.T, d *Driver) {
	t.Helper()
	if why := d.sessionOffWhy(); why != "" {
		caps, err := d.Capabilities(context.Background())
		if err != nil || caps.Details[detailSessionSandbox] != why {
			t.Fatalf("session sandboxes off (%s) but the capabilities say %q (%v)", why, caps.Details[detailSessionSandbox], err)
		}
		t.Skip("session sandboxes off here: " + why)
	}
}

// needAhead is needSessions for the tests of sessions built ahead, which
// an unprivileged driver does not build (aheadPerProfile says why).
func needAhead(t *testing.T, d *Driver) {
	t.Helper()
	needSessions(t, d)
	if d.probe().sessionUser {
		if n := d.aheadPerProfile(); n != 0 {
			t.Fatalf("unprivileged, yet %d session sandboxes built ahead per profile", n)
		}
		t.Skip("unprivileged: no session sandbox is built ahead (checked: none per profile)")
	}
}

// needForkPath is needSessions for the tests of the fork path, which an
// unprivileged driver's session supervisor does not take: the control
// shows a command's parent is its own sandbox-init there, not the reaper.
func needForkPath(t *testing.T, d *Driver) {
	t.Helper()
	needSessions(t, d)
	if d.probe().sessionUser {
		r := sessRun(t, d, newWorkspace(t), "fork-path-control", spawnCaps, parentScript)
		expectOK(t, r)
		if strings.Contains(r.stdout, sandboxinit.ReaperName) || sessionOf(r) != driverapi.SessionSandboxNew {
			t.Fatalf("unprivileged, yet the command ran on the fork path: %q %v", r.stdout, r.exit.Details)
		}
		t.Skip("unprivileged: each command of a session gets a sandbox-init of its own (checked: " + strings.TrimSpace(r.stdout) + ")")
	}
}

// sessRun runs a shell snippet as a command of session that asks for its
// session's sandbox.
func sessRun(t testing.TB, d *Driver, ws, session string, caps driverapi.Capabilities, script string) drvResult {
	t.Helper()
	ctx := context.Background()
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws})
	if err != nil {
		return drvResult{err: err}
	}
	env := []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "HOME", Value: ws}}
	var out, errb bytes.Buffer
	spec := driverapi.RunSpec{
		Program: "/bin/sh", Args: []string{"-c", script}, Env: env, Cwd: ws, Profile: prof,
		Timeout: 20 * time.Second, MaxOutputBytes: 1 << 20, SessionID: session,
	}
	setSessionSandbox(&spec)
	exit, err := d.Run(ctx, spec, driverapi.Streams{Stdout: &out, Stderr: &errb})
	return drvResult{exit: exit, stdout: out.String(), stderr: errb.String(), err: err}
}

var spawnCaps = driverapi.Capabilities{SpawnSubprocess: true}

func sessionOf(r drvResult) string { return r.exit.Details[driverapi.ExitDetailSessionSandbox] }

// TestSessionSharesTmp: two commands of one session see each other's /tmp
// file (the second reuses the first's sandbox), a command of another
// session does not, and the same command without a session sandbox does
// not either.
func TestSessionSharesTmp(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := newWorkspace(t)
	r := sessRun(t, d, ws, "s1", spawnCaps, `echo left > /tmp/mark && echo written`)
	expectOK(t, r)
	if r.stdout != "written\n" || sessionOf(r) != driverapi.SessionSandboxNew {
		t.Fatalf("first: %q %v", r.stdout, r.exit.Details)
	}
	r = sessRun(t, d, ws, "s1", spawnCaps, `cat /tmp/mark`)
	expectOK(t, r)
	if r.stdout != "left\n" || sessionOf(r) != driverapi.SessionSandboxReused {
		t.Fatalf("second, same session: %q %v", r.stdout, r.exit.Details)
	}
	r = sessRun(t, d, ws, "s2", spawnCaps, `cat /tmp/mark 2>/dev/null || echo none`)
	expectOK(t, r)
	if r.stdout != "none\n" || sessionOf(r) != driverapi.SessionSandboxNew {
		t.Fatalf("other session: %q %v", r.stdout, r.exit.Details)
	}
	if n := d.liveSessions(); n != 2 {
		t.Fatalf("%d session sandboxes, want 2", n)
	}
}

// TestSessionBackgroundDies: what command 1 starts in the background is
// dead when its Run returns (it never writes its file), while the session
// sandbox lives: command 2 runs in it.
func TestSessionBackgroundDies(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := newWorkspace(t)
	// Positive control: the background process really ran (it wrote its
	// first mark before the command ended).
	r := sessRun(t, d, ws, "s", spawnCaps, `(echo started > /tmp/bg; sleep 2; echo late > `+ws+`/late) & sleep 0.3; cat /tmp/bg`)
	expectOK(t, r)
	if r.stdout != "started\n" {
		t.Fatalf("background never ran: %q", r.stdout)
	}
	time.Sleep(3 * time.Second)
	if _, err := os.Stat(ws + "/late"); err == nil {
		t.Fatal("the background process outlived its command")
	}
	r = sessRun(t, d, ws, "s", spawnCaps, `cat /tmp/bg; ps -e -o comm= 2>/dev/null | grep -c sleep || true`)
	expectOK(t, r)
	if !strings.HasPrefix(r.stdout, "started\n") || sessionOf(r) != driverapi.SessionSandboxReused {
		t.Fatalf("second: %q %v", r.stdout, r.exit.Details)
	}
}

// TestSessionNoSpawnAfterSpawn: a command without spawn, in a session whose
// earlier command could spawn, cannot spawn; and a network-none command
// after a network-all one has no network. Each capability set is its own
// sandbox: the no-spawn command does not see the spawn one's /tmp.
func TestSessionNoSpawnAfterSpawn(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := newWorkspace(t)
	r := sessRun(t, d, ws, "s", spawnCaps, `/bin/true && echo spawned > /tmp/m && echo ok`)
	expectOK(t, r)
	if r.stdout != "ok\n" {
		t.Fatalf("spawn command: %q", r.stdout)
	}
	// Positive control: the no-spawn command runs (shell builtins only),
	// in a sandbox of its own capability set (no mark in its /tmp).
	r = sessRun(t, d, ws, "s", driverapi.Capabilities{}, `if [ -e /tmp/m ]; then echo mark; else echo "no mark"; fi`)
	expectOK(t, r)
	if r.stdout != "no mark\n" || sessionOf(r) != driverapi.SessionSandboxNew {
		t.Fatalf("no-spawn control: %q %v (another capability set is another sandbox)", r.stdout, r.exit.Details)
	}
	// The shell needs to fork to run /bin/true: refused without spawn.
	r = sessRun(t, d, ws, "s", driverapi.Capabilities{}, `/bin/true && echo spawned`)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if strings.Contains(r.stdout, "spawned") || r.exit.ExitCode == 0 || r.exit.SpawnRefused == 0 || sessionOf(r) != driverapi.SessionSandboxReused {
		t.Fatalf("no-spawn command: %q %+v", r.stdout, r.exit)
	}
}

// TestSessionNetworkNoneAfterAll: network none after network all in one
// session has no network, and the all one had it (a loopback listener
// and a connection to it, in the shell's /dev/tcp-free way: a socket()
// call through python when present, else the interfaces listed).
func TestSessionNetworkNoneAfterAll(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := newWorkspace(t)
	count := `grep -c : /proc/net/dev`
	all := driverapi.Capabilities{SpawnSubprocess: true, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}
	r := sessRun(t, d, ws, "s", all, count)
	expectOK(t, r)
	nAll := strings.TrimSpace(r.stdout)
	if sessionOf(r) != driverapi.SessionSandboxNew {
		t.Fatalf("network all: %v", r.exit.Details)
	}
	r = sessRun(t, d, ws, "s", spawnCaps, count)
	expectOK(t, r)
	nNone := strings.TrimSpace(r.stdout)
	if sessionOf(r) != driverapi.SessionSandboxNew {
		t.Fatalf("network none: %v (another capability set is another session sandbox)", r.exit.Details)
	}
	if nAll == nNone || nNone != "1" {
		t.Fatalf("interfaces: all %q, none %q (none must see loopback only)", nAll, nNone)
	}
}

// TestSessionConcurrent: eight commands of one session at once all run, in
// the one session sandbox.
func TestSessionConcurrent(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := newWorkspace(t)
	expectOK(t, sessRun(t, d, ws, "s", spawnCaps, `echo > /tmp/shared`))
	var wg sync.WaitGroup
	res := make([]drvResult, 8)
	for i := range res {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i] = sessRun(t, d, ws, "s", spawnCaps, `test -e /tmp/shared && echo ok`)
		}()
	}
	wg.Wait()
	for i, r := range res {
		if r.err != nil || r.stdout != "ok\n" || sessionOf(r) != driverapi.SessionSandboxReused {
			t.Fatalf("command %d: %+v", i, r)
		}
	}
	if n := d.liveSessions(); n != 1 {
		t.Fatalf("%d session sandboxes", n)
	}
}

// sessionProcs are the host pids of the session supervisors and the
// commands' sandbox-inits of sandboxes over ws (their spec names ws), and
// their bwraps.
func sessionProcs(ws string) (sup, all []string) {
	for pid, argv := range hostCmdlines() {
		if filepath.Base(argv[0]) != "bwrap" && argv[0] != initPath {
			continue
		}
		joined := strings.Join(argv, " ")
		if !strings.Contains(joined, ws) {
			continue
		}
		if strings.Contains(joined, `"session_supervisor":true`) {
			all = append(all, pid)
			// A child between its fork and its exec still shows the
			// supervisor's argv: the supervisor is the one bwrap started.
			if argv[0] == initPath && parentIsBwrap(pid) {
				sup = append(sup, pid)
			}
		} else if strings.Contains(joined, `"session_child":true`) {
			all = append(all, pid)
		}
	}
	return sup, all
}

// parentIsBwrap says whether pid's parent runs bwrap.
func parentIsBwrap(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return false
	}
	cmd, err := os.ReadFile("/proc/" + f[1] + "/cmdline")
	if err != nil {
		return false
	}
	argv0, _, _ := strings.Cut(string(cmd), "\x00")
	return filepath.Base(argv0) == "bwrap"
}

// driverCgroups are the command cgroups of this test process's drivers.
func driverCgroups(d *Driver) []string {
	var out []string
	for dir := range commandCgroups(d) {
		if strings.HasPrefix(filepath.Base(dir), cgroup.Prefix+d.owner+"-") {
			out = append(out, dir)
		}
	}
	return out
}

// expectNothingLeft waits (bounded) until no process of a session sandbox
// over ws is left, and checks no cgroup of d's is. The session sandboxes
// built ahead, which belong to no session, are ended first: what they
// leave counts too.
func expectNothingLeft(t *testing.T, d *Driver, ws string) {
	t.Helper()
	drainAhead(t, d)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, all := sessionProcs(ws)
		if len(all) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session sandbox processes left: %v", all)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// An idle end runs in the background: its cgroups go just after its
	// processes.
	for {
		left, n := driverCgroups(d), d.liveSessions()
		if len(left) == 0 && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cgroups left: %v; %d session sandboxes still listed", left, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startSession runs one command in session s over a fresh workspace and
// checks (control) that its supervisor lives.
func startSession(t *testing.T, d *Driver) string {
	t.Helper()
	ws := newWorkspace(t)
	r := sessRun(t, d, ws, "s", spawnCaps, `echo > /tmp/mark`)
	expectOK(t, r)
	if sup, _ := sessionProcs(ws); len(sup) != 1 {
		t.Fatalf("control: %d session supervisors over the workspace, want 1", len(sup))
	}
	if d.probe().cg.Mode() != cgroup.None && len(driverCgroups(d)) == 0 {
		t.Fatal("control: the session sandbox has no cgroup")
	}
	return ws
}

// TestSessionForgetEnds: forget_session ends the session's sandboxes (every
// profile) and leaves nothing; its next command gets a new one.
func TestSessionForgetEnds(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := startSession(t, d)
	expectOK(t, sessRun(t, d, ws, "s", driverapi.Capabilities{}, `:`))
	if err := d.ForgetSession(context.Background(), "s"); err != nil {
		t.Fatal(err)
	}
	expectNothingLeft(t, d, ws)
	r := sessRun(t, d, ws, "s", spawnCaps, `test -e /tmp/mark && echo kept || echo gone`)
	expectOK(t, r)
	if r.stdout != "gone\n" || sessionOf(r) != driverapi.SessionSandboxNew {
		t.Fatalf("after forget: %q %v", r.stdout, r.exit.Details)
	}
}

// TestSessionIdleEnds: a session sandbox without a command for
// session_idle_ms ends and leaves nothing; the next command says rebuilt.
func TestSessionIdleEnds(t *testing.T) {
	d := testDriver(t, options{SessionIdleMS: 300})
	needSessions(t, d)
	ws := startSession(t, d)
	expectNothingLeft(t, d, ws)
	r := sessRun(t, d, ws, "s", spawnCaps, `test -e /tmp/mark && echo kept || echo gone`)
	expectOK(t, r)
	if r.stdout != "gone\n" || sessionOf(r) != driverapi.SessionSandboxRebuilt {
		t.Fatalf("after idle: %q %v", r.stdout, r.exit.Details)
	}
}

// TestSessionCloseEnds: Close ends every session sandbox and leaves nothing.
func TestSessionCloseEnds(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := startSession(t, d)
	d.Close()
	expectNothingLeft(t, d, ws)
}

// TestSessionSupervisorKilled: a session whose supervisor was killed gets a
// new sandbox at its next command, which says rebuilt (and finds its /tmp
// empty); nothing of the dead one is left.
func TestSessionSupervisorKilled(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := startSession(t, d)
	sup, _ := sessionProcs(ws)
	pid, _ := strconv.Atoi(sup[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := sessRun(t, d, ws, "s", spawnCaps, `test -e /tmp/mark && echo kept || echo gone`)
	expectOK(t, r)
	if r.stdout != "gone\n" || sessionOf(r) != driverapi.SessionSandboxRebuilt {
		t.Fatalf("after the kill: %q %v", r.stdout, r.exit.Details)
	}
	if now, _ := sessionProcs(ws); len(now) != 1 || now[0] == sup[0] {
		t.Fatalf("supervisors now %v (killed %v)", now, sup)
	}
}

// TestSessionStaleRebuilt: a workspace replaced by another directory at
// the same path makes the session sandbox stale: it is ended, the command
// runs in a new one over the new directory, and says rebuilt.
func TestSessionStaleRebuilt(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := startSession(t, d)
	if err := os.Rename(ws, ws+".old"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws + ".old") })
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ws+"/new", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := sessRun(t, d, ws, "s", spawnCaps, `test -e new && echo new; test -e /tmp/mark && echo kept || echo gone`)
	expectOK(t, r)
	if r.stdout != "new\ngone\n" || sessionOf(r) != driverapi.SessionSandboxRebuilt {
		t.Fatalf("after the swap: %q %v", r.stdout, r.exit.Details)
	}
}

// TestSessionLeftBehind is the attack: command 1 tries to leave something
// for a later command to run with more privilege: an executable in /tmp,
// a background process that would act later, a unix socket listening in
// /tmp. The next command of the same profile sees the file (shared by
// design within one capability set) but neither the process nor anyone
// behind the socket (both died with command 1's PID namespace); a command
// of an elevated profile (network all) in the same session sees none of
// it: its sandbox is another one.
func TestSessionLeftBehind(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := newWorkspace(t)
	plant := `printf '#!/bin/sh\necho pwned\n' > /tmp/evil.sh && chmod +x /tmp/evil.sh
(sleep 3; echo acted > ` + ws + `/acted) &
/usr/bin/python3 -c '
import socket, os, sys
s = socket.socket(socket.AF_UNIX); s.bind("/tmp/evil.sock"); s.listen(1)
if os.fork() == 0:
    os.setsid(); s.accept(); os._exit(0)
print("listening")
'
/tmp/evil.sh`
	r := sessRun(t, d, ws, "s", spawnCaps, plant)
	expectOK(t, r)
	// Control: all three were really made (the script ran, the listener
	// was up).
	if r.stdout != "listening\npwned\n" {
		t.Fatalf("plant: %q %q", r.stdout, r.stderr)
	}
	probe := `test -x /tmp/evil.sh && echo file || echo "no file"
/usr/bin/python3 -c '
import socket
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/tmp/evil.sock"); print("socket answered")
except OSError as e:
    print("socket", type(e).__name__)
'`
	r = sessRun(t, d, ws, "s", spawnCaps, probe)
	expectOK(t, r)
	// The socket file is there; connecting is refused, by the unix socket
	// guard (a socket bound by another command is not this command's own:
	// PermissionError) or, without the guard, by the kernel (nobody
	// listens any more: ConnectionRefusedError).
	if (r.stdout != "file\nsocket PermissionError\n" && r.stdout != "file\nsocket ConnectionRefusedError\n") || sessionOf(r) != driverapi.SessionSandboxReused {
		t.Fatalf("same profile: %q %q %v", r.stdout, r.stderr, r.exit.Details)
	}
	elevated := driverapi.Capabilities{SpawnSubprocess: true, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}
	r = sessRun(t, d, ws, "s", elevated, probe)
	expectOK(t, r)
	if r.stdout != "no file\nsocket FileNotFoundError\n" || sessionOf(r) != driverapi.SessionSandboxNew {
		t.Fatalf("elevated profile: %q %q %v", r.stdout, r.stderr, r.exit.Details)
	}
	time.Sleep(4 * time.Second)
	if _, err := os.Stat(ws + "/acted"); err == nil {
		t.Fatal("command 1's background process acted after its command ended")
	}
}

// TestSessionDriverDeath: killing the driver (kill -9) while a session
// sandbox lives, a command of it waits ahead and another runs, leaves
// no process of them behind: the lifelines hang up, the supervisor ends,
// and with it its PID namespace.
func TestSessionDriverDeath(t *testing.T) {
	needSessions(t, testDriver(t, options{}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := driverapi.LaunchDriver(ctx, driverapi.LaunchConfig{Path: driverBin,
		Env: []string{optionsEnv + `={"session_sandbox":"always","cgroup":"none"}`}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	d := p.Driver()
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: spawnCaps, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	run := func(script string) (driverapi.Exit, error) {
		spec := driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", script}, Cwd: ws, Profile: prof, Env: pathEnv(),
			Timeout: 30 * time.Second, MaxOutputBytes: 1024, SessionID: "s"}
		setSessionSandbox(&spec)
		return d.Run(ctx, spec, driverapi.Streams{})
	}
	if exit, err := run("true"); err != nil || exit.ExitCode != 0 || exit.Details[driverapi.ExitDetailSessionSandbox] != driverapi.SessionSandboxNew {
		t.Fatalf("%v %+v", err, exit)
	}
	long := "sleep 20; : " + ws
	go run(long) //nolint:errcheck // ends with the driver
	// Control: the supervisor, the running command's sandbox-init and the
	// one waiting ahead are there.
	waitUntil(t, func() bool { sup, all := sessionProcs(ws); return len(sup) == 1 && len(all) >= 4 && argRunning(long) })
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, all := sessionProcs(ws)
		if len(all) == 0 && !argRunning(long) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session sandbox outlived its driver: %v", all)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func setSessionSandbox(spec *driverapi.RunSpec) { spec.SessionSandbox = true }

// TestTierSessionOff: the Landlock tier has no namespaces to keep a
// session in: it does not list the call, says why in its capabilities,
// and runs a command that asks for its session's sandbox on its own (no
// session detail, no /tmp of the session's shared by a sandbox).
func TestTierSessionOff(t *testing.T) {
	d := tierDriver(t, options{})
	if d.SessionSandboxes() {
		t.Fatal("the Landlock tier claims session sandboxes")
	}
	caps, err := d.Capabilities(context.Background())
	if err != nil || !strings.HasPrefix(caps.Details[detailSessionSandbox], "Landlock tier") {
		t.Fatalf("capabilities: %q %v", caps.Details[detailSessionSandbox], err)
	}
	ws := newWorkspace(t)
	r := sessRun(t, d, ws, "s", spawnCaps, "echo ran")
	expectOK(t, r) // control: the command ran
	if r.stdout != "ran\n" || sessionOf(r) != "" || r.exit.Details["tier"] != tierLandlock {
		t.Fatalf("%q %v", r.stdout, r.exit.Details)
	}
}

// TestSessionUnprivileged: an unprivileged driver runs session sandboxes
// where its trial says it can (sandboxinit/sessionuser_linux.go): the
// commands of a session share /tmp, each in a user namespace of its own
// that maps the driver's uid and gid to the session's uid 0 and holds no
// capability; a protected entry stays read-only and cannot be unmounted
// or remounted, while the workspace itself is written (the control); the
// supervisor's namespace links and environment stay closed to a command,
// while its own are open (the control); a user namespace of its own is
// refused (no --disable-userns here: seccomp), while the same program
// runs (the control). What still falls back: a driver
// that runs one command, layered sessions, and sessions built ahead.
func TestSessionUnprivileged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root: session sandboxes of a root driver are the other TestSession* tests; the unprivileged pass runs this one")
	}
	d := testDriver(t, options{})
	if why := d.sessionOffWhy(); why != "" {
		// The trial refused here: the capabilities say why, and the
		// command runs in a sandbox of its own.
		caps, err := d.Capabilities(context.Background())
		if err != nil || !strings.HasPrefix(caps.Details[detailSessionSandbox], "unprivileged") || d.SessionSandboxes() {
			t.Fatalf("capabilities: %q %v", caps.Details[detailSessionSandbox], err)
		}
		r := sessRun(t, d, newWorkspace(t), "s", spawnCaps, "echo ran")
		expectOK(t, r)
		if r.stdout != "ran\n" || sessionOf(r) != "" {
			t.Fatalf("%q %v", r.stdout, r.exit.Details)
		}
		t.Skip("session sandboxes off here (the fallback was checked): " + why)
	}
	if !d.SessionSandboxes() {
		t.Fatal("session sandboxes on, yet the call is not listed")
	}
	caps, err := d.Capabilities(context.Background())
	if d := caps.Details[detailSessionSandbox]; err != nil || !strings.HasPrefix(d, "on:") || !strings.Contains(d, "user namespace of its own") ||
		!strings.Contains(caps.Details["nested_userns"], "seccomp alone") {
		t.Errorf("capabilities: %q %q %v", d, caps.Details["nested_userns"], err)
	}
	ws := newWorkspace(t)
	if err := os.MkdirAll(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `echo ns=$(readlink /proc/self/ns/user)
echo map=$(cat /proc/self/uid_map) gmap=$(cat /proc/self/gid_map)
echo id=$(id -u):$(id -g)
grep -E '^Cap(Inh|Prm|Eff|Amb)' /proc/self/status | tr -s '\t' ' '
echo shared >> /tmp/unpriv-shared; echo tmp=$(wc -l < /tmp/unpriv-shared)
echo pwn >> .git/config 2>/dev/null && echo git=written || echo git=refused
umount .git 2>/dev/null && echo umount=done || echo umount=refused
umount -l .git 2>/dev/null && echo lazy=done || echo lazy=refused
mount -o remount,rw,bind .git 2>/dev/null && echo remount=done || echo remount=refused
echo ok > written && echo ws=written
unshare --version >/dev/null && echo unshare=runs
unshare -U true 2>/dev/null && echo userns=made || echo userns=refused
readlink /proc/1/ns/user >/dev/null 2>&1 && echo sup=open || echo sup=closed
cat /proc/1/environ >/dev/null 2>&1 && echo supenv=open || echo supenv=closed
`
	var nss []string
	for i := 1; i <= 2; i++ {
		r := sessRun(t, d, ws, "s", spawnCaps, script)
		expectOK(t, r)
		want := []string{
			fmt.Sprintf("map= %d 0 1 gmap= %d 0 1", os.Getuid(), os.Getgid()),
			fmt.Sprintf("id=%d:%d", os.Getuid(), os.Getgid()),
			"CapInh: 0000000000000000", "CapPrm: 0000000000000000", "CapEff: 0000000000000000", "CapAmb: 0000000000000000",
			fmt.Sprintf("tmp=%d", i),
			"git=refused", "umount=refused", "lazy=refused", "remount=refused", "ws=written", "sup=closed", "supenv=closed",
			"unshare=runs", "userns=refused",
		}
		for _, w := range want {
			if !strings.Contains(r.stdout, w+"\n") {
				t.Errorf("command %d: no %q in:\n%s%s", i, w, r.stdout, r.stderr)
			}
		}
		if how := sessionOf(r); (i == 1) != (how == driverapi.SessionSandboxNew) {
			t.Errorf("command %d: session sandbox %q", i, how)
		}
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.HasPrefix(l, "ns=") {
				nss = append(nss, l)
			}
		}
	}
	if len(nss) != 2 || nss[0] == nss[1] || nss[0] == "ns=" {
		t.Errorf("each command's own user namespace: %q", nss)
	}
	if b, err := os.ReadFile(filepath.Join(ws, ".git", "config")); err != nil || string(b) != "[core]\n" {
		t.Errorf("the protected entry on the host: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "written")); err != nil || string(b) != "ok\n" {
		t.Errorf("the control: the workspace file on the host: %q %v", b, err)
	}
	// What still falls back.
	if why := d.layeredOffWhy(); why != "" || !d.layerInNamespace() {
		t.Errorf("layered sessions: %q (in the sandbox's namespace: %v)", why, d.layerInNamespace())
	}
	if n := d.aheadPerProfile(); n != 0 {
		t.Errorf("session sandboxes built ahead: %d", n)
	}
	one, err := newDriver(config{InitBinary: driverBin, DriverBinary: driverBin, OneCommand: true})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	if why := one.sessionOffWhy(); !strings.HasPrefix(why, "unprivileged") || one.SessionSandboxes() {
		t.Errorf("a driver for one command: %q", why)
	}
}

// TestSessionOffOption: session_sandbox = "off" keeps a sandbox per
// command and says so.
func TestSessionOffOption(t *testing.T) {
	d := testDriver(t, options{SessionSandbox: sessionSandboxOff})
	if d.SessionSandboxes() {
		t.Fatal("off, yet the call is listed")
	}
	caps, err := d.Capabilities(context.Background())
	if err != nil || !strings.Contains(caps.Details[detailSessionSandbox], `session_sandbox = "off"`) {
		t.Fatalf("capabilities: %q %v", caps.Details[detailSessionSandbox], err)
	}
	ws := newWorkspace(t)
	expectOK(t, sessRun(t, d, ws, "s", spawnCaps, "echo > /tmp/m"))
	r := sessRun(t, d, ws, "s", spawnCaps, "test -e /tmp/m && echo shared || echo own")
	expectOK(t, r)
	if r.stdout != "own\n" || sessionOf(r) != "" {
		t.Fatalf("%q %v", r.stdout, r.exit.Details)
	}
}

// TestSessionOptionsRefused: a session_sandbox mode or session_idle_ms the
// driver does not know is refused naming the key; the known ones pass.
func TestSessionOptionsRefused(t *testing.T) {
	for _, o := range []options{{SessionSandbox: "auto"}, {SessionSandbox: "off"}, {SessionSandbox: "always"}, {SessionIdleMS: 1000}} {
		if err := o.Validate(); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
	for key, o := range map[string]options{"session_sandbox": {SessionSandbox: "on"}, "session_idle_ms": {SessionIdleMS: maxSessionIdleMS + 1}} {
		var oe *optionsError
		if err := o.Validate(); !errors.As(err, &oe) || oe.Key != key {
			t.Errorf("%+v: %v, want an OptionsError for %s", o, err, key)
		}
	}
}

// TestSessionIdleCost: what one idle session sandbox holds: bwrap, the
// supervisor, and the command's sandbox-init waiting ahead (with its
// waiting child for a no-spawn profile); logged as PSS, bounded loosely.
func TestSessionIdleCost(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := newWorkspace(t)
	expectOK(t, sessRun(t, d, ws, "s", spawnCaps, "true"))
	waitUntil(t, func() bool { _, all := sessionProcs(ws); return len(all) >= 3 })
	// The processes report ready before their Go runtimes settle.
	time.Sleep(300 * time.Millisecond)
	_, pids := sessionProcs(ws)
	pssKB := pssOf(t, pids)
	t.Logf("one idle session sandbox: %d processes, %d KiB PSS", len(pids), pssKB)
	if pssKB <= 0 || pssKB > 64<<10 {
		t.Fatalf("one idle session sandbox holds %d KiB", pssKB)
	}
}

// pssOf is the PSS of pids in KiB (skips where smaps_rollup is missing).
func pssOf(t *testing.T, pids []string) int {
	t.Helper()
	var pssKB int
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + pid + "/smaps_rollup")
		if err != nil {
			t.Skipf("no smaps_rollup here: %v", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
				n, _ := strconv.Atoi(f[1])
				pssKB += n
			}
		}
	}
	return pssKB
}

// TestSessionTimeout: a command of a session that outlives its timeout is
// killed and reported as timed out, its tree with it, while the session
// sandbox lives on (the next command reuses it and finds the first's
// file).
func TestSessionTimeout(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := newWorkspace(t)
	ctx := context.Background()
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: spawnCaps, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	spec := driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", "echo > /tmp/mark; sleep 30; echo late > " + ws + "/late"},
		Env: pathEnv(), Cwd: ws, Profile: prof, Timeout: time.Second, MaxOutputBytes: 1 << 10, SessionID: "s", SessionSandbox: true}
	exit, err := d.Run(ctx, spec, driverapi.Streams{})
	if err != nil || !exit.TimedOut || exit.Signal != int32(syscall.SIGKILL) || exit.Details[driverapi.ExitDetailSessionSandbox] != driverapi.SessionSandboxNew {
		t.Fatalf("%v %+v", err, exit)
	}
	r := sessRun(t, d, ws, "s", spawnCaps, `test -e /tmp/mark && echo kept`)
	expectOK(t, r)
	if r.stdout != "kept\n" || sessionOf(r) != driverapi.SessionSandboxReused {
		t.Fatalf("after the timeout: %q %v", r.stdout, r.exit.Details)
	}
	// Its shell (whose argv is the script) is gone with its tree.
	if argRunning(spec.Args[1]) {
		t.Fatal("the timed-out command still runs")
	}
}

// TestSessionForgetWhileRunning: forget_session ends a session whose
// command still runs: the command's Run returns (an error saying its
// session sandbox ended under it) and nothing is left.
func TestSessionForgetWhileRunning(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := newWorkspace(t)
	script := "sleep 30; : " + ws
	done := make(chan drvResult, 1)
	go func() { done <- sessRun(t, d, ws, "s", spawnCaps, script) }()
	waitUntil(t, func() bool { return argRunning(script) }) // control: it runs
	if err := d.ForgetSession(context.Background(), "s"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err == nil || !strings.Contains(r.err.Error(), "session sandbox ended") {
			t.Fatalf("%+v", r)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the command's Run did not return after forget_session")
	}
	expectNothingLeft(t, d, ws)
	if argRunning(script) {
		t.Fatal("the command outlived its session")
	}
}

// TestSessionCapabilitiesPassed: the session supervisor hands its
// children an empty bounding set and locked securebits, their two
// capabilities passing as ambient ones (passCapabilitiesAmbient), so a
// command's sandbox-init has less to drop. What a command holds is
// unchanged: nothing in any set, no_new_privs, with and without spawn
// (two different paths to the command: the waiting child and the fork at
// the hand-over). The controls: this process (root) holds capabilities
// in the same fields, and the supervisor really took the new way (its
// bounding set empty, its ambient set not).
func TestSessionCapabilitiesPassed(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := newWorkspace(t)
	fields := func(status string) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(status, "\n") {
			k, v, ok := strings.Cut(l, ":")
			if ok && (strings.HasPrefix(k, "Cap") || k == "NoNewPrivs") {
				m[k] = strings.TrimSpace(v)
			}
		}
		return m
	}
	zero := func(v string) bool { return v != "" && strings.Trim(v, "0") == "" }
	// This thread's, not /proc/self's (the main thread's): a Landlock-tier
	// command's notifier drops its thread's effective capabilities and
	// ends with the thread, and on the main thread, which Go never ends,
	// the drop stays (the thread then runs nothing).
	runtime.LockOSThread()
	own, err := os.ReadFile("/proc/thread-self/status")
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	// Unprivileged, this process holds none; the supervisor's (below) are
	// the control there.
	if f := fields(string(own)); os.Geteuid() == 0 && (zero(f["CapBnd"]) || zero(f["CapEff"])) {
		t.Fatalf("control: this process holds no capability: %v", f)
	}
	script := `while read -r l; do case $l in Cap*|NoNewPrivs*) echo "$l";; esac; done < /proc/self/status`
	for _, caps := range []driverapi.Capabilities{{}, spawnCaps} {
		for i := range 2 { // the session's first command, then a warm one
			r := sessRun(t, d, ws, "caps", caps, script)
			expectOK(t, r)
			f := fields(r.stdout)
			for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
				if !zero(f[k]) {
					t.Errorf("spawn %v, command %d: %s = %q (want none): %q", caps.SpawnSubprocess, i, k, f[k], r.stdout)
				}
			}
			if f["NoNewPrivs"] != "1" {
				t.Errorf("spawn %v, command %d: NoNewPrivs %q", caps.SpawnSubprocess, i, f["NoNewPrivs"])
			}
		}
	}
	sup, _ := sessionProcs(ws)
	if len(sup) == 0 {
		t.Fatal("no session supervisor found")
	}
	for _, pid := range sup {
		b, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			t.Fatal(err)
		}
		f := fields(string(b))
		if !zero(f["CapBnd"]) || zero(f["CapAmb"]) || zero(f["CapEff"]) {
			t.Errorf("supervisor %s: bounding %q, ambient %q, effective %q (want none, some, some)", pid, f["CapBnd"], f["CapAmb"], f["CapEff"])
		}
	}
}

// TestSessionSupervisorKilledMidCommand: a session command whose session
// sandbox is killed under it (its supervisor, then the command's reaper
// with it) ends at once with the error that says so, never waiting for
// its timeout for a status record nobody is left to send; the command
// really ran (its mark), and the session's next command gets a new
// sandbox.
func TestSessionSupervisorKilledMidCommand(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	ws := startSession(t, d)
	sup, _ := sessionProcs(ws)
	pid, _ := strconv.Atoi(sup[0])
	done := make(chan drvResult, 1)
	go func() { done <- sessRun(t, d, ws, "s", spawnCaps, `echo > started; exec sleep 60`) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("control: the command never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err == nil || !strings.Contains(r.err.Error(), "session sandbox ended while it ran") {
		t.Fatalf("the command whose session sandbox was killed: err %v, exit %+v; want the error saying its session sandbox ended (not a timeout)", r.err, r.exit)
	}
	r = sessRun(t, d, ws, "s", spawnCaps, `echo ok`)
	expectOK(t, r)
	if r.stdout != "ok\n" || sessionOf(r) != driverapi.SessionSandboxRebuilt {
		t.Fatalf("after the kill: %q %v", r.stdout, r.exit.Details)
	}
}
