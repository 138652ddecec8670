//go:build darwin

package conformance

import (
	"bytes"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	ioctlGetTermios = unix.TIOCGETA
	ioctlSetTermios = unix.TIOCSETA
	// FIONREAD, _IOR('f', 127, int) in <sys/filio.h>; x/sys/unix does not name it for darwin.
	ioctlPending = 0x4004667f
)

func unlockPTY(fd int) (string, error) {
	if err := unix.IoctlSetInt(fd, unix.TIOCPTYGRANT, 0); err != nil {
		return "", err
	}
	if err := unix.IoctlSetInt(fd, unix.TIOCPTYUNLK, 0); err != nil {
		return "", err
	}
	var name [128]byte
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(unix.TIOCPTYGNAME), uintptr(unsafe.Pointer(&name[0]))); e != 0 {
		return "", e
	}
	if i := bytes.IndexByte(name[:], 0); i >= 0 {
		return string(name[:i]), nil
	}
	return string(name[:]), nil
}
