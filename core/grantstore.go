package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// GrantStore keeps sessions' grants beyond one process, so an elevation
// approved once for a session (by the CLI's --yes or prompt, or a client of
// the service) holds for its later commands wherever they run (docs/cli.md).
// Implementations must be safe for concurrent use, also by several
// processes sharing the store.
type GrantStore interface {
	// Load returns what is kept for the session (ok false when nothing is).
	Load(sessionID string) (st StoredGrants, ok bool, err error)
	// Update replaces the session's state with what fn makes of it, under a
	// lock that other processes honour too (read, change, write).
	Update(sessionID string, fn func(*StoredGrants)) error
	// Delete forgets the session.
	Delete(sessionID string) error
	// Dir is where the store keeps its files: no command may be granted a
	// path that reaches it (a command that could write it could approve
	// its own elevations).
	Dir() string
}

// StoredGrants is one session's kept state. Digest pins it: it must equal
// the policy digest of Baseline, Grants and NetHosts, and Baseline must be
// the session's baseline now, or the state is not used.
type StoredGrants struct {
	Version  int                      `json:"version"`
	Session  string                   `json:"session"`
	Baseline driverapi.Capabilities   `json:"baseline"`
	Grants   []driverapi.Capabilities `json:"grants"`
	NetHosts []string                 `json:"network_grants"`
	Digest   string                   `json:"policy_digest"`
}

const storedGrantsVersion = 1

// maxStoredGrantsBytes bounds a session file read back (a file of many MB
// is not one this package wrote).
const maxStoredGrantsBytes = 4 << 20

func (st *StoredGrants) digest() string {
	ss := &session{baseline: st.Baseline, grants: st.Grants, netHosts: st.NetHosts}
	return ss.digestLocked()
}

// FileGrantStore keeps one JSON file per session (mode 0600) in a 0700
// directory, named like the session's workspace directory.
type FileGrantStore struct{ dir string }

// NewFileGrantStore keeps grants under dir (created on first write).
func NewFileGrantStore(dir string) *FileGrantStore { return &FileGrantStore{dir: dir} }

// Dir implements GrantStore.
func (f *FileGrantStore) Dir() string { return f.dir }

func (f *FileGrantStore) path(sessionID string) string {
	return filepath.Join(f.dir, SessionDirName(sessionID)+".json")
}

// Load implements GrantStore.
func (f *FileGrantStore) Load(sessionID string) (StoredGrants, bool, error) {
	return f.read(sessionID)
}

func (f *FileGrantStore) read(sessionID string) (StoredGrants, bool, error) {
	fh, err := os.Open(f.path(sessionID))
	if errors.Is(err, os.ErrNotExist) {
		return StoredGrants{}, false, nil
	}
	if err != nil {
		return StoredGrants{}, false, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxStoredGrantsBytes+1))
	if err != nil {
		return StoredGrants{}, false, err
	}
	if len(data) > maxStoredGrantsBytes {
		return StoredGrants{}, false, fmt.Errorf("%s: larger than %d bytes", f.path(sessionID), maxStoredGrantsBytes)
	}
	var st StoredGrants
	if err := json.Unmarshal(data, &st); err != nil {
		return StoredGrants{}, false, fmt.Errorf("%s: %w", f.path(sessionID), err)
	}
	if st.Version != storedGrantsVersion || st.Session != sessionID || st.Digest != st.digest() {
		return StoredGrants{}, false, fmt.Errorf("%s: not a grant file of this session (version, session or digest differ)", f.path(sessionID))
	}
	return st, true, nil
}

// Sessions lists the sessions whose grants are kept (their ids, sorted):
// those a process before this one ran and did not forget. A file that is
// not a valid grant file of the session it names is skipped.
func (f *FileGrantStore) Sessions() []string {
	ents, err := os.ReadDir(f.dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		fh, err := os.Open(filepath.Join(f.dir, e.Name()))
		if err != nil {
			continue
		}
		var st StoredGrants
		err = json.NewDecoder(io.LimitReader(fh, maxStoredGrantsBytes)).Decode(&st)
		fh.Close()
		// The name must be the hash of the id the file holds: a file
		// copied under another name says nothing of that session.
		if err != nil || st.Session == "" || SessionDirName(st.Session) != name {
			continue
		}
		if _, ok, err := f.read(st.Session); err == nil && ok {
			out = append(out, st.Session)
		}
	}
	sort.Strings(out)
	return out
}

// Update implements GrantStore.
func (f *FileGrantStore) Update(sessionID string, fn func(*StoredGrants)) error {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return err
	}
	unlock, err := lockFile(f.path(sessionID) + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	st, ok, err := f.read(sessionID)
	if err != nil || !ok {
		// A file that does not check out is replaced, not merged.
		st = StoredGrants{}
	}
	fn(&st)
	st.Version, st.Session = storedGrantsVersion, sessionID
	if st.Grants == nil {
		st.Grants = []driverapi.Capabilities{}
	}
	if st.NetHosts == nil {
		st.NetHosts = []string{}
	}
	st.Digest = st.digest()
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(f.dir, ".grants-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), f.path(sessionID))
}

// Delete implements GrantStore.
func (f *FileGrantStore) Delete(sessionID string) error {
	unlock, err := lockFile(f.path(sessionID) + ".lock")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unlock()
	if err := os.Remove(f.path(sessionID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// mergeGrant adds c to st unless st holds it already.
func mergeGrant(st *StoredGrants, c driverapi.Capabilities) {
	for _, g := range st.Grants {
		if c.IsWithin(g) && g.IsWithin(c) {
			return
		}
	}
	st.Grants = append(st.Grants, cloneCaps(c))
}

func mergeNetHost(st *StoredGrants, h string) {
	if !slices.Contains(st.NetHosts, h) {
		st.NetHosts = append(st.NetHosts, h)
	}
}
