//go:build !linux && !darwin

package driverapi

import (
	"errors"
	"net"
)

// peerCredSupported is false here: the keyed transport is never chosen and
// the plugin connection keeps mutual TLS.
const peerCredSupported = false

func peerUID(net.Conn) (int, error) {
	return -1, errors.New("the peer's uid cannot be read on this system")
}
