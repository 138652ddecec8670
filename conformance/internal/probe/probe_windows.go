//go:build windows

package probe

import (
	"errors"
	"os"
	"syscall"
	"time"
)

const (
	createNewProcessGroup  = 0x00000200
	detachedProcess        = 0x00000008
	createBreakawayFromJob = 0x01000000
	createNoWindow         = 0x08000000
)

// childAttr: every child is started without a console (a console would
// add a conhost.exe process, counted by a Job Object's process limit, and
// flash a window); a detached child also asks to leave the command's Job
// Object and process group (the Windows way to escape a process tree), and
// startChild falls back to a plain child when the job forbids breakaway.
func childAttr(detach bool) *syscall.SysProcAttr {
	if !detach {
		return &syscall.SysProcAttr{CreationFlags: detachedProcess}
	}
	return &syscall.SysProcAttr{CreationFlags: createNewProcessGroup | detachedProcess | createBreakawayFromJob}
}

// Windows has no polite signals to ignore beyond the console's.
func politeSignals() []os.Signal { return []os.Signal{os.Interrupt} }

func killSelf(string) error { return errors.New("POSIX signals do not exist on Windows") }

func cpuTime() time.Duration {
	var c, e, k, u syscall.Filetime
	h, err := syscall.GetCurrentProcess()
	if err != nil || syscall.GetProcessTimes(h, &c, &e, &k, &u) != nil {
		return 0
	}
	ft := func(f syscall.Filetime) time.Duration {
		return time.Duration((int64(f.HighDateTime)<<32 | int64(f.LowDateTime)) * 100)
	}
	return ft(k) + ft(u)
}

func openFDs() ([]int, error) { return nil, errors.New("descriptors are a POSIX notion") }

func datagramPair() error { return errors.New("unix datagram socket pairs are POSIX's") }
