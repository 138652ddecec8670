//go:build linux

package bwrap

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The /etc view: one read-only bind instead of one per /etc entry.
//
// Why: every mount bwrap makes costs a few hundred microseconds here (the
// kernel's, not bwrap's: a read-write bind costs the same as a read-only
// one), and the system read set's /etc part is about twenty of them, the
// largest group of mounts in a sandbox. The view is a directory holding a
// copy of exactly the /etc entries of the plan's system read set (files
// with their content, mode and, for a root driver, owner; directories with
// their entries, symlinks inside them as symlinks; a top-level symlink is
// followed, as the bind of it was), bound read-only at /etc. Inside, /etc
// shows the same names with the same content as the binds did, and nothing
// else (shadow, sudoers, keys stay out: they are never copied).
//
// Freshness: before every command the driver stats the host's entries (each
// file, and every entry below each directory) and compares a fingerprint of
// what it finds (inode, size, mode, owner, mtime and ctime) with the view's;
// a change makes a new view. What a command sees is /etc as it was when the
// command started; a change made while it runs shows in the next command
// (the binds showed it at once).
//
// Views are named by their fingerprint and shared by every driver process of
// the user (the state directory is private to it). A driver holds a shared
// flock on the view it uses now (the current one) and on each older view a
// sandbox of its still binds: every sandbox (a command's, or a prepared one
// waiting in the pool, which keeps its view bound after the command that
// built it) takes a reference on its view and drops it when it has ended,
// and a view that is no longer the current one is released (its lock
// closed, its directory removed unless another driver holds it) when its
// last reference goes. So a driver holds 1 view plus those its running and
// pooled sandboxes bind, however often /etc changes. A view nobody holds
// is removed at the next driver start and by the janitor once its driver is
// gone, except the one used last, which the next driver (a one-shot
// command's, say) takes up instead of copying /etc again (lastUsedView). The view is not used (the per-entry binds are) when a grant or the
// workspace lies under /etc (their mount points would have to be made in the
// read-only view) or when a writable grant or the workspace holds the state
// directory (a sandbox could then change what later sandboxes see as /etc).

// etcViews is one driver's use of the views.
type etcViews struct {
	mu      sync.Mutex
	fp      string    // fingerprint of the view in use
	dir     string    // its directory (the one bound at /etc)
	shallow string    // the entries' own fingerprint when fp was checked
	checked time.Time // when fp was last checked
	failed  string    // a fingerprint whose view could not be made
	viewFP  string    // the view's own fingerprint when its content was checked
	// held are the views this driver holds a lock on, by directory: the
	// current one (dir) and older ones sandboxes still bind.
	held map[string]*heldEtcView
}

// heldEtcView is one view this driver holds: its lock and the sandboxes
// binding it.
type heldEtcView struct {
	root, name string // the view is root/name (its directory is root/name/etc)
	lock       *os.File
	refs       int
}

// hold takes a reference on the view at dir (v.mu held); the returned
// release drops it, once, and releases the view when it was the last
// reference to a view that is no longer the current one.
func (v *etcViews) hold(dir string) func() {
	h := v.held[dir]
	if h == nil {
		return func() {}
	}
	h.refs++
	var once sync.Once
	return func() {
		once.Do(func() {
			v.mu.Lock()
			defer v.mu.Unlock()
			h.refs--
			v.releaseUnused(dir)
		})
	}
}

// releaseUnused lets go of the view at dir when it is neither the current
// view nor bound by any sandbox of this driver (v.mu held).
func (v *etcViews) releaseUnused(dir string) {
	h := v.held[dir]
	if h == nil || h.refs > 0 || dir == v.dir {
		return
	}
	delete(v.held, dir)
	h.lock.Close()
	// Removed unless another driver holds it (or is the one to keep for
	// the next driver: not this one, which is not current any more).
	removeEtcView(h.root, h.name)
}

// setCurrent makes dir (locked by lock) the current view and releases
// the previous one if no sandbox binds it (v.mu held). dir "" leaves no
// current view.
func (v *etcViews) setCurrent(root, dir string, lock *os.File) {
	old := v.dir
	v.dir = dir
	if dir != "" && lock != nil {
		if v.held == nil {
			v.held = map[string]*heldEtcView{}
		}
		if h := v.held[dir]; h != nil {
			// Taken up again while a sandbox still binds it: one lock is
			// enough.
			lock.Close()
		} else {
			v.held[dir] = &heldEtcView{root: root, name: filepath.Base(filepath.Dir(dir)), lock: lock}
		}
	}
	if old != "" && old != dir {
		v.releaseUnused(old)
	}
}

// heldCount is how many views this driver holds (the tests read it).
func (v *etcViews) heldCount() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.held)
}

// etcDeepEvery is how often the entries below the listed directories are
// looked at again (a walk of a few hundred entries): the listed entries
// themselves, and so a directory's own change (an entry added, removed or
// renamed into it, as package tools do), are looked at before every command.
const etcDeepEvery = 2 * time.Second

// etcViewRoot is where the views live.
func (d *Driver) etcViewRoot() string { return filepath.Join(d.cfg.StateDir, "etc-views") }

// etcEntries are the /etc entries of p's system read set.
func (p launchPlan) etcEntries() []string {
	var out []string
	for _, m := range p.System {
		if m.Kind == mountROBind && driverapi.PathWithin(m.Dest, "/etc") {
			out = append(out, m.Dest)
		}
	}
	return out
}

// etcViewFor returns the view to bind at /etc for plan p, or "" when p's
// /etc entries are to be bound one by one (see above; also on any failure,
// which is logged: the binds are the fallback, never a weaker sandbox). It
// takes no reference: a sandbox binds the view of useEtcView.
func (d *Driver) etcViewFor(p launchPlan) string {
	dir, _ := d.etcView(p, false)
	return dir
}

// useEtcView is etcViewFor for a sandbox that binds the view: the view
// stays held until release is called, once the sandbox has ended.
func (d *Driver) useEtcView(p launchPlan) (dir string, release func()) {
	return d.etcView(p, true)
}

func (d *Driver) etcView(p launchPlan, hold bool) (string, func()) {
	none := func() {}
	entries := p.etcEntries()
	if len(entries) == 0 || d.cfg.legacySetup {
		return "", none
	}
	if d.etcEntriesHook != nil {
		entries = d.etcEntriesHook()
	}
	root := d.etcViewRoot()
	for _, g := range append(append([]string{p.Workspace}, p.FSRead...), p.writable()...) {
		if driverapi.PathWithin(g, "/etc") {
			return "", none
		}
	}
	for _, g := range append([]string{p.Workspace}, p.writable()...) {
		if driverapi.PathWithin(root, g) || driverapi.PathWithin(g, root) {
			return "", none
		}
	}
	d.etc.mu.Lock()
	defer d.etc.mu.Unlock()
	dir := d.etcViewLocked(root, entries)
	if !hold || dir == "" {
		return dir, none
	}
	return dir, d.etc.hold(dir)
}

// etcViewOf is the view of entries under root, made or taken up (the
// checks of the plan are etcViewFor's), without a reference.
func (d *Driver) etcViewOf(root string, entries []string) string {
	d.etc.mu.Lock()
	defer d.etc.mu.Unlock()
	return d.etcViewLocked(root, entries)
}

// etcViewLocked is etcViewOf with d.etc.mu held.
func (d *Driver) etcViewLocked(root string, entries []string) string {
	shallow, err := etcFingerprint(entries, false)
	if err != nil {
		d.log.Debug("etc view: host entries changing; binding them one by one", "error", err)
		return ""
	}
	v := &d.etc
	if v.dir != "" && v.shallow == shallow && time.Since(v.checked) < etcDeepEvery {
		return v.dir
	}
	fp, err := etcFingerprint(entries, true)
	if err != nil {
		d.log.Debug("etc view: host entries changing; binding them one by one", "error", err)
		return ""
	}
	if v.fp == fp && v.dir != "" {
		// The view itself, too (etcverify_linux.go).
		if now, err := viewFingerprint(v.dir); err != nil || now != v.viewFP {
			d.log.Warn("etc view changed since it was checked; binding the entries one by one", "view", v.dir, "error", err)
			v.failed = fp
			v.setCurrent(root, "", nil)
			return ""
		}
		v.shallow, v.checked = shallow, time.Now()
		return v.dir
	}
	if fp == v.failed {
		// Not tried again until the host's entries change.
		return ""
	}
	dir, lock, err := acquireEtcView(root, fp, entries)
	if err != nil {
		d.log.Warn("etc view unavailable; binding the entries one by one", "error", err)
		v.failed = fp
		return ""
	}
	// Its name says what it should hold; its content is checked before
	// any sandbox sees it (etcverify_linux.go).
	viewFP, err := checkEtcView(root, fp, dir, entries)
	if err != nil {
		lock.Close()
		d.log.Warn("etc view does not match the host's entries; binding them one by one", "error", err)
		v.failed = fp
		return ""
	}
	v.viewFP = viewFP
	// The old view stays locked while sandboxes bind it (their
	// references), and goes with the last of them.
	v.setCurrent(root, dir, lock)
	v.fp, v.shallow, v.checked = fp, shallow, time.Now()
	// Removed after this process is gone, however it goes.
	d.janitorOnce.Do(d.startJanitor)
	return dir
}

// etcFingerprint summarises what the host's entries are now: each entry
// (followed, as the bind follows it) and, when deep, every entry below the
// directories among them.
func etcFingerprint(entries []string, deep bool) (string, error) {
	h := sha256.New()
	for _, e := range entries {
		var st unix.Stat_t
		if err := unix.Stat(e, &st); err != nil {
			return "", fmt.Errorf("%s: %w", e, err)
		}
		putStat(h, e, &st)
		if !deep || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		// Below e, nothing is followed (e itself was, as the bind
		// follows it; statWalk does not descend into e when e is a link).
		err := statWalk(e, func(p string, st *unix.Stat_t) {
			if p != e {
				putStat(h, p, st)
			}
		})
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// acquireEtcView returns the view named fp under root, building it if
// needed, with a shared lock held on it (the returned file).
func acquireEtcView(root, fp string, entries []string) (string, *os.File, error) {
	if err := privateDir(root); err != nil {
		return "", nil, err
	}
	dir := filepath.Join(root, fp)
	for attempt := 0; attempt < 5; attempt++ {
		lock, err := os.Open(dir + ".lock")
		if errors.Is(err, fs.ErrNotExist) {
			if err := buildEtcView(root, fp, entries); err != nil {
				return "", nil, err
			}
			continue
		}
		if err != nil {
			return "", nil, err
		}
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH); err != nil {
			lock.Close()
			return "", nil, fmt.Errorf("lock %s: %w", dir, err)
		}
		// A sweep may have removed it between the open and the lock.
		if _, err := os.Lstat(dir + ".lock"); err != nil {
			lock.Close()
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, "etc")); err != nil {
			lock.Close()
			return "", nil, fmt.Errorf("etc view %s is incomplete: %w", dir, err)
		}
		// The sweeps keep the view used last (lastUsedView).
		now := time.Now()
		_ = os.Chtimes(dir+".lock", now, now)
		return filepath.Join(dir, "etc"), lock, nil
	}
	return "", nil, fmt.Errorf("etc view %s keeps going away", dir)
}

// privateDir makes dir (and its parents) and refuses it, or the state
// directory holding it, when another user could write there: what is in it
// becomes every sandbox's /etc.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("etc view: %w", err)
	}
	for _, p := range []string{dir, filepath.Dir(dir)} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("etc view: %w", err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
			return fmt.Errorf("etc view: %s is not a private directory of uid %d", p, os.Geteuid())
		}
	}
	return nil
}

// buildEtcView copies entries into root/fp/etc (made under a temporary name
// and renamed into place, so a view is complete or absent) and creates its
// lock file last.
func buildEtcView(root, fp string, entries []string) error {
	tmp, err := os.MkdirTemp(root, "tmp-")
	if err != nil {
		return fmt.Errorf("etc view: %w", err)
	}
	defer os.RemoveAll(tmp)
	etc := filepath.Join(tmp, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		return fmt.Errorf("etc view: %w", err)
	}
	sorted := append([]string(nil), entries...)
	sort.Strings(sorted)
	for _, e := range sorted {
		dest := filepath.Join(tmp, e)
		if err := mkdirParents(etc, dest); err != nil {
			return err
		}
		if err := copyEntry(e, dest, true); err != nil {
			return err
		}
	}
	// World-readable: the sandbox's user may differ from the driver's.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("etc view: %w", err)
	}
	final := filepath.Join(root, fp)
	// A view that exists already (another driver made it first, or died
	// before it made the lock file) is complete: it was renamed into place
	// whole. Either way the lock file comes next.
	err = os.Rename(tmp, final)
	if err != nil && !errors.Is(err, fs.ErrExist) && !errors.Is(err, unix.ENOTEMPTY) {
		return fmt.Errorf("etc view: %w", err)
	}
	if err == nil {
		// The view as copied: its fingerprint is the record a driver
		// taking it up compares with (etcverify_linux.go). A view another
		// builder renamed into place is checked against the host instead.
		viewFP, err := viewFingerprint(filepath.Join(final, "etc"))
		if err != nil {
			return err
		}
		if err := writeViewSum(filepath.Join(root, fp+".sum"), viewFP); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(final+".lock", os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("etc view: %w", err)
	}
	return f.Close()
}

// mkdirParents makes the directories between etc and dest (0755, as bwrap
// makes the mount points' parents).
func mkdirParents(etc, dest string) error {
	rel, err := filepath.Rel(etc, filepath.Dir(dest))
	if err != nil || rel == "." {
		return err
	}
	p := etc
	for _, c := range strings.Split(rel, "/") {
		p = filepath.Join(p, c)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("etc view: %w", err)
		}
	}
	return nil
}

// copyEntry copies src to dest: follow says whether a symlink at src is
// followed (the top-level entries, as a bind follows them) or copied as a
// symlink (entries inside a directory, as a bind shows them).
func copyEntry(src, dest string, follow bool) error {
	st, err := statEntry(src, follow)
	if err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		t, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("etc view: %w", err)
		}
		if err := os.Symlink(t, dest); err != nil {
			return fmt.Errorf("etc view: %w", err)
		}
	case unix.S_IFDIR:
		if err := os.Mkdir(dest, 0o700); err != nil {
			return fmt.Errorf("etc view: %w", err)
		}
		ents, err := os.ReadDir(src)
		if err != nil {
			return fmt.Errorf("etc view: %w", err)
		}
		for _, e := range ents {
			if err := copyEntry(filepath.Join(src, e.Name()), filepath.Join(dest, e.Name()), false); err != nil {
				return err
			}
		}
	case unix.S_IFREG:
		if err := copyFile(src, dest); err != nil {
			return err
		}
	default:
		// Devices, sockets and fifos have no place in /etc's read set.
		return nil
	}
	if os.Geteuid() == 0 {
		if err := unix.Lchown(dest, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("etc view: %w", err)
		}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		// After the chown, which clears set-id bits.
		if err := unix.Chmod(dest, st.Mode&0o7777); err != nil {
			return fmt.Errorf("etc view: %w", err)
		}
	}
	return nil
}

func copyFile(src, dest string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("etc view: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dest, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("etc view: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("etc view: copy %s: %w", src, err)
	}
	return out.Close()
}

// sweepEtcViews removes the views under root nobody holds a lock on, but
// the one used last (see etcKeepLast), and what builders that died mid-way
// left.
func sweepEtcViews(root string) {
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	keep := lastUsedView(ents)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "tmp-") || strings.HasPrefix(e.Name(), "trash-") {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > 10*time.Minute {
				_ = os.RemoveAll(filepath.Join(root, e.Name()))
			}
			continue
		}
		name, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || name == keep {
			continue
		}
		lock, err := os.Open(filepath.Join(root, e.Name()))
		if err != nil {
			continue
		}
		removeLocked(root, name, lock)
	}
}

// removeEtcView removes the view root/name unless a driver holds it.
func removeEtcView(root, name string) {
	lock, err := os.Open(filepath.Join(root, name+".lock"))
	if err != nil {
		return
	}
	removeLocked(root, name, lock)
}

// removeLocked removes the view root/name whose lock file is open as lock
// when nobody holds it, and closes lock.
func removeLocked(root, name string, lock *os.File) {
	defer lock.Close()
	if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return
	}
	// Nobody uses it. Moved aside first, then the lock file goes: a
	// driver that locks it after this finds the lock file gone and builds
	// a fresh view, which the rename let through.
	trash := filepath.Join(root, "trash-"+randHex(8))
	moved := os.Rename(filepath.Join(root, name), trash) == nil
	_ = os.Remove(filepath.Join(root, name+".lock"))
	_ = os.Remove(filepath.Join(root, name+".sum"))
	if moved {
		_ = os.RemoveAll(trash)
	}
}

// lastUsedView is the name of the view under ents whose lock file was
// touched last (acquireEtcView touches it at every use), "" when there is
// none.
//
// Why one view outlives the drivers: a one-shot command (the CLI's exec)
// starts a driver for one command; removing every view nobody holds made
// each such command copy the /etc read set again (hundreds of files, tens
// to hundreds of milliseconds on a loaded disk) and remove it after. The
// view used last is what the next driver wants unless /etc changed since,
// and it is checked exactly as a view kept by a running driver is: its
// name is the fingerprint of the host's entries it was copied from, and a
// driver uses it only when the host's entries have that fingerprint now.
// It lives in the state directory, private to the driver's user, as every
// view does. Any other unheld view (an /etc that changed since) is removed
// as before, so at most one view is kept beyond the drivers' lives.
func lastUsedView(ents []fs.DirEntry) string {
	var keep string
	var newest time.Time
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || strings.HasPrefix(name, "tmp-") || strings.HasPrefix(name, "trash-") {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if keep == "" || fi.ModTime().After(newest) {
			keep, newest = name, fi.ModTime()
		}
	}
	return keep
}

// statEntry stats an /etc entry as the view sees it: following a
// top-level entry's symlink (follow), not one inside a directory.
func statEntry(src string, follow bool) (unix.Stat_t, error) {
	var st unix.Stat_t
	var err error
	if follow {
		err = unix.Stat(src, &st)
	} else {
		err = unix.Lstat(src, &st)
	}
	if err != nil {
		return st, fmt.Errorf("etc view: %s: %w", src, err)
	}
	return st, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
