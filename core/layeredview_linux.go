//go:build linux

package core

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// openDriverView opens the overlay root the driver names. The path is a
// descriptor of the driver's (/proc/<pid>/fd/<n>), which may have been
// closed and its number reused since the driver answered: what is opened
// must be a directory of an overlay with the device and inode the driver
// reported, or it is refused.
func openDriverView(lv driverapi.LayeredView) (*os.File, error) {
	if !strings.HasPrefix(lv.Path, "/proc/") {
		return nil, &LayeredUnavailableError{Reason: fmt.Sprintf("the driver named the session's view %q, not a descriptor under /proc", lv.Path)}
	}
	f, err := os.OpenFile(lv.Path, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &LayeredUnavailableError{Reason: fmt.Sprintf("the session's view (%s) cannot be opened: %v", lv.Path, err)}
	}
	var st unix.Stat_t
	var sf unix.Statfs_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || unix.Fstatfs(int(f.Fd()), &sf) != nil ||
		sf.Type != unix.OVERLAYFS_SUPER_MAGIC || uint64(st.Dev) != lv.Dev || st.Ino != lv.Ino { //nolint:unconvert // Dev's width differs across architectures
		f.Close()
		return nil, &LayeredUnavailableError{Reason: "the session's sandbox ended while its view was being opened; try again"}
	}
	return f, nil
}
