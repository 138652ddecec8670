//go:build linux && (386 || arm || mips || mipsle)

package bwrap

import "golang.org/x/sys/unix"

// mkTimespec builds a unix.Timespec whose fields are 32-bit here (the
// metadata guard refuses to run on such builds; this keeps them compiling).
func mkTimespec(sec, nsec int64) unix.Timespec {
	return unix.Timespec{Sec: int32(sec), Nsec: int32(nsec)}
}
