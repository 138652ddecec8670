//go:build linux || darwin

package wsfs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// openRoot opens the workspace itself; everything else is opened relative
// to this descriptor.
func (r *Root) openRoot(op, p string) (int, error) {
	if r.DirFile != nil {
		// A copy the operation closes as it closes any root.
		fd, err := unix.FcntlInt(r.DirFile.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return -1, &Error{Op: op, Path: p, Code: CodeNotFound, Reason: "the session's view cannot be opened", Err: err}
		}
		return fd, nil
	}
	fd, err := unix.Open(r.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &Error{Op: op, Path: p, Code: CodeNotFound, Reason: "the session's workspace cannot be opened", Err: err}
	}
	return fd, nil
}

// sysErr turns an errno of resolving or opening p into an *Error.
func sysErr(op, p string, err error) error {
	e := &Error{Op: op, Path: p, Err: err}
	switch {
	case errors.Is(err, unix.ENOENT):
		e.Code, e.Reason, e.Err = CodeNotFound, "no such file or directory in the session's workspace", nil
	case errors.Is(err, unix.ELOOP):
		e.Code, e.Reason = CodeLink, "the path goes through a link, which this operation does not follow (writes and removes never follow links; give the link's target path)"
	case errors.Is(err, unix.EXDEV):
		// openat2 RESOLVE_BENEATH: the resolution would have left the
		// workspace (an absolute link, or ".." above it).
		e.Code, e.Reason = CodeLink, "the path goes through a link that leads out of the session's workspace"
	case errors.Is(err, unix.ENOTDIR):
		e.Code, e.Reason = CodeNotDir, "a component of the path is not a directory"
	case errors.Is(err, unix.EISDIR):
		e.Code, e.Reason = CodeIsDir, "is a directory"
	case errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		e.Code, e.Reason = CodeNotEmpty, "the directory is not empty (remove it with recursive)"
	case errors.Is(err, unix.ENXIO), errors.Is(err, unix.ENODEV):
		e.Code, e.Reason = CodeNotRegular, "not a regular file"
	default:
		e.Code, e.Reason = "", "failed"
	}
	return e
}

// walk opens the directory comps names beneath dirfd, one component at a
// time with O_NOFOLLOW: no link is followed on the way, whatever is
// swapped in meanwhile (each step is relative to the descriptor of the
// step before, never to a path). With create, a missing directory is made
// (0o755) and then opened the same way. The caller closes the result.
func walk(op, p string, dirfd int, comps []string, create bool) (int, error) {
	fd, _, err := walkMade(op, p, dirfd, comps, create)
	return fd, err
}

// walkMade is walk that also says how many directories it made: always
// the last ones of comps (below a directory it made, every one is new).
func walkMade(op, p string, dirfd int, comps []string, create bool) (int, int, error) {
	made := 0
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, 0, sysErr(op, p, err)
	}
	for _, c := range comps {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && create {
			merr := unix.Mkdirat(fd, c, 0o755)
			if merr != nil && !errors.Is(merr, unix.EEXIST) {
				unix.Close(fd)
				return -1, made, sysErr(op, p, merr)
			}
			if merr == nil {
				made++
			}
			next, err = unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		if errors.Is(err, unix.ENOTDIR) {
			// O_DIRECTORY|O_NOFOLLOW on a link is ENOTDIR on Linux: say
			// it is a link when it is one.
			var st unix.Stat_t
			if unix.Fstatat(fd, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = unix.ELOOP
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, made, sysErr(op, p, err)
		}
		fd = next
	}
	return fd, made, nil
}

// unmake removes the last made directories of dirs (as walkMade made
// them), each only if still empty: a refused or failed write leaves
// nothing behind, the directories made for it included.
func unmake(root int, dirs []string, made int) {
	for i := len(dirs); i > len(dirs)-made && i > 0; i-- {
		pfd, err := walk("", "", root, dirs[:i-1], false)
		if err != nil {
			return
		}
		err = unix.Unlinkat(pfd, dirs[i-1], unix.AT_REMOVEDIR)
		unix.Close(pfd)
		if err != nil {
			return
		}
	}
}

func kindOf(mode uint32) Kind {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return KindFile
	case unix.S_IFDIR:
		return KindDir
	case unix.S_IFLNK:
		return KindLink
	}
	return KindOther
}

func infoOf(name string, st *unix.Stat_t) Info {
	sec, nsec := mtime(st)
	return Info{Name: name, Kind: kindOf(uint32(st.Mode)), Size: st.Size, Mode: uint32(st.Mode) & 0o7777,
		ModTime: time.Unix(sec, nsec).UTC()}
}

// Stat describes the entry at p, not following it when it is a link.
func (r *Root) Stat(ctx context.Context, p string) (Info, error) {
	comps, err := split("stat", p)
	if err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	root, err := r.openRoot("stat", p)
	if err != nil {
		return Info{}, err
	}
	defer unix.Close(root)
	st, err := lookupStat(root, comps)
	if err != nil {
		return Info{}, sysErr("stat", p, err)
	}
	in := infoOf(nameOf(comps), &st)
	if in.Kind == KindLink {
		in.Target = linkTarget(root, comps)
	}
	return in, nil
}

// linkTarget is the target of the link comps names, "" when it cannot be
// read (the entry is described without it).
func linkTarget(root int, comps []string) string {
	pfd, err := walk("stat", "", root, comps[:len(comps)-1], false)
	if err != nil {
		return ""
	}
	defer unix.Close(pfd)
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(pfd, comps[len(comps)-1], buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

// Open opens the regular file at p for reading; the caller closes it. A
// file above the size limit is refused before a byte is read; Read
// bounds the copy as well (a file growing meanwhile).
func (r *Root) Open(ctx context.Context, p string) (*os.File, Info, error) {
	comps, err := split("read", p)
	if err != nil {
		return nil, Info{}, err
	}
	if len(comps) == 0 {
		return nil, Info{}, &Error{Op: "read", Path: p, Code: CodeIsDir, Reason: "is the workspace directory (list it instead)"}
	}
	if err := ctx.Err(); err != nil {
		return nil, Info{}, err
	}
	root, err := r.openRoot("read", p)
	if err != nil {
		return nil, Info{}, err
	}
	defer unix.Close(root)
	fd, st, err := openRegular(root, comps)
	if err != nil {
		var fe *Error
		if errors.As(err, &fe) {
			fe.Op, fe.Path = "read", p
			return nil, Info{}, fe
		}
		return nil, Info{}, sysErr("read", p, err)
	}
	in := infoOf(nameOf(comps), &st)
	if in.Size > r.maxFile() {
		unix.Close(fd)
		return nil, Info{}, r.fileLimit(fmt.Sprintf("read %q: the file is %d bytes", p, in.Size))
	}
	return os.NewFile(uintptr(fd), path.Join(comps...)), in, nil
}

// checkRegular is the test every opened file passes: pre (the O_PATH or
// fstatat look) must be a regular file, and fd, opened after it, the same
// one. A FIFO, device or socket is refused before it is ever opened; a
// swap between the look and the open is refused after, with nothing read.
func checkRegular(pre *unix.Stat_t) error {
	switch kindOf(uint32(pre.Mode)) {
	case KindFile:
		return nil
	case KindDir:
		return &Error{Code: CodeIsDir, Reason: "is a directory (list it instead)"}
	case KindLink:
		return &Error{Code: CodeLink, Reason: "is a link, which reads do not follow on this platform"}
	}
	return &Error{Code: CodeNotRegular, Reason: "is not a regular file (a FIFO, device or socket is never opened)"}
}

func sameFile(fd int, pre *unix.Stat_t) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return st, err
	}
	if st.Dev != pre.Dev || st.Ino != pre.Ino || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, &Error{Code: CodeChanged, Reason: "the entry was replaced while it was being opened; nothing was read (try again)"}
	}
	return st, nil
}

// List describes the entries of the directory at p, sorted by name,
// without following links (a link is listed as a link).
func (r *Root) List(ctx context.Context, p string) ([]Info, error) {
	comps, err := split("list", p)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	root, err := r.openRoot("list", p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(root)
	fd, err := openDir(root, comps)
	if err != nil {
		return nil, sysErr("list", p, err)
	}
	d := os.NewFile(uintptr(fd), "dir")
	defer d.Close()
	max := r.maxList()
	names, err := d.Readdirnames(max + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, sysErr("list", p, err)
	}
	if len(names) > max {
		key := r.Limits.ListKey
		if key == "" {
			key = "serve.files_max_list_entries"
		}
		return nil, &core.LimitError{Limit: key, Value: int64(max), Reason: fmt.Sprintf("list %q: the directory has more than %d entries", p, max)}
	}
	sort.Strings(names)
	out := make([]Info, 0, len(names))
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // removed meanwhile
		}
		in := infoOf(n, &st)
		if in.Kind == KindLink {
			buf := make([]byte, 4096)
			if k, err := unix.Readlinkat(fd, n, buf); err == nil {
				in.Target = string(buf[:k])
			}
		}
		out = append(out, in)
	}
	return out, nil
}

// Write replaces (or creates) the regular file at p with what src holds,
// atomically: src goes to a temporary file in the same directory, renamed
// over p once complete. No link is followed: the directories on the way
// are opened with O_NOFOLLOW, and a link at p itself is replaced by the
// file (its target is untouched).
func (r *Root) Write(ctx context.Context, p string, src io.Reader, o WriteOptions) (Info, error) {
	comps, err := split("write", p)
	if err != nil {
		return Info{}, err
	}
	if len(comps) == 0 {
		return Info{}, &Error{Op: "write", Path: p, Code: CodeInvalid, Field: "path", Reason: "names the workspace itself: name a file in it"}
	}
	if o.Mode&^0o7777 != 0 {
		return Info{}, &Error{Op: "write", Path: p, Code: CodeInvalid, Field: "mode", Reason: fmt.Sprintf("%#o has bits beyond the permission bits (0o7777)", uint32(o.Mode))}
	}
	if o.Mode&(fs.FileMode(unix.S_ISUID)|fs.FileMode(unix.S_ISGID)) != 0 {
		return Info{}, &Error{Op: "write", Path: p, Code: CodeInvalid, Field: "mode", Reason: "set-user-id and set-group-id bits are refused"}
	}
	// Protected entries at any depth: creating .git/hooks/x, or a file
	// named .envrc, would plant code a host tool runs.
	if err := r.refuseProtected("write", p, comps); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	root, err := r.openRoot("write", p)
	if err != nil {
		return Info{}, err
	}
	defer unix.Close(root)
	dir, made, err := walkMade("write", p, root, comps[:len(comps)-1], o.Parents)
	if err != nil {
		unmake(root, comps[:len(comps)-1], made)
		return Info{}, err
	}
	defer unix.Close(dir)
	written := false
	defer func() {
		if !written {
			unmake(root, comps[:len(comps)-1], made)
		}
	}()
	name := comps[len(comps)-1]
	mode := uint32(o.Mode)
	var old unix.Stat_t
	switch err := unix.Fstatat(dir, name, &old, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && kindOf(uint32(old.Mode)) == KindDir:
		return Info{}, &Error{Op: "write", Path: p, Code: CodeIsDir, Reason: "is a directory"}
	case err == nil && mode == 0 && kindOf(uint32(old.Mode)) == KindFile:
		mode = uint32(old.Mode) & 0o777
	case err != nil && !errors.Is(err, unix.ENOENT):
		return Info{}, sysErr("write", p, err)
	}
	if mode == 0 {
		mode = 0o644
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := tempPrefix + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return Info{}, sysErr("write", p, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	done := false
	defer func() {
		if !done {
			f.Close()
			_ = unix.Unlinkat(dir, tmp, 0)
		}
	}()
	n, err := io.Copy(f, io.LimitReader(ctxReader{ctx, src}, r.maxFile()+1))
	if err != nil {
		if ctx.Err() != nil {
			return Info{}, ctx.Err()
		}
		return Info{}, &Error{Op: "write", Path: p, Reason: "writing failed", Err: err}
	}
	if n > r.maxFile() {
		return Info{}, r.fileLimit(fmt.Sprintf("write %q: the data is over the limit", p))
	}
	// The mode is set on the descriptor, after the umask applied to the
	// open's.
	if err := unix.Fchmod(fd, mode); err != nil {
		return Info{}, &Error{Op: "write", Path: p, Reason: "setting the mode failed", Err: err}
	}
	if err := f.Sync(); err != nil {
		return Info{}, &Error{Op: "write", Path: p, Reason: "writing failed", Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Info{}, &Error{Op: "write", Path: p, Reason: "writing failed", Err: err}
	}
	if err := unix.Renameat(dir, tmp, dir, name); err != nil {
		return Info{}, sysErr("write", p, err)
	}
	done, written = true, true
	f.Close()
	return infoOf(name, &st), nil
}

// Read copies the regular file at p to w.
func (r *Root) Read(ctx context.Context, p string, w io.Writer) (Info, error) {
	return r.readWith(ctx, p, w, r.Open)
}

// Remove removes the entry at p (a link itself, never its target). A
// directory is removed only when empty, or with Recursive; a recursive
// remove that would take a protected entry with it removes nothing.
func (r *Root) Remove(ctx context.Context, p string, o RemoveOptions) error {
	comps, err := split("remove", p)
	if err != nil {
		return err
	}
	if len(comps) == 0 {
		return &Error{Op: "remove", Path: p, Code: CodeInvalid, Field: "path", Reason: "names the workspace itself, which is removed with its session (Sessions forget)"}
	}
	if err := r.refuseProtected("remove", p, comps); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	root, err := r.openRoot("remove", p)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	dir, err := walk("remove", p, root, comps[:len(comps)-1], false)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	name := comps[len(comps)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return sysErr("remove", p, err)
	}
	if kindOf(uint32(st.Mode)) != KindDir {
		if err := unix.Unlinkat(dir, name, 0); err != nil {
			return sysErr("remove", p, err)
		}
		return nil
	}
	if !o.Recursive {
		if err := unix.Unlinkat(dir, name, unix.AT_REMOVEDIR); err != nil {
			return sysErr("remove", p, err)
		}
		return nil
	}
	// Look first, remove after: a protected entry anywhere below refuses
	// the whole remove, so nothing is half-removed by a refusal.
	if e, where, err := r.scanProtected(ctx, dir, name, path.Join(comps...), 0); err != nil {
		return sysErr("remove", p, err)
	} else if e != "" {
		return &Error{Op: "remove", Path: p, Code: CodeProtected, Entry: e,
			Reason: fmt.Sprintf("holds the protected entry %s (%s), which is never removed; nothing was removed", e, where)}
	}
	if err := removeAll(ctx, dir, name, 0); err != nil {
		return sysErr("remove", p, err)
	}
	return nil
}

// maxDepth bounds the recursion of a recursive remove.
const maxDepth = 256

// scanProtected looks for a protected entry below dir/name.
func (r *Root) scanProtected(ctx context.Context, dir int, name, rel string, depth int) (string, string, error) {
	if depth > maxDepth {
		return "", "", fmt.Errorf("deeper than %d directories", maxDepth)
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", "", err
	}
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return "", "", err
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return "", "", err
		}
		if e := r.protectedIn([]string{n}); e != "" {
			return e, path.Join(rel, n), nil
		}
		var st unix.Stat_t
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && kindOf(uint32(st.Mode)) == KindDir {
			if e, where, err := r.scanProtected(ctx, fd, n, path.Join(rel, n), depth+1); err != nil || e != "" {
				return e, where, err
			}
		}
	}
	return "", "", nil
}

// removeAll removes dir/name and everything below it, through
// descriptors (no link is followed; a link is removed as a link).
func removeAll(ctx context.Context, dir int, name string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("deeper than %d directories", maxDepth)
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	names, err := d.Readdirnames(-1)
	if err != nil {
		d.Close()
		return err
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			d.Close()
			return err
		}
		err := unix.Unlinkat(fd, n, 0)
		if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
			var st unix.Stat_t
			if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && kindOf(uint32(st.Mode)) == KindDir {
				err = removeAll(ctx, fd, n, depth+1)
			}
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			d.Close()
			return err
		}
	}
	d.Close()
	return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
}
