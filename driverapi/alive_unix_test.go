//go:build unix

package driverapi_test

import "syscall"

// alive reports whether a process with this pid exists (signal 0 probes
// without delivering anything).
func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }
