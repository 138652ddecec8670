package alephsandbox

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/commandpolicy"
)

// TestOneConfigErrorType: a configuration error from each source (the
// loader in core, a hook's refusal of its section, a driver's refusal of
// its section and a hook's own constructor) is caught by one errors.As,
// whichever package's name for the type the caller uses, and names its
// full key. (The conformance suite's errors are checked in its own tests.)
func TestOneConfigErrorType(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	p := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(p, []byte("[sandbox]\nmax_output_bytez = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, loadErr := LoadConfig(p)

	bad := core.DefaultConfig()
	bad.Sandbox.WorkspaceRoot = t.TempDir()
	bad.Sandbox.RateLimit = core.Section{"burst": int64(-1)}
	_, hookSectionErr := New(bad, WithDriver(nopDriver{}))

	_, hookErrs := commandpolicy.New(commandpolicy.Config{Enabled: true, Enforcement: "audit", UseDefaultRules: true}, nil)
	var hookErr error
	if len(hookErrs) == 1 {
		hookErr = hookErrs[0]
	}

	// What a driver's SetConfig returns, wrapped the way the driver host
	// wraps it.
	driverErr := &core.DriverError{Driver: "x", Op: "configure", Err: &driverapi.ConfigError{Section: "linux", Key: "max_pidz", Reason: "unknown key"}}

	for _, c := range []struct {
		name string
		err  error
		key  string
	}{
		{"core loader", loadErr, "sandbox.max_output_bytez"},
		{"hook section", hookSectionErr, "sandbox.rate_limit.burst"},
		{"hook constructor", hookErr, "sandbox.command_policy.enforcement"},
		{"driver section", driverErr, "sandbox.linux.max_pidz"},
	} {
		var ce *core.ConfigError
		var de *driverapi.ConfigError
		var he *commandpolicy.ConfigError
		if !errors.As(c.err, &ce) || !errors.As(c.err, &de) || !errors.As(c.err, &he) {
			t.Errorf("%s: %v (%T) is not caught as core's, driverapi's and commandpolicy's ConfigError alike", c.name, c.err, c.err)
			continue
		}
		if ce.FullKey() != c.key {
			t.Errorf("%s: key %q, want %q", c.name, ce.FullKey(), c.key)
		}
		if code, field := core.FailureReason(c.err); code != core.ReasonConfigInvalid || field != c.key {
			t.Errorf("%s: reason %s %q, want %s %q", c.name, code, field, core.ReasonConfigInvalid, c.key)
		}
	}
}
