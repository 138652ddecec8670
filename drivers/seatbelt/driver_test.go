//go:build unix

package seatbelt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/conformance"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// TestMain lets the test binary act as the RLIMIT_AS shim, as the driver
// binary does in production.
func TestMain(m *testing.M) {
	// TestConformancePlumbing gives no Config.Probe: this binary is the probe.
	conformance.ServeProbe(os.Args)
	if len(os.Args) > 1 && os.Args[1] == ShimArg {
		os.Exit(ShimMain(os.Args[2:]))
	}
	if os.Getenv("ALEPH_SEATBELT_TEST_CHILD") == "session" {
		// Reports the session id, the pid, and whether /dev/tty opens.
		sid, _ := unix.Getsid(0)
		tty := "no-tty"
		if f, err := os.Open("/dev/tty"); err == nil {
			f.Close()
			tty = "tty-open"
		}
		fmt.Println(sid, os.Getpid(), tty)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// standIn is a sandbox-exec stand-in for hosts without Seatbelt: it checks
// the launcher's argument shape (-p PROFILE, -D NAME=VALUE..., the program
// twice: as PROGRAM and as the command), records the parameters, and execs
// the command. Isolation itself is only tested on macOS.
const standIn = `#!/bin/sh
[ "$1" = "-p" ] || { echo "stand-in: first option must be -p" >&2; exit 90; }
case "$2" in "(version 1)"*) ;; *) echo "stand-in: bad profile" >&2; exit 91;; esac
shift 2
prog=""
while [ "$1" = "-D" ]; do
  case "$2" in PROGRAM=*) prog="${2#PROGRAM=}";; esac
  [ -n "$STANDIN_LOG" ] && printf '%s\n' "$2" >> "$STANDIN_LOG"
  shift 2
done
[ "$prog" = "$1" ] || { echo "stand-in: PROGRAM param $prog != command $1" >&2; exit 92; }
exec "$@"
`

type fixture struct {
	d    *Driver
	ws   string
	prof driverapi.Profile
}

func newFixture(t *testing.T, caps driverapi.Capabilities) *fixture {
	t.Helper()
	// Resolved, as a host passes it: macOS's temp dir is below the /var
	// symlink, and the driver refuses a workspace reached through one.
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	se := filepath.Join(dir, "sandbox-exec")
	if err := os.WriteFile(se, []byte(standIn), 0o755); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d := New(Config{SandboxExec: se, GOOS: "darwin", Shim: []string{exe, ShimArg},
		ProbeMemoryLimit: func(context.Context) error { return nil }})
	prof, err := d.ProfileFor(t.Context(), driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{d: d, ws: ws, prof: prof}
}

func (f *fixture) spec(prog string, args ...string) driverapi.RunSpec {
	return driverapi.RunSpec{Program: prog, Args: args, Cwd: f.ws, Profile: f.prof,
		Timeout: 30 * time.Second, MaxOutputBytes: 1 << 20,
		Env: []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}}}
}

func (f *fixture) run(t *testing.T, spec driverapi.RunSpec) (driverapi.Exit, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	exit, err := f.d.Run(t.Context(), spec, driverapi.Streams{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return exit, out.String(), errb.String()
}

func TestRunArgsEnvStdinExit(t *testing.T) {
	f := newFixture(t, driverapi.Capabilities{})
	args := []string{"", "a b", `"q"`, "-p", "-D", "x=y", "ünï", "$HOME", "*"}
	exit, out, _ := f.run(t, f.spec("printf", append([]string{`%s|`}, args...)...))
	if exit.ExitCode != 0 || out != strings.Join(args, "|")+"|" {
		t.Errorf("argv: exit %d out %q", exit.ExitCode, out)
	}
	s := f.spec("env")
	s.Env = append(s.Env, driverapi.EnvVar{Name: "ONLY", Value: "this"})
	_, out, _ = f.run(t, s)
	// The shell stand-in exports PWD itself; sandbox-exec adds nothing.
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "PWD=") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 || !strings.Contains(out, "ONLY=this") {
		t.Errorf("environment not exactly the given one: %q", out)
	}
	s = f.spec("cat")
	s.Stdin = bytes.Repeat([]byte("stdin!"), 50000)
	exit, out, _ = f.run(t, s)
	if out != string(s.Stdin) || exit.StdoutBytes != int64(len(s.Stdin)) {
		t.Errorf("stdin: got %d bytes", len(out))
	}
	exit, _, _ = f.run(t, f.spec("sh", "-c", "exit 42"))
	if exit.ExitCode != 42 || exit.Signal != 0 {
		t.Errorf("exit 42: %+v", exit)
	}
	exit, _, _ = f.run(t, f.spec("sh", "-c", "kill -TERM $$"))
	if exit.Signal != int32(syscall.SIGTERM) || exit.ExitCode != 128+int32(syscall.SIGTERM) {
		t.Errorf("signal: %+v", exit)
	}
	exit, _, _ = f.run(t, f.spec("pwd"))
	if exit.Details["program"] == "" {
		t.Error("program not reported")
	}
	_, out, _ = f.run(t, f.spec("pwd"))
	if strings.TrimSpace(out) != f.ws {
		t.Errorf("cwd %q, want %q", out, f.ws)
	}
}

func TestRunPassesParamsToLauncher(t *testing.T) {
	f := newFixture(t, driverapi.Capabilities{FSRead: []string{"/usr/share"}})
	log := filepath.Join(t.TempDir(), "params")
	s := f.spec("true")
	s.Env = append(s.Env, driverapi.EnvVar{Name: "STANDIN_LOG", Value: log})
	exit, _, errs := f.run(t, s)
	if exit.ExitCode != 0 {
		t.Fatalf("exit %d: %s", exit.ExitCode, errs)
	}
	got, _ := os.ReadFile(log)
	for _, want := range []string{"WORKSPACE=" + f.ws, "PROTECTED_0=" + f.ws + "/.git", "READ_0=/usr/share", "PROGRAM=/"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("launcher params lack %q:\n%s", want, got)
		}
	}
}

func TestRunTimeoutKillsGroup(t *testing.T) {
	f := newFixture(t, driverapi.Capabilities{SpawnSubprocess: true})
	pidFile := filepath.Join(f.ws, "bg.pid")
	s := f.spec("sh", "-c", "sleep 300 & echo $! > "+pidFile+"; wait")
	s.Timeout = 300 * time.Millisecond
	exit, _, _ := f.run(t, s)
	if !exit.TimedOut || exit.Signal != 9 || exit.ExitCode != 137 {
		t.Fatalf("timeout not reported: %+v", exit)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		t.Fatalf("bad pid %q", b)
	}
	// The background child was in the group: it is gone (or a zombie
	// about to be reaped by init), never still sleeping.
	if alive(pid) {
		t.Errorf("background child %d survived the timeout", pid)
	}
	// Positive control: a command within its timeout is not reported timed out.
	exit, _, _ = f.run(t, f.spec("true"))
	if exit.TimedOut || exit.ExitCode != 0 {
		t.Errorf("control: %+v", exit)
	}
}

func alive(pid int) bool {
	for range 100 {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			if syscall.Kill(pid, 0) != nil {
				return false
			}
		} else if fs := strings.Fields(string(st)); len(fs) > 2 && fs[2] == "Z" {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func TestRunCancelKills(t *testing.T) {
	f := newFixture(t, driverapi.Capabilities{})
	ctx, cancel := context.WithCancel(t.Context())
	out := &syncBuf{}
	done := make(chan error, 1)
	go func() {
		_, err := f.d.Run(ctx, f.spec("sh", "-c", "echo started; exec sleep 300"), driverapi.Streams{Stdout: out})
		done <- err
	}()
	for i := 0; i < 500 && !strings.Contains(out.String(), "started"); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancel: got %v", err)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestRunOutputBudget(t *testing.T) {
	f := newFixture(t, driverapi.Capabilities{})
	s := f.spec("sh", "-c", "head -c 300000 /dev/zero; head -c 10 /dev/zero >&2")
	s.MaxOutputBytes = 2000
	exit, out, errs := f.run(t, s)
	if len(out) != 1000 || len(errs) != 10 {
		t.Errorf("kept %d/%d bytes, want 1000/10", len(out), len(errs))
	}
	if !exit.Truncated || exit.StdoutBytes != 300000 || exit.StderrBytes != 10 {
		t.Errorf("exit %+v", exit)
	}
}

func TestRunMemoryLimitThroughShim(t *testing.T) {
	f := newFixture(t, driverapi.Capabilities{MaxMemoryMB: 300})
	exit, out, errs := f.run(t, f.spec("sh", "-c", "ulimit -v"))
	if exit.ExitCode != 0 || strings.TrimSpace(out) != strconv.Itoa(300*1024) {
		t.Errorf("RLIMIT_AS in the child: exit %d out %q err %q", exit.ExitCode, out, errs)
	}
	if exit.Details["memory_limit"] != "rlimit_as" {
		t.Errorf("details %v", exit.Details)
	}
	// Positive control: without a limit there is none.
	g := newFixture(t, driverapi.Capabilities{})
	_, out, _ = g.run(t, g.spec("sh", "-c", "ulimit -v"))
	if strings.TrimSpace(out) != "unlimited" {
		t.Errorf("unlimited run has RLIMIT_AS %q", out)
	}
}

func TestShimFailureIsAnError(t *testing.T) {
	f := newFixture(t, driverapi.Capabilities{MaxMemoryMB: 100})
	f.d.cfg.SandboxExec = "/nonexistent/sandbox-exec"
	_, err := f.d.Run(t.Context(), f.spec("true"), driverapi.Streams{})
	if err == nil || !strings.Contains(err.Error(), "exec /nonexistent/sandbox-exec") {
		t.Errorf("shim exec failure: %v", err)
	}
}

func TestRunRefusesBadProfileAndSpec(t *testing.T) {
	f := newFixture(t, driverapi.Capabilities{})
	s := f.spec("true")
	s.Profile.Data = append(append([]byte{}, s.Profile.Data...), ' ')
	var pe *driverapi.ProfileError
	if _, err := f.d.Run(t.Context(), s, driverapi.Streams{}); !errors.As(err, &pe) {
		t.Errorf("tampered profile: %v", err)
	}
	s = f.spec("true")
	s.Profile = driverapi.NewProfile("bwrap", s.Profile.Data)
	if _, err := f.d.Run(t.Context(), s, driverapi.Streams{}); !errors.As(err, &pe) {
		t.Errorf("foreign backend: %v", err)
	}
	s = f.spec("true")
	s.Timeout = 0
	var ise *driverapi.InvalidSpecError
	if _, err := f.d.Run(t.Context(), s, driverapi.Streams{}); !errors.As(err, &ise) {
		t.Errorf("zero timeout: %v", err)
	}
	s = f.spec("true")
	s.Cwd = filepath.Dir(f.ws)
	if _, err := f.d.Run(t.Context(), s, driverapi.Streams{}); !errors.As(err, &ise) {
		t.Errorf("cwd outside the workspace: %v", err)
	}
	// A cwd that only resolves into the workspace is refused, not
	// resolved: through a symlink, or spelled with "..".
	sub := filepath.Join(f.ws, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sub, filepath.Join(f.ws, "link")); err != nil {
		t.Fatal(err)
	}
	for _, cwd := range []string{filepath.Join(f.ws, "link"), sub + "/..", sub + "/"} {
		s = f.spec("true")
		s.Cwd = cwd
		if _, err := f.d.Run(t.Context(), s, driverapi.Streams{}); !errors.As(err, &ise) || ise.Field != "cwd" {
			t.Errorf("cwd %q: %v, want an InvalidSpecError for cwd", cwd, err)
		}
	}
	s = f.spec("true")
	s.Cwd = sub
	if exit, _, errs := f.run(t, s); exit.ExitCode != 0 {
		t.Errorf("canonical cwd %s: %+v %q", sub, exit, errs)
	}
	exit, _, errs := f.run(t, f.spec("no-such-program-here"))
	if exit.ExitCode != 127 || !strings.Contains(errs, "not found") {
		t.Errorf("missing program: %+v %q", exit, errs)
	}
}

func TestResolveProgram(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []driverapi.EnvVar{{Name: "PATH", Value: "relative:" + dir}}
	if p, err := ResolveProgram("tool", "/", env, nil); err != nil || p != exe {
		t.Errorf("PATH lookup: %q %v", p, err)
	}
	if p, err := ResolveProgram("./tool", dir, nil, nil); err != nil || p != exe {
		t.Errorf("relative with slash: %q %v", p, err)
	}
	if _, err := ResolveProgram("data", "/", []driverapi.EnvVar{{Name: "PATH", Value: dir}}, nil); err == nil {
		t.Error("non-executable file accepted")
	}
	if _, err := ResolveProgram("tool", "/", nil, nil); err == nil {
		t.Error("found without PATH entry")
	}
}

func TestCapabilitiesReport(t *testing.T) {
	dir := t.TempDir()
	se := filepath.Join(dir, "sandbox-exec")
	if err := os.WriteFile(se, []byte(standIn), 0o755); err != nil {
		t.Fatal(err)
	}
	ok := New(Config{SandboxExec: se, GOOS: "darwin", ProbeMemoryLimit: func(context.Context) error { return nil }})
	hc, err := ok.Capabilities(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{driverapi.FeatureFSReadIsolation, driverapi.FeatureProtectedPaths, driverapi.FeatureNetworkNone,
		driverapi.FeatureNetworkViaProxy, driverapi.FeatureSubprocessControl, driverapi.FeatureMemoryLimit, driverapi.FeatureEnvIsolation} {
		if !hc.Has(f) {
			t.Errorf("macOS report lacks %s", f)
		}
	}
	for _, f := range []string{driverapi.FeaturePidLimit, driverapi.FeatureCPULimit, driverapi.FeatureProcessTreeKill} {
		if hc.Has(f) {
			t.Errorf("macOS report claims %s", f)
		}
		if !unavailable(hc, f) {
			t.Errorf("%s not listed as unavailable with a reason", f)
		}
	}
	for _, f := range hc.Features {
		if !driverapi.IsKnownFeature(f) {
			t.Errorf("unknown feature %q", f)
		}
	}
	bad := New(Config{SandboxExec: se, GOOS: "darwin", ProbeMemoryLimit: func(context.Context) error { return errors.New("EINVAL") }})
	hc, _ = bad.Capabilities(t.Context())
	if hc.Has(driverapi.FeatureMemoryLimit) || !unavailable(hc, driverapi.FeatureMemoryLimit) {
		t.Error("memory_limit claimed although the probe failed")
	}
	for _, d := range []*Driver{
		New(Config{SandboxExec: se, GOOS: "linux"}),
		New(Config{SandboxExec: filepath.Join(dir, "missing"), GOOS: "darwin"}),
	} {
		hc, _ = d.Capabilities(t.Context())
		if len(hc.Features) != 0 || len(hc.Unavailable) != len(driverapi.KnownFeatures()) {
			t.Errorf("no launcher, yet features %v", hc.Features)
		}
	}
}

// TestRealProbeOnThisHost runs the real shim probe (RLIMIT_AS is honoured
// on Linux too), so the probe itself is exercised here.
func TestRealProbeOnThisHost(t *testing.T) {
	if _, err := os.Stat("/usr/bin/true"); err != nil {
		t.Skip("no /usr/bin/true")
	}
	exe, _ := os.Executable()
	d := New(Config{Shim: []string{exe, ShimArg}})
	if err := d.probeRlimitAS(t.Context()); err != nil {
		t.Errorf("probe: %v", err)
	}
	d = New(Config{Shim: []string{"/nonexistent"}})
	if err := d.probeRlimitAS(t.Context()); err == nil {
		t.Error("probe with a missing shim succeeded")
	}
}

func unavailable(hc driverapi.HostCapabilities, f string) bool {
	for _, u := range hc.Unavailable {
		if u.Feature == f && u.Reason != "" {
			return true
		}
	}
	return false
}

func TestOverGRPC(t *testing.T) {
	f := newFixture(t, driverapi.Capabilities{})
	c := drivertest.Connect(t, f.d)
	prof, err := c.ProfileFor(t.Context(), driverapi.ProfileRequest{Workspace: f.ws, Cwd: f.ws})
	if err != nil {
		t.Fatal(err)
	}
	s := f.spec("echo", "over", "grpc")
	s.Profile = prof
	var out bytes.Buffer
	exit, err := c.Run(t.Context(), s, driverapi.Streams{Stdout: &out, Stderr: &bytes.Buffer{}})
	if err != nil || exit.ExitCode != 0 || out.String() != "over grpc\n" {
		t.Errorf("over gRPC: %+v %q %v", exit, out.String(), err)
	}
}

// TestShimStartsWithEmptyEnvironment: the RLIMIT_AS shim runs outside
// Seatbelt, so the command's environment must not reach it (on macOS a
// DYLD_INSERT_LIBRARIES from the command would load workspace code into
// it). GODEBUG stands in for DYLD_*: it changes what the Go runtime of
// the shim does (inittrace=1 prints a line per package initialised to
// stderr) while the stand-in launcher, a shell script, ignores it. The
// command itself must still see the variable.
func TestShimStartsWithEmptyEnvironment(t *testing.T) {
	f := newFixture(t, driverapi.Capabilities{MaxMemoryMB: 300})
	s := f.spec("sh", "-c", `printf '%s' "$GODEBUG"`)
	s.Env = append(s.Env, driverapi.EnvVar{Name: "GODEBUG", Value: "inittrace=1"})
	exit, out, errs := f.run(t, s)
	if exit.ExitCode != 0 || out != "inittrace=1" {
		t.Fatalf("the command did not get its environment through the shim: exit %d out %q err %q", exit.ExitCode, out, errs)
	}
	if strings.Contains(errs, "init ") {
		t.Errorf("the shim ran with the command's environment (its Go runtime obeyed GODEBUG):\n%s", errs)
	}
	// Positive control: the same binary started with GODEBUG in its own
	// environment does print the trace, so the check above can fail.
	exe, _ := os.Executable()
	var errb bytes.Buffer
	c := exec.Command(exe, ShimArg, "--as-bytes", "1048576", "--", "/nonexistent")
	c.Env = []string{"GODEBUG=inittrace=1"}
	c.Stderr = &errb
	_ = c.Run()
	if !strings.Contains(errb.String(), "init ") {
		t.Errorf("control: GODEBUG=inittrace=1 printed nothing: %q", errb.String())
	}
}

func TestShimEnvironmentRoundTrip(t *testing.T) {
	big := strings.Repeat("x", 100000) // larger than a 64 KiB pipe buffer
	env := []string{"A=1", "EMPTY=", "EQ=a=b", "NL=line\nbreak", "BIG=" + big, "DYLD_INSERT_LIBRARIES=/ws/evil.dylib"}
	f := newFixture(t, driverapi.Capabilities{MaxMemoryMB: 300})
	// The shim here is the stand-in driver built without the race
	// detector: under -race, the test binary's ThreadSanitizer must map
	// shadow memory for exec's copy of a large environment, which a
	// 300 MB RLIMIT_AS refuses. A production driver has no such runtime.
	if testing.Short() {
		t.Skip("builds the stand-in driver")
	}
	shim := filepath.Join(t.TempDir(), "standin")
	if out, err := exec.Command("go", "build", "-o", shim, "./internal/standin").CombinedOutput(); err != nil {
		t.Fatalf("build stand-in: %v\n%s", err, out)
	}
	f.d.cfg.Shim = []string{shim, ShimArg}
	s := f.spec("env")
	s.Env = nil
	for _, e := range env {
		name, value, _ := strings.Cut(e, "=")
		s.Env = append(s.Env, driverapi.EnvVar{Name: name, Value: value})
	}
	exit, out, errs := f.run(t, s)
	if exit.ExitCode != 0 {
		t.Fatalf("exit %d: %s", exit.ExitCode, errs)
	}
	for _, e := range env {
		if !strings.Contains(out, e+"\n") {
			t.Errorf("the command lacks %.40q", e)
		}
	}
	got, err := decodeEnv(encodeEnv(env))
	if err != nil || strings.Join(got, "\x00") != strings.Join(env, "\x00") {
		t.Errorf("decodeEnv(encodeEnv) = %q, %v", got, err)
	}
	for _, bad := range [][]byte{[]byte("A=1"), []byte("A=1\x00noequals\x00"), []byte("=x\x00")} {
		if _, err := decodeEnv(bad); err == nil {
			t.Errorf("decodeEnv(%q) accepted", bad)
		}
	}
}

// TestCommandHasNoControllingTerminal: the command runs in a session of
// its own, so it has no controlling terminal and cannot reach the user's
// terminal through /dev/tty (the TIOCSTI attack needs it). Its session id
// is its own pid; under the old process-group-only launch it was the
// caller's session. (When the tests run without a terminal, /dev/tty
// fails either way; the session id is the check that always bites.)
func TestCommandHasNoControllingTerminal(t *testing.T) {
	f := newFixture(t, driverapi.Capabilities{})
	exe, _ := os.Executable()
	s := f.spec(exe)
	s.Env = append(s.Env, driverapi.EnvVar{Name: "ALEPH_SEATBELT_TEST_CHILD", Value: "session"})
	exit, out, errs := f.run(t, s)
	if exit.ExitCode != 0 {
		t.Fatalf("exit %d: %s", exit.ExitCode, errs)
	}
	lines := strings.Fields(out)
	if len(lines) != 3 {
		t.Fatalf("output %q", out)
	}
	if lines[0] != lines[1] {
		t.Errorf("session id %s, pid %s: the command is not a session leader", lines[0], lines[1])
	}
	if lines[2] != "no-tty" {
		t.Errorf("the command opened /dev/tty")
	}
}

func TestAllocationProbeLogic(t *testing.T) {
	limited := false
	enforcing := func(size uint64) error {
		if limited && size > 100 {
			return syscall.ENOMEM
		}
		return nil
	}
	set := func(uint64) error { limited = true; return nil }
	if err := allocationProbe(100, enforcing, set); err != nil {
		t.Errorf("enforcing host: %v", err)
	}
	// A host that accepts the limit and ignores it.
	if err := allocationProbe(100, func(uint64) error { return nil }, func(uint64) error { return nil }); err == nil || !strings.Contains(err.Error(), "not enforced") {
		t.Errorf("ignored limit: %v", err)
	}
	if err := allocationProbe(100, enforcing, func(uint64) error { return syscall.EINVAL }); err == nil {
		t.Error("failed setrlimit accepted")
	}
	// The control: a probe that cannot map the size at all proves nothing.
	if err := allocationProbe(100, func(uint64) error { return syscall.ENOMEM }, set); err == nil || !strings.Contains(err.Error(), "control") {
		t.Errorf("failing control: %v", err)
	}
}
