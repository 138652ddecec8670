//go:build linux && (amd64 || arm || arm64 || loong64 || mips64 || mips64le || riscv64)

package conformance

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"syscall"
)

// sysvObject is a SysV IPC object the suite created on the host.
type sysvObject struct {
	kind string // shm, msg, sem
	key  int32
	id   uintptr
}

const (
	ipcCreat = 0o1000
	ipcExcl  = 0o2000
	ipcRmid  = 0
)

// createSysV makes one shared memory segment, one message queue and one
// semaphore set at random keys, readable and writable by everyone, and
// returns a function that removes them.
func createSysV() ([]sysvObject, func(), error) {
	var objs []sysvObject
	remove := func() {
		for _, o := range objs {
			switch o.kind {
			case "shm":
				syscall.Syscall(syscall.SYS_SHMCTL, o.id, ipcRmid, 0)
			case "msg":
				syscall.Syscall(syscall.SYS_MSGCTL, o.id, ipcRmid, 0)
			case "sem":
				syscall.Syscall6(syscall.SYS_SEMCTL, o.id, 0, ipcRmid, 0, 0, 0)
			}
		}
	}
	for _, kind := range []string{"shm", "msg", "sem"} {
		var b [4]byte
		_, _ = rand.Read(b[:])
		// Positive keys away from 0 (IPC_PRIVATE).
		key := int32(binary.BigEndian.Uint32(b[:])&0x3fffffff) | 0x10000
		flags := uintptr(ipcCreat | ipcExcl | 0o666)
		var id uintptr
		var e syscall.Errno
		switch kind {
		case "shm":
			id, _, e = syscall.Syscall(syscall.SYS_SHMGET, uintptr(key), 4096, flags)
		case "msg":
			id, _, e = syscall.Syscall(syscall.SYS_MSGGET, uintptr(key), flags, 0)
		case "sem":
			id, _, e = syscall.Syscall(syscall.SYS_SEMGET, uintptr(key), 1, flags)
		}
		if e != 0 {
			remove()
			return nil, func() {}, fmt.Errorf("creating a SysV %s object on the host: %w", kind, e)
		}
		objs = append(objs, sysvObject{kind: kind, key: key, id: id})
	}
	return objs, remove, nil
}
