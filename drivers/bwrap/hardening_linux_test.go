//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
)

// A grant equal to or inside the workspace is dropped from the plan (the
// workspace already gives every right), so bwrap never has to mount one
// directory twice; a grant outside stays and keeps its mode.
func TestGrantWithinWorkspaceDropped(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	sub := filepath.Join(ws, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := newWorkspace(t)
	if err := os.WriteFile(filepath.Join(outside, "f"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	caps := driverapi.Capabilities{SpawnSubprocess: true, FSRead: []string{ws, sub, outside}, FSWrite: []string{ws, sub}}
	plan, err := buildPlan(driverapi.ProfileRequest{Workspace: ws, Cwd: ws, Capabilities: caps})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.FSWrite) != 0 || len(plan.FSRead) != 1 || plan.FSRead[0] != outside {
		t.Fatalf("grants read %v write %v, want read [%s] only", plan.FSRead, plan.FSWrite, outside)
	}
	for _, c := range []driverapi.Capabilities{
		{SpawnSubprocess: true, FSRead: []string{ws, outside}},
		{SpawnSubprocess: true, FSWrite: []string{ws}, FSRead: []string{outside}},
		{SpawnSubprocess: true, FSRead: []string{sub, outside}},
	} {
		r := drvRun(t, context.Background(), d, ws, c, nil, "/bin/sh", "-c", "echo w > sub/out && cat "+outside+"/f")
		expectOK(t, r)
		if r.stdout != "outside" {
			t.Fatalf("%+v: read grant content %q", c, r.stdout)
		}
		// The grant outside the workspace stays read-only.
		expectFail(t, drvRun(t, context.Background(), d, ws, c, nil, "/bin/sh", "-c", "echo x > "+outside+"/new"))
	}
	if b, _ := os.ReadFile(filepath.Join(sub, "out")); string(b) != "w\n" {
		t.Fatalf("workspace write did not reach the host: %q", b)
	}
	// A grant into a protected entry is still refused, not dropped.
	git := filepath.Join(ws, ".git")
	if err := os.Mkdir(git, 0o755); err != nil {
		t.Fatal(err)
	}
	var ise *driverapi.InvalidSpecError
	if _, err := buildPlan(driverapi.ProfileRequest{Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{FSWrite: []string{git}}}); !errors.As(err, &ise) {
		t.Fatalf("write grant on .git: %v", err)
	}
	// A forged plan carrying such a grant is refused before bwrap runs.
	plan.FSWrite = []string{ws}
	data, err := plan.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var pe *driverapi.ProfileError
	if _, err := decodePlan(data); !errors.As(err, &pe) || !strings.Contains(err.Error(), "lies in the workspace") {
		t.Fatalf("forged grant equal to the workspace: %v", err)
	}
}

// buildGoAlloc builds a static Go program into dir that allocates and
// touches ARG MiB, then prints "ok".
func buildGoAlloc(t *testing.T, dir string) string {
	t.Helper()
	src := t.TempDir()
	prog := `package main

import (
	"fmt"
	"os"
	"strconv"
)

func main() {
	n, _ := strconv.Atoi(os.Args[1])
	b := make([]byte, n<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	fmt.Println("ok", len(b)>>20)
}
`
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "goalloc")
	cmd := exec.Command("go", "build", "-o", out, "main.go")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GO111MODULE=off", "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	return out
}

// Under a memory limit the cgroup enforces, RLIMIT_AS leaves room for the
// address space runtimes reserve: a Go program starts under 64 MiB, and
// the cgroup still kills it when it really uses more.
func TestGoRunsUnderSmallMemoryLimit(t *testing.T) {
	d := testDriver(t, options{})
	ctx := context.Background()
	caps, err := d.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !caps.Has(driverapi.FeatureMemoryLimit) {
		t.Skip("no memory cgroup here: memory limits are refused (TestMemoryLimit)")
	}
	ws := newWorkspace(t)
	prog := buildGoAlloc(t, ws)
	lim := driverapi.Capabilities{MaxMemoryMB: 64}
	r := drvRun(t, ctx, d, ws, lim, nil, prog, "16")
	expectOK(t, r)
	if strings.TrimSpace(r.stdout) != "ok 16" {
		t.Fatalf("stdout %q", r.stdout)
	}
	r = drvRun(t, ctx, d, ws, lim, nil, prog, "256")
	if r.err != nil || r.exit.ExitCode == 0 || strings.Contains(r.stdout, "ok") {
		t.Fatalf("256 MiB under a 64 MiB limit: err=%v exit=%+v stdout=%q stderr=%q", r.err, r.exit, r.stdout, r.stderr)
	}
	if !r.exit.OOMKilled {
		t.Fatalf("not stopped by the cgroup: exit=%+v stderr=%q", r.exit, r.stderr)
	}
	// The ceiling is still finite.
	if got := addressSpaceCeiling(64 << 20); got != 64<<20+addressSpaceHeadroom {
		t.Fatalf("ceiling %d", got)
	}
}

// buildPreload builds a shared library into ws whose constructor appends
// the loading process's name to hostMark (a host directory the sandbox
// does not see: only a load outside the sandbox can write it) and to
// wsMark (in the workspace: any load writes it).
func buildPreload(t *testing.T, ws, hostMark, wsMark string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the preload library")
	}
	src := filepath.Join(t.TempDir(), "evil.c")
	code := `#include <stdio.h>
static void mark(const char *path) {
	char comm[64] = "?";
	FILE *c = fopen("/proc/self/comm", "r");
	if (c) { if (!fgets(comm, sizeof comm, c)) comm[0] = 0; fclose(c); }
	FILE *f = fopen(path, "a");
	if (f) { fputs(comm, f); fclose(f); }
}
__attribute__((constructor)) static void evil(void) {
	mark("` + hostMark + `");
	mark("` + wsMark + `");
}
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(ws, "evil.so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Skipf("cannot build a shared library: %v %s", err, out)
	}
	// Control: a host program does load it.
	ctl := exec.Command("/bin/true")
	ctl.Env = []string{"LD_PRELOAD=" + lib}
	if err := ctl.Run(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(hostMark); !strings.Contains(string(b), "true") {
		t.Skipf("the preload library does not load on this host (%q)", b)
	}
	os.Remove(hostMark)
	os.Remove(wsMark)
	return lib
}

// Loader variables of the child act on the target only: bwrap, its reaper,
// sandbox-init and sandbox-net start with the driver's fixed environment,
// so a workspace library named in LD_PRELOAD / LD_AUDIT / LD_LIBRARY_PATH
// never runs outside the sandbox. Positive control: the target itself
// loads it, and sees the variables exactly.
func TestLoaderVariablesOnlyReachTarget(t *testing.T) {
	d := testDriver(t, options{})
	ctx := context.Background()
	ws := newWorkspace(t)
	hostDir := t.TempDir()
	hostMark, wsMark := filepath.Join(hostDir, "loaded"), filepath.Join(ws, "loaded")
	lib := buildPreload(t, ws, hostMark, wsMark)
	env := []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "LD_PRELOAD", Value: lib},
		{Name: "LD_AUDIT", Value: lib}, {Name: "LD_LIBRARY_PATH", Value: ws}, {Name: "GCONV_PATH", Value: ws}}
	check := func(t *testing.T, r drvResult) {
		t.Helper()
		expectOK(t, r)
		if b, err := os.ReadFile(hostMark); err == nil {
			t.Fatalf("escape: the workspace library ran outside the sandbox, in %q", b)
		}
		got, _ := os.ReadFile(wsMark)
		os.Remove(wsMark)
		if !strings.Contains(string(got), "env") {
			t.Fatalf("control: the target did not load LD_PRELOAD (marks %q, stderr %q)", got, r.stderr)
		}
		for _, bad := range []string{"bwrap", "aleph"} {
			if strings.Contains(string(got), bad) {
				t.Fatalf("%s loaded the library before the target ran: %q", bad, got)
			}
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		var want []string
		for _, e := range env {
			want = append(want, e.Name+"="+e.Value)
		}
		if strings.Join(lines, "|") != strings.Join(want, "|") {
			t.Fatalf("child env %q, want exactly %q", lines, want)
		}
	}
	t.Run("network none", func(t *testing.T) {
		check(t, drvRun(t, ctx, d, ws, driverapi.Capabilities{}, env, "/usr/bin/env"))
	})
	t.Run("allow_hosts via sandbox-net", func(t *testing.T) {
		caps, _ := d.Capabilities(ctx)
		if !caps.Has(driverapi.FeatureNetworkViaProxy) {
			t.Skip("network_via_proxy unavailable here")
		}
		req := driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}}
		prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: req, Workspace: ws, Cwd: ws, Proxy: &driverapi.ProxyEndpoint{UnixSocket: fakeProxy(t)}})
		if err != nil {
			t.Fatal(err)
		}
		var out, errb lockedBuf
		exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/usr/bin/env", Cwd: ws, Profile: prof, Env: env,
			Timeout: 30 * time.Second, MaxOutputBytes: 1 << 16}, driverapi.Streams{Stdout: &out, Stderr: &errb})
		check(t, drvResult{exit: exit, err: err, stdout: out.String(), stderr: errb.String()})
	})
}

// argvProcs lists live processes whose argv contains marker (zombies have
// none), killing them so a failure leaves nothing behind.
func argvProcs(marker string) []string {
	var found []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(b), marker) {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
		wchan, _ := os.ReadFile("/proc/" + e.Name() + "/wchan")
		status, _ := os.ReadFile("/proc/" + e.Name() + "/status")
		var ppid, nspid string
		for _, l := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(l, "PPid:"); ok {
				ppid = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
				nspid = strings.Join(strings.Fields(v), "/")
			}
		}
		found = append(found, fmt.Sprintf("%s %s (ppid %s, nspid %s, waiting in %s)", e.Name(), strings.TrimSpace(string(comm)), ppid, nspid, wchan))
	}
	return found
}

// childWithComm reports whether pid has a child process named comm.
func childWithComm(pid int, comm string) bool {
	base := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, _ := os.ReadDir(base)
	for _, tk := range tasks {
		b, _ := os.ReadFile(base + tk.Name() + "/children")
		for _, c := range strings.Fields(string(b)) {
			if n, _ := os.ReadFile("/proc/" + c + "/comm"); strings.TrimSpace(string(n)) == comm {
				return true
			}
		}
	}
	return false
}

// A driver killed at any point of the sandbox's setup (bwrap parsing its
// argv, cloning, the cgroup v1 hand-over, sandbox-init starting) leaves no
// process behind and never lets the command start: sandbox-init finds the
// lifeline closed. Control: left alone, the same command does start.
func TestDriverDeathDuringSetup(t *testing.T) {
	local := testDriver(t, options{})
	before := commandCgroups(local)
	var killed []int // the plugins' pids
	defer func() {
		// The dead drivers cannot remove their command cgroups. Only
		// theirs (named after them): other test processes run commands
		// meanwhile, and removing one of their cgroups between its
		// creation and its first member fails that command.
		for dir := range commandCgroups(local) {
			for _, pid := range killed {
				if !before[dir] && strings.HasPrefix(filepath.Base(dir), cgroup.Prefix+strconv.Itoa(pid)+"-") {
					_ = os.Remove(dir)
				}
			}
		}
	}()
	caps := driverapi.Capabilities{SpawnSubprocess: true}
	// session: a command of a session enters the session's network
	// namespace (unprivileged, through nsenter and unshare).
	try := func(session string, delay time.Duration, kill bool) (started bool, left []string) {
		p := launchPlugin(t)
		d := p.Driver()
		ctx := context.Background()
		// A workspace of its own for each try: its path is the marker,
		// named by bwrap's mounts, sandbox-init's spec and the command's
		// argv alike (the command's argv reaches neither bwrap's nor
		// sandbox-init's command line).
		ws := newWorkspace(t)
		prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws})
		if err != nil {
			t.Fatal(err)
		}
		marker := ws
		started = false
		var out lockedBuf
		done := make(chan error, 1)
		// The command outlives the wait for residue below by far: if it
		// started despite the driver's death, it is still there then. It
		// ignores SIGPIPE: its stdout is a pipe the dead driver read, and
		// its first write would otherwise kill it and hide the leak.
		go func() {
			_, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", "trap '' PIPE; echo started; sleep 120", marker}, Cwd: ws,
				Profile: prof, Timeout: 3 * time.Minute, MaxOutputBytes: 1024, Env: pathEnv(), SessionID: session}, driverapi.Streams{Stdout: &out})
			done <- err
		}()
		pid := p.Pid()
		killed = append(killed, pid)
		// Bounds for a loaded machine, not expected durations: each wait
		// below ends as soon as what it waits for happens.
		deadline := time.Now().Add(60 * time.Second)
		for !childWithComm(pid, "bwrap") && !childWithComm(pid, "nsenter") && !childWithComm(pid, "unshare") && time.Now().Before(deadline) {
			time.Sleep(200 * time.Microsecond)
		}
		if !kill {
			for !strings.Contains(out.String(), "started") && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			started = strings.Contains(out.String(), "started")
		} else {
			time.Sleep(delay)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-done
		// What a dead driver's setup leaves goes away by itself (bwrap
		// and sandbox-init finish their setup and exit), in tens of
		// milliseconds on an idle machine but over half a second at a
		// load of 20 on two cores: a fixed 3 s here failed under load.
		// A leak is a process that does not go away: a command that
		// started (it sleeps for two minutes) or a process blocked for
		// good; either is still there at the bound. The wait ends early
		// when only the known inert residue is left.
		deadline = time.Now().Add(15 * time.Second)
		for {
			left = argvProcs(marker)
			settled := true
			for _, l := range left {
				settled = settled && inertSetupResidue(l)
			}
			if settled || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, l := range left {
			n, _ := strconv.Atoi(strings.Fields(l)[0])
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
		return started, left
	}
	for _, session := range []string{"", "setup-session"} {
		if started, left := try(session, 0, false); !started || len(left) > 0 {
			t.Fatalf("control (session %q): started %v, left %v", session, started, left)
		}
		step := 2
		if session != "" {
			step = 5
		}
		for delay := 0; delay <= 30; delay += step {
			_, left := try(session, time.Duration(delay)*time.Millisecond, true)
			checkSetupResidue(t, session, delay, left)
		}
	}
}

// checkSetupResidue fails for every process of a killed driver's setup
// that survived, but the one known inert residue.
func checkSetupResidue(t *testing.T, session string, delay int, left []string) {
	t.Helper()
	{
		for _, l := range left {
			if inertSetupResidue(l) {
				t.Logf("driver killed %d ms after bwrap started (session %q): inert bwrap child left (killed now): %s", delay, session, l)
				continue
			}
			t.Errorf("driver killed %d ms after bwrap started (session %q): %s survived", delay, session, l)
		}
	}
}

// inertSetupResidue reports whether l (an argvProcs line) is the known
// residue: bwrap killed between cloning its child and letting it go on
// leaves that child blocked for good on an eventfd, before any mount,
// never running anything.
func inertSetupResidue(l string) bool {
	return strings.Contains(l, " bwrap ") && strings.Contains(l, "/1, waiting in do_wait_intr_irq)")
}

// A sandbox bwrap fails to set up is the driver's error, carrying bwrap's
// message, never the command's exit status; bwrap's output is not passed
// off as the command's. Control: the same wrapper lets a sandbox it does
// not break run normally, with the command's own stderr.
func TestSetupFailureIsDriverError(t *testing.T) {
	real, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("no bwrap")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "bwrap")
	// Breaks only sandboxes whose command line names the workspace entry
	// "break-me"; everything else (the probe's trial sandbox) is real.
	script := "#!/bin/sh\nfor a; do case \"$a\" in *break-me*) echo \"bwrap: Can't stat fd 5: Bad file descriptor\" >&2; exit 1;; esac; done\nexec " + real + " \"$@\"\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	// With the cgroup v1 hand-over where it applies (root here), and without.
	// The fake breaks a launch by its workspace, named by bwrap's mounts;
	// a prepared sandbox fails at its preparation instead:
	// TestPreparedSetupFailureFallsBack is its counterpart there.
	for _, opts := range []options{{BwrapPath: fake, Prepared: preparedOff}, {BwrapPath: fake, Cgroup: cgroupNone, Prepared: preparedOff}} {
		d := testDriver(t, opts)
		ws := newWorkspace(t)
		r := drvRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true}, nil, "/bin/sh", "-c", "echo own-stderr >&2; exit 3")
		if r.err != nil || r.exit.ExitCode != 3 || r.stderr != "own-stderr\n" {
			t.Fatalf("%+v: control: err=%v exit=%+v stderr=%q", opts, r.err, r.exit, r.stderr)
		}
		broken := mkdir(t, newWorkspace(t), "break-me")
		r = drvRun(t, context.Background(), d, broken, driverapi.Capabilities{SpawnSubprocess: true}, nil, "/bin/sh", "-c", "echo ran")
		var se *setupError
		if !errors.As(r.err, &se) || !strings.Contains(se.Message, "Can't stat fd 5") || strings.Contains(se.Error(), "\n") {
			t.Fatalf("%+v: setup failure: err=%v exit=%+v", opts, r.err, r.exit)
		}
		if r.stderr != "" {
			t.Fatalf("%+v: bwrap's message reached the command's stderr: %q", opts, r.stderr)
		}
	}
}
