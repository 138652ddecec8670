//go:build linux && !(386 || arm || mips || mipsle)

package bwrap

import "golang.org/x/sys/unix"

// mkTimespec builds a unix.Timespec whose fields are 64-bit here. Special
// nanosecond values (UTIME_NOW, UTIME_OMIT) pass through unchanged, which
// unix.NsecToTimespec would not do.
func mkTimespec(sec, nsec int64) unix.Timespec { return unix.Timespec{Sec: sec, Nsec: nsec} }
