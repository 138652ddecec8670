//go:build linux

package main

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// checkServiceOwner refuses a socket served by a uid other than this
// user's and root's (SO_PEERCRED): whoever listens there gets the
// command, its environment and stdin, and answers for the sandbox. A
// socket path in a directory another user could make or take (/tmp) may
// be theirs.
func checkServiceOwner(c net.Conn, sock string) error {
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
		return &ServiceOwnerError{Socket: sock, UID: cred.Uid}
	}
	return nil
}
