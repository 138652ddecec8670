package bwrap

import (
	"fmt"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The kernel's limits on what one exec carries (fs/exec.c), checked by
// the driver before it builds a sandbox: past them the target's execve
// fails with E2BIG inside the sandbox, after bwrap, the mounts and
// sandbox-init have all been paid for, and the error would name none of
// the command's fields.
//
//   - Each string (argument or NAME=VALUE entry) with its NUL may take at
//     most MAX_ARG_STRLEN, 32 pages (128 KiB with 4 KiB pages).
//   - All of them together, plus one pointer per string (argc+envc, argc
//     counted as at least 1), plus the path of the file being exec'd
//     (copied first), may take at most a quarter of RLIMIT_STACK's soft
//     limit, capped at three quarters of _STK_LIM (8 MiB: so 6 MiB), and
//     never less than ARG_MAX (128 KiB) (bprm_stack_limits, Linux >= 4.13;
//     older kernels had no 6 MiB cap, so the check is stricter than they
//     are). Measured here with RLIMIT_STACK 8 MiB: /bin/true with an empty
//     environment runs with exactly 2 MiB so counted, and fails with
//     E2BIG one byte over.
//
// The target inherits the driver's RLIMIT_STACK (neither bwrap nor
// sandbox-init changes it), so the driver's is the one that applies.
const (
	// argMax is ARG_MAX, the floor of the total.
	argMax = 128 << 10
	// stackLimCap is three quarters of _STK_LIM, the ceiling of the total.
	stackLimCap = 6 << 20
	// execPointerSize is what each string's pointer costs: 8 bytes, the
	// most any architecture the driver runs on takes.
	execPointerSize = 8
	// pathMax is PATH_MAX, NUL included: the most the exec'd file's path
	// (the PATH lookup's result, which the driver does not know) may take.
	pathMax = 4096
	// interpreterCost is what a #! script adds at its exec: its path in
	// place of argv[0] (at most pathMax), the interpreter and its optional
	// argument (from the first 256 bytes of the file) and their pointers.
	interpreterCost = pathMax + 256 + 3*execPointerSize
	// execHeadroom is kept free of the total for what the driver cannot
	// count: the exec'd file's path and two levels of interpreters. A
	// command that fits only without them could still fail at its exec;
	// refusing it costs a few KiB of the megabytes there are.
	execHeadroom = pathMax + 2*interpreterCost
)

// execLimitSet are the kernel's exec limits for a stack limit and page size.
type execLimitSet struct {
	// Total is what the strings, their pointers and the exec'd path may
	// take together.
	Total uint64
	// String is what one string, its NUL included, may take.
	String uint64
}

// execLimitsFor computes the limits for an RLIMIT_STACK soft limit
// (RLIM_INFINITY is the largest uint64) and a page size, as fs/exec.c
// does.
func execLimitsFor(stackCur uint64, pageSize int) execLimitSet {
	total := min(uint64(stackLimCap), stackCur/4)
	total = max(total, argMax)
	return execLimitSet{Total: total, String: uint64(pageSize) * 32}
}

// checkExecSize refuses a command whose argv and environment the kernel
// would not take at the target's exec under lim, naming the field to
// change (program, args or env), what it takes and what is allowed.
func checkExecSize(spec driverapi.RunSpec, lim execLimitSet) error {
	cost := func(s string) uint64 { return uint64(len(s)) + 1 + execPointerSize }
	tooLong := func(s string) bool { return uint64(len(s))+1 > lim.String }
	if tooLong(spec.Program) {
		return &driverapi.InvalidSpecError{Field: "program", Reason: fmt.Sprintf(
			"the program's name is %d bytes; the kernel takes at most %d bytes per argument at exec (MAX_ARG_STRLEN)", len(spec.Program), lim.String-1)}
	}
	argBytes := cost(spec.Program)
	for i, a := range spec.Args {
		if tooLong(a) {
			return &driverapi.InvalidSpecError{Field: "args", Reason: fmt.Sprintf(
				"argument %d is %d bytes; the kernel takes at most %d bytes per argument at exec (MAX_ARG_STRLEN): pass it on stdin or in a file instead",
				i+1, len(a), lim.String-1)}
		}
		argBytes += cost(a)
	}
	var envBytes uint64
	for _, e := range spec.Env {
		kv := e.Name + "=" + e.Value
		if tooLong(kv) {
			return &driverapi.InvalidSpecError{Field: "env", Reason: fmt.Sprintf(
				"%s is %d bytes (NAME=VALUE); the kernel takes at most %d bytes per variable at exec (MAX_ARG_STRLEN): pass the value in a file instead",
				e.Name, len(kv), lim.String-1)}
		}
		envBytes += cost(kv)
	}
	if lim.Total < execHeadroom || argBytes+envBytes > lim.Total-execHeadroom {
		allowed := uint64(0)
		if lim.Total > execHeadroom {
			allowed = lim.Total - execHeadroom
		}
		field, fix := "args", "pass the data on stdin or in a file instead"
		if envBytes+cost(spec.Program) > allowed {
			// Too large with no argument at all: the environment is what
			// must shrink.
			field, fix = "env", "pass large values in files instead"
		}
		return &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf(
			"the arguments (%d bytes) and the environment (%d bytes) are more than the %d bytes an exec may carry here "+
				"(each string counts its length, its NUL and an %d-byte pointer; the kernel allows %d bytes, a quarter of "+
				"the stack limit within 128 KiB..6 MiB, and %d are kept for the program's path and interpreter): %s",
			argBytes, envBytes, allowed, execPointerSize, lim.Total, execHeadroom, fix)}
	}
	return nil
}
