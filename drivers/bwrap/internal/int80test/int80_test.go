//go:build linux && amd64

package int80test

import (
	"os"
	"testing"
)

// Without a filter, the i386 entry point works from 64-bit code: this is the
// positive control for the seccomp tests that expect it to be killed.
func TestGetpid32(t *testing.T) {
	if got := Getpid32(); int(got) != os.Getpid() {
		t.Fatalf("int 0x80 getpid = %d, want %d (IA32 emulation off?)", got, os.Getpid())
	}
}
