//go:build linux

package sandboxinit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// errLauncherGone: the launcher's end of the lifeline is closed.
var errLauncherGone = errors.New("the launcher is gone; not starting the command")

// ReadCommandFD reads the command record held by fd (see InitSpec.CommandFD)
// and returns its argv and environment.
func ReadCommandFD(fd int) (argv, env []string, err error) {
	// pread on the number, not an *os.File: a File's finalizer would close
	// the descriptor at some later collection, while the supervisor's plain
	// child still needs it (and by then the number may be another file's).
	var data []byte
	buf := make([]byte, 64<<10)
	for len(data) <= maxCommandBytes {
		n, err := unix.Pread(fd, buf, int64(len(data)))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("command fd %d: %w", fd, err)
		}
		if n == 0 {
			break
		}
		data = append(data, buf[:n]...)
	}
	argv, env, err = DecodeCommand(data)
	if err != nil {
		return nil, nil, fmt.Errorf("command fd %d: %w", fd, err)
	}
	return argv, env, nil
}

// ReportStarted writes the started byte on the lifeline; a closed
// launcher end is errLauncherGone.
func ReportStarted(fd int) error {
	// MSG_NOSIGNAL: a dead peer must be an error here, not a SIGPIPE.
	err := unix.Sendto(fd, []byte{'s'}, unix.MSG_NOSIGNAL, nil)
	switch {
	case errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET):
		return errLauncherGone
	case err != nil:
		return fmt.Errorf("lifeline fd %d: %w", fd, err)
	}
	return nil
}

// GoAheadTag is the launcher's go-ahead on the lifeline in the Landlock
// tier (InitSpec.NoNamespaces): this process has been moved into the
// command's cgroup and may start the command.
const GoAheadTag = 'g'

// WaitGoAhead blocks until the launcher writes GoAheadTag on the lifeline;
// a launcher gone first is errLauncherGone. It reads one byte at a time so
// nothing after the go-ahead (signal requests) is consumed here.
func WaitGoAhead(fd int) error {
	var b [1]byte
	for {
		n, err := unix.Read(fd, b[:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("lifeline fd %d: %w", fd, err)
		case n == 0:
			return errLauncherGone
		case b[0] == GoAheadTag:
			return nil
		}
	}
}

// LauncherGone reports whether the launcher's end of the lifeline is
// closed: a hang-up or an error, or a descriptor that cannot be polled.
// Data waiting is not a hang-up: the launcher writes signal requests on it
// (SignalTag), which the supervisor reads once the target runs.
func LauncherGone(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
	for {
		n, err := unix.Poll(pfd, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return true
		}
		return n != 0 && pfd[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
	}
}

// reaperWait bounds WaitReaperArmed.
const reaperWait = 5 * time.Second

// WaitReaperArmed waits until PID 1 of the sandbox, bwrap's reaper, sleeps
// in its wait loop. The reaper arms its --die-with-parent just before it
// enters that loop, while this process may already be running: only once
// it is armed does a lifeline found open mean that the driver's death will
// take the sandbox down. The process state in /proc/1/stat needs no ptrace
// access. When this process is PID 1 itself there is no reaper to wait for.
func WaitReaperArmed() error {
	if os.Getpid() == 1 {
		return nil
	}
	deadline := time.Now().Add(reaperWait)
	for pause := 50 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		b, err := os.ReadFile("/proc/1/stat")
		if err != nil {
			return fmt.Errorf("sandbox reaper: %w", err)
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return fmt.Errorf("sandbox reaper: unexpected /proc/1/stat %q", b)
		}
		switch b[i+2] {
		case 'S':
			return nil
		case 'Z', 'X':
			return errLauncherGone
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox reaper: not waiting after %v (state %c)", reaperWait, b[i+2])
		}
		time.Sleep(pause)
	}
}
