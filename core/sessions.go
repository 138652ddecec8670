package core

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Grant is one elevation a session holds: approved capabilities, or a
// network grant (ApplyNetworkGrant). ID names it for RevokeGrant.
type Grant struct {
	ID string `json:"id"`
	// Capabilities is set for an approved elevation.
	Capabilities *driverapi.Capabilities `json:"capabilities,omitempty"`
	// NetworkHost is set for a network grant ("host" or "host:port").
	NetworkHost string `json:"network_host,omitempty"`
}

// SessionGrants is what a session holds, and the digest pinning it.
type SessionGrants struct {
	SessionID    string                 `json:"session_id"`
	Baseline     driverapi.Capabilities `json:"baseline"`
	Grants       []Grant                `json:"grants"`
	PolicyDigest string                 `json:"policy_digest"`
}

func grantID(c driverapi.Capabilities) string {
	b, _ := json.Marshal(c)
	return "cap-" + driverapi.Digest(b)[:16]
}

func netGrantID(host string) string { return "net-" + driverapi.Digest([]byte(host))[:16] }

// Grants lists a session's grants, in a stable order. A session never seen
// has none.
func (s *WorkspaceSandbox) Grants(sessionID string) SessionGrants {
	// Through session, so that what the store keeps for a session this
	// process has not run yet is listed too.
	// A read creates nothing: a session this process does not hold is
	// described from a transient copy (baseline plus what the store
	// kept), not added to the sessions.
	var sess *session
	err := validateSessionID(sessionID)
	if err == nil {
		s.mu.RLock()
		held, ok := s.sessions[sessionID]
		s.mu.RUnlock()
		if ok {
			sess = held
			s.refreshGrants(sess)
		} else {
			sess = &session{id: sessionID, baseline: cloneCaps(s.baseline)}
			s.restoreGrants(sess)
		}
	} else {
		sess = &session{id: sessionID, baseline: cloneCaps(s.baseline)}
	}
	sess.mu.RLock()
	defer sess.mu.RUnlock()
	out := SessionGrants{SessionID: sessionID, Baseline: sess.baseline, Grants: []Grant{}, PolicyDigest: sess.digestLocked()}
	for _, g := range sess.grants {
		c := g
		out.Grants = append(out.Grants, Grant{ID: grantID(g), Capabilities: &c})
	}
	for _, h := range sess.netHosts {
		out.Grants = append(out.Grants, Grant{ID: netGrantID(h), NetworkHost: h})
	}
	sort.Slice(out.Grants, func(i, j int) bool { return out.Grants[i].ID < out.Grants[j].ID })
	return out
}

// KeptSessions lists, sorted, the sessions kept on disk by this process or
// an earlier one and not forgotten: those whose grants the store keeps
// (with a file store) and those whose workspace is on disk with its
// record (RecordedSessions).
func (s *WorkspaceSandbox) KeptSessions() []string {
	out := RecordedSessions(s.cfg)
	if fs, ok := s.store.(*FileGrantStore); ok {
		out = append(out, fs.Sessions()...)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// GrantNotFoundError: RevokeGrant named a grant the session does not hold.
type GrantNotFoundError struct{ SessionID, ID string }

func (e *GrantNotFoundError) Error() string {
	return fmt.Sprintf("session %q holds no grant %q (list them with Grants)", e.SessionID, e.ID)
}

// RevokeGrant removes one grant (by its Grants ID) from a session. Later
// commands that need it ask for approval again. It is audited and returns
// the session's new policy digest.
func (s *WorkspaceSandbox) RevokeGrant(ctx context.Context, sessionID, id string) (string, error) {
	if err := validateSessionID(sessionID); err != nil {
		return "", err
	}
	sess, err := s.session(sessionID)
	if err != nil {
		return "", err
	}
	s.refreshGrants(sess)
	sess.mu.Lock()
	found := false
	if i := slices.IndexFunc(sess.grants, func(c driverapi.Capabilities) bool { return grantID(c) == id }); i >= 0 {
		sess.grants = slices.Delete(sess.grants, i, i+1)
		found = true
	} else if i := slices.IndexFunc(sess.netHosts, func(h string) bool { return netGrantID(h) == id }); i >= 0 {
		sess.netHosts = slices.Delete(sess.netHosts, i, i+1)
		found = true
	}
	next := sess.digestLocked()
	sess.mu.Unlock()
	if !found {
		return "", &GrantNotFoundError{SessionID: sessionID, ID: id}
	}
	s.persist(sessionID, func(st *StoredGrants) {
		st.Grants = slices.DeleteFunc(st.Grants, func(c driverapi.Capabilities) bool { return grantID(c) == id })
		st.NetHosts = slices.DeleteFunc(st.NetHosts, func(h string) bool { return netGrantID(h) == id })
	})
	s.ledger.record(ctx, AuditRecord{SessionID: sessionID, CommandID: "revoke-" + newCommandID()[4:], Program: "(grant revoked)",
		Decision: DecisionAllow, Reason: ReasonGrantRevoked, PolicyDigest: next, Detail: "revoked grant " + id})
	return next, nil
}

// ExpireSession deletes a session that has sat idle for idle
// (DeleteSession: its commands end, its HOME, kept grants and the
// workspace the sandbox made for it are removed) and records that in the
// audit log, so that a session's end is explained where its commands are.
func (s *WorkspaceSandbox) ExpireSession(ctx context.Context, sessionID string, idle time.Duration) error {
	if err := validateSessionID(sessionID); err != nil {
		return err
	}
	err := s.DeleteSession(sessionID)
	rec := AuditRecord{SessionID: sessionID, CommandID: "expire-" + newCommandID()[4:], Program: "(session expired)",
		Decision: DecisionAllow, Reason: ReasonSessionExpired,
		Detail: fmt.Sprintf("deleted after %s without a call or a running command (serve.session_idle_ttl)", idle.Round(time.Second))}
	if err != nil {
		rec.Detail += "; removing its workspace failed: " + err.Error()
	}
	s.ledger.record(ctx, rec)
	return err
}

// WorkspacePath is the canonical directory of a session's workspace,
// created if it does not exist yet.
func (s *WorkspaceSandbox) WorkspacePath(sessionID string) (string, error) {
	if err := validateSessionID(sessionID); err != nil {
		return "", err
	}
	sess, err := s.session(sessionID)
	if err != nil {
		return "", err
	}
	return s.workspaceDir(sess)
}

// Capabilities is the driver's capability report (as doctor shows it),
// fetched once and kept.
func (s *WorkspaceSandbox) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	return s.capabilities(ctx)
}

// restoreGrants loads what the store kept for a new session's state. Kept
// grants are used only when they were made on the session's baseline of
// now and their digest checks out (the store verifies it): grants approved
// against another baseline are not carried over to this one.
func (s *WorkspaceSandbox) restoreGrants(sess *session) {
	if s.store == nil {
		return
	}
	st, ok, err := s.store.Load(sess.id)
	if err != nil {
		s.logger.Warn("kept grants not used", "session", sess.id, "error", err)
		return
	}
	if !ok {
		return
	}
	if b1, b2 := capsDigest(st.Baseline), capsDigest(sess.baseline); b1 != b2 {
		s.logger.Warn("kept grants not used: they were approved on another baseline", "session", sess.id)
		return
	}
	for _, g := range st.Grants {
		sess.grants = append(sess.grants, cloneCaps(g))
	}
	sess.netHosts = append(sess.netHosts, st.NetHosts...)
}

// refreshGrants replaces the session's grants with what the store keeps
// now. The store, not this process's copy, is the session's state: another
// process may have revoked a grant or forgotten the session since this one
// loaded it. A store that cannot be read leaves no grants (later commands
// ask again), as does one kept on another baseline. While this process
// could not write a change (unkept), its own copy stands.
func (s *WorkspaceSandbox) refreshGrants(sess *session) {
	if s.store == nil || sess.unkept.Load() {
		return
	}
	st, ok, err := s.store.Load(sess.id)
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.grants, sess.netHosts = nil, nil
	if err != nil || !ok || capsDigest(st.Baseline) != capsDigest(sess.baseline) {
		return
	}
	for _, g := range st.Grants {
		sess.grants = append(sess.grants, cloneCaps(g))
	}
	sess.netHosts = append(sess.netHosts, st.NetHosts...)
}

// persist applies a change of a session's grants to the store. A store
// that cannot be written loses the grant beyond this process only: the
// session's grants then live in this process (refreshGrants leaves them)
// until a write succeeds again; the failure is logged.
func (s *WorkspaceSandbox) persist(sessionID string, fn func(*StoredGrants)) {
	if s.store == nil {
		return
	}
	s.mu.RLock()
	sess := s.sessions[sessionID]
	s.mu.RUnlock()
	baseline := driverapi.Capabilities{}
	if sess != nil {
		baseline = sess.baseline
	}
	if err := s.store.Update(sessionID, func(st *StoredGrants) {
		if capsDigest(st.Baseline) != capsDigest(baseline) {
			*st = StoredGrants{}
		}
		st.Baseline = baseline
		fn(st)
	}); err != nil {
		s.logger.Error("keeping the session's grants failed", "session", sessionID, "error", err)
		if sess != nil {
			sess.unkept.Store(true)
		}
	} else if sess != nil {
		sess.unkept.Store(false)
	}
}

// grantsReachOwnState refuses fs grants that would let a command read or
// write the sandbox's own state: the grant store (a command that can write
// it approves its own elevations for the next command) and the audit log;
// and write grants that would let it replace a program the sandbox runs
// unconfined (hook plugins, the driver, the configuration: see
// WithProtectedPaths).
//
// Last, a granted path must exist: before anyone is asked to approve it,
// since an approved path that is not there would be kept as a grant of
// nothing (and the driver refuses it anyway).
func (s *WorkspaceSandbox) grantsReachOwnState(caps driverapi.Capabilities, sid string) error {
	for _, p := range caps.FSRead {
		if err := s.reachesOwnState("capabilities.fs_read", p, false); err != nil {
			return err
		}
		if err := s.reachesOtherSessions("capabilities.fs_read", p, sid); err != nil {
			return err
		}
	}
	for _, p := range caps.FSWrite {
		if err := s.reachesOwnState("capabilities.fs_write", p, true); err != nil {
			return err
		}
		if err := s.reachesOtherSessions("capabilities.fs_write", p, sid); err != nil {
			return err
		}
	}
	for _, g := range []struct {
		field string
		paths []string
	}{{"capabilities.fs_read", caps.FSRead}, {"capabilities.fs_write", caps.FSWrite}} {
		for i, p := range g.paths {
			if _, err := os.Stat(p); err != nil {
				return &InvalidCommandError{Field: fmt.Sprintf("%s[%d]", g.field, i), Reason: fmt.Sprintf("%q: %v", p, unwrapPath(err))}
			}
		}
	}
	return nil
}

// reachesOtherSessions refuses a path (a grant, or a workspace a command
// names) that lies in the workspace root but outside session sid's own
// workspace: the session directories under the root are the other
// sessions' workspaces, and one session must not read or write another's
// (an approved grant of a neighbour's directory would make the session
// boundary a matter of the approver noticing a hash).
func (s *WorkspaceSandbox) reachesOtherSessions(field, p, sid string) error {
	root := s.cfg.Sandbox.WorkspaceRoot
	if root == "" {
		return nil
	}
	if canon, err := filepath.EvalSymlinks(root); err == nil {
		root = canon
	}
	if !driverapi.PathWithin(p, root) {
		return nil
	}
	own := filepath.Join(root, SessionDirName(sid))
	if driverapi.PathWithin(p, own) {
		return nil
	}
	return &InvalidCommandError{Field: field, Reason: fmt.Sprintf("%q lies in the workspace root %q outside this session's own workspace: the other directories there are other sessions' workspaces; grant a path outside the root, or run in that session", p, root)}
}

// reachesOwnState refuses a path (a grant, or a workspace a command names)
// that contains or lies in the sandbox's own state; when write, also one
// that contains a protected program or file.
func (s *WorkspaceSandbox) reachesOwnState(field, p string, write bool) error {
	own := s.ownStateFiles()
	// The sessions' private HOMEs: a grant reaching them would hand one
	// session another's HOME (home.go).
	if h := s.homesRoot(); h != "" {
		own = append(own, h)
	}
	// The sessions' records: a command that could write them could make
	// a listing show sessions that are not there (sessionrecord.go).
	if d := sessionRecordsDir(s.cfg); d != "" {
		own = append(own, d)
	}
	for _, o := range own {
		if filepath.Clean(p) == string(filepath.Separator) {
			return &InvalidCommandError{Field: field, Reason: fmt.Sprintf("the root directory cannot be granted: it holds %q, where the sandbox keeps its own state (grants, audit, session homes); use a narrower path", o)}
		}
		if pathsOverlap(p, o) {
			return &InvalidCommandError{Field: field, Reason: fmt.Sprintf("%q reaches %q, where the sandbox keeps its own state (grants, audit, session homes); use a narrower path", p, o)}
		}
	}
	if !write {
		return nil
	}
	for _, o := range s.protect {
		if pathsOverlap(p, o) {
			return &InvalidCommandError{Field: field, Reason: fmt.Sprintf("%q holds %q, part of the sandbox's own state (a program it runs unconfined: the CLI, a driver or a hook plugin; or its configuration), which no command may write; use a narrower path, or a workspace that does not contain it", p, o)}
		}
	}
	return nil
}

// pathsOverlap reports whether p and o are the same file or one lies in
// the other, by name and by identity. By name alone is not enough: the
// store's or the log's configured path may go through a symbolic link
// (a linked home or data directory) while grants are canonical, and a
// bind mount or a case-insensitive file system gives one directory
// several names. So every existing ancestor of each is also compared, as
// a file, with the other.
func pathsOverlap(p, o string) bool {
	if driverapi.PathWithin(o, p) || driverapi.PathWithin(p, o) {
		return true
	}
	return ancestorIs(o, p) || ancestorIs(p, o)
}

// ancestorIs reports whether a, or an existing directory above it, is the
// same file as b.
func ancestorIs(a, b string) bool {
	bi, err := os.Stat(b)
	if err != nil {
		return false
	}
	for cur := filepath.Clean(a); ; cur = filepath.Dir(cur) {
		if ai, err := os.Stat(cur); err == nil && os.SameFile(ai, bi) {
			return true
		}
		if filepath.Dir(cur) == cur {
			return false
		}
	}
}
