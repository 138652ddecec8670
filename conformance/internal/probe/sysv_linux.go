//go:build linux && (amd64 || arm || arm64 || loong64 || mips64 || mips64le || riscv64)

package probe

import (
	"fmt"
	"strconv"
	"syscall"
)

// sysv looks up an existing SysV IPC object (kind shm, msg or sem) by key,
// without creating it, and prints "sysv-KIND:visible" or
// "sysv-KIND:absent (ERRNO)". Objects of another IPC namespace are absent.
func (p *prober) sysv(kind, key string) error {
	k, err := strconv.ParseInt(key, 10, 32)
	if err != nil {
		return fmt.Errorf("%w: key %q", errUsage, key)
	}
	var trap uintptr
	switch kind {
	case "shm":
		trap = syscall.SYS_SHMGET
	case "msg":
		trap = syscall.SYS_MSGGET
	case "sem":
		trap = syscall.SYS_SEMGET
	default:
		return fmt.Errorf("%w: sysv kind %q", errUsage, kind)
	}
	// shmget(key, 0, 0), msgget(key, 0), semget(key, 0, 0): look up only.
	_, _, e := syscall.Syscall(trap, uintptr(int32(k)), 0, 0)
	if e == 0 {
		_, err = fmt.Fprintf(p.stdout, "sysv-%s:visible\n", kind)
		return err
	}
	_, err = fmt.Fprintf(p.stdout, "sysv-%s:absent (%v)\n", kind, e)
	return err
}
