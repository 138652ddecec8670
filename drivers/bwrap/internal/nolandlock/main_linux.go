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

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/filterexec"

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

func run(argv []string) error { return filterexec.Exec(argv, filter()) }
