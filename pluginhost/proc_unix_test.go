//go:build !windows

package pluginhost

import (
	"errors"
	"syscall"
)

// processAlive reports whether pid exists (zombies included: a reaped
// process is gone, an unreaped one would still count as left behind).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
