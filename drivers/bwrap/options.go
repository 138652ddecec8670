package bwrap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// optionsEnv is the environment variable through which the host hands the
// driver its [sandbox.linux] configuration section, as one JSON object.
const optionsEnv = "ALEPH_DRIVER_OPTIONS"

// defaultMaxPids is the pids limit of a command when none is configured.
const defaultMaxPids = 200

// defaultTmpfsMaxMB is what a command's writable tmpfs mounts (/tmp and
// /dev/shm) hold together when tmpfs_max_mb is not configured. Without a
// bound each would be the kernel's default, half of RAM, of unswappable
// host memory pinned by one command.
const defaultTmpfsMaxMB = 1024

// maxTmpfsMaxMB bounds tmpfs_max_mb (1 TiB): far above any real host, low
// enough that the byte count cannot overflow.
const maxTmpfsMaxMB = 1 << 20

// Prepared sandboxes (prepared_linux.go): the defaults.
const (
	defaultPreparedPerProfile = 2
	defaultPreparedMax        = 16
	defaultPreparedIdleMS     = 60_000
	maxPreparedPerProfile     = 16
	maxPreparedMax            = 1024
	maxPreparedIdleMS         = 3_600_000
)

// Session sandboxes (session_linux.go): the defaults.
const (
	defaultSessionIdleMS = 300_000
	// sessionPlaceholdersCommand: a session's command makes the
	// placeholders of missing protected entries and removes them when it
	// ends, as a command without a session does (the default).
	sessionPlaceholdersCommand = "command"
	// sessionPlaceholdersSession: the session sandbox keeps them, and the
	// protected entries found, until it ends; a command checks the
	// workspace is unchanged instead of scanning it.
	sessionPlaceholdersSession = "session"
	maxSessionIdleMS           = 86_400_000
	// defaultSessionAhead is how many session sandboxes wait, built ahead,
	// per recently used profile (sessionahead_linux.go).
	defaultSessionAhead = 1
	// defaultSessionAheadIdleMS is how long one waits for a session.
	defaultSessionAheadIdleMS = 30_000
	maxSessionAhead           = 8
	maxSessionAheadIdleMS     = 3_600_000
)

// sessionSandboxMode selects whether the commands of a session that ask
// for it run in one persistent sandbox per session and profile.
type sessionSandboxMode string

const (
	// sessionSandboxAuto: where the driver can (root, bwrap tier).
	sessionSandboxAuto sessionSandboxMode = "auto"
	// sessionSandboxOff: every command gets a sandbox of its own.
	sessionSandboxOff sessionSandboxMode = "off"
	// sessionSandboxAlways: as auto, and every command of a session runs in
	// its session's sandbox whether its host asked or not: the test
	// switch (ALEPH_TEST_SESSION) that runs whole suites that way.
	sessionSandboxAlways sessionSandboxMode = "always"
)

// preparedMode selects when commands run in sandboxes built ahead.
type preparedMode string

const (
	// preparedAuto keeps up to prepared_per_profile sandboxes ready for a
	// profile once it has been used twice within prepared_idle_ms.
	preparedAuto preparedMode = "auto"
	// preparedAlways runs every command it can through a prepared
	// sandbox: one is built for the command when none waits (slower than
	// a plain launch; the hand-over path for every command, as the test
	// suites run it).
	preparedAlways preparedMode = "always"
	// preparedOff builds every sandbox for its command.
	preparedOff preparedMode = "off"
)

// cgroupMode selects how resource limits are enforced.
type cgroupMode string

const (
	// cgroupAuto uses cgroup v2 where delegated, else v1 where writable,
	// else none.
	cgroupAuto cgroupMode = "auto"
	// cgroupV2 requires a delegated cgroup v2 subtree.
	cgroupV2 cgroupMode = "v2"
	// cgroupV1 requires writable cgroup v1 controllers.
	cgroupV1 cgroupMode = "v1"
	// cgroupNone enforces no cgroup limits (RLIMIT_AS remains).
	cgroupNone cgroupMode = "none"
)

// fallback selects what the driver does where bwrap cannot create its
// namespaces (an unprivileged container, user namespaces disabled).
type fallback string

const (
	// fallbackNone fails closed: nothing runs without the namespaces.
	fallbackNone fallback = "none"
	// fallbackLandlock runs commands without bwrap, confined by
	// sandbox-init alone (Landlock, seccomp, rlimits, the cgroup): the
	// weaker Landlock tier (docs/linux.md says what it lacks).
	fallbackLandlock fallback = "landlock"
)

// options is the driver's configuration ([sandbox.linux]).
type options struct {
	// MaxPids caps processes+threads per command; nil means defaultMaxPids,
	// 0 means no pids limit.
	MaxPids *uint64 `json:"max_pids,omitempty"`
	// CPUQuotaPercent caps CPU time as a percentage of one core (50 = half
	// a core, 200 = two cores); 0 means no CPU cap.
	CPUQuotaPercent uint64 `json:"cpu_quota_percent,omitempty"`
	// Cgroup selects the limits mechanism; empty means auto.
	Cgroup cgroupMode `json:"cgroup,omitempty"`
	// BwrapPath is the bubblewrap binary; empty means "bwrap" on PATH.
	BwrapPath string `json:"bwrap_path,omitempty"`
	// TmpfsMaxMB caps, in MiB, what a command's tmpfs mounts hold
	// together; 0 means defaultTmpfsMaxMB. A memory limit lowers it
	// further (see tmpfsBudget). There is no "unbounded".
	TmpfsMaxMB uint64 `json:"tmpfs_max_mb,omitempty"`
	// ProtectedScanMaxEntries bounds the directory entries one command's
	// search for nested .git entries visits; 0 means
	// defaultProtectedScanMaxEntries.
	ProtectedScanMaxEntries uint64 `json:"protected_scan_max_entries,omitempty"`
	// ProtectedScanTimeoutMS bounds that search in time; 0 means
	// defaultProtectedScanTimeout.
	ProtectedScanTimeoutMS uint64 `json:"protected_scan_timeout_ms,omitempty"`
	// fallback is what runs where bwrap cannot create namespaces; empty
	// means fallbackNone.
	Fallback fallback `json:"fallback,omitempty"`
	// Prepared selects prepared sandboxes; empty means preparedAuto.
	Prepared preparedMode `json:"prepared,omitempty"`
	// PreparedPerProfile is how many sandboxes wait per profile and
	// session; nil means defaultPreparedPerProfile (0 turns the pool off).
	PreparedPerProfile *uint64 `json:"prepared_per_profile,omitempty"`
	// PreparedMax caps the sandboxes waiting (or being built) in all;
	// 0 means defaultPreparedMax.
	PreparedMax uint64 `json:"prepared_max,omitempty"`
	// PreparedIdleMS is how long a prepared sandbox waits before it is
	// destroyed; 0 means defaultPreparedIdleMS.
	PreparedIdleMS uint64 `json:"prepared_idle_ms,omitempty"`
	// SessionSandbox selects session sandboxes (session_linux.go) for the
	// commands that ask for theirs; empty means sessionSandboxAuto.
	SessionSandbox sessionSandboxMode `json:"session_sandbox,omitempty"`
	// SessionIdleMS is how long a session sandbox lives without a
	// command; 0 means defaultSessionIdleMS.
	SessionIdleMS uint64 `json:"session_idle_ms,omitempty"`
	// SessionPlaceholders says how long a session sandbox's placeholders
	// of missing protected entries stay on the host: for each command
	// (sessionPlaceholdersCommand, empty) or for the session sandbox's
	// life (sessionPlaceholdersSession: sessionprotect_linux.go).
	SessionPlaceholders string `json:"session_placeholders,omitempty"`
	// SessionAhead is how many session sandboxes are kept built ahead per
	// recently used profile, for the first command of a new session; nil
	// means defaultSessionAhead, 0 builds none ahead.
	SessionAhead *uint64 `json:"session_ahead,omitempty"`
	// SessionAheadIdleMS is how long a session sandbox built ahead waits
	// for a session before it is ended; 0 means defaultSessionAheadIdleMS.
	SessionAheadIdleMS uint64 `json:"session_ahead_idle_ms,omitempty"`
	// MaxSessionNetworks caps the network namespaces held for sessions
	// (each a pasta or slirp process and a namespace); past it a command
	// needing one is refused as resource_exhausted. 0: the default (64).
	MaxSessionNetworks uint64 `json:"max_session_networks,omitempty"`
}

// optionsError is a configuration the driver refuses.
type optionsError struct {
	// Key is the refused key, when one is to blame.
	Key    string
	Reason string
}

func (e *optionsError) Error() string { return "invalid " + optionsEnv + ": " + e.Reason }

// parseOptions decodes the JSON of optionsEnv strictly: unknown keys,
// trailing data and out-of-range values are refused, because a setting the
// driver silently ignored would be a limit nobody enforces. Empty input
// gives the defaults.
func parseOptions(data string) (options, error) {
	var o options
	if len(bytes.TrimSpace([]byte(data))) == 0 {
		return o.withDefaults(), nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return options{}, &optionsError{Reason: err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return options{}, &optionsError{Reason: "trailing data after the JSON object"}
	}
	if err := o.Validate(); err != nil {
		return options{}, err
	}
	return o.withDefaults(), nil
}

// Validate checks value ranges.
func (o options) Validate() error {
	switch o.Cgroup {
	case "", cgroupAuto, cgroupV2, cgroupV1, cgroupNone:
	default:
		return &optionsError{Key: "cgroup", Reason: fmt.Sprintf("cgroup %q: want auto, v2, v1 or none", o.Cgroup)}
	}
	switch o.Fallback {
	case "", fallbackNone, fallbackLandlock:
	default:
		return &optionsError{Key: "fallback", Reason: fmt.Sprintf("fallback %q: want none or landlock", o.Fallback)}
	}
	switch o.Prepared {
	case "", preparedAuto, preparedAlways, preparedOff:
	default:
		return &optionsError{Key: "prepared", Reason: fmt.Sprintf("prepared %q: want auto, always or off", o.Prepared)}
	}
	if o.PreparedPerProfile != nil && *o.PreparedPerProfile > maxPreparedPerProfile {
		return &optionsError{Key: "prepared_per_profile", Reason: fmt.Sprintf("prepared_per_profile %d is out of range (0..%d)", *o.PreparedPerProfile, maxPreparedPerProfile)}
	}
	if o.PreparedMax > maxPreparedMax {
		return &optionsError{Key: "prepared_max", Reason: fmt.Sprintf("prepared_max %d is out of range (0 for the default of %d, up to %d)", o.PreparedMax, defaultPreparedMax, maxPreparedMax)}
	}
	switch o.SessionSandbox {
	case "", sessionSandboxAuto, sessionSandboxOff, sessionSandboxAlways:
	default:
		return &optionsError{Key: "session_sandbox", Reason: fmt.Sprintf("session_sandbox %q: want auto, off or always", o.SessionSandbox)}
	}
	switch o.SessionPlaceholders {
	case "", sessionPlaceholdersCommand, sessionPlaceholdersSession:
	default:
		return &optionsError{Key: "session_placeholders", Reason: fmt.Sprintf("session_placeholders %q: want command or session", o.SessionPlaceholders)}
	}
	if o.SessionIdleMS > maxSessionIdleMS {
		return &optionsError{Key: "session_idle_ms", Reason: fmt.Sprintf("session_idle_ms %d is out of range (0 for the default of %d, up to %d)", o.SessionIdleMS, defaultSessionIdleMS, maxSessionIdleMS)}
	}
	if o.SessionAhead != nil && *o.SessionAhead > maxSessionAhead {
		return &optionsError{Key: "session_ahead", Reason: fmt.Sprintf("session_ahead %d is out of range (0..%d)", *o.SessionAhead, maxSessionAhead)}
	}
	if o.SessionAheadIdleMS > maxSessionAheadIdleMS {
		return &optionsError{Key: "session_ahead_idle_ms", Reason: fmt.Sprintf("session_ahead_idle_ms %d is out of range (0 for the default of %d, up to %d)", o.SessionAheadIdleMS, defaultSessionAheadIdleMS, maxSessionAheadIdleMS)}
	}
	if o.PreparedIdleMS > maxPreparedIdleMS {
		return &optionsError{Key: "prepared_idle_ms", Reason: fmt.Sprintf("prepared_idle_ms %d is out of range (0 for the default of %d, up to %d)", o.PreparedIdleMS, defaultPreparedIdleMS, maxPreparedIdleMS)}
	}
	if o.MaxPids != nil && *o.MaxPids > 1<<22 {
		return &optionsError{Key: "max_pids", Reason: fmt.Sprintf("max_pids %d is above the kernel's pid_max ceiling", *o.MaxPids)}
	}
	if o.CPUQuotaPercent > 102_400 {
		return &optionsError{Key: "cpu_quota_percent", Reason: fmt.Sprintf("cpu_quota_percent %d is out of range (0..102400: 1024 cores)", o.CPUQuotaPercent)}
	}
	for _, c := range o.BwrapPath {
		if c == 0 {
			return &optionsError{Key: "bwrap_path", Reason: "bwrap_path contains a NUL byte"}
		}
	}
	if o.TmpfsMaxMB > maxTmpfsMaxMB {
		return &optionsError{Key: "tmpfs_max_mb", Reason: fmt.Sprintf("tmpfs_max_mb %d is out of range (0 for the default of %d, up to %d)", o.TmpfsMaxMB, defaultTmpfsMaxMB, maxTmpfsMaxMB)}
	}
	if o.ProtectedScanMaxEntries > 1<<30 {
		return &optionsError{Key: "protected_scan_max_entries", Reason: fmt.Sprintf("protected_scan_max_entries %d is out of range (0..1073741824)", o.ProtectedScanMaxEntries)}
	}
	if o.ProtectedScanTimeoutMS > 600_000 {
		return &optionsError{Key: "protected_scan_timeout_ms", Reason: fmt.Sprintf("protected_scan_timeout_ms %d is out of range (0..600000)", o.ProtectedScanTimeoutMS)}
	}
	if o.MaxSessionNetworks > maxSessionNetworks {
		return &optionsError{Key: "max_session_networks", Reason: fmt.Sprintf("max_session_networks %d is out of range (0 for the default of %d, up to %d)", o.MaxSessionNetworks, defaultMaxSessionNetworks, maxSessionNetworks)}
	}
	if o.BwrapPath != "" && o.BwrapPath[0] != '/' {
		return &optionsError{Key: "bwrap_path", Reason: fmt.Sprintf("bwrap_path %q is not absolute", o.BwrapPath)}
	}
	return nil
}

// defaultMaxSessionNetworks is the default config.MaxSessionNetworks
// (max_session_networks): how many sessions may hold a network namespace
// of their own at once.
const defaultMaxSessionNetworks = 64

// maxSessionNetworks bounds max_session_networks: each namespace holds
// processes and descriptors of its own.
const maxSessionNetworks = 4096

func (o options) withDefaults() options {
	if o.Cgroup == "" {
		o.Cgroup = cgroupAuto
	}
	if o.Fallback == "" {
		o.Fallback = fallbackNone
	}
	if o.MaxPids == nil {
		n := uint64(defaultMaxPids)
		o.MaxPids = &n
	}
	if o.Prepared == "" {
		o.Prepared = preparedAuto
	}
	if o.PreparedPerProfile == nil {
		n := uint64(defaultPreparedPerProfile)
		o.PreparedPerProfile = &n
	}
	if o.PreparedMax == 0 {
		o.PreparedMax = defaultPreparedMax
	}
	if o.PreparedIdleMS == 0 {
		o.PreparedIdleMS = defaultPreparedIdleMS
	}
	if o.SessionSandbox == "" {
		o.SessionSandbox = sessionSandboxAuto
	}
	if o.SessionIdleMS == 0 {
		o.SessionIdleMS = defaultSessionIdleMS
	}
	if o.SessionAhead == nil {
		n := uint64(defaultSessionAhead)
		o.SessionAhead = &n
	}
	if o.SessionAheadIdleMS == 0 {
		o.SessionAheadIdleMS = defaultSessionAheadIdleMS
	}
	return o
}

// Pids is the effective pids limit (0: none).
func (o options) Pids() uint64 {
	if o.MaxPids == nil {
		return defaultMaxPids
	}
	return *o.MaxPids
}

// TmpfsMaxBytes is the effective tmpfs_max_mb in bytes.
func (o options) TmpfsMaxBytes() uint64 {
	if o.TmpfsMaxMB == 0 {
		return defaultTmpfsMaxMB << 20
	}
	return o.TmpfsMaxMB << 20
}
