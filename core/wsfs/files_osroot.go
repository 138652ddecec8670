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
	"strings"
	"syscall"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// osRoot is the files API on os.Root, for the platforms without the
// descriptor code of files_unix.go (Windows first). It has no build tag:
// Linux compiles it and runs wsfs's tests against it too, so its logic is
// tested where the Unix one is.
//
// What os.Root guarantees, on every platform (its documentation and
// source): every component is opened relative to the handle of its
// parent, never by a path string; a link is followed only while it stays
// beneath the root (an absolute link, or ".." above the root, is "path
// escapes from parent"), at most 8 in a row; on Windows it opens with
// NtCreateFile relative to a directory handle and OBJ_DONT_REPARSE, reads
// a reparse point itself and follows symbolic links and junctions under
// the same rule (a junction's target is absolute, so it never is), and it
// cleans the path with GetFullPathNameW first, refusing a device name,
// a ':' and a '?'. What it does not do, and this file does:
//   - follow no link at all on a write or a remove: os.Root follows links
//     that stay inside, which could lead a write into a protected entry
//     through a link to it; walk opens each directory with an os.Root of
//     its own after an Lstat that must show a real directory, the same one
//     (os.SameFile) the new handle then holds;
//   - open nothing but a regular file: os.Root opens FIFOs and devices
//     (Unix) and runs reparse points' filters (Windows); Open looks first
//     and compares after, as files_unix.go does;
//   - refuse Windows names that Windows reads as another name (a trailing
//     dot or space, an 8.3 short name: winnames.go), which os.Root
//     passes on.
type osRoot struct {
	r *Root
	// windows applies Windows' rules: its names (winnames.go), and a
	// read-only file replaced by a write (a rename over one is refused
	// there, not on Unix). Set on Windows, and by tests elsewhere.
	windows bool
}

// rel is comps as a path os.Root takes ("." for the workspace itself).
func rel(comps []string) string {
	if len(comps) == 0 {
		return "."
	}
	return strings.Join(comps, "/")
}

func (o osRoot) open(op, p string) (*os.Root, error) {
	if o.r.DirFile != nil {
		// A layered session's view is an overlay reached by descriptor,
		// which exists on Linux only (files_unix.go).
		return nil, &Error{Op: op, Path: p, Code: CodeUnsupported, Reason: "a layered session's view is reached on Linux only"}
	}
	root, err := os.OpenRoot(o.r.Dir)
	if err != nil {
		return nil, &Error{Op: op, Path: p, Code: CodeNotFound, Reason: "the session's workspace cannot be opened", Err: err}
	}
	return root, nil
}

// check is the path checks every operation starts with.
func (o osRoot) check(op, p string, mutating bool) ([]string, error) {
	comps, err := split(op, p)
	if err != nil {
		return nil, err
	}
	if o.windows {
		if err := checkWinNames(op, p, comps, mutating); err != nil {
			return nil, err
		}
	}
	return comps, nil
}

// errEscapes is os.Root's word for a path that would leave the root; the
// error itself is not exported (TestSymlinkOut fails if it changes).
const errEscapes = "path escapes from parent"

// osErr turns an error of os.Root for p into an *Error.
func osErr(op, p string, err error) error {
	e := &Error{Op: op, Path: p, Err: err}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e.Code, e.Reason, e.Err = CodeNotFound, "no such file or directory in the session's workspace", nil
	case err != nil && strings.Contains(err.Error(), errEscapes):
		e.Code, e.Reason = CodeLink, "the path goes through a link that leads out of the session's workspace"
	case errors.Is(err, syscall.ELOOP):
		e.Code, e.Reason = CodeLink, "the path goes through too many links"
	case errors.Is(err, syscall.ENOTDIR):
		e.Code, e.Reason = CodeNotDir, "a component of the path is not a directory"
	case errors.Is(err, syscall.EISDIR):
		e.Code, e.Reason = CodeIsDir, "is a directory"
	case dirNotEmpty(err):
		e.Code, e.Reason = CodeNotEmpty, "the directory is not empty (remove it with recursive)"
	case errors.Is(err, syscall.ENXIO), errors.Is(err, syscall.ENODEV):
		e.Code, e.Reason = CodeNotRegular, "not a regular file"
	default:
		e.Code, e.Reason = "", "failed"
	}
	return e
}

// kindOfMode is the Kind of an entry os.Lstat described. A Windows
// reparse point other than a symbolic link (a junction, a placeholder) is
// KindOther: it is never opened nor walked through.
func kindOfMode(fi fs.FileInfo) Kind {
	m := fi.Mode()
	switch {
	case m&fs.ModeSymlink != 0:
		return KindLink
	case reparsePoint(fi):
		return KindOther
	case m.IsDir():
		return KindDir
	case m.IsRegular():
		return KindFile
	}
	return KindOther
}

// permBits is fi's mode as Unix bits (0o7777). On Windows only the write
// bit is real (the read-only attribute): 0o666 or 0o444, 0o777 for a
// directory.
func permBits(m fs.FileMode) uint32 {
	b := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

// fileMode is Unix bits (0o7777) as an fs.FileMode.
func fileMode(b uint32) fs.FileMode {
	m := fs.FileMode(b & 0o777)
	if b&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if b&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if b&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func infoOfFI(name string, fi fs.FileInfo) Info {
	return Info{Name: name, Kind: kindOfMode(fi), Size: fi.Size(), Mode: permBits(fi.Mode()), ModTime: fi.ModTime().UTC()}
}

// Stat describes the entry at p, not following it when it is a link (the
// directories on the way may be links that stay inside).
func (o osRoot) Stat(ctx context.Context, p string) (Info, error) {
	comps, err := o.check("stat", p, false)
	if err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	root, err := o.open("stat", p)
	if err != nil {
		return Info{}, err
	}
	defer root.Close()
	fi, err := root.Lstat(rel(comps))
	if err != nil {
		return Info{}, osErr("stat", p, err)
	}
	in := infoOfFI(nameOf(comps), fi)
	if in.Kind == KindLink {
		in.Target, _ = root.Readlink(rel(comps))
	}
	return in, nil
}

// Open opens the regular file at p for reading; the caller closes it.
// Links that stay inside are followed (os.Root); the entry is looked at
// first (Stat) and opened only when it is a regular file, which the open
// handle must then be (os.SameFile: device and inode, or volume and file
// index on Windows).
func (o osRoot) Open(ctx context.Context, p string) (*os.File, Info, error) {
	comps, err := o.check("read", p, false)
	if err != nil {
		return nil, Info{}, err
	}
	if len(comps) == 0 {
		return nil, Info{}, &Error{Op: "read", Path: p, Code: CodeIsDir, Reason: "is the workspace directory (list it instead)"}
	}
	if err := ctx.Err(); err != nil {
		return nil, Info{}, err
	}
	root, err := o.open("read", p)
	if err != nil {
		return nil, Info{}, err
	}
	defer root.Close()
	pre, err := root.Stat(rel(comps))
	if err != nil {
		return nil, Info{}, osErr("read", p, err)
	}
	switch kindOfMode(pre) {
	case KindFile:
	case KindDir:
		return nil, Info{}, &Error{Op: "read", Path: p, Code: CodeIsDir, Reason: "is a directory (list it instead)"}
	default:
		return nil, Info{}, &Error{Op: "read", Path: p, Code: CodeNotRegular, Reason: "is not a regular file (a FIFO, device, socket or reparse point is never opened)"}
	}
	f, err := root.OpenFile(rel(comps), os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, Info{}, osErr("read", p, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, Info{}, &Error{Op: "read", Path: p, Reason: "reading failed", Err: err}
	}
	if kindOfMode(st) != KindFile || !os.SameFile(pre, st) {
		f.Close()
		return nil, Info{}, &Error{Op: "read", Path: p, Code: CodeChanged, Reason: "the entry was replaced while it was being opened; nothing was read (try again)"}
	}
	in := infoOfFI(nameOf(comps), st)
	if in.Size > o.r.maxFile() {
		f.Close()
		return nil, Info{}, o.r.fileLimit(fmt.Sprintf("read %q: the file is %d bytes", p, in.Size))
	}
	return f, in, nil
}

// Read copies the regular file at p to w.
func (o osRoot) Read(ctx context.Context, p string, w io.Writer) (Info, error) {
	return o.r.readWith(ctx, p, w, o.Open)
}

// List describes the entries of the directory at p, sorted by name,
// without following links (a link is listed as a link). The directory
// itself may be reached through links that stay inside.
func (o osRoot) List(ctx context.Context, p string) ([]Info, error) {
	comps, err := o.check("list", p, false)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	root, err := o.open("list", p)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	// Looked at first: a Windows reparse point other than a link (a
	// placeholder directory) is not opened. OpenRoot then opens a
	// directory only (O_DIRECTORY, FILE_DIRECTORY_FILE), so a FIFO is not
	// opened either, and it must be the directory looked at.
	pre, err := root.Stat(rel(comps))
	if err != nil {
		return nil, osErr("list", p, err)
	}
	switch kindOfMode(pre) {
	case KindDir:
	case KindOther:
		if reparsePoint(pre) {
			return nil, &Error{Op: "list", Path: p, Code: CodeNotRegular, Reason: "is a reparse point, which is never opened"}
		}
		return nil, &Error{Op: "list", Path: p, Code: CodeNotDir, Reason: "is not a directory"}
	default:
		return nil, &Error{Op: "list", Path: p, Code: CodeNotDir, Reason: "is not a directory"}
	}
	dr, err := root.OpenRoot(rel(comps))
	if err != nil {
		return nil, osErr("list", p, err)
	}
	defer dr.Close()
	if st, err := dr.Stat("."); err != nil || !os.SameFile(pre, st) {
		return nil, &Error{Op: "list", Path: p, Code: CodeChanged, Reason: "the directory was replaced while it was being opened; nothing was listed (try again)"}
	}
	d, err := dr.Open(".")
	if err != nil {
		return nil, osErr("list", p, err)
	}
	max := o.r.maxList()
	names, err := d.Readdirnames(max + 1)
	d.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, osErr("list", p, err)
	}
	if len(names) > max {
		key := o.r.Limits.ListKey
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
		fi, err := dr.Lstat(n)
		if err != nil {
			continue // removed meanwhile
		}
		in := infoOfFI(n, fi)
		if in.Kind == KindLink {
			in.Target, _ = dr.Readlink(n)
		}
		out = append(out, in)
	}
	return out, nil
}

// walk opens the directory comps names, one component at a time, each
// with an os.Root of its own, following no link: a component must be a
// real directory by Lstat, and the handle then opened the same directory
// (a link swapped in between is refused as changed). With create a
// missing directory is made (0o755). made is how many were (always the
// last of comps). The caller closes the result.
func (o osRoot) walk(op, p string, root *os.Root, comps []string, create bool) (*os.Root, int, error) {
	made := 0
	cur, err := root.OpenRoot(".")
	if err != nil {
		return nil, 0, osErr(op, p, err)
	}
	for _, c := range comps {
		next, mk, err := o.step(op, p, cur, c, create)
		made += mk
		cur.Close()
		if err != nil {
			return nil, made, err
		}
		cur = next
	}
	return cur, made, nil
}

// step opens the directory c of dir, following no link (see walk).
func (o osRoot) step(op, p string, dir *os.Root, c string, create bool) (*os.Root, int, error) {
	made := 0
	fi, err := dir.Lstat(c)
	if errors.Is(err, fs.ErrNotExist) && create {
		merr := dir.Mkdir(c, 0o755)
		if merr != nil && !errors.Is(merr, fs.ErrExist) {
			return nil, 0, osErr(op, p, merr)
		}
		if merr == nil {
			made++
		}
		fi, err = dir.Lstat(c)
	}
	if err != nil {
		return nil, made, osErr(op, p, err)
	}
	switch kindOfMode(fi) {
	case KindDir:
	case KindLink:
		return nil, made, &Error{Op: op, Path: p, Code: CodeLink, Reason: "the path goes through a link, which this operation does not follow (writes and removes never follow links; give the link's target path)"}
	case KindOther:
		if fi.IsDir() || reparsePoint(fi) {
			return nil, made, &Error{Op: op, Path: p, Code: CodeLink, Reason: "the path goes through a reparse point (a junction, a placeholder), which this operation does not follow"}
		}
		return nil, made, &Error{Op: op, Path: p, Code: CodeNotDir, Reason: "a component of the path is not a directory"}
	default:
		return nil, made, &Error{Op: op, Path: p, Code: CodeNotDir, Reason: "a component of the path is not a directory"}
	}
	next, err := dir.OpenRoot(c)
	if err != nil {
		return nil, made, osErr(op, p, err)
	}
	st, err := next.Stat(".")
	if err != nil || !os.SameFile(fi, st) {
		next.Close()
		return nil, made, &Error{Op: op, Path: p, Code: CodeChanged, Reason: "a directory on the path was replaced while it was being opened; nothing was written or removed (try again)"}
	}
	return next, made, nil
}

// unmake removes the last made directories of dirs (as walk made them),
// each only if still empty, through walk: a refused or failed write
// leaves nothing behind.
func (o osRoot) unmake(root *os.Root, dirs []string, made int) {
	for i := len(dirs); i > len(dirs)-made && i > 0; i-- {
		parent, _, err := o.walk("", "", root, dirs[:i-1], false)
		if err != nil {
			return
		}
		err = parent.Remove(dirs[i-1])
		parent.Close()
		if err != nil {
			return
		}
	}
}

// Write replaces (or creates) the regular file at p with what src holds,
// atomically: src goes to a temporary file in the same directory, renamed
// over p once complete. No link is followed (walk); a link at p itself is
// replaced by the file (a rename replaces the entry, never its target).
func (o osRoot) Write(ctx context.Context, p string, src io.Reader, opt WriteOptions) (Info, error) {
	comps, err := o.check("write", p, true)
	if err != nil {
		return Info{}, err
	}
	if len(comps) == 0 {
		return Info{}, &Error{Op: "write", Path: p, Code: CodeInvalid, Field: "path", Reason: "names the workspace itself: name a file in it"}
	}
	if opt.Mode&^0o7777 != 0 {
		return Info{}, &Error{Op: "write", Path: p, Code: CodeInvalid, Field: "mode", Reason: fmt.Sprintf("%#o has bits beyond the permission bits (0o7777)", uint32(opt.Mode))}
	}
	if opt.Mode&0o6000 != 0 {
		return Info{}, &Error{Op: "write", Path: p, Code: CodeInvalid, Field: "mode", Reason: "set-user-id and set-group-id bits are refused"}
	}
	if err := o.r.refuseProtected("write", p, comps); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	root, err := o.open("write", p)
	if err != nil {
		return Info{}, err
	}
	defer root.Close()
	dirs := comps[:len(comps)-1]
	dir, made, err := o.walk("write", p, root, dirs, opt.Parents)
	if err != nil {
		o.unmake(root, dirs, made)
		return Info{}, err
	}
	defer dir.Close()
	written := false
	defer func() {
		if !written {
			o.unmake(root, dirs, made)
		}
	}()
	name := comps[len(comps)-1]
	mode := uint32(opt.Mode)
	readOnly := false
	switch old, err := dir.Lstat(name); {
	case err == nil && kindOfMode(old) == KindDir:
		return Info{}, &Error{Op: "write", Path: p, Code: CodeIsDir, Reason: "is a directory"}
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return Info{}, osErr("write", p, err)
	case err == nil && kindOfMode(old) == KindFile:
		if mode == 0 {
			mode = permBits(old.Mode()) & 0o777
		}
		readOnly = old.Mode().Perm()&0o200 == 0
	}
	if mode == 0 {
		mode = 0o644
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := tempPrefix + hex.EncodeToString(rnd[:])
	// O_EXCL creates the entry, never opens one there (os.Root adds
	// O_NOFOLLOW, FILE_OPEN_REPARSE_POINT on Windows).
	f, err := dir.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return Info{}, osErr("write", p, err)
	}
	closed, renamed := false, false
	defer func() {
		if !closed {
			f.Close()
		}
		if !renamed {
			_ = dir.Remove(tmp)
		}
	}()
	n, err := io.Copy(f, io.LimitReader(ctxReader{ctx, src}, o.r.maxFile()+1))
	if err != nil {
		if ctx.Err() != nil {
			return Info{}, ctx.Err()
		}
		return Info{}, &Error{Op: "write", Path: p, Reason: "writing failed", Err: err}
	}
	if n > o.r.maxFile() {
		return Info{}, o.r.fileLimit(fmt.Sprintf("write %q: the data is over the limit", p))
	}
	// On the handle, after the umask applied to the create's mode. On
	// Windows only the write bit has a meaning (the read-only attribute).
	if err := f.Chmod(fileMode(mode)); err != nil {
		return Info{}, &Error{Op: "write", Path: p, Reason: "setting the mode failed", Err: err}
	}
	if err := f.Sync(); err != nil {
		return Info{}, &Error{Op: "write", Path: p, Reason: "writing failed", Err: err}
	}
	st, err := f.Stat()
	if err != nil {
		return Info{}, &Error{Op: "write", Path: p, Reason: "writing failed", Err: err}
	}
	// Closed before the rename: Windows renames an open file only when
	// every handle shares delete access, so the portable order is close
	// first.
	closed = true
	if err := f.Close(); err != nil {
		return Info{}, &Error{Op: "write", Path: p, Reason: "writing failed", Err: err}
	}
	if readOnly && o.windows {
		// Windows refuses to rename over a file with the read-only
		// attribute, which Unix replaces like any other: the attribute is
		// cleared on the entry itself (Root.Chmod opens it with
		// FILE_OPEN_REPARSE_POINT, no link followed; it was a regular file
		// by Lstat just before) and set again if the rename fails.
		if err := dir.Chmod(name, 0o666); err != nil {
			return Info{}, osErr("write", p, err)
		}
	}
	if err := dir.Rename(tmp, name); err != nil {
		if readOnly && o.windows {
			_ = dir.Chmod(name, 0o444)
		}
		return Info{}, osErr("write", p, err)
	}
	renamed, written = true, true
	return infoOfFI(name, st), nil
}

// Remove removes the entry at p (a link itself, never its target). A
// directory is removed only when empty, or with Recursive; a recursive
// remove that would take a protected entry with it removes nothing.
func (o osRoot) Remove(ctx context.Context, p string, opt RemoveOptions) error {
	comps, err := o.check("remove", p, true)
	if err != nil {
		return err
	}
	if len(comps) == 0 {
		return &Error{Op: "remove", Path: p, Code: CodeInvalid, Field: "path", Reason: "names the workspace itself, which is removed with its session (Sessions forget)"}
	}
	if err := o.r.refuseProtected("remove", p, comps); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	root, err := o.open("remove", p)
	if err != nil {
		return err
	}
	defer root.Close()
	dir, _, err := o.walk("remove", p, root, comps[:len(comps)-1], false)
	if err != nil {
		return err
	}
	defer dir.Close()
	name := comps[len(comps)-1]
	fi, err := dir.Lstat(name)
	if err != nil {
		return osErr("remove", p, err)
	}
	// Root.Remove and Root.RemoveAll act on the last component itself:
	// a link (or a Windows reparse point) is removed, not its target.
	if kindOfMode(fi) != KindDir || !opt.Recursive {
		if err := dir.Remove(name); err != nil {
			return osErr("remove", p, err)
		}
		return nil
	}
	// Look first, remove after: a protected entry anywhere below refuses
	// the whole remove, so nothing is half-removed by a refusal.
	if e, where, err := o.scanProtected(ctx, dir, name, path.Join(comps...), 0); err != nil {
		var fe *Error
		if errors.As(err, &fe) {
			fe.Op, fe.Path = "remove", p
			return fe
		}
		return osErr("remove", p, err)
	} else if e != "" {
		return &Error{Op: "remove", Path: p, Code: CodeProtected, Entry: e,
			Reason: fmt.Sprintf("holds the protected entry %s (%s), which is never removed; nothing was removed", e, where)}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := dir.RemoveAll(name); err != nil {
		return osErr("remove", p, err)
	}
	return nil
}

// scanProtected looks for a protected entry below dir/name, descending
// into real directories only (step: no link is followed).
func (o osRoot) scanProtected(ctx context.Context, dir *os.Root, name, relp string, depth int) (string, string, error) {
	if depth > maxScanDepth {
		return "", "", fmt.Errorf("deeper than %d directories", maxScanDepth)
	}
	sub, _, err := o.step("remove", "", dir, name, false)
	if err != nil {
		return "", "", err
	}
	defer sub.Close()
	d, err := sub.Open(".")
	if err != nil {
		return "", "", err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return "", "", err
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return "", "", err
		}
		if e := o.r.protectedIn([]string{n}); e != "" {
			return e, path.Join(relp, n), nil
		}
		if fi, err := sub.Lstat(n); err == nil && kindOfMode(fi) == KindDir {
			if e, where, err := o.scanProtected(ctx, sub, n, path.Join(relp, n), depth+1); err != nil || e != "" {
				return e, where, err
			}
		}
	}
	return "", "", nil
}

// maxScanDepth bounds the recursion of a recursive remove's scan.
const maxScanDepth = 256
