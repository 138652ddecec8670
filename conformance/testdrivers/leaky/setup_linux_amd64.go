//go:build linux && amd64

package main

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// setupAndExec applies RLIMIT_AS (0: leave it) and the gates, a comma
// list ("": none) of "spawn" (fork, vfork and clone without CLONE_THREAD
// fail with EPERM, clone3 with ENOSYS, so that libc falls back to clone
// for threads), "spawn-no-clone3" (the same but clone3 stays open),
// "setid" (chmod, fchmod, fchmodat and fchmodat2 with a set-user-id or
// set-group-id bit fail with EPERM) and "setuid-only" (the same for the
// set-user-id bit alone), then execs program on the thread that installed
// the filters.
func setupAndExec(asBytes uint64, gates, program string, argv []string) error {
	runtime.LockOSThread()
	if asBytes > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: asBytes, Max: asBytes}); err != nil {
			return err
		}
	}
	if gates != "" {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return err
		}
	}
	for _, gate := range strings.Split(gates, ",") {
		var prog []bpf.Instruction
		switch gate {
		case "":
			continue
		case "spawn", "spawn-no-clone3":
			prog = spawnGate(gate == "spawn")
		case "setid":
			prog = setIDGate(unix.S_ISUID | unix.S_ISGID)
		case "setuid-only":
			prog = setIDGate(unix.S_ISUID)
		default:
			return errors.New("unknown gate " + gate)
		}
		if err := loadFilter(prog); err != nil {
			return err
		}
	}
	return syscall.Exec(program, argv, os.Environ())
}

// setIDGate denies the chmod calls whose mode has any of bits (the mode is
// the second argument of chmod and fchmod, the third of fchmodat and
// fchmodat2; its low word, little-endian).
func setIDGate(bits uint32) []bpf.Instruction {
	const (
		allow = unix.SECCOMP_RET_ALLOW
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	)
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4}, // nr
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CHMOD, SkipTrue: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_FCHMOD, SkipTrue: 3},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_FCHMODAT, SkipTrue: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 452, SkipTrue: 3}, // fchmodat2
		bpf.RetConstant{Val: allow},
		bpf.LoadAbsolute{Off: 16 + 8, Size: 4}, // args[1]
		bpf.Jump{Skip: 1},
		bpf.LoadAbsolute{Off: 16 + 16, Size: 4}, // args[2]
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: bits, SkipTrue: 1},
		bpf.RetConstant{Val: allow},
		bpf.RetConstant{Val: eperm},
	}
}

// spawnGate is the spawn gate. A test filter: it checks no architecture
// and reads clone's flags as the low word of the first argument
// (little-endian hosts).
func spawnGate(denyClone3 bool) []bpf.Instruction {
	const (
		allow = unix.SECCOMP_RET_ALLOW
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosy = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	clone3 := uint32(allow)
	if denyClone3 {
		clone3 = enosy
	}
	return []bpf.Instruction{
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
}

// loadFilter installs one seccomp filter (no_new_privs is set already).
func loadFilter(prog []bpf.Instruction) error {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return err
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return errno
	}
	return nil
}
