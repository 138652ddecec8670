//go:build !linux

package conformance

import "errors"

// hostDevptsDev: the case that uses it is LinuxOnly.
func hostDevptsDev() (uint64, error) { return 0, errors.New("devpts is Linux's") }
