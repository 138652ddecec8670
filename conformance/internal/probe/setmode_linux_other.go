//go:build linux && !amd64

package probe

// rawPathCalls: newer architectures (arm64, riscv64) have no chmod or
// creat system call (-1); setmode uses the *at forms there, as libc does.
func rawPathCalls() (chmod, creat int) { return -1, -1 }
