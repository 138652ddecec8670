//go:build unix && !linux

package core

import "errors"

// chmodNoFollow needs O_PATH (Linux): elsewhere an unreadable directory
// stays, and the removal reports it.
func chmodNoFollow(int, string, uint32) error {
	return errors.New("not supported on this system")
}
