//go:build linux

package client

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// checkOwner refuses a socket served by a uid other than this
// user's and root's (SO_PEERCRED): whoever listens there gets the
// command, its environment and stdin, and answers for the sandbox. A
// socket path in a directory another user could make or take (/tmp) may
// be theirs.
func checkOwner(c net.Conn, sock string) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("service socket %s: %w", sock, err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return fmt.Errorf("service socket %s: %w", sock, err)
	}
	if cerr != nil {
		return fmt.Errorf("service socket %s: reading who serves it: %w", sock, cerr)
	}
	if int(cred.Uid) != os.Getuid() && cred.Uid != 0 {
		return &OwnerError{Socket: sock, UID: cred.Uid}
	}
	return nil
}

// Describe says which serve answers on sock: its pid as the kernel
// reports the listener (SO_PEERCRED, which the server cannot fake), and
// the version and data directory it wrote into the socket's lock file
// when it took the socket (service.UnixListener.WriteOwner). The default
// socket is shared by every checkout of a user, so "which serve" is
// worth asking. The lock file's line is used only when it names the very
// pid the kernel reports: a stale or foreign line is not believed.
func Describe(sock string) (string, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return "", fmt.Errorf("service socket %s: %w", sock, err)
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return "", fmt.Errorf("service socket %s: %w", sock, err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return "", fmt.Errorf("service socket %s: reading who serves it: %w", sock, errors.Join(err, cerr))
	}
	pid := fmt.Sprintf("pid %d", cred.Pid)
	f, err := os.Open(sock + ".lock")
	if err == nil {
		defer f.Close()
		b := make([]byte, 512)
		n, _ := f.Read(b)
		line := strings.Join(strings.Fields(strings.ToValidUTF8(string(b[:n]), "?")), " ")
		if line == pid || strings.HasPrefix(line, pid+",") {
			return line, nil
		}
	}
	return pid + " (its version and data dir unknown: a serve older than this CLI)", nil
}
