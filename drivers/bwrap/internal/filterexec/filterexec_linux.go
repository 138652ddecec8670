//go:build linux

// Package filterexec is the shared half of the test wrappers that make a
// host look like another one for one process tree (nolandlock,
// nonamespaces): set no_new_privs, install a seccomp program on every
// thread, and exec the given command under it.
package filterexec

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Exec runs argv (looked up in PATH) under filter; it returns only on
// failure.
func Exec(argv []string, filter []bpf.Instruction) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	raw, err := bpf.Assemble(filter)
	if err != nil {
		return err
	}
	prog := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		prog[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// The exec below must run on the thread that carries the filter
	// (TSYNC puts it on every thread anyway).
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	runtime.KeepAlive(prog)
	return fmt.Errorf("exec %s: %w", path, syscall.Exec(path, argv, os.Environ()))
}
