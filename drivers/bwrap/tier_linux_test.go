//go:build linux

package bwrap

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// refusingBwrap is a bwrap that works (--version answers) but cannot
// create namespaces, as in an unprivileged container: the driver's trial
// sandbox fails exactly as it does there.
func refusingBwrap(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bwrap")
	script := "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'bubblewrap 0.8.0'; exit 0; }\n" +
		"echo 'bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces.' >&2\nexit 1\n"
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// tierDriver is a driver on a host where bwrap cannot create namespaces,
// with the Landlock tier on, or skips where this kernel cannot give the
// tier (then the refusal is what TestTierRefusedWithoutLandlockScopes
// checks).
func tierDriver(t testing.TB, opts Options) *Driver {
	t.Helper()
	if LandlockABI() < minTierLandlockABI || !SeccompAvailable() {
		t.Skipf("the Landlock tier needs Landlock ABI >= %d and seccomp; this kernel has ABI %d", minTierLandlockABI, LandlockABI())
	}
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") == "" {
		opts.BwrapPath = refusingBwrap(t)
	}
	opts.Fallback = FallbackLandlock
	d := testDriver(t, opts)
	hc, err := d.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if hc.Details["tier"] != tierLandlock {
		t.Fatalf("tier %q, want landlock (unavailable: %+v)", hc.Details["tier"], hc.Unavailable)
	}
	return d
}

func TestTierSmoke(t *testing.T) {
	d := tierDriver(t, Options{})
	ws := newWorkspace(t)
	r := drvSh(t, d, ws, "echo hello; echo err >&2; exit 3")
	if r.err != nil || r.exit.ExitCode != 3 || r.stdout != "hello\n" || r.stderr != "err\n" {
		t.Fatalf("got %+v", r)
	}
	if r.exit.Details["tier"] != tierLandlock {
		t.Fatalf("exit details %v: want tier landlock", r.exit.Details)
	}
	_ = strings.TrimSpace
	_ = driverapi.FeatureFSReadIsolation
}
