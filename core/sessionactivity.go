package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// A session's activity, as every process sharing a workspace root sees
// it. serve expires sessions idle for serve.session_idle_ttl, but it
// cannot see the calls of another process: a CLI's `exec --session S`,
// an embedder's Runtime, another serve on the same data directory. So
// each session kept on disk says itself when it was last used and
// whether it is in use now:
//
//   - The stamp: its record's (sessionrecord.go) modification time,
//     set by every front end at the start and end of each command
//     (Execute, which StartProcess's processes go through too) and of
//     each files API call (UseSession). Only the sandbox writes there:
//     the records' directory is its own state, which no command or grant
//     reaches (reachesOwnState).
//   - The hold: <records dir>/<workspace dir>.lock, locked shared for
//     the whole of each command and file call. An expiry takes it
//     exclusive without waiting and leaves a session anyone holds alone;
//     while it holds it, a command or file call of the session waits (its
//     context bounds the wait), then runs on a fresh session, never on a
//     half-removed one.
//
// The lock is advisory (flock, LockFileEx on Windows): it binds the
// processes of this package, which are the only ones deleting sessions.
// A stamp or lock that cannot be written does not fail the command: the
// session then looks older to an expiry than it is, which removes only
// what a `session delete` could remove too, never a session in a command
// this process holds, since its own commands hold the lock.

// sessionLockPath is session id's lock file under cfg ("" without a
// workspace root).
func sessionLockPath(cfg Config, id string) string {
	if sessionRecordsDir(cfg) == "" {
		return ""
	}
	return filepath.Join(sessionRecordsDir(cfg), SessionDirName(id)+".lock")
}

// ensureRecordsDir makes the records' directory (0700) and checks it is a
// real directory: through a planted link a lock or record would be
// written elsewhere.
func ensureRecordsDir(cfg Config) error {
	dir := sessionRecordsDir(cfg)
	if err := os.MkdirAll(cfg.Sandbox.WorkspaceRoot, 0o700); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("%s: not a directory (symlinks are refused)", dir)
	}
	return nil
}

// openSessionLock locks session id's lock file, shared or exclusive,
// without waiting. busy: another holder is in the way. The file locked is
// the one at the path now: a lock taken on a file an expiry has unlinked
// since it was opened is dropped and taken again, or an expiry that
// opened the new file could not see this hold.
func openSessionLock(path string, exclusive bool) (f *os.File, busy bool, err error) {
	for {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, false, err
		}
		busy, err = tryLockOpen(f, exclusive)
		if busy || err != nil {
			f.Close()
			return nil, busy, err
		}
		held, herr := f.Stat()
		now, nerr := os.Lstat(path)
		if herr == nil && nerr == nil && os.SameFile(held, now) {
			return f, false, nil
		}
		f.Close()
		if nerr != nil && !errors.Is(nerr, os.ErrNotExist) {
			return nil, false, nerr
		}
	}
}

// sessionLockPoll is how often a call retries a session lock an expiry
// holds: an expiry removes one session's directories, and a call waiting
// for it should not wait much longer than that.
const sessionLockPoll = 20 * time.Millisecond

// UseSession marks session id in use by this process until the returned
// release is called: its lock is held shared and its stamp set now and
// again at release. It waits (until ctx ends) while an expiry holds the
// session. Execute calls it for each command; the files API for each
// call. Without a workspace root (no records) it does nothing; a lock
// that cannot be made is logged, and the call goes on unheld.
func (s *WorkspaceSandbox) UseSession(ctx context.Context, id string) (release func(), err error) {
	path := sessionLockPath(s.cfg, id)
	if path == "" || validateSessionID(id) != nil {
		return func() {}, nil
	}
	if err := ensureRecordsDir(s.cfg); err != nil {
		s.logger.Warn("the session's lock cannot be made: another process's idle expiry cannot see it in use", "session", id, "error", err)
		return func() {}, nil
	}
	var f *os.File
	for {
		var busy bool
		f, busy, err = openSessionLock(path, false)
		if err != nil {
			s.logger.Warn("the session's lock cannot be taken: another process's idle expiry cannot see it in use", "session", id, "error", err)
			return func() {}, nil
		}
		if !busy {
			break
		}
		t := time.NewTimer(sessionLockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("waiting for the expiry of session %q to end: %w", id, ctx.Err())
		case <-t.C:
		}
	}
	touchSession(s.cfg, id)
	return func() {
		touchSession(s.cfg, id)
		f.Close()
	}, nil
}

// touchSession sets session id's stamp to now (nothing when it has no
// record yet: the record, once written, is stamped with its writing).
func touchSession(cfg Config, id string) {
	now := time.Now()
	_ = os.Chtimes(sessionRecordPath(cfg, id), now, now)
}

// SessionLastUsed is session id's stamp under cfg: when a command or file
// call of it last started or ended, in any process (ok false when it has
// no record).
func SessionLastUsed(cfg Config, id string) (time.Time, bool) {
	if sessionRecordsDir(cfg) == "" {
		return time.Time{}, false
	}
	st, err := os.Lstat(sessionRecordPath(cfg, id))
	if err != nil || !st.Mode().IsRegular() {
		return time.Time{}, false
	}
	return st.ModTime(), true
}

// SessionKeptError: an idle expiry left the session alone, because it is
// in use (a command or file call of some process holds it), was used
// within the TTL (its stamp, by another process's call), or its lock
// could not be taken (Err): nothing was removed.
type SessionKeptError struct {
	Session string
	Reason  string
	Err     error
}

func (e *SessionKeptError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("session %q kept: %s: %v", e.Session, e.Reason, e.Err)
	}
	return fmt.Sprintf("session %q kept: %s", e.Session, e.Reason)
}

func (e *SessionKeptError) Unwrap() error { return e.Err }

// ExpireIdleSession deletes session id as ExpireSession does if it has
// been idle for ttl in every process: nobody holds its lock, and neither
// seen (the caller's own last sight of a call, zero for none) nor its
// stamp lies within ttl of now. Otherwise it returns a
// *SessionKeptError and changes nothing. The lock is held exclusive from
// the check to the end of the deletion, so a command of any process that
// starts meanwhile waits and then runs on a fresh session. It returns how
// long the session had been idle.
func (s *WorkspaceSandbox) ExpireIdleSession(ctx context.Context, id string, ttl time.Duration, seen time.Time) (time.Duration, error) {
	if err := validateSessionID(id); err != nil {
		return 0, err
	}
	// The stamp first, without the lock: most sessions a sweep looks at
	// were used lately, and a stat is all they cost.
	if st, ok := SessionLastUsed(s.cfg, id); ok && time.Since(st) < ttl {
		return 0, &SessionKeptError{Session: id, Reason: "used within the TTL"}
	}
	path := sessionLockPath(s.cfg, id)
	var f *os.File
	if path != "" {
		// A lock that cannot be taken keeps the session: nothing shows
		// that nobody holds it.
		if err := ensureRecordsDir(s.cfg); err != nil {
			return 0, &SessionKeptError{Session: id, Reason: "its lock cannot be made", Err: err}
		}
		var busy bool
		var err error
		f, busy, err = openSessionLock(path, true)
		if err != nil {
			return 0, &SessionKeptError{Session: id, Reason: "its lock cannot be taken", Err: err}
		}
		if busy {
			return 0, &SessionKeptError{Session: id, Reason: "a command or file call holds it"}
		}
		defer f.Close()
	}
	last := seen
	if st, ok := SessionLastUsed(s.cfg, id); ok && st.After(last) {
		last = st
	}
	if last.IsZero() {
		// Neither this caller nor a record says when it was used: it is
		// not this expiry's to judge (a session only its grants keep).
		return 0, &SessionKeptError{Session: id, Reason: "no record of its last use"}
	}
	idle := time.Since(last)
	if idle < ttl {
		return 0, &SessionKeptError{Session: id, Reason: fmt.Sprintf("used %s ago, within the TTL %s", idle.Round(time.Second), ttl)}
	}
	err := s.ExpireSession(ctx, id, idle)
	if err == nil && path != "" {
		// Unlinked while held: a waiter that opened it takes it again at
		// the new file (openSessionLock), never a lock nobody checks.
		_ = os.Remove(path)
	}
	return idle, err
}

// removeSessionLock removes session id's lock file when nobody holds it
// (its record and workspace are gone: nothing is left behind). A held
// one stays: its holder's command is running.
func removeSessionLock(cfg Config, id string) {
	path := sessionLockPath(cfg, id)
	if path == "" {
		return
	}
	if _, err := os.Lstat(path); err != nil {
		return
	}
	f, busy, err := openSessionLock(path, true)
	if err != nil || busy {
		return
	}
	_ = os.Remove(path)
	f.Close()
}
