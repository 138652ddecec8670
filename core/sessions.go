package core

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"

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
	s.mu.RLock()
	sess, ok := s.sessions[sessionID]
	s.mu.RUnlock()
	if !ok {
		sess = &session{id: sessionID}
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

// GrantNotFoundError: RevokeGrant named a grant the session does not hold.
type GrantNotFoundError struct{ SessionID, ID string }

func (e *GrantNotFoundError) Error() string {
	return fmt.Sprintf("session %q holds no grant %q (list them with Grants)", e.SessionID, e.ID)
}

// RevokeGrant removes one grant (by its Grants ID) from a session. Later
// commands that need it ask for approval again. It is audited and returns
// the session's new policy digest.
func (s *WorkspaceSandbox) RevokeGrant(ctx context.Context, sessionID, id string) (string, error) {
	s.mu.RLock()
	sess, ok := s.sessions[sessionID]
	s.mu.RUnlock()
	if !ok {
		return "", &GrantNotFoundError{SessionID: sessionID, ID: id}
	}
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
	s.ledger.record(ctx, AuditRecord{SessionID: sessionID, CommandID: "revoke-" + newCommandID()[4:], Program: "(grant revoked)",
		Decision: DecisionAllow, Reason: ReasonGrantRevoked, PolicyDigest: next, Detail: "revoked grant " + id})
	return next, nil
}

// WorkspacePath is the canonical directory of a session's workspace,
// created if it does not exist yet.
func (s *WorkspaceSandbox) WorkspacePath(sessionID string) (string, error) {
	if err := validateCommand(sessionID, Command{Program: "workspace"}); err != nil {
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
