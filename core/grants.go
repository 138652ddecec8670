package core

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// policyDoc is what PolicyDigest hashes: the baseline and every grant, in a
// canonical order so equal policies give equal digests.
type policyDoc struct {
	Baseline driverapi.Capabilities   `json:"baseline"`
	Grants   []driverapi.Capabilities `json:"grants"`
	NetHosts []string                 `json:"network_grants"`
}

func (ss *session) digestLocked() string {
	grants := make([]string, 0, len(ss.grants))
	for _, g := range ss.grants {
		b, _ := json.Marshal(g)
		grants = append(grants, string(b))
	}
	sort.Strings(grants)
	doc := policyDoc{Baseline: ss.baseline, Grants: []driverapi.Capabilities{}, NetHosts: append([]string{}, ss.netHosts...)}
	for _, g := range grants {
		var c driverapi.Capabilities
		_ = json.Unmarshal([]byte(g), &c)
		doc.Grants = append(doc.Grants, c)
	}
	sort.Strings(doc.NetHosts)
	b, _ := json.Marshal(doc)
	return driverapi.Digest(b)
}

// PolicyDigest is the digest of a session's effective policy (baseline and
// grants). A host shows it with a grant request and passes it back to
// ApplyNetworkGrant, pinning the grant to the policy the user saw.
func (s *WorkspaceSandbox) PolicyDigest(sessionID string) string {
	s.mu.RLock()
	sess, ok := s.sessions[sessionID]
	s.mu.RUnlock()
	if !ok {
		sess = &session{id: sessionID}
	}
	sess.mu.RLock()
	defer sess.mu.RUnlock()
	return sess.digestLocked()
}

// ApplyNetworkGrant widens a session's grants by one AllowHosts origin
// (host, and port when non-zero). expectedDigest must be the session's
// current PolicyDigest, or the grant is refused with a *StaleGrantError.
// Both outcomes are audited. It returns the new digest.
func (s *WorkspaceSandbox) ApplyNetworkGrant(ctx context.Context, sessionID, host string, port uint16, expectedDigest string) (string, error) {
	rec := AuditRecord{SessionID: sessionID, CommandID: "grant-" + newCommandID()[4:], Program: "(network grant)"}
	if err := validateSessionID(sessionID); err != nil {
		return "", err
	}
	h := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(host), "."))
	if reason := grantHostProblem(h); reason != "" {
		return "", &InvalidCommandError{Field: "host", Reason: fmt.Sprintf("%q is not a host name, *.suffix or IP literal: %s", host, reason)}
	}
	subject := h
	if port != 0 {
		if strings.Contains(h, ":") { // IPv6 literal
			subject = "[" + h + "]:" + strconv.Itoa(int(port))
		} else {
			subject = h + ":" + strconv.Itoa(int(port))
		}
	}
	sess, err := s.session(sessionID)
	if err != nil {
		return "", err
	}
	sess.mu.Lock()
	current := sess.digestLocked()
	if current != expectedDigest {
		sess.mu.Unlock()
		rec.Decision, rec.Reason, rec.PolicyDigest = DecisionDeny, ReasonGrantStale, current
		err := &StaleGrantError{SessionID: sessionID, Subject: subject, Expected: expectedDigest, Current: current}
		rec.Detail = err.Error()
		s.ledger.record(ctx, rec)
		return "", err
	}
	present := false
	for _, x := range sess.netHosts {
		if x == subject {
			present = true
		}
	}
	if !present {
		sess.netHosts = append(sess.netHosts, subject)
	}
	s.persist(sessionID, func(st *StoredGrants) { mergeNetHost(st, subject) })
	next := sess.digestLocked()
	sess.mu.Unlock()
	rec.Decision, rec.Reason, rec.PolicyDigest = DecisionAllow, ReasonGrantApplied, next
	rec.Detail = "network grant " + subject
	rec.CapabilityDigest = capsDigest(driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{subject}}})
	s.ledger.record(ctx, rec)
	return next, nil
}

// forgetDriverTimeout bounds the driver's ForgetSession call: releasing
// what a driver keeps per session is quick, and a hung driver must not hang
// the host's forget.
const forgetDriverTimeout = 10 * time.Second

// ForgetSession ends the session's commands still running (Execute in
// flight: each returns an error whose cause is ErrSessionForgotten), drops
// its in-memory state (its grants) and removes
// its private HOME (sandbox.session.home = "session"); its workspace
// directory stays on disk and is reused if the session comes back, with a
// fresh baseline and an empty HOME. Long-running hosts call it when a session ends so
// the session map does not grow without bound.
//
// With a GrantStore the kept grants are deleted too: a forgotten session
// starts again from its baseline, in this process and every other.
//
// The driver is told too (driverapi.SessionForgetter), so that it releases
// what it keeps for the session: the bwrap driver's shared network
// namespace of network none.
//
// Its record (sessionrecord.go) is removed: a forgotten session is no
// longer listed, though its workspace stays; its next command records it
// again.
func (s *WorkspaceSandbox) ForgetSession(sessionID string) {
	s.forget(sessionID)
	if err := RemoveSessionRecord(s.cfg, sessionID); err != nil {
		s.logger.Error("removing the session's record failed", "session", sessionID, "error", err)
	}
}

// forget is ForgetSession but for the session's record.
func (s *WorkspaceSandbox) forget(sessionID string) {
	s.mu.Lock()
	sess := s.sessions[sessionID]
	delete(s.sessions, sessionID)
	s.mu.Unlock()
	// The session's running commands end first: one still running could
	// plant links in the HOME while it is removed (the removal never
	// follows them, but it could not finish).
	if sess != nil && !sess.endAll(s.runGrace+forgetDriverTimeout) {
		s.logger.Error("commands of the forgotten session did not end in time; its HOME is removed all the same", "session", sessionID)
	}
	s.forgetHome(sessionID)
	if f, ok := s.driver.(driverapi.SessionForgetter); ok && sessionID != "" {
		ctx, cancel := context.WithTimeout(context.Background(), forgetDriverTimeout)
		err := f.ForgetSession(ctx, sessionID)
		cancel()
		if err != nil {
			s.logger.Error("the driver could not forget the session", "session", sessionID, "error", err)
		}
	}
	// Its sandbox ended with it, and the overlay with that: a layered
	// session's layer goes (the host never saw it).
	if sessionID != "" {
		s.discardLayer(sessionID)
	}
	if s.store != nil {
		if err := s.store.Delete(sessionID); err != nil {
			s.logger.Error("forgetting the kept grants failed", "session", sessionID, "error", err)
		}
	}
}

// DeleteSession is ForgetSession (the session's commands end, its private
// HOME and kept grants are removed) and then removes its workspace: the
// directory the sandbox made for it under sandbox.workspace_root. A
// directory a caller named as the workspace (Command.Workspace,
// --workspace) is the caller's and is never removed.
func (s *WorkspaceSandbox) DeleteSession(sessionID string) error {
	// The record goes with the workspace (RemoveSessionWorkspace), not
	// before it: a workspace that could not be removed stays listed, so
	// that its deletion can be tried again.
	s.forget(sessionID)
	return RemoveSessionWorkspace(s.cfg, sessionID)
}

// RemoveSessionWorkspace removes the workspace the sandbox made for a
// session under cfg's workspace root (nothing when there is none), by
// descriptor, never following a link (removeTree), and then the session's
// record (RemoveSessionRecord). Both paths are hashes of sessionID, never
// what a record holds: a record edited to name another session cannot
// make this remove that session's directory.
func RemoveSessionWorkspace(cfg Config, sessionID string) error {
	root := cfg.Sandbox.WorkspaceRoot
	if root == "" || sessionID == "" {
		return nil
	}
	dir := filepath.Join(root, SessionDirName(sessionID))
	if err := removeTree(dir); err != nil {
		return &WorkspaceError{Path: dir, Err: err}
	}
	return RemoveSessionRecord(cfg, sessionID)
}

// grantHostProblem says what is wrong with h (lower-cased, no trailing dot)
// as the host of a network grant, or "" when it is an IP literal, a host
// name, or *. and a suffix of at least two labels. A grant widens what the
// session may reach for all its later commands, so it is held to the
// shape of an allowlist entry here rather than refused only when a command
// first uses it.
func grantHostProblem(h string) string {
	if h == "" {
		return "empty"
	}
	if net.ParseIP(h) != nil {
		return ""
	}
	name := h
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		name = rest
		if strings.Count(name, ".") < 1 {
			return "a wildcard needs a suffix of at least two labels (*.example.com, not *.com)"
		}
	}
	if len(name) > 253 {
		return "longer than 253 bytes"
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return "a label is empty or longer than 63 bytes"
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "a label starts or ends with '-'"
		}
		for _, r := range label {
			// ASCII letters, digits, '-', '_' and (internationalised
			// names, normalised by the proxy) any non-ASCII letter.
			ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r > 0x7f && unicode.IsLetter(r)
			if !ok {
				return fmt.Sprintf("%q is not allowed in a host name", r)
			}
		}
	}
	return ""
}
