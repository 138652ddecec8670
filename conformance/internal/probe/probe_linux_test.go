//go:build linux

package probe

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// clone3 starts a real child (or says clone3 is missing and uses clone).
func TestClone3Step(t *testing.T) {
	out, errOut, code := run(t, "", "clone3")
	if code != 0 || !strings.Contains(out, "-child=42\n") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// fds reports a descriptor without close-on-exec, and not the ones with it.
func TestFDsStep(t *testing.T) {
	f, err := os.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out, _, code := run(t, "", "fds")
	if code != 0 || strings.Contains(out, "fd:"+itoa(f.Fd())+":") {
		t.Fatalf("a close-on-exec descriptor was reported: exit %d, %q", code, out)
	}
	syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_SETFD, 0)
	out, _, code = run(t, "", "fds")
	if code != 0 || !strings.Contains(out, "fd:"+itoa(f.Fd())+":/\n") || !strings.HasSuffix(out, "fds-checked\n") {
		t.Fatalf("an inheritable descriptor to / was not reported: exit %d, %q", code, out)
	}
}

// ps finds a process by the hostmark form of its tag only.
func TestPSStep(t *testing.T) {
	out, _, code := run(t, "", "ps", "no-such-tag-1234")
	if code != 0 || strings.Contains(out, "seen:") || !strings.Contains(out, "scanned:") {
		t.Fatalf("exit %d, %q", code, out)
	}
}

func itoa(u uintptr) string { return strconv.FormatUint(uint64(u), 10) }
