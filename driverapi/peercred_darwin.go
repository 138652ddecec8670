package driverapi

import "golang.org/x/sys/unix"

// socketPeerUID reads the peer's effective uid with LOCAL_PEERCRED.
func socketPeerUID(fd int) (int, error) {
	cred, err := unix.GetsockoptXucred(fd, unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
	if err != nil {
		return -1, err
	}
	return int(cred.Uid), nil
}
