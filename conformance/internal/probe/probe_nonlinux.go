//go:build !linux

package probe

import (
	"errors"
	"os"
	"strconv"
)

var errLinuxOnly = errors.New("this step exists only on Linux")

func (p *prober) clone3() error { return errLinuxOnly }

func (p *prober) procScan(string) error { return errLinuxOnly }

// fdTarget names what an open descriptor refers to, where the OS says.
func fdTarget(fd int) string {
	if t, err := os.Readlink("/dev/fd/" + strconv.Itoa(fd)); err == nil {
		return t
	}
	return "?"
}
