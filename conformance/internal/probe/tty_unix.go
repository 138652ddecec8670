//go:build linux || darwin

package probe

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

func ioctlPtr(fd int, req uint, arg unsafe.Pointer) syscall.Errno {
	_, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	return e
}

// tty reports what the probe can do with a terminal: "devtty=" whether
// /dev/tty (the controlling terminal) opens, "sti=" whether a byte can be
// pushed into its input with TIOCSTI (the injection: what a terminal's
// owner would run as typed), "fds=" which of descriptors 0-2 are
// terminals, and "devnull=" whether /dev/null opens for writing (the
// control that opening a device works at all).
func (p *prober) tty() error {
	res := func(err error) string {
		var en syscall.Errno
		switch {
		case err == nil:
			return "ok"
		case errors.As(err, &en):
			return "errno" + strconv.Itoa(int(en))
		}
		return "error"
	}
	devtty, sti := "", "-"
	f, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	devtty = res(err)
	if err == nil {
		c := byte('Z')
		var e error
		if en := ioctlPtr(int(f.Fd()), syscall.TIOCSTI, unsafe.Pointer(&c)); en != 0 {
			e = en
		}
		sti = res(e)
		f.Close()
	}
	var ttys []string
	var ws [4]uint16
	for fd := 0; fd < 3; fd++ {
		if ioctlPtr(fd, syscall.TIOCGWINSZ, unsafe.Pointer(&ws)) == 0 {
			ttys = append(ttys, strconv.Itoa(fd))
		}
	}
	n, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err == nil {
		_, err = n.Write([]byte("x"))
		n.Close()
	}
	_, err = fmt.Fprintf(p.stdout, "tty devtty=%s sti=%s fds=%s devnull=%s\n", devtty, sti, strings.Join(ttys, ","), res(err))
	return err
}

// ctty runs a program in a new session whose controlling terminal is the
// terminal at a[0] (a pty the suite holds): setsid, TIOCSCTTY, then exec
// of a[2] with the arguments after it, checked against the SHA-256 a[1]
// unless that is "-". The suite starts a driver so, to see whether the
// driver's commands can reach a terminal its own session has.
func (p *prober) ctty(a []string) error {
	if len(a) < 3 {
		return fmt.Errorf("%w: ctty TERMINAL SHA256|- PROGRAM [ARGS...]", errUsage)
	}
	if a[1] != "-" {
		b, err := os.ReadFile(a[2])
		if err != nil {
			return err
		}
		if sum := sha256.Sum256(b); !strings.EqualFold(hex.EncodeToString(sum[:]), a[1]) {
			return fmt.Errorf("%s does not match its SHA-256 pin", a[2])
		}
	}
	if _, err := syscall.Setsid(); err != nil {
		return fmt.Errorf("setsid: %w", err)
	}
	t, err := os.OpenFile(a[0], os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, t.Fd(), uintptr(syscall.TIOCSCTTY), 0); e != 0 {
		t.Close()
		return fmt.Errorf("TIOCSCTTY: %w", e)
	}
	t.Close() // the session keeps its controlling terminal
	return syscall.Exec(a[2], a[2:], os.Environ())
}
