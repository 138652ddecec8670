//go:build linux && amd64

package main

import (
	"errors"
	"os"
	"runtime"
	"strconv"
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
// "setid" (setIDGate: every call giving a file a set-user-id or
// set-group-id bit fails with EPERM), "setuid-only" (the same for the
// set-user-id bit alone) and "setid-no-fchmod" (the same with fchmod
// left open), then execs program on the thread that installed
// the filters.
func setupAndExec(asBytes uint64, gates, program string, argv []string) error {
	runtime.LockOSThread()
	if asBytes > 0 {
		// RLIMIT_AS is applied by a shell that then execs the program,
		// not by this process: set here, it would bind this Go runtime
		// too, whose address space (thread stacks, heap arenas) is already
		// past a 128 MiB limit, so any thread or arena it made before the
		// exec (a loaded host hands a blocked thread's work to a new one)
		// fails, and the command dies of "out of memory" before it runs.
		// The shell's own address space is a few MiB, and execve gives the
		// program a fresh one under the same limit.
		kib := strconv.FormatUint(asBytes>>10, 10)
		argv = append([]string{"sh", "-c", `ulimit -v "$0" && exec "$@"`, kib}, argv...)
		program = "/bin/sh"
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
			prog = setIDGate(unix.S_ISUID|unix.S_ISGID, true)
		case "setuid-only":
			prog = setIDGate(unix.S_ISUID, true)
		case "setid-no-fchmod":
			prog = setIDGate(unix.S_ISUID|unix.S_ISGID, false)
		default:
			return errors.New("unknown gate " + gate)
		}
		if err := loadFilter(prog); err != nil {
			return err
		}
	}
	return syscall.Exec(program, argv, os.Environ())
}

// setIDGate denies, with EPERM, every call that can give a file a mode
// with any of bits: chmod, fchmod, fchmodat and fchmodat2, and the
// creation mode of open, openat, creat, mknod and mknodat (the mode
// argument's low word, little-endian; a call that creates nothing passes
// mode 0). openat2 carries its mode in a struct a filter cannot read: it
// gets ENOSYS, so callers fall back to openat. Without fchmod (the
// no-fchmod lie) a descriptor's mode can still be changed.
func setIDGate(bits uint32, withFchmod bool) []bpf.Instruction {
	const (
		allow = unix.SECCOMP_RET_ALLOW
		eperm = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosy = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	// Each system call and the index of its mode argument.
	calls := [][2]uint32{
		{unix.SYS_CHMOD, 1}, {unix.SYS_FCHMODAT, 2}, {452, 2}, // fchmodat2
		{unix.SYS_OPEN, 2}, {unix.SYS_OPENAT, 3}, {unix.SYS_CREAT, 1},
		{unix.SYS_MKNOD, 1}, {unix.SYS_MKNODAT, 2},
	}
	if withFchmod {
		calls = append(calls, [2]uint32{unix.SYS_FCHMOD, 1})
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4}, // nr
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_OPENAT2, SkipTrue: 1},
		bpf.RetConstant{Val: enosy},
	}
	for _, c := range calls {
		// A holds nr until a block matches; a block that does not match
		// skips to the next.
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: c[0], SkipTrue: 4},
			bpf.LoadAbsolute{Off: 16 + 8*c[1], Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: bits, SkipTrue: 1},
			bpf.RetConstant{Val: allow},
			bpf.RetConstant{Val: eperm},
		)
	}
	return append(prog, bpf.RetConstant{Val: allow})
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
