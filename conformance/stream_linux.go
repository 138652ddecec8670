//go:build linux

package conformance

import "syscall"

// hostDevptsDev is the device of the host's devpts instance (the one this
// process sees at /dev/pts).
func hostDevptsDev() (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat("/dev/pts/ptmx", &st); err != nil {
		return 0, err
	}
	return uint64(st.Dev), nil
}
