//go:build linux || darwin

package driverapi

import (
	"errors"
	"net"
	"syscall"
)

// peerCredSupported: the kernel tells a unix socket's peer (socketPeerUID).
const peerCredSupported = true

// peerUID is the uid the kernel recorded for the other end of a unix
// socket when it connected or listened: not something the peer says.
func peerUID(conn net.Conn) (int, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return -1, errors.New("not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	uid, gerr := -1, error(nil)
	if err := raw.Control(func(fd uintptr) { uid, gerr = socketPeerUID(int(fd)) }); err != nil {
		return -1, err
	}
	return uid, gerr
}
