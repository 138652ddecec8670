//go:build !unix && !windows

package wsfs

import (
	"errors"
	"io/fs"
	"syscall"
)

const openNonblock = 0

func reparsePoint(fs.FileInfo) bool { return false }

func dirNotEmpty(err error) bool { return errors.Is(err, syscall.ENOTEMPTY) }
