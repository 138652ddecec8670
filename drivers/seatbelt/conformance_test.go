//go:build unix

package seatbelt

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/conformance"
)

// TestConformancePlumbing runs the shared suite against the driver's
// plumbing with a stand-in launcher (internal/standin): the protocol,
// exec and robustness cases run; isolation cases skip because the
// stand-in claims no isolation. Isolation is tested on macOS only.
func TestConformancePlumbing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a driver binary")
	}
	conformance.Run(t, func(t testing.TB) conformance.Config {
		bin := filepath.Join(t.TempDir(), "standin-driver")
		out, err := exec.Command("go", "build", "-o", bin, "./internal/standin").CombinedOutput()
		if err != nil {
			t.Fatalf("build stand-in driver: %v\n%s", err, out)
		}
		// The cases assert behaviour (every command succeeds with its own
		// output, nothing leaks), not speed: robust/sequential-200 took
		// over a minute on a loaded two-core machine with the race
		// detector, past the default one-minute case budget.
		return conformance.Config{DriverPath: bin, CaseTimeout: 5 * time.Minute}
	})
}
