//go:build linux && amd64

package int80test

import (
	"errors"
	"os"
	"testing"
)

// Without a filter, the i386 entry point works from 64-bit code: this is the
// positive control for the seccomp tests that expect it to be killed. A host
// without IA32 emulation faults instead; that is reported, not a failure.
func TestGetpid32(t *testing.T) {
	got, err := Probe()
	if errors.Is(err, ErrNoIA32) {
		t.Skipf("cannot make a 32-bit syscall on this host: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if int(got) != os.Getpid() {
		t.Fatalf("int 0x80 getpid = %d, want %d", got, os.Getpid())
	}
}
