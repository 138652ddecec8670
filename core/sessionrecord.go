package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// A session's record: a workspace directory is named by a hash of its
// session's id (SessionDirName), so once the process that made it has
// ended nothing on disk says whose it is. When the pipeline makes (or
// first uses) a session's workspace under the workspace root it writes the
// id beside it, in <workspace_root>/.sessions/<dir name>.json, so that a
// later process (a restarted serve) can list the sessions it would resume.
//
// The record is only displayed and compared, never used as a path: a
// listed id is hashed again and must name the record's own file and an
// existing workspace directory, so a record edited to hold another id is
// not listed, and deleting a session always removes the directories its
// own id hashes to (RemoveSessionWorkspace), whatever a record says.
// Commands cannot write it anyway: the workspace root outside a session's
// own directory is refused to them (reachesOtherSessions), and the
// records' directory counts as the sandbox's own state (reachesOwnState).

// SessionsDirName is the directory under the workspace root that holds the
// sessions' records, one per session workspace, named like it. It cannot
// be a session's workspace: those are hex names.
const SessionsDirName = ".sessions"

// sessionRecordVersion is the version of the record's format.
const sessionRecordVersion = 1

// maxSessionRecordBytes bounds a record read back: the longest id
// (maxSessionIDLen bytes), each byte escaped in JSON (\u00XX, 6 bytes),
// and the rest of the record fit well within it; a larger file is not one
// this package wrote.
const maxSessionRecordBytes = 8 << 10

// sessionRecord is what a record holds. The file's modification time is
// the session's activity stamp (sessionactivity.go).
type sessionRecord struct {
	Version int       `json:"version"`
	Session string    `json:"session"`
	Created time.Time `json:"created"`
}

// sessionRecordsDir is where cfg keeps the records ("" without a
// workspace root).
func sessionRecordsDir(cfg Config) string {
	if cfg.Sandbox.WorkspaceRoot == "" {
		return ""
	}
	return filepath.Join(cfg.Sandbox.WorkspaceRoot, SessionsDirName)
}

// sessionRecordPath is the record of session id under cfg.
func sessionRecordPath(cfg Config, id string) string {
	return filepath.Join(sessionRecordsDir(cfg), SessionDirName(id)+".json")
}

// writeSessionRecord records id as the session of its workspace directory,
// unless a record of it is there already. It is written to a temporary file
// (0600) in the records' directory (0700) and renamed into place, so a
// reader sees the whole record or none.
func writeSessionRecord(cfg Config, id string) error {
	dir := sessionRecordsDir(cfg)
	if dir == "" {
		return nil
	}
	path := sessionRecordPath(cfg, id)
	if st, err := os.Lstat(path); err == nil && st.Mode().IsRegular() {
		return nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	// The records' directory must be a real directory: through a planted
	// link the record would be written elsewhere.
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("%s: not a directory (symlinks are refused)", dir)
	}
	data, err := json.Marshal(sessionRecord{Version: sessionRecordVersion, Session: id, Created: time.Now().UTC()})
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".record-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
	}
	// No fsync: this is on a new session's first command's path, and the
	// record is no more durable than what it describes (the workspace
	// directory made just before is not synced either). The rename keeps a
	// reader from seeing half a record while this process runs; after a
	// crash a record cut short is one readSessionRecord does not accept,
	// so the session is not listed, as it would not be had the crash come
	// before the record was written. Nothing is decided from a record but
	// what is listed (see above).
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("recording session %q: %w", id, err)
	}
	return nil
}

// RemoveSessionRecord removes session id's record under cfg (nothing when
// there is none): the session is no longer listed as kept on disk. The
// path is the hash of id, never what a record holds.
func RemoveSessionRecord(cfg Config, id string) error {
	if sessionRecordsDir(cfg) == "" || id == "" {
		return nil
	}
	if err := os.Remove(sessionRecordPath(cfg, id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return &WorkspaceError{Path: sessionRecordPath(cfg, id), Err: err}
	}
	removeSessionLock(cfg, id)
	return nil
}

// RecordedSessions lists, sorted, the sessions whose workspace under cfg's
// workspace root is on disk with its record: the sessions of earlier
// processes (and of this one) not deleted nor forgotten. A record is
// listed only when it is a regular file of at most maxSessionRecordBytes
// holding a valid session id whose hash is the record's own name, and that
// session's workspace directory exists: a record edited to hold another
// id, or copied under another name, says nothing of either session.
// Workspaces made before records were written have none and are not
// listed.
func RecordedSessions(cfg Config) []string {
	dir := sessionRecordsDir(cfg)
	if dir == "" {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		id, ok := readSessionRecord(filepath.Join(dir, e.Name()))
		if !ok || SessionDirName(id) != name {
			continue
		}
		if st, err := os.Lstat(filepath.Join(cfg.Sandbox.WorkspaceRoot, name)); err != nil || !st.IsDir() {
			continue
		}
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// readSessionRecord reads the id a record holds; ok is false for anything
// that is not a record this package wrote.
func readSessionRecord(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return "", false
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSessionRecordBytes+1))
	if err != nil || len(data) > maxSessionRecordBytes {
		return "", false
	}
	var rec sessionRecord
	if err := json.Unmarshal(data, &rec); err != nil || rec.Version != sessionRecordVersion {
		return "", false
	}
	if validateSessionID(rec.Session) != nil {
		return "", false
	}
	return rec.Session, true
}

// RecordedSessions is RecordedSessions of the sandbox's configuration.
func (s *WorkspaceSandbox) RecordedSessions() []string { return RecordedSessions(s.cfg) }
