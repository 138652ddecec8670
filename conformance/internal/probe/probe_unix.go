//go:build unix

package probe

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// childAttr: a detached child gets a session of its own (setsid), out of
// the reach of signals to the command's process group.
func childAttr(detach bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: detach}
}

func politeSignals() []os.Signal {
	return []os.Signal{syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT, syscall.SIGPIPE}
}

// killSelf sends the named signal (TERM, KILL) to the probe itself.
func killSelf(name string) error {
	var sig syscall.Signal
	switch name {
	case "TERM":
		sig = syscall.SIGTERM
	case "KILL":
		sig = syscall.SIGKILL
	default:
		return fmt.Errorf("%w: signal %q", errUsage, name)
	}
	return syscall.Kill(os.Getpid(), sig)
}

// cpuTime is the CPU time (user+system) this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
