//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

func preparedOpts(mode preparedMode) options { return options{Prepared: mode} }

// preparedMarker is in the argv of a prepared sandbox's bwrap and
// sandbox-init (the spec's field) and in no other's.
const preparedMarker = `"prepared":true`

// needPreparable skips where the driver builds every sandbox for its
// command by design (docs/linux.md, "Prepared sandboxes": root drivers
// only); TestPreparedOffUnprivileged holds that case.
func needPreparable(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("prepared sandboxes need a root driver (the sandbox cannot mount in its own mount namespace unprivileged)")
	}
}

// TestPreparedOffUnprivileged: an unprivileged driver asked for prepared
// sandboxes builds each sandbox for its command, says so in its
// capabilities, and runs every command (in "always" mode too).
func TestPreparedOffUnprivileged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root: prepared sandboxes are used (the other TestPrepared* tests)")
	}
	d := testDriver(t, preparedOpts(preparedAlways))
	ws := newWorkspace(t)
	for i := 0; i < 3; i++ {
		r := drvSh(t, d, ws, "echo ok")
		if r.err != nil || r.exit.ExitCode != 0 || r.stdout != "ok\n" || r.exit.Details["prepared"] == "1" {
			t.Fatalf("%+v", r)
		}
	}
	caps, err := d.Capabilities(context.Background())
	if err != nil || !strings.HasPrefix(caps.Details["prepared"], "off (unprivileged") {
		t.Fatalf("prepared: %q %v", caps.Details["prepared"], err)
	}
	if st := d.PreparedStats(); st.Hits+st.Built != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPreparedHandover runs commands through prepared sandboxes: output,
// exit status, environment, cwd and stdin arrive with the hand-over, and
// the exit says it ran prepared.
func TestPreparedHandover(t *testing.T) {
	needPreparable(t)
	d := testDriver(t, preparedOpts(preparedAlways))
	skipWithoutPool(t, d)
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

// TestPreparedOnce: a prepared sandbox serves one command. Commands of one
// profile back to back run in different sandboxes (each finds its own
// /tmp, a tmpfs of its sandbox, without the mark of the one before),
// prepared, and the pool hit. (Not the PID namespace's inode: the kernel
// gives a freed namespace's number to the next one.)
func TestPreparedOnce(t *testing.T) {
	needPreparable(t)
	d := testDriver(t, preparedOpts(preparedAuto))
	skipWithoutPool(t, d)
	ws := newWorkspace(t)
	prepared := 0
	for i := 0; i < 6; i++ {
		r := drvSh(t, d, ws, `test -e /tmp/served && echo reused; echo > /tmp/served && echo marked`)
		expectOK(t, r)
		if r.stdout != "marked\n" {
			t.Fatalf("command %d: %q (a sandbox served twice, or the mark failed)", i, r.stdout)
		}
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

// TestPreparedAnswerMeansEnded: a prepared sandbox's command is answered
// as soon as its supervisor reports, before the namespaces are gone, so
// the report must mean what a sandbox that ended means: what the command
// left running in the background is dead (it never writes its file), and
// the output is complete. The positive control waits for the same
// background writer, whose file then exists: the writer works, and only
// the end of its command stops it.
func TestPreparedAnswerMeansEnded(t *testing.T) {
	needPreparable(t)
	d := testDriver(t, preparedOpts(preparedAlways))
	skipWithoutPool(t, d)
	ws := newWorkspace(t)
	// A writer that never stops: once its command is answered, the file
	// must not grow.
	r := drvSh(t, d, ws, `(exec >/dev/null 2>&1 </dev/null; while :; do echo x >> busy; done) & sleep 0.1; echo started`)
	size := func() int64 {
		st, err := os.Stat(filepath.Join(ws, "busy"))
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	at := size()
	expectOK(t, r)
	if r.exit.Details["prepared"] != "1" || r.stdout != "started\n" || at == 0 {
		t.Fatalf("%+v, %d bytes written", r, at)
	}
	time.Sleep(300 * time.Millisecond)
	if now := size(); now != at {
		t.Fatalf("the background writer of an answered command still ran: %d bytes, then %d", at, now)
	}
	late := func(wait string) drvResult {
		return drvSh(t, d, ws, `(sleep 0.3; echo late > late; echo bg-out) & echo started; `+wait)
	}
	r = late("wait")
	expectOK(t, r)
	if r.exit.Details["prepared"] != "1" || r.stdout != "started\nbg-out\n" {
		t.Fatalf("control: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(ws, "late")); err != nil {
		t.Fatalf("control: the background writer did not write: %v", err)
	}
	// Large output is complete when the answer comes.
	r = drvSh(t, d, ws, `head -c 400000 /dev/zero`)
	expectOK(t, r)
	if r.exit.Details["prepared"] != "1" || len(r.stdout) != 400000 || r.exit.StdoutBytes != 400000 {
		t.Fatalf("output: %d bytes, exit %+v", len(r.stdout), r.exit)
	}
	// The command's own resource use comes with the report.
	r = drvSh(t, d, ws, `i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done`)
	expectOK(t, r)
	if r.exit.Details["prepared"] != "1" || r.exit.Usage.MaxRSSKB <= 0 || r.exit.Usage.UserMS+r.exit.Usage.SystemMS <= 0 {
		t.Fatalf("usage: %+v", r.exit)
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
	needPreparable(t)
	d := testDriver(t, preparedOpts(preparedAuto))
	skipWithoutPool(t, d)
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
	// The behaviour: killed at its timeout, long before the program would
	// end; the margin (20 s against 0.5 s) absorbs a loaded machine.
	if e := run("sleep 60", 500*time.Millisecond); !e.TimedOut || e.Details["prepared"] != "1" || e.Duration > 20*time.Second {
		t.Fatalf("a command past its timeout: %+v", e)
	}
}

// fillPool runs a profile twice (auto mode prepares on the second run) and
// waits until a sandbox waits for it.
func fillPool(t *testing.T, d *Driver, ws string) {
	t.Helper()
	skipWithoutPool(t, d)
	expectOK(t, drvSh(t, d, ws, "true"))
	expectOK(t, drvSh(t, d, ws, "true"))
	waitUntil(t, func() bool { return d.PreparedStats().Waiting > 0 })
}

// TestPreparedProtectedAtHandover: the protected entries are those of the
// workspace when the command arrives. While a sandbox waits, nothing of it
// is on the host (no placeholder); a repository made after the sandbox was
// prepared, nested ones included, is read-only to the command; missing
// entries cannot be created; and the rest of the workspace stays writable.
func TestPreparedProtectedAtHandover(t *testing.T) {
	needPreparable(t)
	d := testDriver(t, preparedOpts(preparedAuto))
	ws := newWorkspace(t)
	fillPool(t, d, ws)
	if ents, err := os.ReadDir(ws); err != nil || len(ents) != 0 {
		t.Fatalf("the workspace holds %v while a sandbox waits (%v)", ents, err)
	}
	for _, dir := range []string{".git/hooks", "sub/.git/hooks"} {
		if err := os.MkdirAll(filepath.Join(ws, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := drvSh(t, d, ws, `
		echo evil > .git/config 2>/dev/null && echo wrote-config
		echo evil > .git/hooks/pre-commit 2>/dev/null && echo wrote-hook
		echo evil > sub/.git/hooks/pre-commit 2>/dev/null && echo wrote-nested-hook
		mv sub moved 2>/dev/null && echo moved-sub
		mkdir .vscode 2>/dev/null && echo made-vscode
		echo ok > allowed && echo wrote-allowed
		echo ok > sub/allowed && echo wrote-sub-allowed`)
	expectOK(t, r)
	if r.exit.Details["prepared"] != "1" {
		t.Fatalf("not run prepared: %+v", r.exit)
	}
	if got := strings.Fields(r.stdout); len(got) != 2 || got[0] != "wrote-allowed" || got[1] != "wrote-sub-allowed" {
		t.Fatalf("inside: %q (want only the two allowed writes)", r.stdout)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(b) != "[core]\n" {
		t.Fatalf(".git/config is %q", b)
	}
	for _, p := range []string{".git/hooks/pre-commit", "sub/.git/hooks/pre-commit", ".vscode"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s exists on the host", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "sub", "allowed")); string(b) != "ok\n" {
		t.Fatalf("positive control: sub/allowed is %q", b)
	}
}

// TestPreparedStaleWorkspace: a workspace replaced after its sandbox was
// prepared is not served by that sandbox (it binds the old directory):
// the command runs in a sandbox built for it and sees the new one.
func TestPreparedStaleWorkspace(t *testing.T) {
	needPreparable(t)
	d := testDriver(t, preparedOpts(preparedAuto))
	ws := newWorkspace(t)
	fillPool(t, d, ws)
	if err := os.Remove(ws); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "new"), []byte("fresh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stale := d.PreparedStats().Stale
	r := drvSh(t, d, ws, "cat new")
	expectOK(t, r)
	if r.stdout != "fresh\n" || r.exit.Details["prepared"] == "1" || d.PreparedStats().Stale != stale+1 {
		t.Fatalf("stdout %q details %v stats %+v", r.stdout, r.exit.Details, d.PreparedStats())
	}
}

// TestPreparedNotAcrossSessions: a session's sandboxes never serve
// another session's command, even for the same profile.
func TestPreparedNotAcrossSessions(t *testing.T) {
	needPreparable(t)
	d, ws, prof := poolDriver(t, preparedOpts(preparedAuto))
	ctx := context.Background()
	run := func(session string) driverapi.Exit {
		exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/true", Env: pathEnv(), Cwd: ws, Profile: prof, SessionID: session,
			Timeout: 10 * time.Second, MaxOutputBytes: 1024}, driverapi.Streams{})
		if err != nil || exit.ExitCode != 0 {
			t.Fatalf("%v %+v", err, exit)
		}
		return exit
	}
	run("a")
	run("a")
	waitUntil(t, func() bool { return d.PreparedStats().Waiting > 0 })
	if e := run("b"); e.Details["prepared"] == "1" {
		t.Fatal("session b was served a sandbox prepared for session a")
	}
	if e := run("a"); e.Details["prepared"] != "1" {
		t.Fatalf("positive control: session a's own command was not served prepared (%+v)", d.PreparedStats())
	}
	// Forgetting a session destroys its waiting sandboxes.
	waitUntil(t, func() bool { return d.PreparedStats().Waiting > 0 })
	if err := d.ForgetSession(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if st := d.PreparedStats(); st.Waiting != 0 {
		t.Fatalf("after forget: %+v", st)
	}
}

// TestPreparedCapped: many sessions, each with a warm pool, never hold
// more sandboxes than prepared_max, waiting or being built, and do reach
// it (the control: the cap, not a lack of demand, bounds them). Four
// times as many sessions as the cap, each asking for a pool on its
// second command, keep the pool at the cap for most of the run; the
// sandboxes prepared wait 60 s (prepared_idle_ms), longer than the run.
func TestPreparedCapped(t *testing.T) {
	needPreparable(t)
	const limit = 6
	d, ws, prof := poolDriver(t, options{Prepared: preparedAuto, PreparedMax: limit})
	ctx := context.Background()
	peak := 0
	for s := 0; s < 4*limit; s++ {
		for i := 0; i < 2; i++ {
			exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/true", Env: pathEnv(), Cwd: ws, Profile: prof,
				SessionID: "s" + strconv.Itoa(s), Timeout: 10 * time.Second, MaxOutputBytes: 1024}, driverapi.Streams{})
			if err != nil || exit.ExitCode != 0 {
				t.Fatalf("%v %+v", err, exit)
			}
		}
		total, _, _ := d.pool.Counts()
		peak = max(peak, total)
	}
	if peak != limit {
		t.Fatalf("peak %d waiting or being built, cap %d", peak, limit)
	}
	// bwrap, sandbox-init and its pre-forked child (a no-spawn profile).
	if n := len(preparedProcs(ws)); n > 3*limit {
		t.Fatalf("%d sandbox processes for a cap of %d sandboxes", n, limit)
	}
}

// preparedProcs are the host processes of sandboxes prepared for ws: bwrap
// and sandbox-init (initPath inside). Unprivileged, the nsenter and unshare
// that start bwrap in a session's network namespace carry the same argv
// and are left out.
func preparedProcs(ws string) []string {
	var found []string
	for pid, argv := range hostCmdlines() {
		if filepath.Base(argv[0]) != "bwrap" && argv[0] != initPath {
			continue
		}
		if joined := strings.Join(argv, " "); strings.Contains(joined, preparedMarker) && strings.Contains(joined, ws) {
			found = append(found, pid)
		}
	}
	return found
}

// TestPreparedDriverDeath: killing the driver (kill -9) while sandboxes
// wait leaves none of them behind.
func TestPreparedDriverDeath(t *testing.T) {
	needPreparable(t)
	p, ws := pluginWithPool(t, `{"prepared":"auto","cgroup":"none"}`)
	// Control: sandboxes wait (bwrap and sandbox-init of each).
	waitUntil(t, func() bool { return len(preparedProcs(ws)) >= 2 })
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(preparedProcs(ws)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("prepared sandboxes outlived their driver: %v", preparedProcs(ws))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPreparedChain: what waits in a prepared sandbox starts as a
// launched one does: bwrap and sandbox-init with an empty environment
// (nothing of the driver's or of any command's) and sandbox-init told the
// precompiled seccomp programs' descriptor.
func TestPreparedChain(t *testing.T) {
	needPreparable(t)
	d := testDriver(t, preparedOpts(preparedAuto))
	ws := newWorkspace(t)
	fillPool(t, d, ws)
	pids := preparedProcs(ws)
	if len(pids) < 2 {
		t.Fatalf("control: %d processes of the waiting sandbox", len(pids))
	}
	sawSeccompFD := false
	for _, pid := range pids {
		env, err := os.ReadFile("/proc/" + pid + "/environ")
		if err != nil {
			t.Fatal(err)
		}
		// bwrap's is empty; sandbox-init's holds the PWD bwrap sets.
		for _, kv := range strings.Split(strings.TrimSuffix(string(env), "\x00"), "\x00") {
			if kv != "" && !strings.HasPrefix(kv, "PWD=") {
				t.Errorf("process %s starts with %q in its environment", pid, kv)
			}
		}
		cl, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		if strings.Contains(string(cl), `"seccomp_fd":`) && strings.Contains(string(cl), `"prepared":true`) {
			sawSeccompFD = true
		}
	}
	if !sawSeccompFD {
		t.Fatal("no waiting sandbox-init was told the precompiled programs")
	}
}

// TestPreparedSetupFailureFallsBack: a sandbox that cannot be prepared
// costs the command nothing but the attempt: it runs in a sandbox built
// for it, with its own output and status.
func TestPreparedSetupFailureFallsBack(t *testing.T) {
	real, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("no bwrap")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "bwrap")
	script := "#!/bin/sh\nfor a; do case \"$a\" in *'" + preparedMarker + "'*) echo 'bwrap: broken' >&2; exit 1;; esac; done\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	d := testDriver(t, options{BwrapPath: fake, Prepared: preparedAlways})
	ws := newWorkspace(t)
	r := drvSh(t, d, ws, "echo out; echo own >&2; exit 4")
	if r.err != nil || r.exit.ExitCode != 4 || r.stdout != "out\n" || r.stderr != "own\n" || r.exit.Details["prepared"] == "1" {
		t.Fatalf("%+v", r)
	}
	if st := d.PreparedStats(); st.Hits != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPreparedIdleCost measures what a waiting sandbox costs in memory
// (proportional set size of its processes) and holds it to a bound far
// above the figure measured (about 5 MB: bwrap and a Go sandbox-init), so
// a sandbox that grew by an order of magnitude fails here.
func TestPreparedIdleCost(t *testing.T) {
	needPreparable(t)
	_, ws, _, _ := noSpawnPool(t)
	// The sandbox reports ready before its Go runtimes settle.
	time.Sleep(200 * time.Millisecond)
	pids := preparedProcs(ws)
	if len(pids) != 3 {
		t.Fatalf("%d processes of one waiting sandbox (want bwrap, sandbox-init and its waiting child)", len(pids))
	}
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
	t.Logf("one waiting sandbox: %d processes, %d KiB PSS", len(pids), pssKB)
	if pssKB <= 0 || pssKB > 48<<10 {
		t.Fatalf("one waiting sandbox holds %d KiB", pssKB)
	}
}

func ptr[T any](v T) *T { return &v }

// TestPreparedStopsAfterRefusals: when the hand-overs of a profile keep
// failing (here: the workspace replaced before every command, so each
// waiting sandbox binds a directory that is gone), the driver stops
// preparing sandboxes for it instead of building one per command that
// nobody can use; the commands themselves all run.
func TestPreparedStopsAfterRefusals(t *testing.T) {
	needPreparable(t)
	d := testDriver(t, preparedOpts(preparedAuto))
	skipWithoutPool(t, d)
	ws := newWorkspace(t)
	fillPool(t, d, ws)
	for i := 0; i < 8; i++ {
		if err := os.RemoveAll(ws); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		r := drvSh(t, d, ws, "echo ok")
		if r.err != nil || r.stdout != "ok\n" || r.exit.Details["prepared"] == "1" {
			t.Fatalf("command %d: %+v", i, r)
		}
		// Let a refill (if any) finish before the next replacement.
		time.Sleep(100 * time.Millisecond)
	}
	st := d.PreparedStats()
	if st.Stale < maxRefused || st.Built > maxRefused+2 {
		t.Fatalf("after 8 refused hand-overs: %+v (want at least %d stale, at most %d built)", st, maxRefused, maxRefused+2)
	}
}

// TestPreparedGracefulStop: when the host shuts the plugin down, its
// waiting sandboxes go with it, processes and cgroups, before the process
// exits (not only at the next driver's start).
func TestPreparedGracefulStop(t *testing.T) {
	needPreparable(t)
	p, ws := pluginWithPool(t, `{"prepared":"auto"}`)
	// Control: sandboxes wait, each in a cgroup of this plugin's.
	waitUntil(t, func() bool { return len(preparedProcs(ws)) >= 2 })
	local := testDriver(t, options{})
	own := cgroup.Prefix + strconv.Itoa(p.Pid()) + "-"
	ownCgroups := func() []string {
		var out []string
		for dir := range commandCgroups(local) {
			if strings.HasPrefix(filepath.Base(dir), own) {
				out = append(out, dir)
			}
		}
		return out
	}
	if local.probe().cg.Mode() != cgroup.None && len(ownCgroups()) == 0 {
		t.Fatal("control: the waiting sandboxes have no cgroup")
	}
	p.Kill() // the host's graceful stop: Close runs before the process exits
	if left := preparedProcs(ws); len(left) > 0 {
		t.Errorf("waiting sandboxes outlived the plugin's stop: %v", left)
	}
	if left := ownCgroups(); len(left) > 0 {
		t.Errorf("cgroups of the stopped plugin left: %v", left)
		for _, dir := range left {
			_ = os.Remove(dir)
		}
	}
}

// pluginWithPool launches the driver plugin with the options section opts
// and runs one profile twice in a fresh workspace, so that (in auto mode)
// sandboxes are being prepared for it.
func pluginWithPool(t *testing.T, opts string) (*driverapi.Process, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := driverapi.LaunchDriver(ctx, driverapi.LaunchConfig{Path: driverBin, Env: []string{optionsEnv + "=" + opts}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	d := p.Driver()
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/true", Cwd: ws, Profile: prof, Env: pathEnv(),
			Timeout: 10 * time.Second, MaxOutputBytes: 1024}, driverapi.Streams{}); err != nil || exit.ExitCode != 0 {
			t.Fatalf("%v %+v", err, exit)
		}
	}
	return p, ws
}

// TestPreparedWaitingChild: the child a no-spawn sandbox forks while it
// waits (sandboxinit/prefork_linux.go) holds no capability in any set, has
// no_new_privs and its seccomp filter, and holds no descriptor of the
// lifeline, while its supervisor still holds only the effective
// capabilities the hand-over's mounts need (its bounding and ambient sets
// already empty) and no filter yet. The next command runs as that very
// process. A waiting child that died costs the command nothing.
func TestPreparedWaitingChild(t *testing.T) {
	needPreparable(t)
	d, ws, prof, _ := noSpawnPool(t)
	ctx := context.Background()
	sup, child := waitingPair(t, ws)
	cs, ss := procStatus(t, atoi(child)), procStatus(t, atoi(sup))
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if cs[k] != "0000000000000000" {
			t.Errorf("waiting child %s: %s", k, cs[k])
		}
	}
	// Two filters more than its supervisor (which may carry filters of
	// its own host's: the Landlock-hidden pass puts one on the whole
	// tree): the command's notification filter, whose listener the driver
	// holds (notify_linux.go), and the target's program.
	if cs["Seccomp"] != "2" || cs["NoNewPrivs"] != "1" || atoi(cs["Seccomp_filters"]) != atoi(ss["Seccomp_filters"])+2 {
		t.Errorf("waiting child: seccomp %s, %s filters (its supervisor %s), no_new_privs %s",
			cs["Seccomp"], cs["Seccomp_filters"], ss["Seccomp_filters"], cs["NoNewPrivs"])
	}
	// The control: the supervisor still has what the mounts need, and
	// nothing it could pass on at an exec.
	if ss["CapEff"] == "0000000000000000" {
		t.Errorf("supervisor before the hand-over: %v", ss)
	}
	if ss["CapBnd"] != "0000000000000000" || ss["CapAmb"] != "0000000000000000" || ss["CapInh"] != "0000000000000000" {
		t.Errorf("supervisor's bounding %s, ambient %s, inheritable %s", ss["CapBnd"], ss["CapAmb"], ss["CapInh"])
	}
	lifeline, err := os.Readlink("/proc/" + sup + "/fd/" + strconv.Itoa(lifelineFD))
	if err != nil || !strings.HasPrefix(lifeline, "socket:") {
		t.Fatalf("supervisor's lifeline: %q %v", lifeline, err)
	}
	fds, err := os.ReadDir("/proc/" + child + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fds {
		if l, _ := os.Readlink("/proc/" + child + "/fd/" + f.Name()); l == lifeline {
			t.Errorf("the waiting child holds the lifeline (fd %s)", f.Name())
		}
	}
	if len(fds) > 5 {
		t.Errorf("the waiting child holds %d descriptors (0-2 and its socket expected)", len(fds))
	}
	// The command is the waiting child itself: the shell's $$ is its pid
	// in the sandbox's namespace.
	nspid := strings.Fields(cs["NSpid"])
	run := func() string {
		var out lockedBuf
		exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", "echo $$"}, Env: pathEnv(), Cwd: ws,
			Profile: prof, Timeout: 10 * time.Second, MaxOutputBytes: 1024}, driverapi.Streams{Stdout: &out, Stderr: &out})
		if err != nil || exit.ExitCode != 0 || exit.Details["prepared"] != "1" {
			t.Fatalf("%v %+v %q", err, exit, out.String())
		}
		return strings.TrimSpace(out.String())
	}
	if got := run(); len(nspid) < 2 || got != nspid[len(nspid)-1] {
		t.Fatalf("the command ran as pid %s, the waiting child was %v", got, nspid)
	}
	// A waiting child that dies does not cost the command: its
	// supervisor forks one for it, as in a sandbox built for it.
	_, child = waitingPair(t, ws)
	if err := syscall.Kill(atoi(child), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Dead, not only signalled: a child still dying when the command
	// arrives takes it and dies with it (its socket is still open).
	waitUntil(t, func() bool {
		st, err := os.ReadFile("/proc/" + child + "/stat")
		return err != nil || strings.Contains(string(st), ") Z ")
	})
	if got := run(); got == "" {
		t.Fatal("after the waiting child died: no pid printed")
	}
}

// TestPreparedNofileLimit: the Go runtime raises its own soft
// RLIMIT_NOFILE at every start and puts the inherited one back only in
// what it execs; the waiting child, a fork of the supervisor that execs
// the target itself, puts it back too. The target of a prepared no-spawn
// sandbox sees the limit its driver was started with, as one built for its
// command does (the control).
func TestPreparedNofileLimit(t *testing.T) {
	needPreparable(t)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max < 2048 {
		t.Skipf("hard RLIMIT_NOFILE %d: no room below it for a distinct soft limit", lim.Max)
	}
	// This process's children (bwrap, so sandbox-init) start with 1000.
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 1000, Max: lim.Max}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
	want := fmt.Sprintf("1000\n%d", lim.Max)
	for _, mode := range []preparedMode{preparedAlways, preparedOff} {
		d, ws, prof := modeDriver(t, mode)
		var out lockedBuf
		exit, err := d.Run(context.Background(), driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", "ulimit -Sn; ulimit -Hn"},
			Env: pathEnv(), Cwd: ws, Profile: prof, Timeout: 10 * time.Second, MaxOutputBytes: 1024}, driverapi.Streams{Stdout: &out, Stderr: &out})
		if err != nil || exit.ExitCode != 0 || (exit.Details["prepared"] == "1") != (mode == preparedAlways) {
			t.Fatalf("%s: %v %+v %q", mode, err, exit, out.String())
		}
		if got := strings.TrimSpace(out.String()); got != want {
			t.Errorf("%s: soft and hard RLIMIT_NOFILE %q, want %q", mode, got, want)
		}
	}
}

// TestPreparedExecFailure: a target the kernel refuses to exec (no
// interpreter line, not an ELF file) ends the run with an InvalidSpecError
// for the program naming the kernel's error, and nothing on the command's
// output, whether the waiting child execs it or a child forked for the
// command does (the control: a sandbox built for it). The program in the
// same place made executable text runs (the positive control).
func TestPreparedExecFailure(t *testing.T) {
	needPreparable(t)
	for _, mode := range []preparedMode{preparedAlways, preparedOff} {
		d, ws, prof := modeDriver(t, mode)
		prog := filepath.Join(ws, "prog")
		run := func(content string) (driverapi.Exit, string, error) {
			if err := os.WriteFile(prog, []byte(content), 0o755); err != nil {
				t.Fatal(err)
			}
			var out lockedBuf
			exit, err := d.Run(context.Background(), driverapi.RunSpec{Program: prog, Env: pathEnv(), Cwd: ws, Profile: prof,
				Timeout: 10 * time.Second, MaxOutputBytes: 1024}, driverapi.Streams{Stdout: &out, Stderr: &out})
			return exit, out.String(), err
		}
		_, out, err := run("\x7fnot a program\n")
		var ise *driverapi.InvalidSpecError
		if !errors.As(err, &ise) || ise.Field != "program" || !strings.Contains(ise.Reason, "exec format error") || out != "" {
			t.Errorf("%s: err %v, output %q; want an InvalidSpecError for the program saying exec format error", mode, err, out)
		}
		exit, out, err := run("#!/bin/sh\necho ran\n")
		if err != nil || exit.ExitCode != 0 || out != "ran\n" {
			t.Errorf("%s: the control: err %v exit %d, output %q", mode, err, exit.ExitCode, out)
		}
		if (exit.Details["prepared"] == "1") != (mode == preparedAlways) {
			t.Errorf("%s: %+v", mode, exit)
		}
	}
}

// waitingPair finds the supervisor of ws's waiting sandbox and its
// waiting child (the supervisor's child, confined: no_new_privs is set
// before it says it waits).
func waitingPair(t *testing.T, ws string) (sup, child string) {
	t.Helper()
	waitUntil(t, func() bool {
		sup, child = "", ""
		all := hostCmdlines()
		for _, pid := range preparedProcs(ws) {
			if len(all[pid]) == 0 || all[pid][0] != initPath {
				continue // bwrap
			}
			st, err := os.ReadFile("/proc/" + pid + "/stat")
			if err != nil {
				continue
			}
			// pid (comm) state ppid ...
			f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
			if len(f) < 2 {
				continue
			}
			if p := f[1]; slices.Contains(preparedProcs(ws), p) && all[p][0] == initPath {
				child = pid
			} else {
				sup = pid
			}
		}
		return sup != "" && child != "" && procStatus(t, atoi(child))["NoNewPrivs"] == "1"
	})
	return sup, child
}

// TestPreparedNoSpawnSignals: the target of a no-spawn profile runs in the
// pre-forked child's Landlock domain, beside (not below) its supervisor's;
// signals still reach it: one sent through the driver is forwarded, and
// the timeout kills it. Its own attempt to signal its supervisor fails.
func TestPreparedNoSpawnSignals(t *testing.T) {
	needPreparable(t)
	d, ws, prof := poolDriver(t, preparedOpts(preparedAlways))
	ctx := context.Background()
	run := func(id, script string, timeout time.Duration, out *lockedBuf) <-chan runResult {
		done := make(chan runResult, 1)
		go func() {
			exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", script}, Env: pathEnv(), Cwd: ws,
				Profile: prof, Timeout: timeout, MaxOutputBytes: 1 << 20, CommandID: id}, driverapi.Streams{Stdout: out, Stderr: out})
			done <- runResult{exit, err}
		}()
		return done
	}
	// Builtins only: the shell itself is the target and never forks.
	var out lockedBuf
	done := run("nospawn-term", `trap 'echo got; exit 7' TERM; kill -TERM 1 2>/dev/null && echo "signalled 1"; echo ready; while :; do :; done`, 20*time.Second, &out)
	waitFor(t, &out, "ready")
	if err := d.signalCommand("nospawn-term", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.exit.ExitCode != 7 || r.exit.Details["prepared"] != "1" || !strings.Contains(out.String(), "got") {
		t.Fatalf("forwarded TERM: %+v %v %q", r.exit, r.err, out.String())
	}
	if strings.Contains(out.String(), "signalled 1") {
		t.Errorf("the target signalled its supervisor: %q", out.String())
	}
	var out2 lockedBuf
	r = <-run("nospawn-timeout", `echo ready; while :; do :; done`, 700*time.Millisecond, &out2)
	if r.err != nil || !r.exit.TimedOut || r.exit.Details["prepared"] != "1" || !strings.Contains(out2.String(), "ready") {
		t.Fatalf("timeout: %+v %v %q", r.exit, r.err, out2.String())
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// noSpawnPool is an auto-mode driver with one sandbox waiting for the
// default profile (no spawn: its sandbox-init starts the plain child while
// it waits, sandboxinit/prefork_linux.go), its workspace, the profile and a
// /bin/true spec of it.
func noSpawnPool(t *testing.T) (*Driver, string, driverapi.Profile, driverapi.RunSpec) {
	t.Helper()
	d, ws, prof := poolDriver(t, options{Prepared: preparedAuto, PreparedPerProfile: ptr(uint64(1))})
	ctx := context.Background()
	spec := driverapi.RunSpec{Program: "/bin/true", Env: pathEnv(), Cwd: ws, Profile: prof, Timeout: 10 * time.Second, MaxOutputBytes: 1024}
	for range 2 {
		if exit, err := d.Run(ctx, spec, driverapi.Streams{}); err != nil || exit.ExitCode != 0 {
			t.Fatalf("%v %+v", err, exit)
		}
	}
	waitUntil(t, func() bool { return d.PreparedStats().Waiting > 0 })
	return d, ws, prof, spec
}

// A prepared command is registered for signals before its hand-over record
// is sent (the command may run and print before the driver goes on), so
// a signal can come before the record; the supervisor reads the record
// first, so the signal must follow it on the lifeline, never precede it:
// it is held until the supervisor has answered the record. One held for a
// hand-over that was never answered goes to the sandbox built instead
// (takeHeld).
func TestPreparedSignalHeldForRecord(t *testing.T) {
	l, err := newLifeline()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	remote := int(l.remote.Fd())
	l.holdSignals()
	if err := l.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var b [64]byte
	if n, _, err := unix.Recvfrom(remote, b[:], unix.MSG_DONTWAIT); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("a held signal reached the supervisor before the record: %q %v", b[:max(n, 0)], err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	rec := []byte{sandboxinit.HandoverTag, 'r', 'e', 'c'}
	if err := l.handOver(rec, []int{int(null.Fd())}); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for len(got) < len(rec) {
		n, _, _, _, err := unix.Recvmsg(remote, b[:], make([]byte, unix.CmsgSpace(4)), 0)
		if err != nil || n == 0 {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, b[:n]...)
	}
	if !bytes.Equal(got, rec) {
		t.Fatalf("the lifeline carried %q, want the record alone %q", got, rec)
	}
	// Still held until the supervisor answers the record (a large record
	// may fill the socket's buffer until it is read).
	if n, _, err := unix.Recvfrom(remote, b[:], unix.MSG_DONTWAIT); !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("a held signal went out before the supervisor's answer: %q %v", b[:max(n, 0)], err)
	}
	if _, err := l.remote.Write([]byte{sandboxinit.ReadyTag}); err != nil {
		t.Fatal(err)
	}
	if err := l.awaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Read(remote, b[:]); err != nil || !bytes.Equal(b[:n], []byte{sandboxinit.SignalTag, byte(syscall.SIGTERM)}) {
		t.Fatalf("after the answer: %q %v, want the held signal", b[:max(n, 0)], err)
	}
	// After the answer a signal goes straight out (the control: holding
	// ends there).
	if err := l.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Read(remote, b[:]); err != nil || !bytes.Equal(b[:n], []byte{sandboxinit.SignalTag, byte(syscall.SIGINT)}) {
		t.Fatalf("after the hand-over: %q %v", b[:max(n, 0)], err)
	}

	l2, err := newLifeline()
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	l2.holdSignals()
	if err := l2.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The record went out, the supervisor never answered it: what was
	// held, and what came after the record, goes to the sandbox built
	// instead.
	if err := l2.handOver([]byte{sandboxinit.HandoverTag}, []int{int(null.Fd())}); err != nil {
		t.Fatal(err)
	}
	if err := l2.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if held := l2.takeHeld(); len(held) != 2 || held[0] != syscall.SIGHUP || held[1] != syscall.SIGUSR1 {
		t.Fatalf("held for a hand-over never answered: %v", held)
	}
	if held := l2.takeHeld(); len(held) != 0 {
		t.Fatalf("taken twice: %v", held)
	}
}

// A sandbox-init that fails after its started byte leaves that byte alone
// on the lifeline: waitStarted must see the sandbox end (not wait out
// preparedReadyWait, polling a descriptor that is always readable), and
// hand back what done reported, which destroy reads again.
func TestPreparedWaitStartedSeesEnd(t *testing.T) {
	l, err := newLifeline()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.remote.Write([]byte{sandboxinit.StartedTag}); err != nil {
		t.Fatal(err)
	}
	l.remote.Close()
	done := make(chan sandboxResult, 1)
	go func() {
		time.Sleep(50 * time.Millisecond)
		done <- sandboxResult{err: errors.New("exit status 1")}
	}()
	// Well below preparedReadyWait: a wait for that long fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), preparedReadyWait/2)
	defer cancel()
	ended, err := waitStarted(ctx, l, done)
	if err == nil || ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waitStarted = %v (context: %v), want the sandbox's end", err, ctx.Err())
	}
	if ended == nil || ended.err == nil || ended.err.Error() != "exit status 1" {
		t.Fatalf("ended = %+v, want what done reported", ended)
	}

	// The control: started and prepared bytes mean ready, with the
	// sandbox still running.
	l2, err := newLifeline()
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if _, err := l2.remote.Write([]byte{sandboxinit.StartedTag, sandboxinit.PreparedTag}); err != nil {
		t.Fatal(err)
	}
	if ended, err := waitStarted(context.Background(), l2, make(chan sandboxResult)); err != nil || ended != nil {
		t.Fatalf("ready sandbox: %v %+v", err, ended)
	}
}

// A waiting sandbox is recorded as a user of placeholders while it is
// built (recovery after a driver's death waits for it to be gone before it
// removes what that driver left), so the hand-over need not record it on
// the command's path; the record goes with the sandbox.
func TestPreparedSandboxRecordedAsUser(t *testing.T) {
	needPreparable(t)
	d, _, _, _ := noSpawnPool(t)
	dir, err := d.journal.Dir()
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, ps := range d.pool.Waiting() {
		if p := ps.sb.process(); p != nil {
			pids = append(pids, p.Pid)
		}
	}
	if len(pids) == 0 {
		t.Fatal("control: no sandbox waits")
	}
	users := func() map[int]bool {
		got := map[int]bool{}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), "user-"+d.owner+"-") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				continue
			}
			pid, _, _ := strings.Cut(string(b), "-")
			got[atoi(pid)] = true
		}
		return got
	}
	got := users()
	for _, pid := range pids {
		if !got[pid] {
			t.Errorf("waiting sandbox (bwrap pid %d) not recorded; records name %v", pid, got)
		}
	}
	d.Close()
	if left := users(); len(left) != 0 {
		t.Errorf("records left after Close: %v", left)
	}
}

// poolDriver is a driver of opts with its pool (the test is skipped where
// there can be none), a fresh workspace and the workspace's default
// profile.
// modeDriver is a driver in prepared mode mode, a workspace and its
// default profile (poolDriver without the need for a pool).
func modeDriver(t *testing.T, mode preparedMode) (*Driver, string, driverapi.Profile) {
	t.Helper()
	d := testDriver(t, preparedOpts(mode))
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	return d, ws, prof
}

func poolDriver(t *testing.T, opts options) (*Driver, string, driverapi.Profile) {
	t.Helper()
	d := testDriver(t, opts)
	skipWithoutPool(t, d)
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	return d, ws, prof
}

// Close ends the runs still going and returns only once their sandboxes
// are gone: a plugin's handlers are cancelled when its host shuts it down
// and nothing waits for them, so a command still being killed went on
// after the plugin, and the service, had exited. The control: the command
// was seen running before Close.
func TestCloseEndsRunsInFlight(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	marker := fmt.Sprintf("%d.%d", 300+os.Getpid()%100, time.Now().UnixNano()%1000000)
	res := make(chan drvResult, 1)
	go func() {
		res <- drvRun(t, context.Background(), d, ws, driverapi.Capabilities{}, nil, "/bin/sleep", marker)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !argRunning(marker) {
		if time.Now().After(deadline) {
			t.Fatal("control: the command never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.Close()
	if argRunning(marker) {
		t.Fatal("the command still runs after Close returned")
	}
	select {
	case r := <-res:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("the run Close ended: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not return")
	}
}

// argRunning reports whether a process has arg in its command line.
func argRunning(arg string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && slices.Contains(strings.Split(string(b), "\x00"), arg) {
			return true
		}
	}
	return false
}
