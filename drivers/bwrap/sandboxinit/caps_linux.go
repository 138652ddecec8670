//go:build linux

package sandboxinit

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Securebits (include/uapi/linux/securebits.h): root gains no capabilities
// at exec, setuid to or from 0 changes none, and the bits are locked.
const (
	secbitNoroot             = 1 << 0
	secbitNorootLocked       = 1 << 1
	secbitNoSetuidFixup      = 1 << 2
	secbitNoSetuidFixupLock  = 1 << 3
	secbitKeepCapsLocked     = 1 << 5
	secbitNoCapAmbientRaise  = 1 << 6
	secbitNoCapAmbientLocked = 1 << 7
)

// lastCap is the highest capability this kernel knows.
func lastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("capabilities: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 || n > 63 {
		return 0, fmt.Errorf("capabilities: cap_last_cap %q", b)
	}
	return n, nil
}

// dropCapabilities empties every capability set of this thread for good
// (InitSpec.NoNamespaces): without a user namespace a root launcher's
// capabilities would be the host's. With CAP_SETPCAP (a root launcher) it
// first locks the securebits against root's gain at exec and empties the
// bounding set; without it (an unprivileged launcher) there is nothing to
// gain later anyway: no_new_privs stops set-id and file capabilities.
// Then the ambient set is cleared and the permitted, effective and
// inheritable sets emptied, and the result is read back: a capability left
// anywhere is an error, never a silent partial drop.
func dropCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Effective&(1<<unix.CAP_SETPCAP) != 0 {
		// Read only here: a second sandbox-init below a confined one has
		// no capabilities left and no /proc to read.
		last, err := lastCap()
		if err != nil {
			return err
		}
		bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLock |
			secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientLocked
		if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
			return fmt.Errorf("prctl(PR_SET_SECUREBITS): %w", err)
		}
		for c := 0; c <= last; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("prctl(PR_CAPBSET_DROP, %d): %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_CAP_AMBIENT_CLEAR_ALL): %w", err)
	}
	data = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return noneHeld("capabilities left after the drop")
}

// noneHeld reads this thread's effective, permitted and inheritable sets
// back and fails, saying what (and what is held), if any is not empty.
func noneHeld(what string) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, d := range data {
		if d.Effective|d.Permitted|d.Inheritable != 0 {
			return fmt.Errorf("%s: %+v", what, data)
		}
	}
	return nil
}
