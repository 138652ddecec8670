//go:build unix

package core

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// removeTree removes dir and everything below it without ever following a
// symbolic link or naming a path below dir: every directory is opened
// relative to its parent's descriptor with O_NOFOLLOW, made writable
// through that descriptor (fchmod) when its owner left it read-only (Go's
// module cache does), and its entries are unlinked relative to it. A
// process still writing in the tree (a command of the session) can swap a
// directory for a link at any moment: an open by name then fails
// (ELOOP/ENOTDIR) instead of reaching the link's target, and a chmod or
// unlink through a descriptor acts on the directory that was opened,
// never on what a name leads to now. Such a race can make the removal
// fail, never act outside dir. The last component of dir is not followed
// either; the directories above it are the sandbox's own.
func removeTree(dir string) error {
	parent, name := filepath.Dir(dir), filepath.Base(dir)
	pfd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "open", Path: parent, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unlinkEntry(pfd, name, dir)
	}
	// An entry made while the tree was being emptied leaves the last
	// rmdir ENOTEMPTY: the tree is emptied again, a few times, before the
	// removal gives up and names what it found there. Seen under load on a
	// deleted session's workspace right after its process was killed: the
	// driver was still removing that command's placeholders. The bubblewrap
	// driver's ForgetSession now waits for that; another driver may not.
	for try := 1; ; try++ {
		if err := removeChildren(pfd, name, dir, 0); err != nil {
			return err
		}
		err := unlinkEntry(pfd, name, dir)
		if err == nil || !errors.Is(err, unix.ENOTEMPTY) {
			return err
		}
		if try == maxRemoveTries {
			return fmt.Errorf("%w (still there after %d tries: %s)", err, try, entryNames(dir, 5))
		}
		time.Sleep(time.Duration(try) * 10 * time.Millisecond)
	}
}

// maxRemoveTries bounds removeTree's passes over a tree that fills again.
const maxRemoveTries = 4

// entryNames lists up to max names in dir, for an error message only.
func entryNames(dir string, max int) string {
	f, err := os.Open(dir)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	names, _ := f.Readdirnames(max)
	return strings.Join(names, ", ")
}

// maxRemoveDepth bounds the recursion (one descriptor per level).
const maxRemoveDepth = 4096

// removeChildren empties the directory name of pfd (shown as p).
func removeChildren(pfd int, name, p string, depth int) error {
	if depth > maxRemoveDepth {
		return &os.PathError{Op: "remove", Path: p, Err: errors.New("nested deeper than the removal follows")}
	}
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK
	fd, err := unix.Openat(pfd, name, flags, 0)
	if errors.Is(err, unix.EACCES) {
		// Unreadable to its owner: make it readable through an O_PATH
		// descriptor of the directory itself (its /proc link names the
		// inode opened, not a path).
		if perr := chmodNoFollow(pfd, name, 0o700); perr == nil {
			fd, err = unix.Openat(pfd, name, flags, 0)
		}
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	// Entries can be removed only from a writable directory.
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&0o700 != 0o700 {
		_ = unix.Fchmod(fd, uint32(st.Mode&0o7777)|0o700)
	}
	dfd, err := unix.Dup(fd)
	if err != nil {
		return &os.PathError{Op: "dup", Path: p, Err: err}
	}
	unix.CloseOnExec(dfd)
	f := os.NewFile(uintptr(dfd), p)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return &os.PathError{Op: "readdir", Path: p, Err: err}
	}
	var errs []error
	for _, n := range names {
		cp := filepath.Join(p, n)
		var cst unix.Stat_t
		if err := unix.Fstatat(fd, n, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				errs = append(errs, &os.PathError{Op: "lstat", Path: cp, Err: err})
			}
			continue
		}
		if cst.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := removeChildren(fd, n, cp, depth+1); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := unlinkEntry(fd, n, cp); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unlinkEntry removes the entry name of fd, a directory (already emptied)
// or not, whichever it is now.
func unlinkEntry(fd int, name, p string) error {
	err := unix.Unlinkat(fd, name, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		err = unix.Unlinkat(fd, name, unix.AT_REMOVEDIR)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "remove", Path: p, Err: err}
	}
	return nil
}
