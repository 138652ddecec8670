//go:build !linux

package conformance

import (
	"errors"
	"os"
)

// hostDevptsDev: the case that uses it is LinuxOnly.
func hostDevptsDev() (uint64, error) { return 0, errors.New("devpts is Linux's") }

// fileID: the case that uses it is LinuxOnly.
func fileID(*os.File) (dev, ino uint64, ok bool) { return 0, 0, false }
