//go:build linux

// Command nolandlock runs a program as if the kernel had no Landlock: it
// sets no_new_privs, loads a seccomp filter under which
// landlock_create_ruleset, landlock_add_rule and landlock_restrict_self fail
// with EOPNOTSUPP (what a kernel built without Landlock, or with Landlock
// left out of the LSM list, answers), and execs the program. The filter is
// inherited by everything the program starts, so a `go test` run under it
// exercises the bwrap driver's Landlock-less path on a kernel that has
// Landlock, without touching the machine. It is a test tool: nothing ships
// it (scripts/test-nolandlock.sh builds and uses it).
//
//	nolandlock PROGRAM [ARGS...]
package main

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

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nolandlock PROGRAM [ARGS...]")
		os.Exit(2)
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "nolandlock:", err)
		os.Exit(125)
	}
}

// filter makes the three Landlock syscalls fail with EOPNOTSUPP and allows
// everything else. Their numbers (444-446) are the same on every
// architecture Linux gives them to, i386 included, so no arch check is
// needed to catch them.
func filter() []bpf.Instruction {
	const enotsupp = unix.SECCOMP_RET_ERRNO | uint32(unix.EOPNOTSUPP)
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
		bpf.JumpIf{Cond: bpf.JumpLessThan, Val: unix.SYS_LANDLOCK_CREATE_RULESET, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: unix.SYS_LANDLOCK_RESTRICT_SELF, SkipTrue: 1},
		bpf.RetConstant{Val: enotsupp},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
	}
}

func run(argv []string) error {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	raw, err := bpf.Assemble(filter())
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
