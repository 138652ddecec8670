//go:build linux

package bwrap

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// statWalk calls fn with the lstat of root and, when root itself (not
// followed) is a directory, of everything below it: pre-order, each
// directory's names sorted, the paths filepath.Join makes. That is
// filepath.WalkDir's order and its paths, so a fingerprint made from it is
// the one WalkDir and a Lstat per path made.
//
// Why not WalkDir: the /etc views' fingerprints (the host's read set and
// the view's own copy, about 700 entries each) are taken at every driver
// start, and a one-shot command starts a driver. A Lstat per path makes
// the kernel resolve every component of a deep path again (the view's
// entries sit eight directories down the state directory) and WalkDir's
// DirEntry values are thrown away. Here each entry is looked at relative
// to its directory's descriptor (fstatat), and a subdirectory is opened
// from that descriptor with O_NOFOLLOW: nothing is resolved twice, and no
// symbolic link swapped in between the stat and the open is followed
// (the open then fails, and the fingerprint with it, as a vanished entry
// does: the callers bind the entries one by one on any error).
func statWalk(root string, fn func(p string, st *unix.Stat_t)) error {
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: root, Err: err}
	}
	fn(root, &st)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: root, Err: err}
	}
	return statWalkDir(fd, root, fn)
}

// statWalkDir walks the directory open as fd (named dir), and closes fd.
func statWalkDir(fd int, dir string, fn func(p string, st *unix.Stat_t)) error {
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		p := filepath.Join(dir, name)
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		fn(p, &st)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: p, Err: err}
		}
		if err := statWalkDir(sub, p, fn); err != nil {
			return err
		}
	}
	return nil
}
