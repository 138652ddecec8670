package appcontainer

import (
	"fmt"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Tier is one of the driver's isolation levels, strongest first.
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

// Tiers lists the tiers, strongest first.
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

// TierFeatures is what a tier enforces, and nothing more.
//
// The Job Object is in every tier, but what it gives depends on who runs
// in it. With the host user's token (the job tier) or a restricted token
// that still carries the user's groups, a command can ask a service to
// start a process for it (the task scheduler, WMI's Win32_Process.Create,
// an out-of-process COM server): that process is not in the job, so
// neither the process limit, nor the memory cap, nor the tree kill holds.
// Only an AppContainer is refused those brokers, so only that tier claims
// them. env_isolation and network_all hold everywhere: the environment
// block is built by the driver, and no tier narrows the network it grants.
func TierFeatures(t Tier) []string {
	switch t {
	case TierAppContainer:
		return []string{
			driverapi.FeatureFSReadIsolation, driverapi.FeatureFSWriteIsolation,
			driverapi.FeatureProtectedPaths, driverapi.FeatureNetworkNone, driverapi.FeatureNetworkAll,
			driverapi.FeatureSubprocessControl, driverapi.FeatureMemoryLimit,
			driverapi.FeatureEnvIsolation, driverapi.FeatureProcessTreeKill,
		}
	case TierRestrictedToken:
		// WRITE_RESTRICTED with a per-command capability SID: a write
		// needs both the user's access and an ACE for that SID (or
		// Everyone / the logon SID), and Low integrity adds no-write-up.
		// Reads are not restricted.
		return []string{
			driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths,
			driverapi.FeatureNetworkAll, driverapi.FeatureEnvIsolation,
		}
	case TierJobObject:
		return []string{driverapi.FeatureNetworkAll, driverapi.FeatureEnvIsolation}
	}
	return nil
}

// tierLacks says why a tier cannot enforce feature (for the report).
func tierLacks(t Tier, feature string) string {
	switch feature {
	case driverapi.FeatureNetworkNone:
		return "only an AppContainer (no network capability SIDs) blocks the network without the Windows Filtering Platform; the " + t.String() + " tier has full network access"
	case driverapi.FeatureFSReadIsolation:
		return "the " + t.String() + " tier can read every file the host user can; only an AppContainer cannot"
	case driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths:
		return "the " + t.String() + " tier runs with the host's own token, so file ACLs give it everything the host user has"
	case driverapi.FeatureSubprocessControl, driverapi.FeatureMemoryLimit, driverapi.FeatureProcessTreeKill:
		return "the " + t.String() + " tier keeps the user's groups, so it can have the task scheduler, WMI or a COM server start a process outside its Job Object, where no process limit, memory cap or tree kill reaches"
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
		{Feature: driverapi.FeatureSpawnRefusedReport,
			Reason: "the Job Object refuses a process over its limit without telling the driver, so refused starts are not counted",
			Fix:    "read the command's stderr (the CLI recognises the common messages)"},
		{Feature: driverapi.FeatureViolationReport,
			Reason: "AppContainer denials are not reported to the driver, so a result lists no violations (unknown, not none)",
			Fix:    "read the command's stderr"},
	}
}

// report builds the capability report for the best tier that works here
// (0 when none), the configured floor, and the probe errors of the tiers
// above it.
func report(best, floor Tier, probeErrs map[Tier]error) ([]string, []driverapi.Unavailable, map[string]string) {
	details := map[string]string{"min_tier": floor.String()}
	reasons := probeSummary(probeErrs)
	if reasons != "" {
		details["probe_failures"] = reasons
	}
	un := alwaysUnavailable()
	if best == 0 || best > floor {
		why := "no tier down to " + floor.String() + " could be set up here"
		if reasons != "" {
			why += ": " + reasons
		}
		for _, f := range driverapi.KnownFeatures() {
			if !has([]string{driverapi.FeatureNetworkViaProxy, driverapi.FeaturePidLimit, driverapi.FeatureCPULimit, driverapi.FeatureSpawnRefusedReport, driverapi.FeatureViolationReport}, f) {
				un = append(un, driverapi.Unavailable{Feature: f, Reason: why, Fix: "AppContainers need Windows 8 or later and no policy that disables them; check the probe failures"})
			}
		}
		return nil, un, details
	}
	details["tier"] = best.String()
	features := TierFeatures(best)
	for _, f := range driverapi.KnownFeatures() {
		if has(features, f) || has([]string{driverapi.FeatureNetworkViaProxy, driverapi.FeaturePidLimit, driverapi.FeatureCPULimit, driverapi.FeatureSpawnRefusedReport, driverapi.FeatureViolationReport}, f) {
			continue
		}
		un = append(un, driverapi.Unavailable{Feature: f, Reason: tierLacks(best, f)})
	}
	return features, un, details
}

// PlanNeeds lists the features a command with plan asks of the tier that
// runs it: write confinement to the workspace and grants and the
// protected directories (every plan has them), and what the network
// mode, spawn_subprocess and max_memory_mb ask for. Read isolation is not
// in the plan: the core requires it of every command and so refuses to
// use a driver whose Capabilities lack it; a direct client of a weaker
// tier (min_tier lowered, e.g. to run the conformance suite on it) gets
// what that tier claims and no more.
func PlanNeeds(p Plan) []string {
	need := []string{driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths}
	switch p.Network {
	case driverapi.NetworkNone.String():
		need = append(need, driverapi.FeatureNetworkNone)
	case driverapi.NetworkAllowAll.String():
		need = append(need, driverapi.FeatureNetworkAll)
	}
	if !p.SpawnSubprocess {
		need = append(need, driverapi.FeatureSubprocessControl)
	}
	if p.MaxMemoryMB > 0 {
		need = append(need, driverapi.FeatureMemoryLimit)
	}
	return need
}

// selectTier is the tier this host runs commands in: the strongest tier
// whose probe succeeded, no weaker than floor; 0 when there is none. A
// tier is skipped only because it is absent on the host (its probe
// failed), never because one command's setup failed.
func selectTier(floor Tier, probeErrs map[Tier]error) Tier {
	for _, t := range Tiers() {
		if t > floor {
			break
		}
		if probeErrs[t] == nil {
			return t
		}
	}
	return 0
}

// TierError refuses a command: the host's tier does not enforce what the
// command needs, or no tier is usable at all. Nothing was started.
type TierError struct {
	Tier    Tier     // the host's tier; 0 when none is usable
	Floor   Tier     // the configured min_tier
	Missing []string // the needed features the tier lacks
	Probes  string   // why stronger tiers are absent
}

func (e *TierError) Error() string {
	var msg string
	if e.Tier == 0 {
		msg = "no sandbox tier down to min_tier " + e.Floor.String() + " is available on this host"
	} else {
		msg = "this host's sandbox tier " + e.Tier.String() + " does not enforce " + strings.Join(e.Missing, ", ") + ", which the command needs; not running it in a weaker sandbox"
	}
	if e.Probes != "" {
		msg += " (" + e.Probes + ")"
	}
	return msg
}

// tierFor decides the tier for one command: the host's tier, if it
// enforces everything plan needs, else a *TierError. There is no
// per-command fall to a weaker tier.
func tierFor(p Plan, host, floor Tier, probeErrs map[Tier]error) (Tier, error) {
	probes := probeSummary(probeErrs)
	if host == 0 {
		return 0, &TierError{Floor: floor, Probes: probes}
	}
	var missing []string
	for _, f := range PlanNeeds(p) {
		if !has(TierFeatures(host), f) {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return 0, &TierError{Tier: host, Floor: floor, Missing: missing, Probes: probes}
	}
	return host, nil
}

// probeSummary joins the probe failures, strongest tier first.
func probeSummary(probeErrs map[Tier]error) string {
	var reasons []string
	for _, t := range Tiers() {
		if err := probeErrs[t]; err != nil {
			reasons = append(reasons, t.String()+": "+err.Error())
		}
	}
	return strings.Join(reasons, "; ")
}
