//go:build !unix && !windows

package probe

import (
	"errors"
	"os"
	"syscall"
	"time"
)

func childAttr(bool) *syscall.SysProcAttr { return nil }

func politeSignals() []os.Signal { return nil }

func killSelf(string) error { return errors.New("signals are not supported on this system") }

func cpuTime() time.Duration { return 0 }

func openFDs() ([]int, error) { return nil, errors.New("not supported on this system") }

func datagramPair() error { return errors.New("unix datagram socket pairs are POSIX's") }
