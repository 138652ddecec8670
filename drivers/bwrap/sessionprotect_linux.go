//go:build linux

package bwrap

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Protected entries once per session sandbox.
//
// Without a session, every command scans its workspace and grant roots for
// the protected entries (scanProtected), makes a placeholder on the host
// for each missing one, and removes them when it ends: with a small
// workspace the placeholders' files and records cost most of a command's
// CPU in the driver. A session sandbox instead keeps the protection of its
// last scan, placeholders held, for as long as it lives, and each command
// first checks that a new scan would find the same targets; only then is
// the kept protection handed over again. Anything else takes the
// per-command path (a new scan, new or reused placeholders), whose result
// is kept in turn.
//
// Why the check is enough (the security reasoning). A scan's result is a
// function of a few things on the host: the entries of each directory it
// lists, the .git entries it looks at, and the git indexes it reads
// (submodules). The fingerprint (protFingerprint) is each such path's
// device, inode, type, size and change time (ctime), taken with fstatat
// and no following of symlinks, by a second scan made after the first
// one's placeholders exist, each path's identity taken before the scan
// reads it. For the scan to find something new, one of them must change:
//   - a name created, removed or renamed in a directory (a new .git, a
//     protected entry replaced by a symlink or another inode, a placeholder
//     removed) updates that directory's ctime; a directory replaced is a
//     new inode in its parent, whose ctime changes; a mode change (a
//     directory made readable to the driver) updates its ctime too;
//   - an index or gitfile written in place updates its ctime and usually
//     its size; one replaced by a rename changes its inode and its
//     directory's ctime;
//   - ctime cannot be set from user space (utimensat sets mtime and atime
//     and moves ctime to now), so a writer cannot put a directory's old
//     ctime back; only setting the host's clock back could, which takes
//     CAP_SYS_TIME on the host.
//
// Two limits are handled by not trusting a fingerprint:
//   - timestamps are coarse (a clock tick): a change in the same tick as
//     the fingerprint's read could leave the ctime as it was. A
//     fingerprint with any ctime within racyMargin of its start is not
//     kept (the next command scans again), as git treats a racily clean
//     index entry;
//   - a gitfile names a git directory through paths the scan resolves,
//     possibly outside every root, where nothing above watches: a
//     workspace with a gitfile is scanned for every command.
//
// What is handed over is then exactly what the per-command path would
// hand over, and the hand-over's own checks stay: handoverMounts opens
// each entry as it is now (no symlink followed) and sandbox-init refuses
// to mount on an inode other than the one named (handoverMount), so an
// entry swapped after the check fails the command closed (the session
// sandbox is then built anew), never mounts elsewhere.
//
// The placeholders stay on the host while the session sandbox lives (they
// did while a command ran): a user who replaces one on the host (git init
// over an empty .git file) changes its directory's ctime, and the next
// command protects the new entry. A kept protection is released only once
// the session sandbox and every command that used it have ended: removing
// a placeholder while a command runs would detach the /dev/null mounted
// on it in that command's mount namespace.

// racyMargin: a fingerprint whose entries changed this recently is not
// trusted (a few clock ticks at HZ=100).
const racyMargin = 50 * time.Millisecond

// protState is a session sandbox's kept protection.
type protState struct {
	mu  sync.Mutex
	cur *protHold
	// gone: the session sandbox ended; nothing is kept any more.
	gone bool
	// reused and scanned count the commands that took the kept protection
	// and those that scanned (tests, bench).
	reused, scanned int
}

// protHold is one protection and its placeholders, released once its
// last user lets go.
type protHold struct {
	pr      *protection
	sig     string
	fp      []fpEntry // nil: not trusted, the next command scans
	release func()
	refs    int // the session's own while it is kept, and each command's
}

// fpEntry is one path's identity in a fingerprint.
type fpEntry struct {
	path     string
	missing  bool
	dev, ino uint64
	mode     uint32
	size     int64
	ctime    unix.Timespec
}

// planSig is what of a plan its protection depends on.
func planSig(p launchPlan) string {
	join := func(s []string) string { return strings.Join(s, "\x00") }
	return strings.Join([]string{p.Workspace, join(p.FSWrite), join(p.FSRead), join(p.Protected)}, "\x01")
}

// protectFor is the protection of a command of ss: the kept one when its
// fingerprint still holds, else a new scan's (kept in turn). done lets go
// of it once the command's sandbox has ended.
func (ss *sessionSandbox) protectFor(d *Driver, plan launchPlan) (*protection, func(), error) {
	ps := &ss.prot
	sig := planSig(plan)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if h := ps.cur; h != nil && h.sig == sig && h.fp != nil && fingerprintHolds(h.fp) {
		h.refs++
		ps.reused++
		d.trace.Mark("protection kept")
		return h.pr, func() { ps.unref(h) }, nil
	}
	pr, release, err := d.protect(plan)
	if err != nil {
		return nil, nil, err
	}
	ps.scanned++
	h := &protHold{pr: pr, sig: sig, release: release, refs: 1}
	if ps.gone {
		return pr, func() { ps.unref(h) }, nil
	}
	h.fp = d.protFingerprint(plan, pr)
	h.refs++ // kept
	old := ps.cur
	ps.cur = h
	if old != nil {
		// After the new one holds its placeholders: one still missing is
		// not removed and made again.
		ps.unrefLocked(old)
	}
	return pr, func() { ps.unref(h) }, nil
}

// unref lets go of one use of h.
func (ps *protState) unref(h *protHold) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.unrefLocked(h)
}

func (ps *protState) unrefLocked(h *protHold) {
	if h.refs--; h.refs == 0 && h.release != nil {
		h.release()
		h.release = nil
	}
}

// end lets go of the kept protection: the session sandbox has ended.
func (ps *protState) end() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.gone = true
	if h := ps.cur; h != nil {
		ps.cur = nil
		ps.unrefLocked(h)
	}
}

// protFingerprint scans plan's roots again, taking the identity of every
// path the scan depends on before it is read, and returns them if the scan
// found exactly pr's targets and nothing in it is too recent or opaque to
// trust (nil otherwise).
func (d *Driver) protFingerprint(plan launchPlan, pr *protection) []fpEntry {
	start := time.Now()
	var fp []fpEntry
	opaque := false
	note := func(path string, gitfile bool) {
		if gitfile {
			opaque = true
		}
		fp = append(fp, fpStat(path))
	}
	targets, err := scanProtectedNoting(plan, d.scanLimits(), note)
	if err != nil || opaque {
		return nil
	}
	got := make([]string, 0, len(targets))
	for _, t := range targets {
		got = append(got, t.path)
	}
	want := append(append([]string{}, pr.existing...), pr.missing...)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return nil
	}
	limit := start.Add(-racyMargin)
	for _, e := range fp {
		if !e.missing && !time.Unix(e.ctime.Unix()).Before(limit) {
			return nil
		}
	}
	return fp
}

// fpStat is path's identity now (missing when it does not exist or
// cannot be looked at: the check then wants the same).
func fpStat(path string) fpEntry {
	var st unix.Stat_t
	if err := unix.Fstatat(unix.AT_FDCWD, path, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fpEntry{path: path, missing: true, ino: uint64(errno(err))}
	}
	return fpEntry{path: path, dev: st.Dev, ino: st.Ino, mode: st.Mode, size: st.Size, ctime: st.Ctim}
}

// errno is err's number (0 for another kind of error).
func errno(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

// fingerprintHolds says whether every path of fp is as it was.
func fingerprintHolds(fp []fpEntry) bool {
	for _, e := range fp {
		if fpStat(e.path) != e {
			return false
		}
	}
	return true
}
