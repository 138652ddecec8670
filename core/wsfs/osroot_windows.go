//go:build windows

package wsfs

import (
	"errors"
	"io/fs"
	"syscall"
)

// openNonblock is 0: no FIFO or device lives in a Windows directory (a
// named pipe or device is reached only by an absolute \\.\ path or link,
// which os.Root refuses), so an open cannot wait.
const openNonblock = 0

// reparsePoint reports whether fi is a reparse point. os.Root follows
// symbolic links (and refuses them when they lead out); every other
// reparse point (junctions, whose targets are absolute and so refused by
// os.Root too, cloud placeholders, deduplicated files, AF_UNIX sockets)
// runs a file-system filter when opened, so the files API opens none.
func reparsePoint(fi fs.FileInfo) bool {
	d, ok := fi.Sys().(*syscall.Win32FileAttributeData)
	return ok && d.FileAttributes&syscall.FILE_ATTRIBUTE_REPARSE_POINT != 0
}

// errorDirNotEmpty is ERROR_DIR_NOT_EMPTY.
const errorDirNotEmpty = syscall.Errno(145)

// dirNotEmpty reports whether err says a directory is not empty.
func dirNotEmpty(err error) bool {
	return errors.Is(err, errorDirNotEmpty) || errors.Is(err, syscall.ENOTEMPTY)
}
