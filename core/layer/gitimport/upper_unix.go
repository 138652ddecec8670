//go:build unix

package gitimport

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// The upper layer is read only through descriptors: each directory is
// opened relative to its parent's descriptor with O_NOFOLLOW, so a symlink
// the session planted anywhere (HEAD -> /etc/passwd, objects/ab -> /) is
// seen as a symlink and refused, never followed; files are opened with
// O_NONBLOCK so that a FIFO cannot stall the import, and their type and
// size are taken from the open descriptor (fstat), not from a name that
// could be swapped in between.

const openFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK

// upperDir is one directory of the upper layer, open.
type upperDir struct {
	fd   int
	path string // for messages
}

func openUpperRoot(path string) (*upperDir, entKind, error) {
	fd, err := unix.Open(path, openFlags|unix.O_DIRECTORY, 0)
	if err == nil {
		return &upperDir{fd: fd, path: path}, kindDir, nil
	}
	var st unix.Stat_t
	if lerr := unix.Lstat(path, &st); lerr != nil {
		if errors.Is(lerr, unix.ENOENT) {
			return nil, kindAbsent, nil
		}
		return nil, kindAbsent, fmt.Errorf("reading the session's repository %s: %w", path, lerr)
	}
	return nil, kindOfStat(&st), nil
}

func kindOfStat(st *unix.Stat_t) entKind {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return kindFile
	case unix.S_IFDIR:
		return kindDir
	case unix.S_IFLNK:
		return kindSymlink
	case unix.S_IFCHR:
		if st.Rdev == 0 {
			return kindWhiteout // overlayfs marks a deleted entry so
		}
	}
	return kindOther
}

func (d *upperDir) Close() { _ = unix.Close(d.fd) }

// kind reports what name is in d, without following it.
func (d *upperDir) kind(name string) entKind {
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return kindAbsent
	}
	return kindOfStat(&st)
}

// sub opens the directory name in d; a name that is not a directory
// gives its kind and a nil dir.
func (d *upperDir) sub(name string) (*upperDir, entKind) {
	fd, err := unix.Openat(d.fd, name, openFlags|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, d.kind(name)
	}
	return &upperDir{fd: fd, path: d.path + "/" + name}, kindDir
}

// names lists d's entries (at most max).
func (d *upperDir) names(max int) ([]string, error) {
	fd, err := unix.Dup(d.fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	names, err := f.Readdirnames(max + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(names) > max {
		return nil, badObject("%s holds more than %d entries", d.path, max)
	}
	return names, nil
}

// opaque reports whether overlayfs marked d opaque (what the lower layer
// held under it is hidden): trusted.overlay.opaque as root, or
// user.overlay.opaque in a user namespace's mount.
func (d *upperDir) opaque() bool {
	var b [4]byte
	for _, x := range []string{"trusted.overlay.opaque", "user.overlay.opaque"} {
		if n, err := unix.Fgetxattr(d.fd, x, b[:]); err == nil && n >= 1 && b[0] == 'y' {
			return true
		}
	}
	return false
}

// read reads the regular file name in d, at most max bytes; anything else
// (symlink, device, FIFO, directory) gives its kind and no data.
func (d *upperDir) read(name string, max int64) ([]byte, entKind, error) {
	fd, err := unix.Openat(d.fd, name, openFlags, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, kindAbsent, nil
		}
		k := d.kind(name)
		if k == kindAbsent || k == kindFile {
			return nil, k, fmt.Errorf("reading %s/%s: %w", d.path, name, err)
		}
		return nil, k, nil
	}
	f := os.NewFile(uintptr(fd), d.path+"/"+name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, kindAbsent, fmt.Errorf("reading %s/%s: %w", d.path, name, err)
	}
	if k := kindOfStat(&st); k != kindFile {
		return nil, k, nil
	}
	if st.Size > max {
		return nil, kindFile, badObject("%s is %d bytes, over the limit of %d", name, st.Size, max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, kindFile, fmt.Errorf("reading %s/%s: %w", d.path, name, err)
	}
	if int64(len(b)) > max {
		return nil, kindFile, badObject("%s is over the limit of %d bytes", name, max)
	}
	return b, kindFile, nil
}

// openFile opens the regular file name in d for reading at offsets.
func (d *upperDir) openFile(name string) (*os.File, int64, entKind, error) {
	fd, err := unix.Openat(d.fd, name, openFlags, 0)
	if err != nil {
		return nil, 0, d.kind(name), nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return nil, 0, kindAbsent, fmt.Errorf("reading %s/%s: %w", d.path, name, err)
	}
	if k := kindOfStat(&st); k != kindFile {
		_ = unix.Close(fd)
		return nil, 0, k, nil
	}
	return os.NewFile(uintptr(fd), d.path+"/"+name), st.Size, kindFile, nil
}

const upperSupported = true
