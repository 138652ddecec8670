//go:build !linux || !(amd64 || arm || arm64 || loong64 || mips64 || mips64le || riscv64)

package probe

import "errors"

func (p *prober) sysv(kind, key string) error {
	return errors.New("the probe looks SysV IPC up only on Linux with separate IPC system calls")
}
