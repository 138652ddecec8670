package bwrap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// OptionsEnv is the environment variable through which the host hands the
// driver its [sandbox.linux] configuration section, as one JSON object.
const OptionsEnv = "ALEPH_DRIVER_OPTIONS"

// DefaultMaxPids is the pids limit of a command when none is configured.
const DefaultMaxPids = 200

// DefaultTmpfsMaxMB is what a command's writable tmpfs mounts (/tmp and
// /dev/shm) hold together when tmpfs_max_mb is not configured. Without a
// bound each would be the kernel's default, half of RAM, of unswappable
// host memory pinned by one command.
const DefaultTmpfsMaxMB = 1024

// maxTmpfsMaxMB bounds tmpfs_max_mb (1 TiB): far above any real host, low
// enough that the byte count cannot overflow.
const maxTmpfsMaxMB = 1 << 20

// Prepared sandboxes (prepared_linux.go): the defaults.
const (
	DefaultPreparedPerProfile = 2
	DefaultPreparedMax        = 16
	DefaultPreparedIdleMS     = 60_000
	maxPreparedPerProfile     = 16
	maxPreparedMax            = 1024
	maxPreparedIdleMS         = 3_600_000
)

// Session sandboxes (session_linux.go): the defaults.
const (
	DefaultSessionIdleMS = 300_000
	// SessionPlaceholdersCommand: a session's command makes the
	// placeholders of missing protected entries and removes them when it
	// ends, as a command without a session does (the default).
	SessionPlaceholdersCommand = "command"
	// SessionPlaceholdersSession: the session sandbox keeps them, and the
	// protected entries found, until it ends; a command checks the
	// workspace is unchanged instead of scanning it.
	SessionPlaceholdersSession = "session"
	maxSessionIdleMS           = 86_400_000
	// DefaultSessionAhead is how many session sandboxes wait, built ahead,
	// per recently used profile (sessionahead_linux.go).
	DefaultSessionAhead = 1
	// DefaultSessionAheadIdleMS is how long one waits for a session.
	DefaultSessionAheadIdleMS = 30_000
	maxSessionAhead           = 8
	maxSessionAheadIdleMS     = 3_600_000
)

// SessionSandboxMode selects whether the commands of a session that ask
// for it run in one persistent sandbox per session and profile.
type SessionSandboxMode string

const (
	// SessionSandboxAuto: where the driver can (root, bwrap tier).
	SessionSandboxAuto SessionSandboxMode = "auto"
	// SessionSandboxOff: every command gets a sandbox of its own.
	SessionSandboxOff SessionSandboxMode = "off"
	// SessionSandboxAlways: as auto, and every command of a session runs in
	// its session's sandbox whether its host asked or not: the test
	// switch (ALEPH_TEST_SESSION) that runs whole suites that way.
	SessionSandboxAlways SessionSandboxMode = "always"
)

// PreparedMode selects when commands run in sandboxes built ahead.
type PreparedMode string

const (
	// PreparedAuto keeps up to prepared_per_profile sandboxes ready for a
	// profile once it has been used twice within prepared_idle_ms.
	PreparedAuto PreparedMode = "auto"
	// PreparedAlways runs every command it can through a prepared
	// sandbox: one is built for the command when none waits (slower than
	// a plain launch; the hand-over path for every command, as the test
	// suites run it).
	PreparedAlways PreparedMode = "always"
	// PreparedOff builds every sandbox for its command.
	PreparedOff PreparedMode = "off"
)

// CgroupMode selects how resource limits are enforced.
type CgroupMode string

const (
	// CgroupAuto uses cgroup v2 where delegated, else v1 where writable,
	// else none.
	CgroupAuto CgroupMode = "auto"
	// CgroupV2 requires a delegated cgroup v2 subtree.
	CgroupV2 CgroupMode = "v2"
	// CgroupV1 requires writable cgroup v1 controllers.
	CgroupV1 CgroupMode = "v1"
	// CgroupNone enforces no cgroup limits (RLIMIT_AS remains).
	CgroupNone CgroupMode = "none"
)

// Fallback selects what the driver does where bwrap cannot create its
// namespaces (an unprivileged container, user namespaces disabled).
type Fallback string

const (
	// FallbackNone fails closed: nothing runs without the namespaces.
	FallbackNone Fallback = "none"
	// FallbackLandlock runs commands without bwrap, confined by
	// sandbox-init alone (Landlock, seccomp, rlimits, the cgroup): the
	// weaker Landlock tier (docs/linux.md says what it lacks).
	FallbackLandlock Fallback = "landlock"
)

// Options is the driver's configuration ([sandbox.linux]).
type Options struct {
	// MaxPids caps processes+threads per command; nil means DefaultMaxPids,
	// 0 means no pids limit.
	MaxPids *uint64 `json:"max_pids,omitempty"`
	// CPUQuotaPercent caps CPU time as a percentage of one core (50 = half
	// a core, 200 = two cores); 0 means no CPU cap.
	CPUQuotaPercent uint64 `json:"cpu_quota_percent,omitempty"`
	// Cgroup selects the limits mechanism; empty means auto.
	Cgroup CgroupMode `json:"cgroup,omitempty"`
	// BwrapPath is the bubblewrap binary; empty means "bwrap" on PATH.
	BwrapPath string `json:"bwrap_path,omitempty"`
	// TmpfsMaxMB caps, in MiB, what a command's tmpfs mounts hold
	// together; 0 means DefaultTmpfsMaxMB. A memory limit lowers it
	// further (see tmpfsBudget). There is no "unbounded".
	TmpfsMaxMB uint64 `json:"tmpfs_max_mb,omitempty"`
	// ProtectedScanMaxEntries bounds the directory entries one command's
	// search for nested .git entries visits; 0 means
	// DefaultProtectedScanMaxEntries.
	ProtectedScanMaxEntries uint64 `json:"protected_scan_max_entries,omitempty"`
	// ProtectedScanTimeoutMS bounds that search in time; 0 means
	// DefaultProtectedScanTimeout.
	ProtectedScanTimeoutMS uint64 `json:"protected_scan_timeout_ms,omitempty"`
	// Fallback is what runs where bwrap cannot create namespaces; empty
	// means FallbackNone.
	Fallback Fallback `json:"fallback,omitempty"`
	// Prepared selects prepared sandboxes; empty means PreparedAuto.
	Prepared PreparedMode `json:"prepared,omitempty"`
	// PreparedPerProfile is how many sandboxes wait per profile and
	// session; nil means DefaultPreparedPerProfile (0 turns the pool off).
	PreparedPerProfile *uint64 `json:"prepared_per_profile,omitempty"`
	// PreparedMax caps the sandboxes waiting (or being built) in all;
	// 0 means DefaultPreparedMax.
	PreparedMax uint64 `json:"prepared_max,omitempty"`
	// PreparedIdleMS is how long a prepared sandbox waits before it is
	// destroyed; 0 means DefaultPreparedIdleMS.
	PreparedIdleMS uint64 `json:"prepared_idle_ms,omitempty"`
	// SessionSandbox selects session sandboxes (session_linux.go) for the
	// commands that ask for theirs; empty means SessionSandboxAuto.
	SessionSandbox SessionSandboxMode `json:"session_sandbox,omitempty"`
	// SessionIdleMS is how long a session sandbox lives without a
	// command; 0 means DefaultSessionIdleMS.
	SessionIdleMS uint64 `json:"session_idle_ms,omitempty"`
	// SessionPlaceholders says how long a session sandbox's placeholders
	// of missing protected entries stay on the host: for each command
	// (SessionPlaceholdersCommand, empty) or for the session sandbox's
	// life (SessionPlaceholdersSession: sessionprotect_linux.go).
	SessionPlaceholders string `json:"session_placeholders,omitempty"`
	// SessionAhead is how many session sandboxes are kept built ahead per
	// recently used profile, for the first command of a new session; nil
	// means DefaultSessionAhead, 0 builds none ahead.
	SessionAhead *uint64 `json:"session_ahead,omitempty"`
	// SessionAheadIdleMS is how long a session sandbox built ahead waits
	// for a session before it is ended; 0 means DefaultSessionAheadIdleMS.
	SessionAheadIdleMS uint64 `json:"session_ahead_idle_ms,omitempty"`
	// MaxSessionNetworks caps the network namespaces held for sessions
	// (each a pasta or slirp process and a namespace); past it a command
	// needing one is refused as resource_exhausted. 0: the default (64).
	MaxSessionNetworks uint64 `json:"max_session_networks,omitempty"`
}

// OptionsError is a configuration the driver refuses.
type OptionsError struct {
	// Key is the refused key, when one is to blame.
	Key    string
	Reason string
}

func (e *OptionsError) Error() string { return "invalid " + OptionsEnv + ": " + e.Reason }

// ParseOptions decodes the JSON of OptionsEnv strictly: unknown keys,
// trailing data and out-of-range values are refused, because a setting the
// driver silently ignored would be a limit nobody enforces. Empty input
// gives the defaults.
func ParseOptions(data string) (Options, error) {
	var o Options
	if len(bytes.TrimSpace([]byte(data))) == 0 {
		return o.withDefaults(), nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return Options{}, &OptionsError{Reason: err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Options{}, &OptionsError{Reason: "trailing data after the JSON object"}
	}
	if err := o.Validate(); err != nil {
		return Options{}, err
	}
	return o.withDefaults(), nil
}

// Validate checks value ranges.
func (o Options) Validate() error {
	switch o.Cgroup {
	case "", CgroupAuto, CgroupV2, CgroupV1, CgroupNone:
	default:
		return &OptionsError{Key: "cgroup", Reason: fmt.Sprintf("cgroup %q: want auto, v2, v1 or none", o.Cgroup)}
	}
	switch o.Fallback {
	case "", FallbackNone, FallbackLandlock:
	default:
		return &OptionsError{Key: "fallback", Reason: fmt.Sprintf("fallback %q: want none or landlock", o.Fallback)}
	}
	switch o.Prepared {
	case "", PreparedAuto, PreparedAlways, PreparedOff:
	default:
		return &OptionsError{Key: "prepared", Reason: fmt.Sprintf("prepared %q: want auto, always or off", o.Prepared)}
	}
	if o.PreparedPerProfile != nil && *o.PreparedPerProfile > maxPreparedPerProfile {
		return &OptionsError{Key: "prepared_per_profile", Reason: fmt.Sprintf("prepared_per_profile %d is out of range (0..%d)", *o.PreparedPerProfile, maxPreparedPerProfile)}
	}
	if o.PreparedMax > maxPreparedMax {
		return &OptionsError{Key: "prepared_max", Reason: fmt.Sprintf("prepared_max %d is out of range (0 for the default of %d, up to %d)", o.PreparedMax, DefaultPreparedMax, maxPreparedMax)}
	}
	switch o.SessionSandbox {
	case "", SessionSandboxAuto, SessionSandboxOff, SessionSandboxAlways:
	default:
		return &OptionsError{Key: "session_sandbox", Reason: fmt.Sprintf("session_sandbox %q: want auto, off or always", o.SessionSandbox)}
	}
	switch o.SessionPlaceholders {
	case "", SessionPlaceholdersCommand, SessionPlaceholdersSession:
	default:
		return &OptionsError{Key: "session_placeholders", Reason: fmt.Sprintf("session_placeholders %q: want command or session", o.SessionPlaceholders)}
	}
	if o.SessionIdleMS > maxSessionIdleMS {
		return &OptionsError{Key: "session_idle_ms", Reason: fmt.Sprintf("session_idle_ms %d is out of range (0 for the default of %d, up to %d)", o.SessionIdleMS, DefaultSessionIdleMS, maxSessionIdleMS)}
	}
	if o.SessionAhead != nil && *o.SessionAhead > maxSessionAhead {
		return &OptionsError{Key: "session_ahead", Reason: fmt.Sprintf("session_ahead %d is out of range (0..%d)", *o.SessionAhead, maxSessionAhead)}
	}
	if o.SessionAheadIdleMS > maxSessionAheadIdleMS {
		return &OptionsError{Key: "session_ahead_idle_ms", Reason: fmt.Sprintf("session_ahead_idle_ms %d is out of range (0 for the default of %d, up to %d)", o.SessionAheadIdleMS, DefaultSessionAheadIdleMS, maxSessionAheadIdleMS)}
	}
	if o.PreparedIdleMS > maxPreparedIdleMS {
		return &OptionsError{Key: "prepared_idle_ms", Reason: fmt.Sprintf("prepared_idle_ms %d is out of range (0 for the default of %d, up to %d)", o.PreparedIdleMS, DefaultPreparedIdleMS, maxPreparedIdleMS)}
	}
	if o.MaxPids != nil && *o.MaxPids > 1<<22 {
		return &OptionsError{Key: "max_pids", Reason: fmt.Sprintf("max_pids %d is above the kernel's pid_max ceiling", *o.MaxPids)}
	}
	if o.CPUQuotaPercent > 102_400 {
		return &OptionsError{Key: "cpu_quota_percent", Reason: fmt.Sprintf("cpu_quota_percent %d is out of range (0..102400: 1024 cores)", o.CPUQuotaPercent)}
	}
	for _, c := range o.BwrapPath {
		if c == 0 {
			return &OptionsError{Key: "bwrap_path", Reason: "bwrap_path contains a NUL byte"}
		}
	}
	if o.TmpfsMaxMB > maxTmpfsMaxMB {
		return &OptionsError{Key: "tmpfs_max_mb", Reason: fmt.Sprintf("tmpfs_max_mb %d is out of range (0 for the default of %d, up to %d)", o.TmpfsMaxMB, DefaultTmpfsMaxMB, maxTmpfsMaxMB)}
	}
	if o.ProtectedScanMaxEntries > 1<<30 {
		return &OptionsError{Key: "protected_scan_max_entries", Reason: fmt.Sprintf("protected_scan_max_entries %d is out of range (0..1073741824)", o.ProtectedScanMaxEntries)}
	}
	if o.ProtectedScanTimeoutMS > 600_000 {
		return &OptionsError{Key: "protected_scan_timeout_ms", Reason: fmt.Sprintf("protected_scan_timeout_ms %d is out of range (0..600000)", o.ProtectedScanTimeoutMS)}
	}
	if o.MaxSessionNetworks > maxSessionNetworks {
		return &OptionsError{Key: "max_session_networks", Reason: fmt.Sprintf("max_session_networks %d is out of range (0 for the default of %d, up to %d)", o.MaxSessionNetworks, DefaultMaxSessionNetworks, maxSessionNetworks)}
	}
	if o.BwrapPath != "" && o.BwrapPath[0] != '/' {
		return &OptionsError{Key: "bwrap_path", Reason: fmt.Sprintf("bwrap_path %q is not absolute", o.BwrapPath)}
	}
	return nil
}

// DefaultMaxSessionNetworks is the default Config.MaxSessionNetworks
// (max_session_networks): how many sessions may hold a network namespace
// of their own at once.
const DefaultMaxSessionNetworks = 64

// maxSessionNetworks bounds max_session_networks: each namespace holds
// processes and descriptors of its own.
const maxSessionNetworks = 4096

func (o Options) withDefaults() Options {
	if o.Cgroup == "" {
		o.Cgroup = CgroupAuto
	}
	if o.Fallback == "" {
		o.Fallback = FallbackNone
	}
	if o.MaxPids == nil {
		n := uint64(DefaultMaxPids)
		o.MaxPids = &n
	}
	if o.Prepared == "" {
		o.Prepared = PreparedAuto
	}
	if o.PreparedPerProfile == nil {
		n := uint64(DefaultPreparedPerProfile)
		o.PreparedPerProfile = &n
	}
	if o.PreparedMax == 0 {
		o.PreparedMax = DefaultPreparedMax
	}
	if o.PreparedIdleMS == 0 {
		o.PreparedIdleMS = DefaultPreparedIdleMS
	}
	if o.SessionSandbox == "" {
		o.SessionSandbox = SessionSandboxAuto
	}
	if o.SessionIdleMS == 0 {
		o.SessionIdleMS = DefaultSessionIdleMS
	}
	if o.SessionAhead == nil {
		n := uint64(DefaultSessionAhead)
		o.SessionAhead = &n
	}
	if o.SessionAheadIdleMS == 0 {
		o.SessionAheadIdleMS = DefaultSessionAheadIdleMS
	}
	return o
}

// Pids is the effective pids limit (0: none).
func (o Options) Pids() uint64 {
	if o.MaxPids == nil {
		return DefaultMaxPids
	}
	return *o.MaxPids
}

// TmpfsMaxBytes is the effective tmpfs_max_mb in bytes.
func (o Options) TmpfsMaxBytes() uint64 {
	if o.TmpfsMaxMB == 0 {
		return DefaultTmpfsMaxMB << 20
	}
	return o.TmpfsMaxMB << 20
}
