//go:build unix

package seatbelt

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ShimMain is the whole program when the driver binary is started with
// ShimArg as its first argument (args are the arguments after it). It sets
// RLIMIT_AS and execs the rest of the command line; it only returns on
// failure, with the exit status to use.
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
	asBytes, argv, err := parseShimArgs(args)
	if err != nil {
		return fail(err)
	}
	lim := unix.Rlimit{Cur: asBytes, Max: asBytes}
	if err := unix.Setrlimit(unix.RLIMIT_AS, &lim); err != nil {
		return fail(fmt.Errorf("setrlimit(RLIMIT_AS, %d): %w", asBytes, err))
	}
	if err := unix.Exec(argv[0], argv, os.Environ()); err != nil {
		return fail(fmt.Errorf("exec %s: %w", argv[0], err))
	}
	return 0 // not reached
}
