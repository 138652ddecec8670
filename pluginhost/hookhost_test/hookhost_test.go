package hookhost_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/pluginhost"
)

func newHost(t *testing.T, mode string, once bool) *pluginhost.HookHost {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{fakeHookEnv + "=" + mode}
	if strings.HasPrefix(mode, "hang") {
		// A hung plugin's tests set short deadlines; their plugin starts a
		// second late, as on a loaded machine, so the deadline must fire on
		// the call, never on a slow start.
		env = append(env, fakeHookSlowStartEnv+"=1s")
	}
	if once {
		env = append(env, fakeHookMarkerEnv+"="+filepath.Join(t.TempDir(), "marker"))
	}
	h, err := pluginhost.NewHookHost(pluginhost.HookHostConfig{Path: exe, Name: "fake", Env: env, CallTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// launch starts the plugin with a call that does not misbehave (Describe),
// so the deadline a test sets next measures the hung call alone, not a
// process start that a loaded machine can make arbitrarily slow.
func launch(t *testing.T, h *pluginhost.HookHost) {
	t.Helper()
	if _, err := h.Describe(context.Background()); err != nil {
		t.Fatalf("launching the plugin: %v", err)
	}
}

func before(h *pluginhost.HookHost) (driverapi.Verdict, error) {
	return h.Before(context.Background(), driverapi.HookRequest{SessionID: "s", CommandID: "c", Program: "true"})
}

// alive reports whether a process with pid exists (Unix only).
func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}

func TestAllowAndDenyPassThrough(t *testing.T) {
	h := newHost(t, "allow", false)
	if h.Pid() != 0 {
		t.Fatal("plugin launched before first use")
	}
	v, err := before(h)
	if err != nil || v.Action != driverapi.ActionAllow {
		t.Fatalf("%+v %v", v, err)
	}
	info, err := h.Describe(context.Background())
	if err != nil || info.Name != "fake-allow" {
		t.Fatalf("%+v %v", info, err)
	}
	h.After(context.Background(), "s", "c", true)

	d := newHost(t, "deny", false)
	v, err = before(d)
	if err != nil || v.Action != driverapi.ActionDeny || v.Rule != "fake" {
		t.Fatalf("deny: %+v %v", v, err)
	}
}

func TestCrashFailsClosedThenRelaunches(t *testing.T) {
	h := newHost(t, "crash-once", true)
	_, err := before(h)
	var he *core.HookPluginError
	if !errors.As(err, &he) || !errors.Is(err, driverapi.ErrPluginDied) {
		t.Fatalf("crash: %v", err)
	}
	v, err := before(h)
	if err != nil || v.Action != driverapi.ActionAllow {
		t.Fatalf("after relaunch: %+v %v", v, err)
	}
}

func TestHangFailsClosedThenRelaunches(t *testing.T) {
	exe, _ := os.Executable()
	h, err := pluginhost.NewHookHost(pluginhost.HookHostConfig{Path: exe, Env: []string{
		fakeHookEnv + "=hang-once", fakeHookMarkerEnv + "=" + filepath.Join(t.TempDir(), "m"), fakeHookSlowStartEnv + "=1s"},
		CallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	launch(t, h)
	if _, err := before(h); !errors.Is(err, core.ErrHookHung) {
		t.Fatalf("hang: %v", err)
	}
	v, err := before(h)
	if err != nil || v.Action != driverapi.ActionAllow {
		t.Fatalf("after relaunch: %+v %v", v, err)
	}
}

func TestGarbageFailsClosed(t *testing.T) {
	h := newHost(t, "garbage", false)
	v, err := before(h)
	var he *core.HookPluginError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "unknown action") {
		t.Fatalf("garbage: %+v %v", v, err)
	}
	if v.Action == driverapi.ActionAllow {
		t.Fatal("garbage became an allow")
	}
}

func TestCallerCancelIsAnError(t *testing.T) {
	h := newHost(t, "hang", false)
	launch(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	if _, err := h.Before(ctx, driverapi.HookRequest{SessionID: "s"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled call must fail with context.Canceled, got %v", err)
	}
}

// The caller's own (shorter) deadline expiring on a hung plugin replaces
// the plugin too, so a host whose deadline matches the pipeline's recovers.
func TestCallerDeadlineOnHungPluginRelaunches(t *testing.T) {
	h := newHost(t, "hang-once", true)
	launch(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := h.Before(ctx, driverapi.HookRequest{SessionID: "s"}); !errors.Is(err, core.ErrHookHung) {
		t.Fatalf("hung: %v", err)
	}
	if v, err := before(h); err != nil || v.Action != driverapi.ActionAllow {
		t.Fatalf("after relaunch: %+v %v", v, err)
	}
}

func TestCloseLeavesNoProcess(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("process probe uses signal 0")
	}
	h := newHost(t, "allow", false)
	if _, err := before(h); err != nil {
		t.Fatal(err)
	}
	pid := h.Pid()
	if pid == 0 || !alive(pid) {
		t.Fatalf("plugin not running (pid %d)", pid)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("plugin %d still running after Close", pid)
	}
	if _, err := before(h); err == nil {
		t.Fatal("call after Close succeeded")
	}
}

func TestMissingBinary(t *testing.T) {
	h, err := pluginhost.NewHookHost(pluginhost.HookHostConfig{Path: filepath.Join(t.TempDir(), "nope")})
	if err != nil {
		t.Fatal(err)
	}
	var pe *driverapi.PluginError
	if _, err := before(h); !errors.As(err, &pe) {
		t.Fatalf("missing binary: %v", err)
	}
}
