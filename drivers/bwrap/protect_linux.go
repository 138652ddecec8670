//go:build linux

package bwrap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/ownertag"
)

// The host side of missing protected entries (see protect.go for the design).
//
// A placeholder is an empty read-only regular file at the missing path,
// made by the driver just before bwrap starts. Its life:
//
//   - Before creating it, the driver writes an intent record (the path, or
//     the paths of every placeholder one command makes, NUL-separated) into
//     its state directory, named after the driver process (pid and start
//     time). It creates the file with O_EXCL, takes a shared flock on it,
//     and only then records it as "ph-<dev>-<ino>" (holding the path) and
//     drops the intent once all of them are recorded. A file is a placeholder only if such a record names
//     its inode at its path: a user's own empty .envrc is never one.
//   - Every command that uses a placeholder, of this driver process or
//     another, holds a shared flock on it for its whole run. A command that
//     finds a placeholder already there uses it the same way.
//   - After the command (on every path the driver survives: exit, timeout,
//     cancel, setup failure) the command turns its shared lock into a
//     non-blocking exclusive one, on the same open file description, and
//     removes the placeholder if it gets it: it goes once the last command
//     using it is done, and never while a sandbox still has it mounted.
//     Removing a mount point from outside the sandbox's mount
//     namespace would detach the sandbox's mount (the kernel unmounts mounts
//     on unlinked dentries) and let it create the entry. The one exception is
//     a prepared sandbox whose supervisor reported that it is alone
//     (sandboxinit/status.go): every other process of the sandbox is dead and
//     reaped, the supervisor runs nothing of the command's and only exits,
//     so nothing is left that could create the entry once the mount is gone.
//   - A driver killed with SIGKILL cannot remove anything. The next driver
//     start, of any driver process of the same user, reads the records:
//     a placeholder nobody holds a lock on is removed with its record, an
//     intent of a dead process whose file never got a record is removed if
//     that file still is an empty read-only regular file.
//
// Records live outside the workspace, so nothing of this machinery is ever
// seen there.

// placeholderPerm is the mode of a placeholder file on the host.
const placeholderPerm = 0o444

// defaultStateDir is the driver's private state directory: /run for root,
// XDG_RUNTIME_DIR otherwise, else the user's state directory
// ($XDG_STATE_HOME, ~/.local/state), and a per-uid directory in the temp
// dir only without a home: a name in the shared temp dir can be taken by
// another user first (placeholderDir then refuses it, and nothing runs).
func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/run/aleph-sandbox"
	}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "aleph-sandbox")
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "aleph-sandbox", "driver")
	}
	if h, err := os.UserHomeDir(); err == nil && filepath.IsAbs(h) {
		return filepath.Join(h, ".local", "state", "aleph-sandbox", "driver")
	}
	return filepath.Join(os.TempDir(), "aleph-sandbox-"+strconv.Itoa(os.Geteuid()))
}

// placeholderDir returns the record directory, created private if needed,
// and refuses one another user could write to.
func (d *Driver) placeholderDir() (string, error) {
	dir := filepath.Join(d.cfg.StateDir, "placeholders")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("bwrap driver: state directory: %w", err)
	}
	for _, p := range []string{d.cfg.StateDir, dir} {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return "", fmt.Errorf("bwrap driver: state directory: %w", err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
			return "", fmt.Errorf("bwrap driver: state directory %s is not a private directory of uid %d (remove it)", p, os.Geteuid())
		}
	}
	return dir, nil
}

func recordName(st *unix.Stat_t) string {
	return "ph-" + strconv.FormatUint(st.Dev, 10) + "-" + strconv.FormatUint(st.Ino, 10)
}

// isPlaceholder: the empty regular file path (with stat st) is recorded as
// a placeholder.
func isPlaceholder(dir, path string, st *unix.Stat_t) bool {
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 0 {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, recordName(st)))
	return err == nil && string(b) == path
}

// createPlaceholder makes the placeholder at path and returns it holding a
// shared lock. os.ErrExist: something appeared there meanwhile.
// journaled says an intent of this command names path already (else
// one is written for it alone). st is the placeholder's stat.
func (d *Driver) createPlaceholder(dir, path string, journaled bool) (*os.File, *unix.Stat_t, error) {
	if !journaled {
		intent, err := d.writeIntent(dir, []string{path})
		if err != nil {
			return nil, nil, err
		}
		defer os.Remove(intent)
	}
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, placeholderPerm)
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, nil, os.ErrExist
		}
		return nil, nil, fmt.Errorf("bwrap driver: create placeholder for protected %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	st := new(unix.Stat_t)
	err = unix.Flock(fd, unix.LOCK_SH)
	if err == nil {
		err = unix.Fstat(fd, st)
	}
	if err == nil && st.Mode&0o7777 != placeholderPerm {
		// An exact mode, whatever the umask: recovery recognises it.
		err = unix.Fchmod(fd, placeholderPerm)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, recordName(st)), []byte(path), 0o600)
	}
	if err != nil {
		f.Close()
		_ = os.Remove(path)
		return nil, nil, fmt.Errorf("bwrap driver: record placeholder %s: %w", path, err)
	}
	return f, st, nil
}

// writeIntent journals that the placeholders at paths are about to be
// made and returns the intent record's name (removed once they are
// recorded, or failed).
func (d *Driver) writeIntent(dir string, paths []string) (string, error) {
	d.seq++
	intent := filepath.Join(dir, "intent-"+d.owner+"-"+strconv.FormatUint(d.seq, 10))
	if err := os.WriteFile(intent, []byte(strings.Join(paths, "\x00")), 0o600); err != nil {
		return "", fmt.Errorf("bwrap driver: journal placeholders %s: %w", strings.Join(paths, ", "), err)
	}
	return intent, nil
}

// removePlaceholder deletes path and its record if it still is a recorded
// placeholder and no command of any driver process holds it. held reports
// that some process still held it (so it was left).
//
// made is the placeholder's stat when this driver made it (nil otherwise):
// the same file, still empty and of the placeholder's mode, needs no look
// at its record, which this driver wrote.
//
// tomb is a fresh intent name of this driver process (tombName).
func removePlaceholder(dir, path string, made *unix.Stat_t, tomb string) (held bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	return removeHeld(dir, path, os.NewFile(uintptr(fd), path), made, tomb)
}

// removeHeld is removePlaceholder on f, an open file description of path
// (one holding this command's shared lock, or a new one), which it closes.
// Converting f's lock to an exclusive one fails while any other
// description holds a lock on the file.
func removeHeld(dir, path string, f *os.File, made *unix.Stat_t, tomb string) (held bool) {
	defer f.Close()
	fd := int(f.Fd())
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return true // still in use; its last user removes it
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || !sameFile(f, path) {
		return false
	}
	ours := made != nil && made.Dev == st.Dev && made.Ino == st.Ino && looksLikePlaceholder(&st)
	if !ours && !isPlaceholder(dir, path, &st) {
		return false
	}
	// The record becomes an intent before the file goes. Once the file is
	// unlinked its inode number may name a new placeholder at once (of
	// another command, or another driver process), whose record has the
	// same name: removing the record after the file could remove that one,
	// and leave a placeholder that nothing recognises. As an intent of
	// this process it still lets recovery remove the file should this
	// process die in between.
	rec := filepath.Join(dir, recordName(&st))
	renamed := os.Rename(rec, tomb) == nil
	if err := os.Remove(path); err != nil {
		if renamed {
			_ = os.Rename(tomb, rec)
		}
		return false
	}
	if renamed {
		_ = os.Remove(tomb)
	}
	return false
}

// tombName is a fresh intent name of this driver process for
// removePlaceholder.
func (d *Driver) tombName(dir string) string {
	return filepath.Join(dir, "intent-"+d.owner+"-r"+strconv.FormatUint(d.tombs.Add(1), 10))
}

// removeUnrecorded removes path if it is an empty read-only regular file
// that nobody holds and that no record names: a placeholder whose maker
// died before recording it.
//
// later reports a file left only because its record is empty and young (its
// writer may still be writing it): the intent naming it must stay, or
// nothing would name the file once the record is taken for dead.
func removeUnrecorded(dir, path string) (later bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil && unix.Fstat(fd, &st) == nil &&
		looksLikePlaceholder(&st) && st.Nlink == 1 {
		switch recordState(filepath.Join(dir, recordName(&st))) {
		case recordNone, recordDead:
			_ = os.Remove(path)
		case recordYoung:
			return true
		}
	}
	return false
}

// emptyRecordAge is how old an empty placeholder record must be to be
// taken for one whose writer died between creating and writing it (the
// write follows the create at once).
const emptyRecordAge = time.Minute

// What a placeholder record's file says (recordState).
const (
	recordWritten = iota // it names a path, or cannot be looked at
	recordNone           // there is none
	recordYoung          // empty, younger than emptyRecordAge: being written
	recordDead           // empty and older: its writer died
)

// recordState looks at the record rec once.
func recordState(rec string) int {
	var st unix.Stat_t
	switch err := unix.Lstat(rec, &st); {
	case errors.Is(err, unix.ENOENT):
		return recordNone
	case err != nil || st.Size != 0:
		return recordWritten
	case time.Since(time.Unix(st.Mtim.Unix())) > emptyRecordAge:
		return recordDead
	}
	return recordYoung
}

// recoverPlaceholders removes what killed drivers left: see the top of the
// file. Runs once per driver, before its first command.
func (d *Driver) recoverPlaceholders() {
	sweepEtcViews(d.etcViewRoot())
	d.recoverPlaceholdersWaiting(2*time.Second, false)
}

// recoverPlaceholdersWaiting first waits up to bound for the sandboxes of
// dead drivers to be gone: a placeholder removed while a dying sandbox
// still has it mounted would detach the mount for its last moments.
func (d *Driver) recoverPlaceholdersWaiting(bound time.Duration, retryHeld bool) {
	if _, err := os.Lstat(filepath.Join(d.cfg.StateDir, "placeholders")); errors.Is(err, os.ErrNotExist) {
		// No record was ever written (or the state directory is gone,
		// as a test's is before its janitor runs): nothing to recover,
		// and nothing to create.
		return
	}
	dir, err := d.placeholderDir()
	if err != nil {
		d.log.Warn("placeholder records unavailable", "error", err)
		return
	}
	if !waitDeadUsers(dir, bound) {
		d.log.Warn("sandboxes of a dead driver are still ending; their placeholders are left to a later start")
		return
	}
	// For the janitor, a placeholder still held may be its dead driver's
	// own, for the last moments of its exit (its descriptors close one
	// after the other, the pipe the janitor waits on among them): it looks
	// again for a short while. A starting driver does not wait: what is
	// held there is another live command's.
	held := d.recoverPass(dir)
	for deadline := time.Now().Add(placeholderHeldWait); held && retryHeld && time.Now().Before(deadline); held = d.recoverPass(dir) {
		time.Sleep(50 * time.Millisecond)
	}
}

// placeholderHeldWait bounds how long recovery retries placeholders that are
// still held; past it, whoever holds one removes it when done.
const placeholderHeldWait = 2 * time.Second

// recoverPass is one pass of recoverPlaceholdersWaiting over the records in
// dir; held reports that a recorded placeholder was still held by someone.
func (d *Driver) recoverPass(dir string) (held bool) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		name := e.Name()
		rec := filepath.Join(dir, name)
		b, err := os.ReadFile(rec)
		if err != nil {
			continue
		}
		if len(b) == 0 && strings.HasPrefix(name, "ph-") {
			// Its writer died between creating and writing it (it is
			// written a moment after it is created, so only an old one
			// is taken for dead), or is writing it now.
			if recordState(rec) == recordDead {
				_ = os.Remove(rec)
			}
			continue
		}
		if len(b) > 0 && !filepath.IsAbs(string(b)) {
			continue
		}
		path := string(b)
		switch {
		case strings.HasPrefix(name, "ph-") && !strings.Contains(path, "\x00"):
			var st unix.Stat_t
			if unix.Lstat(path, &st) != nil || recordName(&st) != name {
				// The placeholder is gone (or the name holds another file):
				// nothing is mounted on it any more.
				_ = os.Remove(rec)
				continue
			}
			if removePlaceholder(dir, path, nil, d.tombName(dir)) {
				held = true
			}
		case strings.HasPrefix(name, "intent-"):
			pid, start, rest, ok := ownertag.Parse(strings.TrimPrefix(name, "intent-"))
			if !ok || !ownertag.Gone(pid, start, rest) {
				continue
			}
			// Its creator died between the intent and the records: each
			// file, if made, may be an unrecorded placeholder. Only an
			// empty read-only regular file nobody holds is taken for one.
			// An empty intent (its creator died before writing it) names
			// nothing and goes.
			later := false
			for _, path := range strings.Split(path, "\x00") {
				if filepath.IsAbs(path) && removeUnrecorded(dir, path) {
					later = true
				}
			}
			if !later {
				_ = os.Remove(rec)
			}
		}
	}
	return held
}

// scanLimits are this driver's bounds for one command's scan.
func (d *Driver) scanLimits() scanLimits {
	n, to := d.cfg.Options.ProtectedScanMaxEntries, d.cfg.Options.ProtectedScanTimeoutMS
	lim := scanLimits{maxEntries: defaultProtectedScanMaxEntries, deadline: time.Now().Add(defaultProtectedScanTimeout)}
	if n > 0 {
		lim.maxEntries = int(n)
	}
	if to > 0 {
		lim.deadline = time.Now().Add(time.Duration(to) * time.Millisecond)
	}
	return lim
}

// protect finds the protected entries of plan p (scanProtected), makes the
// missing ones exist as placeholders, and returns what the sandbox must
// bind. release undoes the placeholders; call it once the sandbox is gone.
// A symlink in a protected place is refused: bwrap would follow it and the
// read-only mount would land wherever it points.
func (d *Driver) protect(p launchPlan) (*protection, func(), error) {
	d.recoverOnce.Do(d.recoverPlaceholders)
	targets, err := scanProtected(p, d.scanLimits())
	if err != nil {
		return nil, nil, err
	}
	// A grant inside a protected entry would be mounted over its read-only
	// bind (the plan refuses this for the top-level set; nested entries
	// are only known now).
	for _, g := range append(append([]string{}, p.FSRead...), p.FSWrite...) {
		for _, t := range targets {
			if driverapi.PathWithin(g, t.path) {
				return nil, nil, &driverapi.InvalidSpecError{Field: "fs_read/fs_write", Reason: fmt.Sprintf("%q lies in the protected %s", g, t.path)}
			}
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	type held struct {
		path string
		f    *os.File
		made *unix.Stat_t // this command made it
	}
	var locks []held
	dir := ""
	undo := func() {
		// Each lock is turned into an exclusive one on this command's own
		// open file description, never on a new one: a child of this
		// process between fork and exec holds a copy of every descriptor,
		// but a copy of the same description, which holds no lock of its
		// own and so cannot keep this command from removing what it made.
		// (Dropping the lock and reopening the file used to do that: the
		// child's copy then held the shared lock against the new
		// description, and the placeholder was left for good.) Another
		// command using the placeholder holds its own description's
		// lock: the conversion fails, and its last user removes it.
		for _, h := range locks {
			removeHeld(dir, h.path, h.f, h.made, d.tombName(dir))
		}
	}
	fail := func(err error) (*protection, func(), error) {
		undo()
		return nil, nil, err
	}
	// One intent for every entry missing now (each file operation on the
	// state directory costs about as much as the placeholder itself); an
	// entry that goes missing only later gets one of its own.
	journaled := map[string]bool{}
	var absent []string
	for _, t := range targets {
		var st unix.Stat_t
		if errors.Is(unix.Lstat(t.path, &st), unix.ENOENT) {
			absent = append(absent, t.path)
		}
	}
	if len(absent) > 0 {
		var derr error
		if dir, derr = d.placeholderDir(); derr != nil {
			return fail(derr)
		}
		intent, err := d.writeIntent(dir, absent)
		if err != nil {
			return fail(err)
		}
		// Removed once every placeholder below is recorded (or failed).
		defer os.Remove(intent)
		for _, a := range absent {
			journaled[a] = true
		}
	}
	pr := &protection{}
	for _, t := range targets {
		for attempt := 0; ; attempt++ {
			if attempt > maxProtectAttempts {
				return fail(fmt.Errorf("bwrap driver: protected %s keeps changing", t.path))
			}
			if attempt > 0 {
				// Another process is making or removing it, or holds it
				// locked: a moment, growing, before looking again.
				time.Sleep(time.Duration(attempt) * 200 * time.Microsecond)
			}
			var st unix.Stat_t
			err := unix.Lstat(t.path, &st)
			if err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return fail(&driverapi.InvalidSpecError{Field: "workspace", Reason: fmt.Sprintf(
					"%s is a symlink; protected entries must be real directories or files (remove the link)", t.path)})
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				return fail(fmt.Errorf("bwrap driver: protected %s: %w", t.path, err))
			}
			missing := err != nil
			if dir == "" && (missing || st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0) {
				var derr error
				if dir, derr = d.placeholderDir(); derr != nil {
					return fail(derr)
				}
			}
			switch {
			case missing:
				d.janitorOnce.Do(d.startJanitor)
				f, st, err := d.createPlaceholder(dir, t.path, journaled[t.path])
				if errors.Is(err, os.ErrExist) {
					continue
				}
				if err != nil {
					return fail(err)
				}
				locks = append(locks, held{t.path, f, st})
				pr.missing = append(pr.missing, t.path)
			case isPlaceholder(dir, t.path, &st):
				// Another command's placeholder: use it, under a lock.
				f, gone := lockShared(t.path)
				if gone || f == nil {
					continue
				}
				locks = append(locks, held{t.path, f, nil})
				pr.missing = append(pr.missing, t.path)
			case looksLikePlaceholder(&st) && (d.placeholderInFlux(dir, t.path) || !stillSame(t.path, &st)):
				// No record, but another live process's intent names it:
				// a placeholder being made (not recorded yet) or removed
				// (its record already an intent), or it changed while the
				// intents were read (its remover done with both). Bound
				// read-only as a user's file it would hold no lock, and
				// its removal would detach this sandbox's mount.
				continue
			default:
				pr.existing = append(pr.existing, t.path)
			}
			break
		}
	}
	pr.anchors = anchorsFor(append([]string{p.Workspace}, p.FSWrite...), p.FSRead, targets)
	return pr, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		undo()
	}, nil
}

// anchorsFor are the directories between each root and the protected
// targets below it (sub for sub/.git, a and a/b for a/b/c/.git), except
// those inside a target or a read grant (read-only already: a read-write
// anchor there would open a hole).
func anchorsFor(roots, readOnly []string, targets []protectTarget) []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range targets {
		root := ""
		for _, r := range roots {
			if driverapi.PathWithin(t.path, r) && len(r) > len(root) {
				root = r
			}
		}
		if root == "" {
			continue
		}
		for dir := filepath.Dir(t.path); dir != root && driverapi.PathWithin(dir, root); dir = filepath.Dir(dir) {
			if seen[dir] {
				break // its parents are in already
			}
			inside := false
			for _, o := range targets {
				if driverapi.PathWithin(dir, o.path) {
					inside = true
				}
			}
			for _, r := range readOnly {
				if driverapi.PathWithin(dir, r) {
					inside = true
				}
			}
			seen[dir] = true
			if !inside {
				out = append(out, dir)
			}
		}
	}
	return out
}

// lockShared takes a shared flock on path and checks the lock is on what
// path names now. gone reports that path vanished or changed meanwhile.
func lockShared(path string) (f *os.File, gone bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, errors.Is(err, unix.ENOENT)
	}
	f = os.NewFile(uintptr(fd), path)
	// Not blocking: anyone who can read the file can lock it, and protect
	// holds the driver's placeholder lock. Held exclusively means being
	// removed (or held by someone else): the caller looks again, bounded.
	if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	if !sameFile(f, path) {
		f.Close()
		return nil, true
	}
	return f, false
}

// maxProtectAttempts bounds how often protect looks again at an entry
// that changes under it (about 10 ms of pauses in all); past it the command
// is refused.
const maxProtectAttempts = 9

// looksLikePlaceholder: st is an empty regular file of the placeholders'
// mode.
func looksLikePlaceholder(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0 && st.Mode&0o7777 == placeholderPerm
}

// placeholderInFlux reports whether an intent of another live process names
// path (this process's own are serialized with its placeholder set-up by
// d.mu). Read only for an unrecorded file that looks like a placeholder.
func (d *Driver) placeholderInFlux(dir, path string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "intent-") || strings.HasPrefix(name, "intent-"+d.owner+"-") {
			continue
		}
		pid, start, rest, ok := ownertag.Parse(strings.TrimPrefix(name, "intent-"))
		if !ok || ownertag.Gone(pid, start, rest) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		for _, p := range strings.Split(string(b), "\x00") {
			if p == path {
				return true
			}
		}
	}
	return false
}

// stillSame: path still names the file st was taken of.
func stillSame(path string, st *unix.Stat_t) bool {
	var now unix.Stat_t
	return unix.Lstat(path, &now) == nil && now.Dev == st.Dev && now.Ino == st.Ino
}

func sameFile(f *os.File, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Lstat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}
