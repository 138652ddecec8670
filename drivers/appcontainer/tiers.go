package appcontainer

import (
	"fmt"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Tier is one rung of the soft-degrade chain, strongest first.
type Tier int

const (
	// TierAppContainer: a fresh AppContainer profile per command; the
	// child runs below Low integrity and reaches only what its package SID
	// or capability SIDs are granted.
	TierAppContainer Tier = iota + 1
	// TierRestrictedToken: CreateRestrictedToken(DISABLE_MAX_PRIVILEGE)
	// with restricting SIDs, at Low integrity.
	TierRestrictedToken
	// TierJobObject: the host's token; only the Job Object contains it.
	TierJobObject
)

// Tiers lists the chain in order.
func Tiers() []Tier { return []Tier{TierAppContainer, TierRestrictedToken, TierJobObject} }

func (t Tier) String() string {
	switch t {
	case TierAppContainer:
		return "appcontainer"
	case TierRestrictedToken:
		return "restricted_token"
	case TierJobObject:
		return "job_object"
	}
	return fmt.Sprintf("tier(%d)", int(t))
}

// ParseTier reads a tier name as used in the options.
func ParseTier(s string) (Tier, error) {
	for _, t := range Tiers() {
		if t.String() == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown tier %q (want appcontainer, restricted_token or job_object)", s)
}

// jobFeatures hold in every tier: the Job Object is always there.
func jobFeatures() []string {
	return []string{
		driverapi.FeatureNetworkAll,
		driverapi.FeatureSubprocessControl,
		driverapi.FeatureMemoryLimit,
		driverapi.FeatureEnvIsolation,
		driverapi.FeatureProcessTreeKill,
	}
}

// TierFeatures is what a tier enforces.
func TierFeatures(t Tier) []string {
	f := jobFeatures()
	switch t {
	case TierAppContainer:
		// Only an AppContainer has a network boundary (the capability
		// SIDs) and keeps the user's own files unreadable.
		f = append(f, driverapi.FeatureFSReadIsolation, driverapi.FeatureFSWriteIsolation,
			driverapi.FeatureProtectedPaths, driverapi.FeatureNetworkNone)
	case TierRestrictedToken:
		// Low integrity cannot write Medium objects (no-write-up) but
		// can read them; restricting SIDs make DENY ACEs bite.
		f = append(f, driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths)
	}
	return f
}

// tierLacks says why a tier cannot enforce feature (for the report).
func tierLacks(t Tier, feature string) string {
	switch feature {
	case driverapi.FeatureNetworkNone:
		return "only an AppContainer (no network capability SIDs) blocks the network without the Windows Filtering Platform; the " + t.String() + " tier has full network access"
	case driverapi.FeatureFSReadIsolation:
		return "Low integrity and restricted tokens can still read the user's files (no-read-up is not set on them); only an AppContainer cannot"
	case driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths:
		return "the " + t.String() + " tier runs with the host's own token, so file ACLs give it everything the host user has"
	}
	return "not enforced by the " + t.String() + " tier"
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// alwaysUnavailable are the features no tier offers, with why.
func alwaysUnavailable() []driverapi.Unavailable {
	return []driverapi.Unavailable{
		{Feature: driverapi.FeatureNetworkViaProxy,
			Reason: "confining a process to the managed proxy needs Windows Filtering Platform rules, which need administrator rights; network allow_hosts is refused with the addresses it would have allowed",
			Fix:    "use network none or network all"},
		{Feature: driverapi.FeaturePidLimit,
			Reason: "the Job Object caps active processes, not threads"},
		{Feature: driverapi.FeatureCPULimit,
			Reason: "Job Object CPU rate control is not applied by this driver version"},
	}
}

// report builds the capability report for the best tier that works here
// (0 when none), the configured floor, and the probe errors of the tiers
// above it.
func report(best, floor Tier, probeErrs map[Tier]error) ([]string, []driverapi.Unavailable, map[string]string) {
	details := map[string]string{"min_tier": floor.String()}
	var reasons []string
	for _, t := range Tiers() {
		if err := probeErrs[t]; err != nil {
			reasons = append(reasons, t.String()+": "+err.Error())
		}
	}
	if len(reasons) > 0 {
		details["probe_failures"] = strings.Join(reasons, "; ")
	}
	un := alwaysUnavailable()
	if best == 0 || best > floor {
		why := "no tier down to " + floor.String() + " could be set up here"
		if len(reasons) > 0 {
			why += ": " + strings.Join(reasons, "; ")
		}
		for _, f := range driverapi.KnownFeatures() {
			if !has([]string{driverapi.FeatureNetworkViaProxy, driverapi.FeaturePidLimit, driverapi.FeatureCPULimit}, f) {
				un = append(un, driverapi.Unavailable{Feature: f, Reason: why, Fix: "lower min_tier, or check the probe failures"})
			}
		}
		return nil, un, details
	}
	details["tier"] = best.String()
	features := TierFeatures(best)
	for _, f := range driverapi.KnownFeatures() {
		if has(features, f) || has([]string{driverapi.FeatureNetworkViaProxy, driverapi.FeaturePidLimit, driverapi.FeatureCPULimit}, f) {
			continue
		}
		un = append(un, driverapi.Unavailable{Feature: f, Reason: tierLacks(best, f)})
	}
	return features, un, details
}

// chainFor lists the tiers a command may use, best first: from the
// strongest down to the configured floor, but never below the weakest
// tier that still enforces the command's network mode. A soft degrade
// may lose read isolation (audited in the exit details), never widen the
// network: a command that asked for no network runs in an AppContainer or
// not at all.
func chainFor(p Plan, floor Tier) []Tier {
	lowest := floor
	if p.Network == driverapi.NetworkNone.String() && lowest > TierAppContainer {
		lowest = TierAppContainer
	}
	var out []Tier
	for _, t := range Tiers() {
		if t <= lowest {
			out = append(out, t)
		}
	}
	return out
}
