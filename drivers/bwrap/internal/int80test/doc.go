// Package int80test issues an i386 system call (int 0x80) from a 64-bit
// process. Tests of the seccomp filter use it to show that a foreign-
// architecture syscall is killed rather than evaluated against x86_64 rules.
// It is imported only by tests.
package int80test
