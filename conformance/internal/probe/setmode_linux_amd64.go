//go:build linux && amd64

package probe

import "syscall"

// rawPathCalls are the path-only chmod and creat system calls x86-64
// still has beside their *at forms.
func rawPathCalls() (chmod, creat int) { return syscall.SYS_CHMOD, syscall.SYS_CREAT }
