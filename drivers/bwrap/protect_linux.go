//go:build linux

package bwrap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/protectjournal"
)

// The host side of missing protected entries (see protect.go for the
// design): protect makes the missing ones exist as placeholders, whose
// journal, removal and recovery are internal/protectjournal's.

// defaultStateDir is the driver's private state directory: /run for root,
// XDG_RUNTIME_DIR otherwise, else the user's state directory
// ($XDG_STATE_HOME, ~/.local/state), and a per-uid directory in the temp
// dir only without a home: a name in the shared temp dir can be taken by
// another user first (the journal's Dir then refuses it, and nothing runs).
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

// recoverPlaceholders removes what killed drivers left: their /etc views
// and their placeholders (protectjournal). Runs once per driver, before
// its first command.
func (d *Driver) recoverPlaceholders() {
	sweepEtcViews(d.etcViewRoot())
	d.journal.Recover(2*time.Second, false)
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
			protectjournal.RemoveHeld(dir, h.path, h.f, h.made, d.journal.TombName(dir))
		}
	}
	fail := func(err error) (*protection, func(), error) {
		undo()
		return nil, nil, err
	}
	// One intent for every entry missing now (each file operation on the
	// state directory costs about as much as the placeholder itself); an
	// entry that goes missing only later gets one of its own.
	journaled := map[string]*protectjournal.Batch{}
	var absent []string
	for _, t := range targets {
		var st unix.Stat_t
		if errors.Is(unix.Lstat(t.path, &st), unix.ENOENT) {
			absent = append(absent, t.path)
		}
	}
	if len(absent) > 0 {
		var derr error
		if dir, derr = d.journal.Dir(); derr != nil {
			return fail(derr)
		}
		intent, err := d.journal.WriteIntent(dir, absent)
		if err != nil {
			return fail(err)
		}
		// Removed once every placeholder below is recorded (or failed).
		defer os.Remove(intent)
		// Their records are one file and links to it (a Batch).
		batch := protectjournal.NewBatch(absent)
		for _, a := range absent {
			journaled[a] = batch
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
				if dir, derr = d.journal.Dir(); derr != nil {
					return fail(derr)
				}
			}
			switch {
			case missing:
				d.janitorOnce.Do(d.startJanitor)
				f, st, err := d.journal.Create(dir, t.path, journaled[t.path])
				if errors.Is(err, os.ErrExist) {
					continue
				}
				if err != nil {
					return fail(err)
				}
				locks = append(locks, held{t.path, f, st})
				pr.missing = append(pr.missing, t.path)
			case protectjournal.IsPlaceholder(dir, t.path, &st):
				// Another command's placeholder: use it, under a lock.
				f, gone := protectjournal.LockShared(t.path)
				if gone || f == nil {
					continue
				}
				locks = append(locks, held{t.path, f, nil})
				pr.missing = append(pr.missing, t.path)
			case protectjournal.LooksLikePlaceholder(&st) && (attempt == 0 || d.journal.InFlux(dir, t.path) || !protectjournal.StillSame(t.path, &st)):
				// No record, but another live process's intent names it:
				// a placeholder being made (linked, not recorded yet) or
				// removed (its record already an intent), or it changed
				// while the intents were read (its remover done with
				// both). Bound read-only as a user's file it would hold no
				// lock, and its removal would detach this sandbox's mount.
				// Looked at once more in any case: a recovery checking a
				// record may have its name aside for a moment
				// (protectjournal's dropRecord).
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

// maxProtectAttempts bounds how often protect looks again at an entry
// that changes under it (about 10 ms of pauses in all); past it the command
// is refused.
const maxProtectAttempts = 9
