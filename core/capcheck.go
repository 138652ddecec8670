package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func (s *WorkspaceSandbox) checkCapabilities(ctx context.Context, r *run, sess *session, sid string, cmd Command) error {
	caps := cmd.Capabilities
	if err := s.grantsReachOwnState(caps, sid); err != nil {
		return err
	}
	if caps.IsWithin(sess.baseline) {
		return nil
	}
	s.refreshGrants(sess)
	if sess.withinGrant(caps) {
		r.rec.Reason = ReasonGrantCached
		return nil
	}
	req := driverapi.ApprovalRequest{
		SessionID: sid, CommandID: r.rec.CommandID, Program: cmd.Program, Args: cmd.Args,
		Requested: caps, Baseline: sess.baseline, Summary: Summary(caps, sess.baseline),
	}
	outcome, err := s.gate.Decide(ctx, req)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	switch {
	case err != nil:
		return &DeniedError{Code: ReasonApprovalDenied, Reason: req.Summary + ": " + err.Error()}
	case outcome == driverapi.ApprovalApproved:
		sess.addGrant(caps)
		s.persist(sid, func(st *StoredGrants) { mergeGrant(st, caps) })
		r.rec.Reason = ReasonApprovalGranted
		return nil
	case outcome == driverapi.ApprovalTimeout:
		return &DeniedError{Code: ReasonApprovalTimeout, Reason: fmt.Sprintf("%s: no answer within %ds (sandbox.approval_timeout_seconds)", req.Summary, s.cfg.Sandbox.ApprovalTimeoutSeconds)}
	}
	return &DeniedError{Code: ReasonApprovalDenied, Reason: req.Summary + ": not approved"}
}

func (ss *session) withinGrant(c driverapi.Capabilities) bool {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	for _, g := range ss.grants {
		if c.IsWithin(g) {
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

func (s *WorkspaceSandbox) enforceable(hc driverapi.HostCapabilities, caps driverapi.Capabilities) error {
	for _, f := range RequiredFeatures(caps) {
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
			Reason: fmt.Sprintf("driver %s cannot enforce %s here: %s", hc.Backend, f, why)}
	}
	if caps.Network.Mode == driverapi.NetworkAllowHosts && s.mediator == nil {
		return &DeniedError{Code: ReasonUnenforceable,
			Reason: "network mode allow_hosts needs the managed proxy, and no network mediator is configured"}
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
