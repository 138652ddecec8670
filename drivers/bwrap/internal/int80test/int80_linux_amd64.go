//go:build linux && amd64

package int80test

// Supported reports whether Getpid32 can be called on this platform.
const Supported = true

// Getpid32 calls getpid through the i386 entry point (eax=20, int 0x80),
// which the kernel reports to seccomp with AUDIT_ARCH_I386.
func Getpid32() uintptr
