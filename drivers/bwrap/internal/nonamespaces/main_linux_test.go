//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// probeEnv makes TestNamespaceProbe report instead of test: the wrapper
// runs this test binary under its filter.
const probeEnv = "NONAMESPACES_PROBE"

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// TestNamespaceProbe prints what creating namespaces answers here.
func TestNamespaceProbe(t *testing.T) {
	if os.Getenv(probeEnv) != "1" {
		t.Skip("helper, run by TestWrapperRefusesNamespaces")
	}
	// A child makes the attempts: unshare changes the calling thread.
	out, err := exec.Command("unshare", "--user", "--map-root-user", "true").CombinedOutput()
	os.Stdout.WriteString("userns=" + errString(err) + " " + strings.TrimSpace(string(out)) + "\n")
	_, _, errno := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
	os.Stdout.WriteString("clone3=" + errno.Error() + "\n")
}

// Under the wrapper a user namespace cannot be made and clone3 is ENOSYS;
// without it (positive control) the same attempt succeeds where this host
// allows user namespaces.
func TestWrapperRefusesNamespaces(t *testing.T) {
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare(1)")
	}
	if out, err := exec.Command("unshare", "--user", "--map-root-user", "true").CombinedOutput(); err != nil {
		t.Skipf("this host refuses user namespaces itself (%v %s): nothing to refuse", err, out)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "nonamespaces")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, self, "-test.run=^TestNamespaceProbe$", "-test.v")
	cmd.Env = append(os.Environ(), probeEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe under the wrapper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "userns=exit status 1") || !strings.Contains(string(out), "Operation not permitted") {
		t.Fatalf("under the wrapper a user namespace was made: %s", out)
	}
	if !strings.Contains(string(out), "clone3=function not implemented") {
		t.Fatalf("under the wrapper clone3 was not ENOSYS: %s", out)
	}
	cmd = exec.Command(self, "-test.run=^TestNamespaceProbe$", "-test.v")
	cmd.Env = append(os.Environ(), probeEnv+"=1")
	out, _ = cmd.CombinedOutput()
	if !strings.Contains(string(out), "userns=ok") {
		t.Fatalf("control: without the wrapper the user namespace failed: %s", out)
	}
}
