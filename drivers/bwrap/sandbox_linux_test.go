//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func TestWorkspaceWritableOutsideNot(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	expectOK(t, drvSh(t, d, ws, "echo data > "+ws+"/f && cat "+ws+"/f"))
	if b, err := os.ReadFile(filepath.Join(ws, "f")); err != nil || string(b) != "data\n" {
		t.Fatalf("workspace write did not reach the host: %q %v", b, err)
	}
	for _, p := range []string{"/usr/aleph-x", "/etc/aleph-x", "/aleph-x", "/run/aleph-sandbox/x", "/newdir/x"} {
		r := drvSh(t, d, ws, "echo x > "+p)
		if r.err != nil || r.exit.ExitCode == 0 {
			t.Errorf("write to %s: err=%v exit=%+v", p, r.err, r.exit)
		}
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Fatalf("%s was created on the host", p)
		}
	}
	// /tmp is private: writable inside, nothing reaches the host.
	expectOK(t, drvSh(t, d, ws, "echo x > /tmp/aleph-private-marker && test -s /tmp/aleph-private-marker"))
	if _, err := os.Stat("/tmp/aleph-private-marker"); err == nil {
		t.Fatal("sandbox /tmp is the host's")
	}
}

func TestFSGrants(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	ro, rw := newWorkspace(t), newWorkspace(t)
	if err := os.WriteFile(filepath.Join(ro, "secret"), []byte("ro-data"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Without a grant the directory does not exist inside.
	expectFail(t, drvSh(t, d, ws, "cat "+ro+"/secret"))
	expectFail(t, drvSh(t, d, ws, "echo x > "+rw+"/out"))

	caps := driverapi.Capabilities{SpawnSubprocess: true, FSRead: []string{ro}, FSWrite: []string{rw}}
	r := drvRun(t, context.Background(), d, ws, caps, nil, "/bin/sh", "-c", "cat "+ro+"/secret && echo w > "+rw+"/out")
	expectOK(t, r)
	if r.stdout != "ro-data" {
		t.Fatalf("fs_read content %q", r.stdout)
	}
	if b, _ := os.ReadFile(filepath.Join(rw, "out")); string(b) != "w\n" {
		t.Fatalf("fs_write did not reach the host: %q", b)
	}
	// fs_read is read-only.
	expectFail(t, drvRun(t, context.Background(), d, ws, caps, nil, "/bin/sh", "-c", "echo x > "+ro+"/new"))
	if _, err := os.Stat(filepath.Join(ro, "new")); err == nil {
		t.Fatal("write through fs_read")
	}
}

func TestHostSecretsInvisible(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	// Positive controls: the system read set is there.
	// Positive controls: the system read set is there, TLS trust roots
	// included.
	expectOK(t, drvSh(t, d, ws, "test -r /etc/passwd && test -x /usr/bin/env && test -d /etc/ssl/certs && ls /etc/ssl/certs | grep -q ."))
	secrets := []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/root", "/home", "/run/docker.sock",
		"/var/run", "/run/dbus", "/etc/ssh", "/var/lib", "/sys/fs/cgroup", "/opt", "/srv",
		// The host's TLS private keys sit beside the trust roots.
		"/etc/ssl/private", "/etc/pki/tls/private", "/etc/pki/CA/private"}
	present := 0
	for _, p := range secrets {
		if _, err := os.Stat(p); err == nil {
			present++
		}
		if r := drvSh(t, d, ws, "test -e "+p); r.err != nil || r.exit.ExitCode == 0 {
			t.Errorf("%s is visible inside (err=%v)", p, r.err)
		}
	}
	// The host really has some of them, so the denials above mean
	// something.
	if present == 0 {
		t.Fatalf("the host has none of %v: the check proves nothing here", secrets)
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv("ALEPH_CANARY_HOST_VAR", "leak-me")
	// The chain is found by its workspace, which bwrap's mounts, the spec
	// on sandbox-init's command line and the command's argv all name;
	// a prepared sandbox's chain is another (TestPreparedChain checks
	// theirs).
	d := testDriver(t, options{Prepared: preparedOff})
	ws := newWorkspace(t)
	env := []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "FOO", Value: "bar baz"}, {Name: "HOME", Value: ws}}
	r := drvRun(t, context.Background(), d, ws, driverapi.Capabilities{}, env, "/usr/bin/env")
	expectOK(t, r)
	got := strings.Split(strings.TrimSpace(r.stdout), "\n")
	sort.Strings(got)
	want := []string{"FOO=bar baz", "HOME=" + ws, "PATH=/usr/bin:/bin"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("child env %q, want exactly %q", got, want)
	}
	// Empty env is empty (nil must not mean "inherit").
	r = drvRun(t, context.Background(), d, ws, driverapi.Capabilities{}, []driverapi.EnvVar{}, "/usr/bin/env")
	expectOK(t, r)
	if r.stdout != "" {
		t.Fatalf("empty env gave %q", r.stdout)
	}
	// bwrap and its PID-1 reaper hold no host variable, read from the host
	// (inside, /proc/1/environ is not readable at all); the target's
	// environ (positive control) holds the given one.
	marker := ws
	done := make(chan drvResult, 1)
	go func() {
		done <- drvRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true}, env, "/bin/sh", "-c", "sleep 5; :", marker)
	}()
	// The target is the sh whose parent is sandbox-init: the shell forks
	// to run sleep, and that child is an sh with the same argv until its
	// execve, so "any sh" can be two processes. Once the target exists,
	// bwrap's clone has long become sandbox-init.
	var bwraps, inits, targets []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && len(targets) == 0; time.Sleep(10 * time.Millisecond) {
		bwraps, inits, targets = nil, nil, nil
		var shells [][2]string // pid, ppid
		for _, p := range argvProcs(marker) {
			f := strings.Fields(p)
			switch f[1] {
			case "bwrap":
				bwraps = append(bwraps, f[0])
			case filepath.Base(initPath):
				inits = append(inits, f[0])
			case "sh":
				shells = append(shells, [2]string{f[0], strings.TrimSuffix(f[3], ",")})
			}
		}
		for _, sh := range shells {
			if len(inits) == 1 && sh[1] == inits[0] {
				targets = append(targets, sh[0])
			}
		}
	}
	// bwrap --as-pid-1: no reaper of bwrap's, sandbox-init is PID 1.
	if len(bwraps) != 1 || len(inits) != 1 || len(targets) != 1 {
		t.Fatalf("want bwrap, sandbox-init and the target: bwrap %v, init %v, target %v", bwraps, inits, targets)
	}
	for _, pid := range bwraps {
		b, err := os.ReadFile("/proc/" + pid + "/environ")
		if err != nil || len(b) != 0 {
			t.Errorf("bwrap process %s environ %q, %v: want readable and empty", pid, b, err)
		}
	}
	// sandbox-init started with bwrap's environment plus the PWD bwrap
	// sets; it is not dumpable, so only a privileged reader gets to see.
	if b, err := os.ReadFile("/proc/" + inits[0] + "/environ"); err == nil && (strings.Contains(string(b), "FOO=") || strings.Contains(string(b), "leak-me")) {
		t.Errorf("sandbox-init environ %q holds the child's or the host's variables", b)
	}
	if b, err := os.ReadFile("/proc/" + targets[0] + "/environ"); err != nil || !strings.Contains(string(b), "FOO=bar baz") {
		t.Errorf("control: the target's environ %q, %v lacks FOO", b, err)
	}
	if pid, err := strconv.Atoi(targets[0]); err == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	<-done
	// Inside: our own environ (positive control) shows the given one.
	r = drvSh(t, d, ws, "tr '\\0' '\\n' < /proc/1/environ; echo ---; tr '\\0' '\\n' < /proc/self/environ")
	expectOK(t, r)
	if strings.Contains(r.stdout, "ALEPH_CANARY") || strings.Contains(r.stdout, "leak-me") {
		t.Fatalf("host env leaked: %q", r.stdout)
	}
	if !strings.Contains(r.stdout, "HOME="+ws) {
		t.Fatalf("control: own environ lacks HOME: %q", r.stdout)
	}
}

func TestProtectedDirs(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	if err := os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("cfg"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Control: the workspace itself is writable, .git readable.
	expectOK(t, drvSh(t, d, ws, "echo ok > ok && cat .git/config"))
	for _, script := range []string{
		"echo evil > .git/hooks/pre-commit",
		"echo evil >> .git/config",
		"rm -rf .git",
		"mv .git g2",
		"mkdir .aleph/x",
		"touch .aleph",
		"rmdir .codex",
		"mkdir .agents/skills",
		"ln -s /tmp .codex",
		"mv .agents a2 && mkdir .agents",
	} {
		expectFail(t, drvSh(t, d, ws, script))
	}
	if _, err := os.Stat(filepath.Join(ws, ".git", "hooks", "pre-commit")); err == nil {
		t.Fatal("hook written")
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(b) != "cfg" {
		t.Fatalf(".git/config changed: %q", b)
	}
	// Placeholders for the missing entries are gone after the command.
	for _, n := range []string{".aleph", ".codex", ".agents"} {
		if _, err := os.Lstat(filepath.Join(ws, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left in the workspace: %v", n, err)
		}
	}
	if _, err := os.Stat(filepath.Join(ws, ".git", "config")); err != nil {
		t.Fatal("existing .git removed")
	}
}

func TestProtectedSymlinkRefused(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	target := newWorkspace(t)
	if err := os.Symlink(target, filepath.Join(ws, ".codex")); err != nil {
		t.Fatal(err)
	}
	r := drvSh(t, d, ws, "echo evil > .codex/x")
	var ise *driverapi.InvalidSpecError
	if !errors.As(r.err, &ise) {
		t.Fatalf("symlinked .codex: want InvalidSpecError, got %v (exit %+v)", r.err, r.exit)
	}
	if _, err := os.Stat(filepath.Join(target, "x")); err == nil {
		t.Fatal("write went through the symlink")
	}
	// Control: without the link the same workspace runs.
	os.Remove(filepath.Join(ws, ".codex"))
	expectOK(t, drvSh(t, d, ws, "true"))
}

func TestProtectedPlaceholderShared(t *testing.T) {
	// Two commands in one workspace: the first to finish must not remove
	// the placeholder the other one still has mounted.
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	_, release, err := d.protect(planFor(t, ws))
	if err != nil {
		t.Fatal(err)
	}
	expectOK(t, drvSh(t, d, ws, "true"))
	if fi, err := os.Lstat(filepath.Join(ws, ".aleph")); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Fatalf("placeholder removed while still held: %v", err)
	}
	release()
	if _, err := os.Stat(filepath.Join(ws, ".aleph")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("placeholder not removed after the last user: %v", err)
	}
}

func planFor(t *testing.T, ws string) launchPlan {
	t.Helper()
	p, err := buildPlan(driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExitCodesAndSignals(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	r := drvSh(t, d, ws, "exit 7")
	if r.err != nil || r.exit.ExitCode != 7 || r.exit.Signal != 0 {
		t.Fatalf("exit 7: %+v %v", r.exit, r.err)
	}
	r = drvSh(t, d, ws, "kill -TERM $$")
	if r.err != nil || r.exit.Signal != 15 || r.exit.ExitCode != 143 {
		t.Fatalf("SIGTERM: %+v %v", r.exit, r.err)
	}
	expectOK(t, drvSh(t, d, ws, "true"))
	if r.exit.Duration <= 0 {
		t.Fatalf("no duration: %+v", r.exit)
	}
	r = drvSh(t, d, ws, "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
	expectOK(t, r)
	if r.exit.Usage.MaxRSSKB <= 0 {
		t.Fatalf("no resource usage: %+v", r.exit.Usage)
	}
}

// hostMarkerProcs reports host processes whose command line contains marker.
func hostMarkerProcs(t *testing.T, marker string) []string {
	t.Helper()
	var found []string
	for pid, argv := range hostCmdlines() {
		cl := strings.Join(argv, " ")
		// bwrap's and the shell's argv contain the script text; count
		// only the sleeping marker processes themselves.
		if strings.HasPrefix(cl, "sleep "+marker) {
			found = append(found, pid+": "+cl)
		}
	}
	return found
}

// hostCmdlines is the argv of every process on the host, by pid.
func hostCmdlines() map[string][]string {
	out := map[string][]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && len(b) > 0 {
			out[e.Name()] = strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		}
	}
	return out
}

// waitNoMarker polls (bounded) until no marker process is left.
func waitNoMarker(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := hostMarkerProcs(t, marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes survived: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// daemonizeScript starts a setsid'd, nohup'd, double-forked sleeper and then
// waits forever itself.
func daemonizeScript(marker string) string {
	return "setsid nohup sh -c '(sleep " + marker + " &) ; sleep " + marker + "' >/dev/null 2>&1 & echo started; sleep " + marker
}

func TestTimeoutKillsTree(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	marker := uniqueMarker()
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Capabilities: driverapi.Capabilities{SpawnSubprocess: true}, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuf
	seen := make(chan int, 1)
	go func() {
		// Positive control: the daemons really run before the timeout.
		n, deadline := 0, time.Now().Add(10*time.Second)
		for n < 3 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			n = len(hostMarkerProcs(t, marker))
		}
		seen <- n
	}()
	exit, err := d.Run(context.Background(), driverapi.RunSpec{
		Program: "/bin/sh", Args: []string{"-c", daemonizeScript(marker)}, Cwd: ws, Profile: prof,
		Env: pathEnv(),
		// Long enough for the control to see the daemons on a loaded machine.
		Timeout: 4 * time.Second, MaxOutputBytes: 4096,
	}, driverapi.Streams{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if n := <-seen; n < 3 {
		t.Fatalf("control: only %d sleepers were seen running", n)
	}
	if !strings.Contains(out.String(), "started") {
		t.Fatalf("control: script output %q", out.String())
	}
	if !exit.TimedOut || exit.Signal != 9 || exit.ExitCode != 137 {
		t.Fatalf("want timed out by SIGKILL, got %+v", exit)
	}
	waitNoMarker(t, marker)
}

func TestCancelKillsTree(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	marker := uniqueMarker()
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Capabilities: driverapi.Capabilities{SpawnSubprocess: true}, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := make(chan int, 1)
	go func() {
		n, deadline := 0, time.Now().Add(10*time.Second)
		for n < 3 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			n = len(hostMarkerProcs(t, marker))
		}
		seen <- n
		cancel()
	}()
	_, err = d.Run(ctx, driverapi.RunSpec{
		Program: "/bin/sh", Args: []string{"-c", daemonizeScript(marker)}, Cwd: ws, Profile: prof,
		Env:     pathEnv(),
		Timeout: time.Minute, MaxOutputBytes: 4096,
	}, driverapi.Streams{})
	if n := <-seen; n < 3 {
		t.Fatalf("control: only %d sleepers were seen running", n)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	waitNoMarker(t, marker)
}

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *lockedBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *lockedBuf) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// byteCounter counts what reaches it.
type byteCounter struct {
	mu sync.Mutex
	n  int64
}

func (c *byteCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.n += int64(len(p))
	c.mu.Unlock()
	return len(p), nil
}

func TestOutputFloodTruncated(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Capabilities: driverapi.Capabilities{SpawnSubprocess: true}, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	const total = 64 << 20
	var out, errw byteCounter
	exit, err := d.Run(context.Background(), driverapi.RunSpec{
		Program: "/bin/sh", Args: []string{"-c", "head -c 67108864 /dev/zero; head -c 1000 /dev/zero >&2"},
		Cwd: ws, Profile: prof, Timeout: time.Minute, MaxOutputBytes: 64 << 10, Env: pathEnv(),
	}, driverapi.Streams{Stdout: &out, Stderr: &errw})
	if err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 0 || !exit.Truncated || exit.StdoutBytes != total || exit.StderrBytes != 1000 {
		t.Fatalf("exit %+v", exit)
	}
	// Only the budget reaches the writers, whatever the child printed.
	if out.n != 32<<10 || errw.n != 1000 {
		t.Fatalf("writers got %d/%d bytes, budget 32768 each", out.n, errw.n)
	}
}

func TestStdin(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	exit, err := d.Run(context.Background(), driverapi.RunSpec{
		Program: "/bin/cat", Stdin: []byte("from stdin"), Cwd: ws, Profile: prof, Timeout: time.Minute, MaxOutputBytes: 4096,
		Env: []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}},
	}, driverapi.Streams{Stdout: &out})
	if err != nil || exit.ExitCode != 0 || out.String() != "from stdin" {
		t.Fatalf("cat: %v %+v %q", err, exit, out.String())
	}
}

func pathEnv() []driverapi.EnvVar { return []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}} }

// uniqueMarker is a sleep duration (seconds) no other process uses.
func uniqueMarker() string { return "9" + strconv.FormatInt(time.Now().UnixNano()%1_000_000_000, 10) }

func TestProcHardened(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	core, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Fatal(err)
	}
	// Control: the sandbox's own /proc works.
	expectOK(t, drvSh(t, d, ws, "grep -q '^Pid:' /proc/self/status && test $(ls -d /proc/[0-9]* | wc -l) -lt 10"))
	for _, script := range []string{
		// Harmless should it ever pass: the value the sysctl has. (A real
		// payload here would change the host's core_pattern.)
		`v=$(cat /proc/sys/kernel/core_pattern) && printf '%s\n' "$v" > /proc/sys/kernel/core_pattern`,
		// Writing nothing: a write of "b" would reboot a host where the
		// cover failed.
		"test -w /proc/sysrq-trigger && : > /proc/sysrq-trigger",
		// PID 1 is sandbox-init: its memory must not be writable from the
		// sandbox.
		"printf x | dd of=/proc/1/mem bs=1 seek=4194304 conv=notrunc 2>/dev/null",
		"ls /proc/1/root/",
	} {
		expectFail(t, drvSh(t, d, ws, script))
	}
	if b, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(b) != string(core) {
		t.Fatalf("host core_pattern changed: %q -> %q", core, b)
	}
}

func TestConcurrentRunsShareWorkspace(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r := drvSh(t, d, ws, "test -c .aleph && ! mkdir .aleph/x 2>/dev/null && echo "+strconv.Itoa(i)+" > f"+strconv.Itoa(i)+" && sleep 0.2")
			if r.err != nil || r.exit.ExitCode != 0 {
				errs <- r.stderr + fmtErr(r.err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for i := 0; i < 6; i++ {
		if _, err := os.Stat(filepath.Join(ws, "f"+strconv.Itoa(i))); err != nil {
			t.Errorf("run %d wrote nothing", i)
		}
	}
	for _, n := range []string{".aleph", ".codex", ".agents", ".git"} {
		if _, err := os.Lstat(filepath.Join(ws, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind", n)
		}
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestNoDescriptorLeaksIntoSandbox(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	ro := newWorkspace(t)
	caps := driverapi.Capabilities{SpawnSubprocess: true, FSRead: []string{ro}}
	// ls opens /proc/self/fd itself (fd 3); nothing else may be open: not
	// the pinned mount sources, not the cgroup hand-over pipes.
	r := drvRun(t, context.Background(), d, ws, caps, nil, "/bin/sh", "-c", "ls /proc/self/fd | tr '\\n' ' '")
	expectOK(t, r)
	if strings.TrimSpace(r.stdout) != "0 1 2 3" {
		t.Fatalf("open descriptors inside: %q", r.stdout)
	}
}

func TestPinRefusesSwappedPaths(t *testing.T) {
	ws := newWorkspace(t)
	other := newWorkspace(t)
	grant := filepath.Join(ws, "..", filepath.Base(ws)+"-grant")
	grant = filepath.Clean(grant)
	if err := os.MkdirAll(filepath.Join(grant, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(grant)
	if err := os.MkdirAll(filepath.Join(other, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := planFor(t, ws)
	p.Protected = nil
	p.FSRead = []string{filepath.Join(grant, "a", "b")}
	// Control: unchanged paths pin.
	files, fds, err := pinPaths(p, 3)
	if err != nil || len(files) != 2 || fds[ws] != 3 || fds[p.FSRead[0]] != 4 {
		t.Fatalf("control: %v %v", fds, err)
	}
	for _, f := range files {
		f.Close()
	}
	// A directory on the way swapped for a symlink after the check.
	if err := os.RemoveAll(filepath.Join(grant, "a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(grant, "a")); err != nil {
		t.Fatal(err)
	}
	var ise *driverapi.InvalidSpecError
	if _, _, err := pinPaths(p, 3); !errors.As(err, &ise) {
		t.Fatalf("swapped parent: %v", err)
	}
	// The path itself swapped for a symlink.
	p.FSRead = []string{filepath.Join(grant, "c")}
	if err := os.Symlink(other, p.FSRead[0]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pinPaths(p, 3); !errors.As(err, &ise) {
		t.Fatalf("swapped leaf: %v", err)
	}
}

func TestProtectedGitFile(t *testing.T) {
	// A worktree's .git is a file; it is protected the same way.
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	if err := os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: /elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := drvSh(t, d, ws, "cat .git")
	expectOK(t, r)
	if r.stdout != "gitdir: /elsewhere\n" {
		t.Fatalf("control: %q", r.stdout)
	}
	expectFail(t, drvSh(t, d, ws, "echo 'gitdir: /tmp/evil' > .git"))
	expectFail(t, drvSh(t, d, ws, "rm -f .git && mkdir .git"))
	if b, _ := os.ReadFile(filepath.Join(ws, ".git")); string(b) != "gitdir: /elsewhere\n" {
		t.Fatalf(".git changed: %q", b)
	}
}

func TestPlaceholderKeptForOtherDriverProcess(t *testing.T) {
	// Two drivers stand for two driver processes (flock locks belong to
	// open files, so the exclusion is the same).
	d1, d2 := testDriver(t, options{}), testDriver(t, options{})
	ws := newWorkspace(t)
	p := planFor(t, ws)
	_, rel1, err := d1.protect(p)
	if err != nil {
		t.Fatal(err)
	}
	pr2, rel2, err := d2.protect(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(pr2.missing) != len(driverapi.DefaultProtectedEntries()) {
		t.Fatalf("the second driver did not take the first one's placeholders for placeholders: %+v", pr2)
	}
	rel1()
	// d1 created the placeholders, but d2's command still uses them.
	for _, n := range driverapi.DefaultProtectedEntries() {
		if _, err := os.Lstat(filepath.Join(ws, n)); err != nil {
			t.Fatalf("%s removed while another driver's command used it: %v", n, err)
		}
	}
	// The last user removes them, whoever made them.
	rel2()
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		t.Fatalf("left in the workspace after both commands: %v", ents)
	}
}
