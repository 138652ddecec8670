//go:build linux

package conformance

import (
	"os"
	"syscall"
)

// hostDevptsDev is the device of the host's devpts instance (the one this
// process sees at /dev/pts).
func hostDevptsDev() (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/dev/pts/ptmx", &st); err != nil {
		return 0, err
	}
	return uint64(st.Dev), nil
}

// fileID is f's device and inode.
func fileID(f *os.File) (dev, ino uint64, ok bool) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return uint64(st.Dev), st.Ino, true //nolint:unconvert // Dev's width differs across architectures
}
