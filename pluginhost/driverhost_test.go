package pluginhost

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// newPluginHost points a DriverHost at this test binary, which serves the
// fake driver when fakeDriverEnv is set (see TestMain).
func newPluginHost(t testing.TB) *DriverHost {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewDriverHost(DriverHostConfig{
		Path:    exe,
		Name:    "fake-plugin",
		Env:     []string{fakeDriverEnv + "=1"},
		Options: []byte(`{"max_pids":7}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func TestDriverHostCrashAndRelaunch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts plugin processes")
	}
	host := newPluginHost(t)
	sink := &memSink{}
	sb, err := core.NewWorkspaceSandbox(testConfig(t), core.WithDriver(host), core.WithAuditSink(sink))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ctx := core.WithSession(context.Background(), "crash")
	if host.Pid() != 0 {
		t.Fatal("plugin launched before first use")
	}
	out, err := sb.Execute(ctx, core.Command{Program: "echo", Args: []string{"one"}})
	if err != nil || string(out.Stdout) != "one\n" {
		t.Fatalf("first: %v", err)
	}
	pid1 := host.Pid()
	if pid1 == 0 {
		t.Fatal("no plugin pid")
	}
	if runtime.GOOS == "linux" {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid1) + "/environ")
		if err != nil || !strings.Contains(string(env), "ALEPH_DRIVER_OPTIONS={\"max_pids\":7}") {
			t.Fatalf("plugin env lacks ALEPH_DRIVER_OPTIONS: %v", err)
		}
	}
	// The plugin is kept across commands.
	if _, err := sb.Execute(ctx, core.Command{Program: "echo"}); err != nil || host.Pid() != pid1 {
		t.Fatalf("second command: %v, pid %d -> %d", err, pid1, host.Pid())
	}
	// It dies mid-command: the command fails naming the driver.
	_, err = sb.Execute(ctx, core.Command{Program: "crash"})
	var de *core.DriverError
	if !errors.As(err, &de) || de.Driver != "fake-plugin" || !errors.Is(err, driverapi.ErrPluginDied) || !strings.Contains(err.Error(), "fake-plugin") {
		t.Fatalf("crash error %T %v", err, err)
	}
	if r := sink.last(t); r.Reason != core.ReasonDriverFailed || r.Decision != core.DecisionError {
		t.Fatalf("audit %+v", r)
	}
	if processAlive(pid1) {
		t.Fatal("crashed plugin still alive")
	}
	// The next command relaunches it.
	out, err = sb.Execute(ctx, core.Command{Program: "echo", Args: []string{"again"}})
	if err != nil || string(out.Stdout) != "again\n" {
		t.Fatalf("after crash: %v", err)
	}
	pid2 := host.Pid()
	if pid2 == 0 || pid2 == pid1 {
		t.Fatalf("not relaunched: %d -> %d", pid1, pid2)
	}
	if err := host.Close(); err != nil {
		t.Fatal(err)
	}
	if processAlive(pid2) {
		t.Fatal("Close left the plugin process running")
	}
	if host.Pid() != 0 {
		t.Fatal("pid after Close")
	}
	_, err = sb.Execute(ctx, core.Command{Program: "echo"})
	if !errors.As(err, &de) {
		t.Fatalf("closed host ran a command: %v", err)
	}
}

func TestFindDriver(t *testing.T) {
	a, b, c := t.TempDir(), t.TempDir(), t.TempDir()
	mk := func(dir, name string, mode os.FileMode) string {
		p := filepath.Join(dir, DriverBinaryName(name))
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inB := mk(b, "alpha", 0o755)
	inC := mk(c, "beta", 0o755)
	mk(a, "alpha", 0o644) // not executable: skipped
	t.Setenv("ALEPH_SANDBOX_PLUGIN_DIR", b)
	t.Setenv("PATH", c+string(os.PathListSeparator)+"relative/dir")

	got, looked, err := FindDriver("alpha", []string{a})
	if err != nil || got != inB {
		t.Fatalf("alpha: %s %v %v", got, looked, err)
	}
	if looked[0] != filepath.Join(a, DriverBinaryName("alpha")) {
		t.Fatalf("search dirs not first: %v", looked)
	}
	got, _, err = FindDriver("beta", nil)
	if err != nil || got != inC {
		t.Fatalf("beta via PATH: %s %v", got, err)
	}
	// A name with a slash is a path.
	got, _, err = FindDriver(inC, nil)
	if err != nil || got != inC {
		t.Fatalf("path: %s %v", got, err)
	}
	_, looked, err = FindDriver("gamma", []string{a})
	var nf *core.DriverNotFoundError
	if !errors.As(err, &nf) || len(nf.Looked) != len(looked) {
		t.Fatalf("gamma: %v", err)
	}
	for _, dir := range []string{a, b, c} {
		if !strings.Contains(err.Error(), filepath.Join(dir, DriverBinaryName("gamma"))) {
			t.Fatalf("message does not list %s: %v", dir, err)
		}
	}
	if strings.Contains(err.Error(), "relative/dir") {
		t.Fatal("relative PATH entry searched")
	}
	if _, _, err := FindDriver(filepath.Join(a, "nope"), nil); !errors.As(err, &nf) {
		t.Fatalf("missing path: %v", err)
	}
	want := map[string]string{"linux": "bwrap", "darwin": "seatbelt", "windows": "appcontainer"}[runtime.GOOS]
	if DefaultDriverName() != want {
		t.Fatalf("default %s", DefaultDriverName())
	}
	// Listing: first of each name in lookup order, executables only.
	mk(c, "alpha", 0o755) // shadowed by b's
	list := FindDrivers([]string{a})
	if len(list) != 2 || list[0] != (DriverCandidate{Name: "alpha", Path: inB}) || list[1] != (DriverCandidate{Name: "beta", Path: inC}) {
		t.Fatalf("FindDrivers %+v", list)
	}
	// No name: the platform default binary, looked for in the same places.
	if _, _, err := FindDriver("", nil); err == nil || !strings.Contains(err.Error(), DriverBinaryName(want)) {
		t.Fatalf("default lookup: %v", err)
	}
}

func TestDriverHostMissingBinary(t *testing.T) {
	h, err := NewDriverHost(DriverHostConfig{Path: filepath.Join(t.TempDir(), "aleph-driver-gone")})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Name() != "aleph-driver-gone" {
		t.Fatalf("name %s", h.Name())
	}
	err = h.Start(context.Background())
	var de *core.DriverError
	var pe *driverapi.PluginError
	if !errors.As(err, &de) || de.Driver != "aleph-driver-gone" || !errors.As(err, &pe) || pe.Op != "find" {
		t.Fatalf("err %v", err)
	}
	if _, err := NewDriverHost(DriverHostConfig{}); err == nil {
		t.Fatal("empty path accepted")
	}
}

func TestDriverHostConcurrentCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts plugin processes")
	}
	host := newPluginHost(t)
	sb, err := core.NewWorkspaceSandbox(testConfig(t), core.WithDriver(host), core.WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ctx := core.WithSession(context.Background(), "cc")
	errs := make(chan error, 24)
	var wg sync.WaitGroup
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			prog := "echo"
			if i == 12 {
				prog = "crash"
			}
			_, err := sb.Execute(ctx, core.Command{Program: prog, Args: []string{"x"}})
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	failures := 0
	for err := range errs {
		if err == nil {
			continue
		}
		failures++
		var de *core.DriverError
		if !errors.As(err, &de) || de.Driver != "fake-plugin" {
			t.Fatalf("unexpected error %T %v", err, err)
		}
	}
	if failures == 0 {
		t.Fatal("the crashing command did not fail")
	}
	out, err := sb.Execute(ctx, core.Command{Program: "echo", Args: []string{"after"}})
	if err != nil || string(out.Stdout) != "after\n" {
		t.Fatalf("after concurrent crash: %v", err)
	}
	pid := host.Pid()
	_ = host.Close()
	if processAlive(pid) {
		t.Fatal("plugin left running")
	}
}

// configFake is a protocol-1.1 driver owning a section "fake" that refuses
// the key "bad".
type configFake struct{ drivertest.FakeDriver }

func (*configFake) ConfigSchema(context.Context) (driverapi.ConfigSchema, error) {
	return driverapi.ConfigSchema{Section: "fake", Fields: []driverapi.ConfigField{{Name: "ok", Type: driverapi.ConfigInt}}}, nil
}

func (*configFake) SetConfig(_ context.Context, b []byte) error {
	if strings.Contains(string(b), `"bad"`) {
		return &driverapi.ConfigError{Section: "fake", Key: "bad", Reason: "not a key of this driver"}
	}
	return nil
}

func (*configFake) Signal(_ context.Context, id string, _ driverapi.Signal) error {
	return &driverapi.NotRunningError{CommandID: id}
}

func configHost(t *testing.T, mode, options string) *DriverHost {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewDriverHost(DriverHostConfig{Path: exe, Name: "fake-plugin", Env: []string{fakeDriverEnv + "=" + mode}, Options: []byte(options)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func TestDriverHostHandsTheDriverItsSection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts plugin processes")
	}
	ctx := context.Background()
	err := configHost(t, "config", `{"bad": 1}`).Start(ctx)
	var ce *driverapi.ConfigError
	var de *core.DriverError
	if !errors.As(err, &ce) || !errors.As(err, &de) || ce.Key != "bad" || ce.Section != "fake" {
		t.Fatalf("want a core.DriverError wrapping the ConfigError on sandbox.fake.bad, got %T %v", err, err)
	}
	// Positive control: an accepted section starts the driver, whose
	// optional calls are then available.
	h := configHost(t, "config", `{"ok": 1}`)
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if sc, err := h.ConfigSchema(ctx); err != nil || sc.Section != "fake" {
		t.Fatalf("schema %+v, %v", sc, err)
	}
	var nr *driverapi.NotRunningError
	if err := h.Signal(ctx, "c1", driverapi.SignalTERM); !errors.As(err, &nr) {
		t.Fatalf("Signal: want the driver's NotRunningError, got %T %v", err, err)
	}

	// A protocol-1.0 driver gets its section in the environment only, and
	// is reported as lacking the optional calls.
	old := configHost(t, "1", `{"bad": 1}`)
	if err := old.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var ue *driverapi.UnsupportedCallError
	if err := old.Signal(ctx, "c1", driverapi.SignalTERM); !errors.As(err, &ue) || ue.Minor != driverapi.ProtocolMinor {
		t.Fatalf("Signal through a 1.0 driver: want UnsupportedCallError, got %T %v", err, err)
	}
	if _, err := old.ConfigSchema(ctx); !errors.As(err, &ue) {
		t.Fatalf("ConfigSchema of a 1.0 driver: want UnsupportedCallError, got %T %v", err, err)
	}
}

// gatedHost is a DriverHost whose plugin (mode "gate" or "hangcaps" of
// TestMain) logs each start's pid to the returned log file; a "gate"
// plugin waits for the gate file, then exits without a handshake.
func gatedHost(t *testing.T, mode string, start time.Duration) (h *DriverHost, log, gate string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log, gate = filepath.Join(dir, "launches"), filepath.Join(dir, "gate")
	h, err = NewDriverHost(DriverHostConfig{Path: exe, Name: "fake-plugin", StartTimeout: start,
		Env: []string{fakeDriverEnv + "=" + mode, "ALEPH_TEST_LAUNCH_LOG=" + log, "ALEPH_TEST_GATE=" + gate}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h, log, gate
}

// launchPids are the pids the plugin logged, one per start; it waits until
// there are at least n.
func launchPids(t *testing.T, log string, n int) []int {
	t.Helper()
	var pids []int
	waitFor(t, func() bool {
		b, _ := os.ReadFile(log)
		pids = nil
		for _, l := range strings.Fields(string(b)) {
			p, _ := strconv.Atoi(l)
			pids = append(pids, p)
		}
		return len(pids) >= n
	})
	return pids
}

// A caller that arrives while a start is under way waits for that start
// instead of launching another; a caller that gives up does not end it;
// the next caller after a failed start tries again.
func TestDriverHostCallersShareOneStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts plugin processes")
	}
	h, log, gate := gatedHost(t, "gate", time.Minute)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := h.Capabilities(gone)
	var de *core.DriverError
	if !errors.As(err, &de) || !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller that gave up: %v", err)
	}
	first := launchPids(t, log, 1)
	res := make(chan error, 1)
	go func() { _, err := h.Capabilities(context.Background()); res <- err }()
	// The second caller waits for the start the first one began.
	waitFor(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.launching != nil && h.launching.waiting == 1
	})
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-res; !errors.As(err, &de) || de.Op != "start" {
		t.Fatalf("the second caller: %v, want the start's failure", err)
	}
	if pids := launchPids(t, log, 1); len(pids) != 1 || pids[0] != first[0] {
		t.Fatalf("starts %v: the second caller launched its own", pids)
	}
	// A later caller tries again.
	if _, err := h.Capabilities(context.Background()); err == nil {
		t.Fatal("a driver that never handshakes started")
	}
	if pids := launchPids(t, log, 2); len(pids) != 2 {
		t.Fatalf("starts %v, want a second one", pids)
	}
}

// A driver that completes its handshake and then never answers is given
// up on after StartTimeout, and its process is killed; the same timeout
// lets a working driver start (the control).
func TestDriverHostBoundsAWedgedDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("starts plugin processes")
	}
	h, log, _ := gatedHost(t, "hangcaps", 2*time.Second)
	_, err := h.Capabilities(context.Background())
	var de *core.DriverError
	if !errors.As(err, &de) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("a wedged driver: %v", err)
	}
	pid := launchPids(t, log, 1)[0]
	if processAlive(pid) {
		t.Fatalf("the wedged driver %d was left running", pid)
	}
	exe, _ := os.Executable()
	ok, err := NewDriverHost(DriverHostConfig{Path: exe, Name: "fake-plugin", StartTimeout: 2 * time.Second, Env: []string{fakeDriverEnv + "=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	if _, err := ok.Capabilities(context.Background()); err != nil {
		t.Fatalf("the control: %v", err)
	}
}

// Close during a start kills the plugin being started.
func TestDriverHostCloseEndsAStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts plugin processes")
	}
	h, log, _ := gatedHost(t, "gate", time.Minute)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, _ = h.Capabilities(gone)
	pid := launchPids(t, log, 1)[0]
	if !processAlive(pid) {
		t.Fatal("the plugin being started is not running")
	}
	_ = h.Close()
	if processAlive(pid) {
		t.Fatalf("the plugin %d outlived Close", pid)
	}
	if _, err := h.Capabilities(context.Background()); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("after Close: %v", err)
	}
}

// waitFor polls cond until it holds, failing the test after a long bound
// (a bound against a hang, not a speed check).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30s")
		}
	}
}

// A third-party driver with the config call is handed the section its
// ConfigSchema names, not the platform section (another driver's keys);
// what it refuses there is named in its own section.
func TestDriverHostRoutesTheDriversOwnSection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts plugin processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	host := func(own string) *DriverHost {
		h, err := NewDriverHost(DriverHostConfig{Path: exe, Name: "fake-plugin", Env: []string{fakeDriverEnv + "=config"},
			Options: []byte(`{"bad": 1}`), // the platform section: keys of another driver
			Section: func(name string) []byte {
				if name == "fake" {
					return []byte(own)
				}
				return []byte("{}")
			}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Close() })
		return h
	}
	ctx := context.Background()
	if err := host(`{"ok": 1}`).Start(ctx); err != nil {
		t.Fatalf("its own section: %v", err)
	}
	err = host(`{"bad": 1}`).Start(ctx)
	var ce *driverapi.ConfigError
	if !errors.As(err, &ce) || ce.Section != "fake" || ce.Key != "bad" {
		t.Fatalf("a bad key in its own section: %v, want sandbox.fake.bad", err)
	}
}

// A pinned binary runs only when its digest matches: a pin that does not
// match refuses it before any handshake. Control: unpinned, the same
// binary runs a command.
func TestDriverHostPin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts plugin processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, pin := range []string{"", strings.Repeat("0", 64)} {
		h, err := NewDriverHost(DriverHostConfig{Path: exe, Name: "fake-plugin", SHA256: pin, Env: []string{fakeDriverEnv + "=1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		sb, err := core.NewWorkspaceSandbox(testConfig(t), core.WithDriver(h), core.WithAuditSink(&memSink{}))
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		out, err := sb.Execute(core.WithSession(context.Background(), "n"), core.Command{Program: "echo", Args: []string{"via", "plugin"}})
		var pe *driverapi.PluginError
		switch {
		case pin == "" && (err != nil || string(out.Stdout) != "via plugin\n"):
			t.Fatalf("unpinned: %v", err)
		case pin != "" && (!errors.As(err, &pe) || pe.Op != "checksum"):
			t.Fatalf("pin mismatch: %v", err)
		}
	}
}
