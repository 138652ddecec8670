//go:build linux

package core

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// chmodNoFollow sets the mode of the directory name of pfd, never of what a
// link there leads to: through an O_PATH|O_NOFOLLOW descriptor of it.
func chmodNoFollow(pfd int, name string, mode uint32) error {
	fd, err := unix.Openat(pfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), mode)
}
