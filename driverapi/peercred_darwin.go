package driverapi

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerCredSupported: the kernel tells a unix socket's peer (LOCAL_PEERCRED).
const peerCredSupported = true

// peerUID is the effective uid the kernel recorded for the other end of a
// unix socket when it connected or listened: not something the peer says.
func peerUID(conn net.Conn) (int, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return -1, errors.New("not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Xucred
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if gerr != nil {
		return -1, gerr
	}
	return int(cred.Uid), nil
}
