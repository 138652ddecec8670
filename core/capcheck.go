package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func (s *WorkspaceSandbox) checkCapabilities(ctx context.Context, r *run, sess *session, sid string, cmd Command) error {
	caps := cmd.Capabilities
	if err := s.grantsReachOwnState(caps, sid); err != nil {
		return err
	}
	// A path is covered by the baseline or a grant only if it is by its
	// name and by where it resolves: a symbolic link made inside a grant
	// (the command may write there) leads out of it, and a driver that
	// resolves paths (Seatbelt) would reach its target unasked.
	reach := resolvedCaps(caps)
	if note := leadsTo(caps, reach); note != "" {
		// Where the paths lead is held to what may be granted as their
		// names are: by name, a link to another session's workspace is
		// outside the workspace root.
		if err := s.grantsReachOwnState(reach, sid); err != nil {
			var ie *InvalidCommandError
			if errors.As(err, &ie) {
				ie.Reason += note
			}
			return err
		}
	}
	if covered(caps, reach, sess.baseline, s.baselineReach) {
		return nil
	}
	s.refreshGrants(sess)
	if sess.withinGrant(caps, reach) {
		r.rec.Reason = ReasonGrantCached
		return nil
	}
	req := driverapi.ApprovalRequest{
		SessionID: sid, CommandID: r.rec.CommandID, Program: cmd.Program, Args: cmd.Args,
		Requested: caps, Baseline: sess.baseline, Summary: Summary(caps, sess.baseline) + leadsTo(caps, reach),
	}
	outcome, err := s.gate.Decide(ctx, req)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	switch {
	case err != nil:
		return &DeniedError{Code: ReasonApprovalDenied, Reason: req.Summary + ": " + err.Error()}
	case outcome == driverapi.ApprovalApproved:
		// The grant is of the names approved and of where they led when
		// approved: a link re-pointed later leads out of it.
		grant := withResolved(caps)
		sess.addGrant(grant)
		s.persist(sid, func(st *StoredGrants) { mergeGrant(st, grant) })
		r.rec.Reason = ReasonApprovalGranted
		return nil
	case outcome == driverapi.ApprovalApprovedOnce:
		// This command only: nothing is kept, in memory or in the grant
		// store, so the next command asking the same is asked again.
		r.rec.Reason = ReasonApprovalGrantedOnce
		return nil
	case outcome == driverapi.ApprovalTimeout:
		return &DeniedError{Code: ReasonApprovalTimeout, Reason: fmt.Sprintf("%s: no answer within %ds (sandbox.approval_timeout_seconds)", req.Summary, s.cfg.Sandbox.ApprovalTimeoutSeconds)}
	}
	return &DeniedError{Code: ReasonApprovalDenied, Reason: req.Summary + ": not approved"}
}

// withinGrant reports whether c, and reach (c's paths as they resolve),
// lie within one of the session's grants.
func (ss *session) withinGrant(c, reach driverapi.Capabilities) bool {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	for _, g := range ss.grants {
		if covered(c, reach, g, g) {
			return true
		}
	}
	if len(ss.netHosts) > 0 {
		g := driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: ss.netHosts}}
		if c.IsWithin(g) {
			return true
		}
	}
	return false
}

func (ss *session) addGrant(c driverapi.Capabilities) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.grants = append(ss.grants, cloneCaps(c))
}

// Covered reports whether requested lies within base both by its paths'
// names and by where they resolve now, against baseReach (Reach(base),
// taken when base was set): a symbolic link under a path of base, which a
// command that may write there can make, leads out of it, and a driver
// that resolves paths (Seatbelt) would reach its target. An approver that
// answers yes to what lies within a baseline of its own decides with it.
func Covered(requested, base, baseReach driverapi.Capabilities) bool {
	return covered(requested, resolvedCaps(requested), base, baseReach)
}

func covered(requested, reach, base, baseReach driverapi.Capabilities) bool {
	return requested.IsWithin(base) && reach.IsWithin(baseReach)
}

// Reach is c with, beside each fs path that resolves elsewhere, where it
// resolves now: what c covers for Covered, fixed at the time it is taken,
// so a link re-pointed later does not carry it along.
func Reach(c driverapi.Capabilities) driverapi.Capabilities { return withResolved(c) }

// resolvedCaps is c with each fs path as it resolves now, symbolic links
// followed: what a driver that resolves paths reaches. A path that does
// not resolve is kept as named.
func resolvedCaps(c driverapi.Capabilities) driverapi.Capabilities {
	c = cloneCaps(c)
	for _, paths := range [][]string{c.FSRead, c.FSWrite} {
		for i, p := range paths {
			paths[i] = resolvePath(p)
		}
	}
	return c
}

// withResolved is c with, beside each fs path that resolves elsewhere,
// where it resolves now.
func withResolved(c driverapi.Capabilities) driverapi.Capabilities {
	c = cloneCaps(c)
	for _, paths := range []*[]string{&c.FSRead, &c.FSWrite} {
		for _, p := range *paths {
			if r := resolvePath(p); r != filepath.Clean(p) {
				*paths = append(*paths, r)
			}
		}
	}
	return c
}

func resolvePath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// leadsTo is the approval summary's note of the requested paths that
// resolve elsewhere than their names say, or "".
func leadsTo(named, reach driverapi.Capabilities) string {
	var notes []string
	for _, pair := range [][2][]string{{named.FSRead, reach.FSRead}, {named.FSWrite, reach.FSWrite}} {
		for i, p := range pair[0] {
			if r := pair[1][i]; r != filepath.Clean(p) {
				notes = append(notes, p+" leads to "+r)
			}
		}
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, ", ") + ")"
}

func cloneCaps(c driverapi.Capabilities) driverapi.Capabilities {
	c.FSRead = append([]string(nil), c.FSRead...)
	c.FSWrite = append([]string(nil), c.FSWrite...)
	c.Network.Hosts = append([]string(nil), c.Network.Hosts...)
	return c
}

// capabilities fetches the driver's fingerprint once and keeps it.
func (s *WorkspaceSandbox) capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	s.capsMu.Lock()
	if s.hostCaps != nil {
		hc := *s.hostCaps
		s.capsMu.Unlock()
		return hc, nil
	}
	s.capsMu.Unlock()
	// Not under the lock: a slow first launch must not serialise errors,
	// and two concurrent first fetches are harmless.
	hc, err := s.driver.Capabilities(ctx)
	if err != nil {
		return hc, s.driverErr("Capabilities", err)
	}
	s.capsMu.Lock()
	s.hostCaps = &hc
	s.capsMu.Unlock()
	return hc, nil
}

// RequiredFeatures lists the driver features a command with caps relies on.
// The baseline promises (host files invisible, writes confined to the
// workspace, the host's environment never passed through) need the fs
// isolation features and env isolation for every command: without the
// last, a driver that hands the child its own environment would leak the
// host's secrets and the plugin's cookie. The rest follow from what caps
// asks for.
func RequiredFeatures(caps driverapi.Capabilities) []string {
	req := []string{driverapi.FeatureFSReadIsolation, driverapi.FeatureFSWriteIsolation, driverapi.FeatureEnvIsolation}
	switch caps.Network.Mode {
	case driverapi.NetworkNone:
		req = append(req, driverapi.FeatureNetworkNone)
	case driverapi.NetworkAllowAll:
		req = append(req, driverapi.FeatureNetworkAll)
	case driverapi.NetworkAllowHosts:
		req = append(req, driverapi.FeatureNetworkViaProxy)
	}
	if !caps.SpawnSubprocess {
		req = append(req, driverapi.FeatureSubprocessControl)
	}
	if caps.MaxMemoryMB > 0 {
		req = append(req, driverapi.FeatureMemoryLimit)
	}
	return req
}

// enforceable refuses caps when the driver does not claim a feature they
// need. It is the one check of enforceability: front ends do not ask the
// driver (they may run before it has started, and the driver's claims
// can change when it is relaunched); the driver itself refuses what it
// cannot do as defence in depth.
func (s *WorkspaceSandbox) enforceable(hc driverapi.HostCapabilities, caps driverapi.Capabilities) error {
	if err := unenforceable(hc, "enforce", RequiredFeatures(caps)); err != nil {
		return err
	}
	if caps.Network.Mode == driverapi.NetworkAllowHosts && s.mediator == nil {
		return &DeniedError{Code: ReasonUnenforceable,
			Reason: "network mode allow_hosts needs the managed proxy, and no network mediator is configured"}
	}
	return nil
}

// unenforceable is the refusal of the first of feats the driver does not
// claim, with the reason the driver gives for it (and its fix), or nil.
// verb says what the driver cannot do with it ("enforce", "give").
func unenforceable(hc driverapi.HostCapabilities, verb string, feats []string) error {
	for _, f := range feats {
		if hc.Has(f) {
			continue
		}
		why := "the driver does not claim it"
		for _, u := range hc.Unavailable {
			if u.Feature == f {
				why = u.Reason
				if u.Fix != "" {
					why += " (fix: " + u.Fix + ")"
				}
			}
		}
		return &DeniedError{Code: ReasonUnenforceable, Feature: f,
			Reason: fmt.Sprintf("driver %s cannot %s %s here: %s", hc.Backend, verb, f, why)}
	}
	return nil
}

func (s *WorkspaceSandbox) profileFor(ctx context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	if req.Proxy != nil {
		return s.driver.ProfileFor(ctx, req)
	}
	kb, _ := json.Marshal(req)
	key := string(kb)
	s.profMu.Lock()
	p, ok := s.profiles[key]
	s.profMu.Unlock()
	if ok {
		return p, nil
	}
	p, err := s.driver.ProfileFor(ctx, req)
	if err != nil {
		return p, err
	}
	s.profMu.Lock()
	if s.profiles == nil || len(s.profiles) >= maxCachedProfiles {
		s.profiles = map[string]driverapi.Profile{}
	}
	s.profiles[key] = p
	s.profMu.Unlock()
	return p, nil
}

func (s *WorkspaceSandbox) driverErr(op string, err error) error {
	s.profMu.Lock()
	s.profiles = nil
	s.profMu.Unlock()
	var ise *driverapi.InvalidSpecError
	if errors.As(err, &ise) {
		// The driver refused a part of the command the caller gave
		// (a workspace of system directories, a path that does not
		// exist, a program it cannot execute): bad input, named by the
		// command's own field, not a driver failure to retry.
		if f, ok := commandFieldOf(ise.Field); ok {
			return &InvalidCommandError{Field: f, Reason: ise.Reason, Err: err}
		}
	}
	var de *DriverError
	if errors.As(err, &de) {
		return err
	}
	name := "driver"
	if n, ok := s.driver.(interface{ Name() string }); ok {
		name = n.Name()
	} else {
		s.capsMu.Lock()
		if s.hostCaps != nil {
			name = s.hostCaps.Backend
		}
		s.capsMu.Unlock()
	}
	return &DriverError{Driver: name, Op: op, Err: err}
}

// commandFieldOf is the Command field (as InvalidCommandError names it) of
// a driver's InvalidSpecError field; ok is false for a field of the
// driver's own making (protected entries, the proxy, the home directory),
// which stays a driver error.
func commandFieldOf(specField string) (field string, ok bool) {
	switch specField {
	case "program", "args", "cwd", "workspace", "stdin", "timeout", "max_output_bytes", "session_id":
		return specField, true
	case "env":
		return "env", true
	case "fs_read", "fs_write":
		return "capabilities." + specField, true
	case "max_memory_mb":
		return "capabilities.max_memory_mb", true
	case "network", "network.mode":
		return "capabilities.network", true
	}
	return "", false
}
