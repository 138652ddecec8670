//go:build linux

package layer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Everything here works by descriptor: a directory is opened relative to
// its parent with O_NOFOLLOW, so a symlink anywhere on the way fails the
// open instead of being followed, and names are resolved one component at
// a time under a directory descriptor already held. The upper layer is
// written by a sandboxed command that may still run, and the host's
// workspace by whoever works there: neither may redirect a read or a write
// by swapping a directory for a link.

const (
	dirFlags  = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fileFlags = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
)

func retryEINTR(f func() error) error {
	for {
		err := f()
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// openDirAt opens the directory name of fd, never through a symlink.
func openDirAt(fd int, name string) (int, error) {
	var nfd int
	err := retryEINTR(func() (e error) { nfd, e = unix.Openat(fd, name, dirFlags, 0); return })
	return nfd, err
}

// openDirPath opens the directory rel ("" for root itself) below root,
// one component at a time.
func openDirPath(root int, rel string) (int, error) {
	fd, err := unix.Dup(root)
	if err != nil {
		return -1, err
	}
	unix.CloseOnExec(fd)
	if rel == "" {
		return fd, nil
	}
	for _, c := range strings.Split(rel, "/") {
		nfd, err := openDirAt(fd, c)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = nfd
	}
	return fd, nil
}

// splitRel splits a slash path into its directory ("" at the top) and
// last component.
func splitRel(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

// lstatAt stats the entry name of fd without following it.
func lstatAt(fd int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := retryEINTR(func() error { return unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) })
	return st, err
}

// openFileAt opens the regular file name of fd for reading and checks,
// on the descriptor, that it is one (O_NONBLOCK: a FIFO swapped in does
// not block the open).
func openFileAt(fd int, name string) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	var nfd int
	if err := retryEINTR(func() (e error) { nfd, e = unix.Openat(fd, name, fileFlags, 0); return }); err != nil {
		return nil, st, err
	}
	if err := unix.Fstat(nfd, &st); err != nil {
		unix.Close(nfd)
		return nil, st, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(nfd)
		return nil, st, unix.EINVAL
	}
	return os.NewFile(uintptr(nfd), name), st, nil
}

// readlinkAt reads the symlink name of fd.
func readlinkAt(fd int, name string) (string, error) {
	buf := make([]byte, 4096)
	for {
		n, err := unix.Readlinkat(fd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= 1<<20 {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, 2*len(buf))
	}
}

// procPath names the entry name of the directory fd through /proc: the
// directory is the one held, and the xattr calls below use the l* forms,
// so the last component is not followed either.
func procPath(fd int, name string) string {
	return "/proc/self/fd/" + strconv.Itoa(fd) + "/" + name
}

// listXattrs lists the xattr names of the entry name of fd (not followed).
func listXattrs(fd int, name string) ([]string, error) {
	p := procPath(fd, name)
	buf := make([]byte, 1024)
	for {
		n, err := unix.Llistxattr(p, buf)
		if errors.Is(err, unix.ERANGE) && len(buf) < 1<<20 {
			buf = make([]byte, 4*len(buf))
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		var out []string
		for _, b := range bytes.Split(buf[:n], []byte{0}) {
			if len(b) > 0 {
				out = append(out, string(b))
			}
		}
		return out, nil
	}
}

// getXattr reads one xattr of the entry name of fd (not followed).
func getXattr(fd int, name, attr string) (string, bool) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(procPath(fd, name), attr, buf)
	if err != nil {
		return "", false
	}
	return string(buf[:n]), true
}

// dirent is one name read from a directory.
type dirent struct {
	name string
	typ  uint8
}

// readDirFd lists the directory fd (getdents64: names and types).
func readDirFd(fd int) ([]dirent, error) {
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		return nil, err
	}
	buf := make([]byte, 16<<10)
	var out []dirent
	for {
		var n int
		if err := retryEINTR(func() (e error) { n, e = unix.Getdents(fd, buf); return }); err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		for off := 0; off+19 <= n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			if reclen == 0 || off+reclen > n {
				break
			}
			typ := buf[off+18]
			nameb := buf[off+19 : off+reclen]
			if i := bytes.IndexByte(nameb, 0); i >= 0 {
				nameb = nameb[:i]
			}
			off += reclen
			name := string(nameb)
			if name == "." || name == ".." {
				continue
			}
			out = append(out, dirent{name, typ})
		}
	}
}

// typeOf names the type of a stat.
func typeOf(st *unix.Stat_t) string {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return TypeFile
	case unix.S_IFDIR:
		return TypeDir
	case unix.S_IFLNK:
		return TypeSymlink
	case unix.S_IFIFO:
		return TypeFIFO
	case unix.S_IFSOCK:
		return TypeSocket
	case unix.S_IFCHR:
		return TypeChar
	case unix.S_IFBLK:
		return TypeBlock
	}
	return "unknown"
}

// isWhiteout: overlayfs marks a deleted lower entry with a character
// device 0/0 in the upper layer.
func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func nsec(ts unix.Timespec) int64 { return int64(ts.Sec)*1e9 + int64(ts.Nsec) }

// sameContent compares two open regular files of equal size, reading
// them into ba and bb (of equal length).
func sameContent(a, b *os.File, ba, bb []byte) (bool, error) {
	for {
		na, ea := io.ReadFull(a, ba)
		nb, eb := io.ReadFull(b, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if ea == io.EOF || ea == io.ErrUnexpectedEOF {
			return eb == io.EOF || eb == io.ErrUnexpectedEOF, nil
		}
		if ea != nil {
			return false, ea
		}
		if eb != nil {
			return false, eb
		}
	}
}

// removeTreeAt removes the entry name of fd and, when it is a directory,
// everything in it, by descriptor: a directory is opened with O_NOFOLLOW
// from its parent, so a link swapped in is removed as a link, never
// followed.
func removeTreeAt(fd int, name string) error {
	err := unix.Unlinkat(fd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	cfd, oerr := openDirAt(fd, name)
	if oerr != nil {
		if errors.Is(oerr, unix.EACCES) {
			// A directory its owner made unreadable: make it readable
			// again through a descriptor of its own, then go on.
			if perr := chmodDirAt(fd, name, 0o700); perr == nil {
				cfd, oerr = openDirAt(fd, name)
			}
		}
		if oerr != nil {
			return oerr
		}
	}
	ents, rerr := readDirFd(cfd)
	if rerr == nil {
		for _, e := range ents {
			if err := removeTreeAt(cfd, e.name); err != nil {
				rerr = err
				break
			}
		}
	}
	unix.Close(cfd)
	if rerr != nil {
		return rerr
	}
	if err := unix.Unlinkat(fd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// chmodDirAt sets the mode of the directory name of fd through an O_PATH
// descriptor of it (never through a link).
func chmodDirAt(fd int, name string, mode uint32) error {
	pfd, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(pfd), mode)
}

func newFile(fd int, name string) *os.File { return os.NewFile(uintptr(fd), name) }
