//go:build !linux || !(amd64 || arm || arm64 || loong64 || mips64 || mips64le || riscv64)

package conformance

import "errors"

type sysvObject struct {
	kind string
	key  int32
}

func createSysV() ([]sysvObject, func(), error) {
	return nil, func() {}, errors.New("the suite creates SysV IPC objects only on Linux with separate IPC system calls")
}
