//go:build unix && !linux

package probe

import (
	"fmt"
	"os"
	"syscall"
)

// SetModeRoutes are the routes setmode knows on this OS: those every
// POSIX system has.
func SetModeRoutes() []string { return []string{"chmod", "fchmod", "open-create", "chown-chmod"} }

// setModeRoute: the routes every POSIX system has (see the Linux file).
func setModeRoute(route string, m uint32, path string) error {
	switch route {
	case "chmod":
		return syscall.Chmod(path, m)
	case "fchmod":
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return syscall.Fchmod(int(f.Fd()), m)
	case "open-create":
		fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, m)
		if err != nil {
			return err
		}
		return syscall.Close(fd)
	case "chown-chmod":
		if err := os.Chown(path, os.Getuid(), os.Getgid()); err != nil {
			return err
		}
		return syscall.Chmod(path, m)
	}
	return fmt.Errorf("%w: setmode route %q", errUsage, route)
}
