//go:build linux && amd64

package main

import (
	"errors"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// setupAndExec applies RLIMIT_AS (0: leave it) and the spawn gate ("":
// none; "full": fork, vfork and clone without CLONE_THREAD fail with
// EPERM, clone3 with ENOSYS, so that libc falls back to clone for threads;
// "no-clone3": the same but clone3 stays open), then execs program on the
// thread that installed the filter.
func setupAndExec(asBytes uint64, gate, program string, argv []string) error {
	runtime.LockOSThread()
	if asBytes > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: asBytes, Max: asBytes}); err != nil {
			return err
		}
	}
	if gate != "" {
		if gate != "full" && gate != "no-clone3" {
			return errors.New("unknown gate " + gate)
		}
		if err := loadGate(gate == "full"); err != nil {
			return err
		}
	}
	return syscall.Exec(program, argv, os.Environ())
}

// loadGate installs the spawn gate. A test filter: it checks no
// architecture and reads clone's flags as the low word of the first
// argument (little-endian hosts).
func loadGate(denyClone3 bool) error {
	const (
		allow = unix.SECCOMP_RET_ALLOW
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosy = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	clone3 := uint32(allow)
	if denyClone3 {
		clone3 = enosy
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4}, // nr
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_FORK, SkipTrue: 6},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_VFORK, SkipTrue: 5},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 435, SkipTrue: 6}, // clone3
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_CLONE, SkipTrue: 2},
		bpf.LoadAbsolute{Off: 16, Size: 4}, // clone's flags
		bpf.JumpIf{Cond: bpf.JumpBitsNotSet, Val: unix.CLONE_THREAD, SkipTrue: 1},
		bpf.RetConstant{Val: allow},
		bpf.RetConstant{Val: eperm},
		bpf.RetConstant{Val: allow}, // unreachable filler keeps the offsets plain
		bpf.RetConstant{Val: clone3},
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return errno
	}
	return nil
}
