//go:build unix

package commandpolicy

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used. Benchmarks report it
// beside wall time because a shared machine inflates wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
