// Package hookhost_test tests pluginhost.HookHost against real hook plugin
// processes: the test binary re-executes itself as a fake hook plugin whose
// behaviour is chosen by an environment variable.
package hookhost_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

const (
	// fakeHookEnv selects the fake plugin's behaviour: allow, deny, crash,
	// hang, garbage; "-once" variants misbehave only in the first process
	// (the marker file in fakeHookMarkerEnv records that it did).
	fakeHookEnv       = "ALEPH_TEST_FAKE_HOOK"
	fakeHookMarkerEnv = "ALEPH_TEST_FAKE_HOOK_MARKER"
	// fakeHookSlowStartEnv delays the plugin's start by that duration
	// (time.ParseDuration), as a loaded machine does: a test's deadline
	// must be about the call, not about how fast a process starts.
	fakeHookSlowStartEnv = "ALEPH_TEST_FAKE_HOOK_SLOW_START"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeHookEnv); mode != "" {
		if d, err := time.ParseDuration(os.Getenv(fakeHookSlowStartEnv)); err == nil {
			time.Sleep(d)
		}
		driverapi.ServeHook(&fakeHook{mode: mode, marker: os.Getenv(fakeHookMarkerEnv)})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type fakeHook struct {
	mode   string
	marker string
}

func (f *fakeHook) Describe(context.Context) (driverapi.HookInfo, error) {
	return driverapi.HookInfo{Name: "fake-" + f.mode, Version: "1"}, nil
}

// misbehave reports whether this process should do its mode's bad thing.
func (f *fakeHook) misbehave() bool {
	if f.marker == "" {
		return true
	}
	if _, err := os.Stat(f.marker); err == nil {
		return false
	}
	_ = os.WriteFile(f.marker, []byte("x"), 0o600)
	return true
}

func (f *fakeHook) Before(ctx context.Context, req driverapi.HookRequest) (driverapi.Verdict, error) {
	switch f.mode {
	case "deny":
		return driverapi.Verdict{Action: driverapi.ActionDeny, Rule: "fake", Reason: "denied by the fake hook"}, nil
	case "crash", "crash-once":
		if f.misbehave() {
			os.Exit(3)
		}
	case "hang", "hang-once":
		if f.misbehave() {
			// Ignore the deadline, like a plugin stuck in a loop.
			time.Sleep(time.Hour)
		}
	case "garbage":
		return driverapi.Verdict{Action: driverapi.Action(42), Rule: "?"}, nil
	}
	return driverapi.Verdict{Action: driverapi.ActionAllow}, nil
}

func (f *fakeHook) After(context.Context, string, string, bool) {}
