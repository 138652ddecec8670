package appcontainer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Placeholders for missing protected entries: the design.
//
// A missing protected entry (no .codex in the workspace) must not be
// creatable by the sandbox, and after the command the workspace must hold
// nothing the driver put there. NTFS ACLs describe objects, not names: no
// entry says "no child named .codex". The ACL-only ways do not fit:
//
//   - a DENY of FILE_ADD_FILE and FILE_ADD_SUBDIRECTORY on the workspace
//     directory refuses every new top-level name, not only the protected
//     ones (a command could not create ok.txt);
//   - an inheritable DENY on the workspace applies to every child created,
//     whatever its name, so it cannot single out one name either, and it
//     is only evaluated once the child exists;
//   - mapping the name elsewhere (the bind filter, ProjFS, a file-system
//     minifilter) needs an administrator or a kernel driver.
//
// So for the command's run the name is taken by a placeholder: an empty
// directory the driver creates before the command and removes after it.
//
//   - It is created with a protected DACL (nothing inherited from the
//     workspace, whose inheritable grants name the SIDs of running
//     commands): full control for the host user and SYSTEM, read for ALL
//     APPLICATION PACKAGES (it is empty). Every command that protects the
//     name adds its own DENY of every write right, as on any protected
//     entry, and revokes it afterwards.
//   - While a command uses it the driver holds a handle on it opened for
//     reading without FILE_SHARE_DELETE: nobody, the host user included,
//     can then open it for DELETE, so it can be neither removed nor
//     renamed, whatever its DACL says. That handle is also the lock shared
//     between driver processes: removal opens it for DELETE, which fails
//     with a sharing violation while any driver process holds it. Within
//     one driver process the commands using a placeholder share one
//     handle, counted per path.
//   - Before creating it the driver writes an intent record (the path) in
//     its state directory, never in the workspace, named after the driver
//     process (pid and creation time); once the directory is made and held
//     it writes a record "ph-<file ID>" holding the path and drops the
//     intent. A directory is a placeholder only if such a record names its
//     file ID at its path: a user's own empty .codex is never taken for one.
//   - After the command (exit, timeout, cancel, setup failure) the last user
//     closes the handle and removes the directory, only if it is still the
//     recorded one, empty, and held by nobody (a sharing violation means a
//     command of another driver process uses it; that one removes it).
//   - A killed driver removes nothing, but its Job Objects die with it
//     (kill on close), so no sandbox of it still runs. With its first
//     placeholder the driver starts a janitor (JanitorCommand), a process
//     of its own outside the driver's console group and job, that waits
//     for the driver to end and then sweeps. Each driver start sweeps too,
//     before its first command, in case the janitor was killed as well.
//     A sweep reads the records: a placeholder nobody holds is removed
//     with its record; an intent of a dead process whose directory got no
//     record is removed only if that directory is still exactly as created
//     (empty, with the DACL it was created with).
//
// The logic here is portable and unit-tested with a fake PlaceholderFS;
// the Win32 calls are in placeholder_windows.go.

// FileID names one file on its volume (on Windows, the volume serial
// number and the file index). It names a record, so it may hold only
// ASCII letters, digits and '-'.
type FileID string

var (
	// ErrPlaceholderBusy: the directory is held by another driver process
	// (for Remove) or is being removed (for Hold and Create): try later.
	ErrPlaceholderBusy = errors.New("placeholder in use")
	// ErrPlaceholderChanged: the path no longer names the placeholder as
	// it was created (another file, not a directory, not empty, another
	// DACL); it is left alone.
	ErrPlaceholderChanged = errors.New("not the placeholder as it was created")
)

// PlaceholderFS is the operating-system side of placeholders.
type PlaceholderFS interface {
	// Create makes an empty directory at path that only the host user can
	// change and returns a hold on it. fs.ErrExist: the name is taken.
	Create(path string) (PlaceholderHold, error)
	// Hold holds the existing directory at path. fs.ErrNotExist: it is
	// gone; ErrPlaceholderBusy: it is being removed.
	Hold(path string) (PlaceholderHold, error)
	// Identify returns the ID of what path names now, holding nothing.
	// fs.ErrNotExist: nothing is there.
	Identify(path string) (FileID, error)
	// Remove deletes the directory at path if it is id, empty, and held
	// by nobody; with fresh, only if its DACL is also still the one Create
	// gave it. fs.ErrNotExist: nothing is there; ErrPlaceholderBusy: it is
	// held; ErrPlaceholderChanged: it is not the placeholder any more.
	Remove(path string, id FileID, fresh bool) error
	// Owner tags this process (pid and start time) in intent records.
	Owner() string
	// OwnerGone reports that the process an Owner tag names has ended.
	OwnerGone(owner string) bool
}

// janitorStarter is a PlaceholderFS that can start a janitor for this
// process (see JanitorCommand).
type janitorStarter interface {
	StartJanitor(stateDir string) error
}

// PlaceholderHold is an open handle on a placeholder that keeps it from
// being removed or renamed.
type PlaceholderHold interface {
	ID() FileID
	Close() error
}

// placeholderAttempts bounds the retries of one path that keeps changing
// (created or removed by another driver process meanwhile).
const placeholderAttempts = 10

// placeholders makes and removes the placeholders of one driver process.
type placeholders struct {
	fs       PlaceholderFS
	stateDir string
	dir      string // the record directory
	mu       sync.Mutex
	seq      uint64
	swept    bool
	janitor  bool              // started (or tried)
	refs     map[string]*phRef // by strings.ToLower(path)
}

// phRef is one placeholder this process holds, and how many of its
// running commands use it.
type phRef struct {
	path string
	id   FileID
	hold PlaceholderHold
	n    int
}

func newPlaceholders(fsys PlaceholderFS, stateDir string) *placeholders {
	return &placeholders{fs: fsys, stateDir: stateDir, dir: filepath.Join(stateDir, "placeholders"), refs: map[string]*phRef{}}
}

func validFileID(id FileID) bool {
	if id == "" || len(id) > 100 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-') {
			return false
		}
	}
	return true
}

func (m *placeholders) recordPath(id FileID) string { return filepath.Join(m.dir, "ph-"+string(id)) }

// recorded reports whether a record names id at path.
func (m *placeholders) recorded(path string, id FileID) bool {
	if !validFileID(id) {
		return false
	}
	b, err := os.ReadFile(m.recordPath(id))
	return err == nil && strings.EqualFold(string(b), path)
}

// acquire makes every path of paths exist for one command: a missing one
// as a new placeholder, a placeholder of another command (of this or any
// driver process) by holding it too; an existing entry of the user's is
// left as it is (its DENY protects it). release drops this command's
// holds and removes the placeholders it was the last to use; it must be
// called once the command's sandbox is gone, and is safe to call twice.
func (m *placeholders) acquire(paths []string) (release func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.swept {
		m.swept = true
		m.sweep()
	}
	var keys []string
	drop := func() {
		for _, k := range keys {
			m.drop(k)
		}
	}
	for _, p := range paths {
		k, err := m.take(p)
		if err != nil {
			drop()
			return nil, err
		}
		if k != "" {
			keys = append(keys, k)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			drop()
		})
	}, nil
}

// take makes path exist or holds it if it is a placeholder; it returns
// the key of the reference taken, "" for an entry of the user's.
func (m *placeholders) take(path string) (string, error) {
	key := strings.ToLower(path)
	var last error
	for attempt := 0; attempt < placeholderAttempts; attempt++ {
		if attempt > 0 {
			// Another driver process is creating or removing it: its
			// step is a few system calls.
			time.Sleep(time.Duration(attempt) * 5 * time.Millisecond)
		}
		if r := m.refs[key]; r != nil {
			r.n++
			return key, nil
		}
		id, err := m.fs.Identify(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			r, err := m.create(path)
			if errors.Is(err, fs.ErrExist) || errors.Is(err, ErrPlaceholderBusy) {
				last = err
				continue
			}
			if err != nil {
				return "", err
			}
			m.refs[key] = r
			return key, nil
		case errors.Is(err, ErrPlaceholderBusy):
			last = err
			continue
		case err != nil:
			return "", fmt.Errorf("protected %s: %w", path, err)
		}
		if !m.recorded(path, id) {
			return "", nil
		}
		h, err := m.fs.Hold(path)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrPlaceholderBusy) || errors.Is(err, ErrPlaceholderChanged) {
			last = err
			continue
		}
		if err != nil {
			return "", fmt.Errorf("hold placeholder %s: %w", path, err)
		}
		if h.ID() != id {
			_ = h.Close()
			last = ErrPlaceholderChanged
			continue
		}
		m.refs[key] = &phRef{path: path, id: id, hold: h, n: 1}
		return key, nil
	}
	return "", fmt.Errorf("protected %s keeps changing (created or removed meanwhile): %w", path, last)
}

// create journals, makes and records a placeholder at path.
func (m *placeholders) create(path string) (*phRef, error) {
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return nil, fmt.Errorf("placeholder records: %w", err)
	}
	if js, ok := m.fs.(janitorStarter); ok && !m.janitor {
		// Best effort: without a janitor the next driver start sweeps.
		m.janitor = true
		_ = js.StartJanitor(m.stateDir)
	}
	m.seq++
	intent := filepath.Join(m.dir, "intent-"+m.fs.Owner()+"-"+strconv.FormatUint(m.seq, 10))
	if err := os.WriteFile(intent, []byte(path), 0o600); err != nil {
		return nil, fmt.Errorf("journal placeholder %s: %w", path, err)
	}
	h, err := m.fs.Create(path)
	if err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, ErrPlaceholderBusy) {
			// Nothing was made: the intent has nothing to cover.
			_ = os.Remove(intent)
			return nil, err
		}
		// The intent stays: whatever Create left, a later start removes
		// it if it is still a fresh placeholder.
		return nil, fmt.Errorf("create placeholder for protected %s: %w", path, err)
	}
	id := h.ID()
	if !validFileID(id) {
		err = fmt.Errorf("file ID %q is not usable as a record name", id)
	} else {
		err = os.WriteFile(m.recordPath(id), []byte(path), 0o600)
	}
	if err != nil {
		_ = h.Close()
		if rerr := m.fs.Remove(path, id, true); rerr == nil || errors.Is(rerr, fs.ErrNotExist) {
			_ = os.Remove(intent)
		}
		return nil, fmt.Errorf("record placeholder %s: %w", path, err)
	}
	_ = os.Remove(intent)
	return &phRef{path: path, id: id, hold: h, n: 1}, nil
}

// drop ends one command's use of the placeholder at key; the last user
// closes the hold and removes it.
func (m *placeholders) drop(key string) {
	r := m.refs[key]
	if r == nil {
		return
	}
	if r.n--; r.n > 0 {
		return
	}
	delete(m.refs, key)
	_ = r.hold.Close()
	m.removeUnused(r.path, r.id)
}

// removeUnused removes the placeholder id at path and its record, unless
// some driver process holds it (then its last user does). A placeholder
// that is not one any more (gone, replaced, not empty) loses its record
// and is left as the user's.
func (m *placeholders) removeUnused(path string, id FileID) {
	err := m.fs.Remove(path, id, false)
	if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrPlaceholderChanged) {
		_ = os.Remove(m.recordPath(id))
	}
}

// sweep removes what killed driver processes left (see the design at the
// top of the file). It runs before this process's first placeholder.
func (m *placeholders) sweep() {
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		return // no record was ever written
	}
	read := func(name string) (string, bool) {
		b, err := os.ReadFile(filepath.Join(m.dir, name))
		if err != nil || len(b) == 0 || !WinIsAbs(string(b)) && !filepath.IsAbs(string(b)) {
			return "", false
		}
		return string(b), true
	}
	for _, e := range ents {
		id, ok := strings.CutPrefix(e.Name(), "ph-")
		if !ok || !validFileID(FileID(id)) {
			continue
		}
		if path, ok := read(e.Name()); ok {
			m.removeUnused(path, FileID(id))
		}
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "intent-")
		i := strings.LastIndexByte(rest, '-')
		if !ok || i <= 0 || !m.fs.OwnerGone(rest[:i]) {
			continue
		}
		rec := filepath.Join(m.dir, e.Name())
		path, ok := read(e.Name())
		if !ok {
			_ = os.Remove(rec)
			continue
		}
		// Its creator died between the intent and the record, or while
		// recording failed: the directory, if made, has no record. Only
		// one exactly as created, and held by nobody, is taken for it.
		id, err := m.fs.Identify(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			continue
		case m.recorded(path, id):
			// Recorded after all: the record governs it.
		default:
			if errors.Is(m.fs.Remove(path, id, true), ErrPlaceholderBusy) {
				continue
			}
		}
		_ = os.Remove(rec)
	}
}

// JanitorCommand is the mode of the driver binary that removes a driver's
// placeholders once the driver is gone, however it went:
//
//	aleph-driver-appcontainer JanitorCommand --state DIR --owner PID-START
//
// The driver starts it with its first placeholder, detached (no console,
// a process group of its own, out of the driver's job where the job
// allows it), so that neither a console's Ctrl-C or close nor the end of
// a job that held the driver takes it down. It waits for the process the
// owner tag names to end, sweeps the state directory, and exits.
const JanitorCommand = "__aleph-placeholder-janitor"

// parseJanitorArgs reads `--state DIR --owner PID-START`.
func parseJanitorArgs(args []string) (stateDir, owner string, err error) {
	usage := fmt.Errorf("usage: %s --state DIR --owner PID-START", JanitorCommand)
	if len(args) != 4 || args[0] != "--state" || args[2] != "--owner" {
		return "", "", usage
	}
	stateDir, owner = args[1], args[3]
	pid, start, ok := strings.Cut(owner, "-")
	if !WinIsAbs(stateDir) && !filepath.IsAbs(stateDir) || !ok || !allDigits(pid) || !allDigits(start) {
		return "", "", usage
	}
	return stateDir, owner, nil
}

func allDigits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// janitorSweep is what the janitor does once its driver is gone.
func janitorSweep(fsys PlaceholderFS, stateDir string) {
	m := newPlaceholders(fsys, stateDir)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.swept = true
	m.sweep()
}
