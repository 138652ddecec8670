//go:build linux

package bwrap

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// execLimits are the exec limits the command's sandbox inherits: this
// process's RLIMIT_STACK, passed on unchanged by bwrap and sandbox-init.
func execLimits() (execLimitSet, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_STACK, &lim); err != nil {
		return execLimitSet{}, fmt.Errorf("bwrap driver: getrlimit(RLIMIT_STACK): %w", err)
	}
	return execLimitsFor(lim.Cur, os.Getpagesize()), nil
}
