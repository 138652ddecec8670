//go:build linux

// Command nonamespaces runs a program as if it were in a container that
// may not create namespaces (Docker's default seccomp profile without
// privileges, a host with user namespaces disabled): it sets
// no_new_privs, loads a seccomp filter under which unshare, setns and
// clone with any CLONE_NEW* flag fail with EPERM and clone3 with ENOSYS
// (its flags are behind a pointer, so that is what such profiles answer),
// and execs the program. The filter is inherited by everything the program
// starts, so a `go test` run under it exercises the bwrap driver's
// namespace-less path (the Landlock tier, or its refusal) on a host that
// has namespaces, without touching the machine. It is a test tool: nothing
// ships it (scripts/test-nonamespaces.sh builds and uses it).
//
//	nonamespaces PROGRAM [ARGS...]
package main

import (
	"fmt"
	"os"
	"unsafe"

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/filterexec"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nonamespaces PROGRAM [ARGS...]")
		os.Exit(2)
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "nonamespaces:", err)
		os.Exit(125)
	}
}

// newFlags are every CLONE_NEW* bit clone(2) takes in its flags (the low
// 32 bits, which is all the kernel keeps of them).
const newFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// filter is the program; it checks native system call numbers only (a test
// tool, not a security boundary: foreign-architecture calls are allowed).
// clone's flags are its first argument on every architecture this project
// builds for (amd64, arm64).
func filter() []bpf.Instruction {
	const (
		eperm  = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		enosys = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	)
	return []bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_UNSHARE, SkipTrue: 6},
		/* 2 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_SETNS, SkipTrue: 5},
		/* 3 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE3, SkipTrue: 5},
		/* 4 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SYS_CLONE, SkipFalse: 2},
		/* 5 */ bpf.LoadAbsolute{Off: argLow0(), Size: 4},
		/* 6 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: newFlags, SkipTrue: 1},
		/* 7 */ bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
		/* 8 */ bpf.RetConstant{Val: eperm},
		/* 9 */ bpf.RetConstant{Val: enosys},
	}
}

// argLow0 is the offset of the low 32 bits of the first argument in
// seccomp_data (args start at 16; big-endian keeps the low half second).
func argLow0() uint32 {
	x := uint16(1)
	if *(*byte)(unsafe.Pointer(&x)) == 0 {
		return 20
	}
	return 16
}

func run(argv []string) error { return filterexec.Exec(argv, filter()) }
