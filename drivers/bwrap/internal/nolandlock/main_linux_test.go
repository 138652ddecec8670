//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// probeEnv makes TestLandlockProbe report instead of test: the wrapper
// runs this test binary under its filter.
const probeEnv = "NOLANDLOCK_PROBE"

// TestLandlockProbe prints what the Landlock ABI query answers here.
func TestLandlockProbe(t *testing.T) {
	if os.Getenv(probeEnv) != "1" {
		t.Skip("helper, run by TestWrapperHidesLandlock")
	}
	v, err := llsys.LandlockGetABIVersion()
	os.Stdout.WriteString("abi=" + strings.TrimSpace(strconv.Itoa(v)+" "+errString(err)) + "\n")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Under the wrapper the kernel's Landlock looks absent (EOPNOTSUPP); the
// same probe without it (positive control) sees this kernel's ABI.
func TestWrapperHidesLandlock(t *testing.T) {
	direct, err := llsys.LandlockGetABIVersion()
	if err != nil || direct < 1 {
		t.Skipf("this kernel has no Landlock itself (ABI %d, %v): nothing to hide", direct, err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "nolandlock")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, self, "-test.run=^TestLandlockProbe$", "-test.v")
	cmd.Env = append(os.Environ(), probeEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe under the wrapper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "abi=-1 operation not supported") {
		t.Fatalf("under the wrapper the ABI query answered %q, want EOPNOTSUPP", out)
	}
	cmd = exec.Command(self, "-test.run=^TestLandlockProbe$", "-test.v")
	cmd.Env = append(os.Environ(), probeEnv+"=1")
	out, _ = cmd.CombinedOutput()
	if !strings.Contains(string(out), "abi="+strconv.Itoa(direct)+"\n") {
		t.Fatalf("control: without the wrapper the ABI query answered %q, want %d", out, direct)
	}
}
