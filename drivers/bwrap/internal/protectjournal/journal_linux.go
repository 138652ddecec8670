//go:build linux

// Package protectjournal is the Linux driver's journal of placeholders:
// the empty read-only files the driver makes where a protected entry
// (.git, .envrc, ...) is missing, so that a sandbox can bind it read-only
// and cannot create it. It makes, recognises, locks and removes them, and
// recovers what killed drivers left, by records in the driver's state
// directory. Which entries are protected, and the binds, are the driver's.
//
// A placeholder is an empty read-only regular file at the missing path,
// made by the driver just before bwrap starts. Its life:
//
//   - Before creating it, the driver writes an intent record (the path, or
//     the paths of every placeholder one command makes, NUL-separated) into
//     its state directory, named after the driver process (pid and start
//     time). It creates the file unnamed in its directory (O_TMPFILE),
//     takes a shared flock on it, links it at the path (never replacing
//     what is there), so nobody sees it there unlocked, and then records
//     it as "ph-<dev>-<ino>" (holding the path, or the paths of the
//     command's intent, NUL-separated: see Batch); where the file system
//     has no O_TMPFILE: O_EXCL at the path, looked at again once locked.
//     It drops the intent once all of them are recorded: until then a
//     linked placeholder without a record is its maker's, and others wait
//     for it (InFlux). A record names a placeholder that is at one of
//     its paths, and recovery drops one that names none (dropRecord). A
//     file is a placeholder only if such a record names its inode and
//     lists its path: a user's own empty .envrc is never one.
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
package protectjournal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/ownertag"
)

// Journal is one driver process's journal in its state directory. Its
// records are named after the process (ownertag.Self), numbered by the
// journal. Callers serialise their own placeholder set-up and removal
// (InFlux reads only other processes' intents).
type Journal struct {
	stateDir string
	owner    string
	log      hclog.Logger
	seq      atomic.Uint64 // numbers the intent and user records
	tombs    atomic.Uint64 // numbers the intents a record becomes while its placeholder is removed
}

// New returns the journal of the process tagged owner in stateDir; nothing
// is created until a record is written.
func New(stateDir, owner string, log hclog.Logger) *Journal {
	return &Journal{stateDir: stateDir, owner: owner, log: log}
}

// PlaceholderPerm is the mode of a placeholder file on the host.
const PlaceholderPerm = 0o444

// Dir returns the record directory, created private if needed,
// and refuses one another user could write to.
func (j *Journal) Dir() (string, error) {
	dir := filepath.Join(j.stateDir, "placeholders")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("bwrap driver: state directory: %w", err)
	}
	for _, p := range []string{j.stateDir, dir} {
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

func RecordName(st *unix.Stat_t) string {
	return "ph-" + strconv.FormatUint(st.Dev, 10) + "-" + strconv.FormatUint(st.Ino, 10)
}

// IsPlaceholder: the empty regular file path (with stat st) is recorded as
// a placeholder: the record named after its inode lists path.
func IsPlaceholder(dir, path string, st *unix.Stat_t) bool {
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 0 {
		return false
	}
	b, err := os.ReadFile(filepath.Join(dir, RecordName(st)))
	return err == nil && listed(string(b), path)
}

// listed: path is one of the record's NUL-separated paths.
func listed(record, path string) bool {
	for _, p := range strings.Split(record, "\x00") {
		if p == path {
			return true
		}
	}
	return false
}

// Batch is the records of one command's placeholders, made under one
// intent: each record lists every path of that intent, so the first
// placeholder's record is written and every later one is a hard link to
// it, a name in the record directory rather than a file of its own (a
// file's creation costs about what the placeholder's does, and a command
// may make twenty). A record still names one inode, which is at one of
// the paths it lists: IsPlaceholder and recovery take a file for a
// placeholder only at a listed path whose inode the record is named
// after, as with a record of one path.
type Batch struct {
	paths string // the intent's paths, NUL-separated
	first string // the record written, "" before
}

// NewBatch is the batch of the placeholders an intent names (paths).
func NewBatch(paths []string) *Batch {
	return &Batch{paths: strings.Join(paths, "\x00")}
}

// Create makes the placeholder at path and returns it holding a
// shared lock. os.ErrExist: something appeared there meanwhile.
// batch, when not nil, is the batch of an intent of this command that
// names path already (else one is written for path alone, and its record
// lists path alone). st is the placeholder's stat.
func (j *Journal) Create(dir, path string, batch *Batch) (*os.File, *unix.Stat_t, error) {
	if batch == nil {
		intent, err := j.WriteIntent(dir, []string{path})
		if err != nil {
			return nil, nil, err
		}
		defer os.Remove(intent)
	}
	f, st, err := createHidden(dir, path, batch)
	if errors.Is(err, errNoTmpfile) {
		return createInPlace(dir, path, batch)
	}
	return f, st, err
}

// errNoTmpfile: the file system of the placeholder's directory cannot make
// an unnamed file (O_TMPFILE), so createInPlace is used.
var errNoTmpfile = errors.New("no O_TMPFILE here")

// createHidden makes the placeholder unnamed in its directory (O_TMPFILE),
// locks it and sets its mode, and only then links it at path; then it
// records it. It never shows at its path unlocked: recovery removes an
// empty read-only file that nobody holds and no record names (what a
// killed driver's intent names, removeUnrecorded), so a placeholder
// visible for a moment before its lock could be removed by a dead
// driver's janitor under its maker, whose sandbox then finds its
// protected entry gone.
//
// It is recorded after the link, not before: a record is written only
// for a placeholder at one of its paths. Recovery drops a record whose
// inode is at none of them (dropRecord), and one written ahead of the link
// looked dropped for that moment. Linked but not yet recorded, it is
// locked (no recovery removes it) and named by its maker's live intent
// (another command waits for it: InFlux).
func createHidden(dir, path string, batch *Batch) (*os.File, *unix.Stat_t, error) {
	// O_RDWR: O_TMPFILE needs write access; the descriptor stays in this
	// process (close-on-exec) and is only ever locked, never written.
	fd, err := unix.Open(filepath.Dir(path), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, PlaceholderPerm)
	if err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL) {
			return nil, nil, errNoTmpfile
		}
		return nil, nil, fmt.Errorf("bwrap driver: create placeholder for protected %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	st, err := lockPlaceholder(fd)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("bwrap driver: lock placeholder %s: %w", path, err)
	}
	// Linked through /proc (linkat's AT_EMPTY_PATH would need
	// CAP_DAC_READ_SEARCH); linkat never replaces what is there.
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	switch {
	case errors.Is(err, unix.EEXIST):
		f.Close()
		return nil, nil, os.ErrExist
	case errors.Is(err, unix.ENOENT):
		// No /proc in this process's view: make it in place.
		f.Close()
		return nil, nil, errNoTmpfile
	case err != nil:
		f.Close()
		return nil, nil, fmt.Errorf("bwrap driver: create placeholder for protected %s: %w", path, err)
	}
	if err := record(filepath.Join(dir, RecordName(st)), path, batch); err != nil {
		// Unrecorded, nobody else took it for a placeholder, so nobody
		// binds it: it goes at once.
		_ = os.Remove(path)
		f.Close()
		return nil, nil, fmt.Errorf("bwrap driver: record placeholder %s: %w", path, err)
	}
	return f, st, nil
}

// lockPlaceholder takes the shared lock on a new placeholder's descriptor
// and gives it its exact mode, whatever the umask (recovery recognises
// placeholders by it); it returns the placeholder's stat.
func lockPlaceholder(fd int) (*unix.Stat_t, error) {
	st := new(unix.Stat_t)
	err := unix.Flock(fd, unix.LOCK_SH)
	if err == nil {
		err = unix.Fstat(fd, st)
	}
	if err == nil && st.Mode&0o7777 != PlaceholderPerm {
		err = unix.Fchmod(fd, PlaceholderPerm)
	}
	return st, err
}

// createInPlace makes the placeholder at path with O_EXCL where the file
// system has no O_TMPFILE. Between the create and the lock a dead
// driver's janitor could take it for an unrecorded placeholder of its
// driver and remove it: once locked it is looked at again, and one gone
// is reported as os.ErrExist (the caller looks at the path again). Locked,
// it can no longer be removed by anyone else.
func createInPlace(dir, path string, batch *Batch) (*os.File, *unix.Stat_t, error) {
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, PlaceholderPerm)
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, nil, os.ErrExist
		}
		return nil, nil, fmt.Errorf("bwrap driver: create placeholder for protected %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	st, err := lockPlaceholder(fd)
	if err == nil && !StillSame(path, st) {
		f.Close()
		return nil, nil, os.ErrExist
	}
	if err == nil {
		err = record(filepath.Join(dir, RecordName(st)), path, batch)
	}
	if err != nil {
		f.Close()
		_ = os.Remove(path)
		return nil, nil, fmt.Errorf("bwrap driver: record placeholder %s: %w", path, err)
	}
	return f, st, nil
}

// record writes the record rec of the placeholder at path: a link to its
// batch's first record, or (the first, or without a batch) a new file.
// A record already named rec is a dead placeholder's (the live inode the
// name says is this placeholder): it is replaced, never written through,
// since as a link it may share its file with the live records of another
// batch.
func record(rec, path string, batch *Batch) error {
	if batch != nil && batch.first != "" {
		err := os.Link(batch.first, rec)
		if errors.Is(err, os.ErrExist) {
			if err = os.Remove(rec); err == nil {
				err = os.Link(batch.first, rec)
			}
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		// The first record is gone (cannot happen while this command
		// holds its placeholder): this one is written in full.
	}
	content := path
	if batch != nil {
		content = batch.paths
	}
	if err := os.Remove(rec); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	fd, err := unix.Open(rec, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	n, err := unix.Write(fd, []byte(content))
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil && n != len(content) {
		err = io.ErrShortWrite
	}
	if err != nil {
		_ = os.Remove(rec)
		return err
	}
	if batch != nil {
		batch.first = rec
	}
	return nil
}

// WriteIntent journals that the placeholders at paths are about to be
// made and returns the intent record's name (removed once they are
// recorded, or failed).
func (j *Journal) WriteIntent(dir string, paths []string) (string, error) {
	intent := filepath.Join(dir, "intent-"+j.owner+"-"+strconv.FormatUint(j.seq.Add(1), 10))
	if err := os.WriteFile(intent, []byte(strings.Join(paths, "\x00")), 0o600); err != nil {
		return "", fmt.Errorf("bwrap driver: journal placeholders %s: %w", strings.Join(paths, ", "), err)
	}
	return intent, nil
}

// Remove deletes path and its record if it still is a recorded
// placeholder and no command of any driver process holds it. held reports
// that some process still held it (so it was left).
//
// made is the placeholder's stat when this driver made it (nil otherwise):
// the same file, still empty and of the placeholder's mode, needs no look
// at its record, which this driver wrote.
//
// tomb is a fresh intent name of this driver process (TombName).
func Remove(dir, path string, made *unix.Stat_t, tomb string) (held bool) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	return RemoveHeld(dir, path, os.NewFile(uintptr(fd), path), made, tomb)
}

// RemoveHeld is Remove on f, an open file description of path
// (one holding this command's shared lock, or a new one), which it closes.
// Converting f's lock to an exclusive one fails while any other
// description holds a lock on the file.
func RemoveHeld(dir, path string, f *os.File, made *unix.Stat_t, tomb string) (held bool) {
	defer f.Close()
	fd := int(f.Fd())
	if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) != nil {
		return true // still in use; its last user removes it
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || !sameFile(f, path) {
		return false
	}
	ours := made != nil && made.Dev == st.Dev && made.Ino == st.Ino && LooksLikePlaceholder(&st)
	if !ours && !IsPlaceholder(dir, path, &st) {
		return false
	}
	// The record becomes an intent before the file goes. Once the file is
	// unlinked its inode number may name a new placeholder at once (of
	// another command, or another driver process), whose record has the
	// same name: removing the record after the file could remove that one,
	// and leave a placeholder that nothing recognises. As an intent of
	// this process it still lets recovery remove the file should this
	// process die in between.
	rec := filepath.Join(dir, RecordName(&st))
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

// TombName is a fresh intent name of this driver process for
// Remove.
func (j *Journal) TombName(dir string) string {
	return filepath.Join(dir, "intent-"+j.owner+"-r"+strconv.FormatUint(j.tombs.Add(1), 10))
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
		LooksLikePlaceholder(&st) && st.Nlink == 1 {
		switch recordState(filepath.Join(dir, RecordName(&st))) {
		case recordNone, recordDead:
			_ = os.Remove(path)
		case recordYoung:
			return true
		}
	}
	return false
}

// EmptyRecordAge is how old an empty placeholder record must be to be
// taken for one whose writer died between creating and writing it (the
// write follows the create at once).
const EmptyRecordAge = time.Minute

// What a placeholder record's file says (recordState).
const (
	recordWritten = iota // it names a path, or cannot be looked at
	recordNone           // there is none
	recordYoung          // empty, younger than EmptyRecordAge: being written
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
	case time.Since(time.Unix(st.Mtim.Unix())) > EmptyRecordAge:
		return recordDead
	}
	return recordYoung
}

// Recover removes what killed drivers left (see the package comment).
// It first waits up to bound for the sandboxes of
// dead drivers to be gone: a placeholder removed while a dying sandbox
// still has it mounted would detach the mount for its last moments.
func (j *Journal) Recover(bound time.Duration, retryHeld bool) {
	if _, err := os.Lstat(filepath.Join(j.stateDir, "placeholders")); errors.Is(err, os.ErrNotExist) {
		// No record was ever written (or the state directory is gone,
		// as a test's is before its janitor runs): nothing to recover,
		// and nothing to create.
		return
	}
	dir, err := j.Dir()
	if err != nil {
		j.log.Warn("placeholder records unavailable", "error", err)
		return
	}
	if !waitDeadUsers(dir, bound) {
		j.log.Warn("sandboxes of a dead driver are still ending; their placeholders are left to a later start")
		return
	}
	// For the janitor, a placeholder still held may be its dead driver's
	// own, for the last moments of its exit (its descriptors close one
	// after the other, the pipe the janitor waits on among them): it looks
	// again for a short while. A starting driver does not wait: what is
	// held there is another live command's.
	held := j.recoverPass(dir)
	for deadline := time.Now().Add(placeholderHeldWait); held && retryHeld && time.Now().Before(deadline); held = j.recoverPass(dir) {
		time.Sleep(50 * time.Millisecond)
	}
}

// placeholderHeldWait bounds how long recovery retries placeholders that are
// still held; past it, whoever holds one removes it when done.
const placeholderHeldWait = 2 * time.Second

// recoverPass is one pass of Recover over the records in
// dir; held reports that a recorded placeholder was still held by someone.
func (j *Journal) recoverPass(dir string) (held bool) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		name := e.Name()
		rec := filepath.Join(dir, name)
		b, recIno, done, err := readRecord(rec)
		if err != nil {
			continue
		}
		if j.recoverEntry(dir, name, b, recIno) {
			held = true
		}
		done()
	}
	return held
}

// recoverEntry is recoverPass on the entry name of dir, read as b (its
// inode recIno, held open by the caller); held: a recorded placeholder
// still held.
func (j *Journal) recoverEntry(dir, name string, b []byte, recIno uint64) (held bool) {
	rec := filepath.Join(dir, name)
	if len(b) == 0 && strings.HasPrefix(name, "ph-") {
		// Its writer died between creating and writing it (it is
		// written a moment after it is created, so only an old one
		// is taken for dead), or is writing it now.
		if recordState(rec) == recordDead {
			j.dropRecord(dir, name, recIno)
		}
		return false
	}
	if len(b) > 0 && !filepath.IsAbs(string(b)) {
		return false
	}
	switch {
	case strings.HasPrefix(name, "ph-"):
		// The listed path whose inode the record is named after (one
		// path, or a batch's).
		paths := strings.Split(string(b), "\x00")
		path := recordedAt(name, paths)
		switch {
		case path != "":
			return Remove(dir, path, nil, j.TombName(dir))
		case !intentNames(dir, "", paths):
			// The placeholder is gone (or the names hold other files):
			// nothing is mounted on it any more. Unless a live process's
			// intent names it: its maker, recording it, or its remover
			// (the record became its intent).
			j.dropRecord(dir, name, recIno)
		}
	case strings.HasPrefix(name, "drop-"):
		// A recovery that died with a record moved aside (dropRecord):
		// it goes back under its name, where the next pass judges it as
		// any record.
		pid, start, rest, ok := ownertag.Parse(strings.TrimPrefix(name, "drop-"))
		if orig := asideName(name); ok && orig != "" && ownertag.Gone(pid, start, rest) {
			putBack(rec, filepath.Join(dir, orig))
		}
	case strings.HasPrefix(name, "intent-"):
		pid, start, rest, ok := ownertag.Parse(strings.TrimPrefix(name, "intent-"))
		if !ok || !ownertag.Gone(pid, start, rest) {
			return false
		}
		// Its creator died between the intent and the records: each
		// file, if made, may be an unrecorded placeholder. Only an
		// empty read-only regular file nobody holds is taken for one.
		// An empty intent (its creator died before writing it) names
		// nothing and goes.
		later := false
		for _, path := range strings.Split(string(b), "\x00") {
			if filepath.IsAbs(path) && removeUnrecorded(dir, path) {
				later = true
			}
		}
		if !later {
			_ = os.Remove(rec)
		}
	}
	return false
}

// LockShared takes a shared flock on path and checks the lock is on what
// path names now. gone reports that path vanished or changed meanwhile.
func LockShared(path string) (f *os.File, gone bool) {
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

// LooksLikePlaceholder: st is an empty regular file of the placeholders'
// mode.
func LooksLikePlaceholder(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0 && st.Mode&0o7777 == PlaceholderPerm
}

// readRecord reads the record file rec and returns its inode number too
// (dropRecord), and a release that closes it: held open, its inode number
// cannot go to a new file meanwhile.
func readRecord(rec string) ([]byte, uint64, func(), error) {
	f, err := os.Open(rec)
	if err != nil {
		return nil, 0, nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, 0, nil, err
	}
	b, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, 0, nil, err
	}
	return b, st.Ino, func() { f.Close() }, nil
}

// dropRecord removes the record named name whose file recovery read
// (inode ino) and found naming no placeholder. The name may name another
// file by now: a record is named after its placeholder's inode, and once
// that placeholder is removed its inode number may go to a new one at
// once, whose record gets the same name. Removing by name after the look
// could remove the new placeholder's record, which nothing would then
// recognise: another command would bind it as a user's file, without a
// lock, and lose it when its maker removes it. So the name is first moved
// aside, and put back unless it still was the file read (never replacing:
// while its placeholder lives nobody else writes that name). The caller
// holds the file read open, so no new record can have its inode number.
func (j *Journal) dropRecord(dir, name string, ino uint64) {
	rec := filepath.Join(dir, name)
	var now unix.Stat_t
	if unix.Lstat(rec, &now) != nil || now.Ino != ino {
		// Gone or another file already (the usual case: the record was
		// read just before its placeholder's remover moved it): nothing
		// to drop, and nothing moved aside for a moment.
		return
	}
	aside := filepath.Join(dir, "drop-"+j.owner+"-"+strconv.FormatUint(j.seq.Add(1), 10)+"-"+name)
	if os.Rename(rec, aside) != nil {
		return
	}
	var st unix.Stat_t
	if unix.Lstat(aside, &st) == nil && st.Ino != ino {
		putBack(aside, rec)
		return
	}
	_ = os.Remove(aside)
}

// putBack renames the record moved aside back to its name rec, never
// replacing one written there since (then the one aside is dead: only the
// maker of the placeholder whose inode rec names writes rec).
func putBack(aside, rec string) {
	err := unix.Renameat2(unix.AT_FDCWD, aside, unix.AT_FDCWD, rec, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// No RENAME_NOREPLACE on this file system: look, then rename.
		if _, lerr := os.Lstat(rec); errors.Is(lerr, os.ErrNotExist) {
			err = os.Rename(aside, rec)
		}
	}
	if err != nil {
		_ = os.Remove(aside)
	}
}

// asideName is the record name a "drop-<owner>-<n>-<record>" name keeps
// (dropRecord), or "".
func asideName(name string) string {
	if _, rest, ok := strings.Cut(name, "-ph-"); ok {
		return "ph-" + rest
	}
	return ""
}

// recordedAt is the one of paths, the paths a placeholder record lists,
// that holds the inode the record (named name) is named after, or "".
func recordedAt(name string, paths []string) string {
	for _, p := range paths {
		var st unix.Stat_t
		if filepath.IsAbs(p) && unix.Lstat(p, &st) == nil && RecordName(&st) == name {
			return p
		}
	}
	return ""
}

// InFlux reports whether an intent of another live process names
// path (this process's own are serialized with its placeholder set-up by
// the caller). Read only for an unrecorded file that looks like a placeholder.
func (j *Journal) InFlux(dir, path string) bool {
	return intentNames(dir, j.owner, []string{path})
}

// intentNames reports whether an intent of a live process, other than
// the one tagged skip ("": any), names one of paths.
func intentNames(dir, skip string, paths []string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "intent-") || skip != "" && strings.HasPrefix(name, "intent-"+skip+"-") {
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
			for _, q := range paths {
				if p == q {
					return true
				}
			}
		}
	}
	return false
}

// StillSame: path still names the file st was taken of.
func StillSame(path string, st *unix.Stat_t) bool {
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

// RecordUser notes that bwrap process pid runs a sandbox of this driver,
// so that a clean-up after the driver's death waits for it; the returned
// func drops the note once bwrap was reaped.
func (j *Journal) RecordUser(pid int) func() {
	dir, err := j.Dir()
	if err != nil {
		return func() {}
	}
	start, err := ownertag.StartTime(pid)
	if err != nil {
		return func() {}
	}
	name := filepath.Join(dir, "user-"+j.owner+"-"+strconv.FormatUint(j.seq.Add(1), 10))
	if os.WriteFile(name, []byte(strconv.Itoa(pid)+"-"+strconv.FormatUint(start, 10)), 0o600) != nil {
		return func() {}
	}
	return func() { _ = os.Remove(name) }
}

// waitDeadUsers waits until no sandbox of a dead driver is still dying
// (bwrap, the init of its PID namespace, ends only after everything in
// it). It drops the records of the ones that ended and reports whether
// none is left.
func waitDeadUsers(dir string, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for {
		left := false
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			name := e.Name()
			if !strings.HasPrefix(name, "user-") {
				continue
			}
			opid, ostart, orest, ok := ownertag.Parse(strings.TrimPrefix(name, "user-"))
			if !ok || !ownertag.Gone(opid, ostart, orest) {
				continue // a live driver's command: its placeholders are locked
			}
			b, _ := os.ReadFile(filepath.Join(dir, name))
			pid, start, _, ok := ownertag.Parse(string(b) + "-")
			if ok && ownertag.Alive(pid, start) {
				left = true
				continue
			}
			_ = os.Remove(filepath.Join(dir, name))
		}
		if !left || time.Now().After(deadline) {
			return !left
		}
		time.Sleep(5 * time.Millisecond)
	}
}
