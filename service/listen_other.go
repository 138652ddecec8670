//go:build !linux

package service

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/hashicorp/go-hclog"
)

// InUseError is a socket a live server is listening on.
type InUseError struct {
	Path  string
	Owner string
}

func (e *InUseError) Error() string {
	if e.Owner != "" {
		return fmt.Sprintf("another aleph-sandbox serve is listening on %s (%s)", e.Path, e.Owner)
	}
	return fmt.Sprintf("another aleph-sandbox serve is listening on %s", e.Path)
}

// WriteOwner is a no-op here: ListenUnix is refused.
func (l *UnixListener) WriteOwner(owner string) error { return nil }

// UnixListener is the service's socket.
type UnixListener struct{ net.Listener }

// Path is the socket's path.
func (l *UnixListener) Path() string { return "" }

// ListenUnix is refused here: the peer-uid check before any RPC is
// implemented on Linux only, and the service is not served without it.
func ListenUnix(path string, allowedUIDs []uint32, log hclog.Logger) (*UnixListener, error) {
	return nil, errors.New("serve: the unix socket's peer check is implemented on Linux only")
}

// fileOwner is not checked here: the mode check stands alone.
func fileOwner(os.FileInfo) (int, bool) { return 0, false }

// peerUID has no peer credentials to read here: no unix-socket listener
// runs on this platform.
func peerUID(net.Conn) (uint32, error) {
	return 0, errors.New("peer credentials are read on Linux only")
}
