//go:build unix

package seatbelt

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// ShimMain is the whole program when the driver binary is started with
// ShimArg as its first argument (args are the arguments after it). It
// reads the command's environment from shimEnvFD, sets RLIMIT_AS and execs
// the rest of the command line with that environment; it only returns on
// failure, with the exit status to use. Its own environment is empty (see
// shimEnvFD).
func ShimMain(args []string) int {
	status := os.NewFile(shimStatusFD, "status")
	if status != nil {
		// Inherited without close-on-exec; set it so a successful exec
		// shows the parent an empty, closed pipe.
		unix.CloseOnExec(shimStatusFD)
	}
	fail := func(err error) int {
		msg := "seatbelt shim: " + err.Error()
		if status != nil {
			_, _ = status.WriteString(msg)
		}
		fmt.Fprintln(os.Stderr, msg)
		return 125
	}
	if len(args) > 0 && args[0] == probeArg {
		return probeMain(args[1:], fail)
	}
	asBytes, argv, err := parseShimArgs(args)
	if err != nil {
		return fail(err)
	}
	envFile := os.NewFile(shimEnvFD, "env")
	if envFile == nil {
		return fail(shimError("no environment pipe on descriptor 4"))
	}
	data, err := io.ReadAll(io.LimitReader(envFile, maxShimEnv+1))
	envFile.Close()
	if err != nil {
		return fail(fmt.Errorf("read environment: %w", err))
	}
	if len(data) > maxShimEnv {
		return fail(shimError("environment larger than 4 MiB"))
	}
	env, err := decodeEnv(data)
	if err != nil {
		return fail(err)
	}
	// exec converts argv and env to C strings, which allocates. Under a
	// limit below what the runtime has mapped, a heap that must grow for
	// that would fail; so grow it now, by the same conversion, and let
	// the collector free it for exec to reuse.
	if _, err := syscall.SlicePtrFromStrings(argv); err != nil {
		return fail(err)
	}
	if _, err := syscall.SlicePtrFromStrings(env); err != nil {
		return fail(err)
	}
	runtime.GC()
	lim := unix.Rlimit{Cur: asBytes, Max: asBytes}
	if err := unix.Setrlimit(unix.RLIMIT_AS, &lim); err != nil {
		return fail(fmt.Errorf("setrlimit(RLIMIT_AS, %d): %w", asBytes, err))
	}
	if err := unix.Exec(argv[0], argv, env); err != nil {
		return fail(fmt.Errorf("exec %s: %w", argv[0], err))
	}
	return 0 // not reached
}

// probeMain runs allocationProbe with real mappings and the real limit.
// The mapping is PROT_NONE: it takes address space (what RLIMIT_AS
// counts) but no memory, and no overcommit accounting.
func probeMain(args []string, fail func(error) int) int {
	if len(args) != 1 {
		return fail(errShimUsage)
	}
	limit, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil || limit == 0 {
		return fail(errShimUsage)
	}
	alloc := func(size uint64) error {
		b, err := unix.Mmap(-1, 0, int(size), unix.PROT_NONE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			return err
		}
		return unix.Munmap(b)
	}
	setLimit := func(n uint64) error {
		var cur unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_AS, &cur); err != nil {
			return err
		}
		return unix.Setrlimit(unix.RLIMIT_AS, &unix.Rlimit{Cur: n, Max: cur.Max})
	}
	if err := allocationProbe(limit, alloc, setLimit); err != nil {
		return fail(err)
	}
	return 0
}
