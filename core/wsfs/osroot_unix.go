//go:build unix

package wsfs

import (
	"errors"
	"io/fs"
	"syscall"
)

// openNonblock is added to a read's open: were a FIFO swapped in between
// the look and the open, the open would otherwise wait for a writer.
const openNonblock = syscall.O_NONBLOCK

// reparsePoint is false: only Windows has reparse points.
func reparsePoint(fs.FileInfo) bool { return false }

// dirNotEmpty reports whether err says a directory is not empty.
func dirNotEmpty(err error) bool {
	return errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)
}
