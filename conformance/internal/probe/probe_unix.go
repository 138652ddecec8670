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
	case "INT":
		sig = syscall.SIGINT
	case "HUP":
		sig = syscall.SIGHUP
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

// openFDs lists the descriptors above 2 that this process inherited,
// asking the kernel about each number up to the descriptor limit (at most
// 65536), so it needs no /proc and opens nothing itself. A descriptor that
// survived exec has no close-on-exec flag; the Go runtime's own (it keeps
// the cgroup CPU files open to follow GOMAXPROCS) have it and are left out.
func openFDs() ([]int, error) {
	var lim syscall.Rlimit
	max := uint64(1024)
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur > 0 {
		max = min(lim.Cur, 65536)
	}
	var open []int
	for fd := 3; uint64(fd) < max; fd++ {
		flags, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
		if e == 0 && flags&syscall.FD_CLOEXEC == 0 {
			open = append(open, fd)
		}
	}
	return open, nil
}

// datagramPair sends one datagram across a unix datagram socket pair.
func datagramPair() error {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	if _, err := syscall.Write(fds[0], []byte("pair")); err != nil {
		return err
	}
	buf := make([]byte, 8)
	n, err := syscall.Read(fds[1], buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "pair" {
		return fmt.Errorf("read %q", buf[:n])
	}
	return nil
}
