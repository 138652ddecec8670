// Package driverapi is the public contract of aleph-sandbox: the Driver and
// Hook interfaces, the value types they exchange, and the go-plugin glue that
// carries them over gRPC between the core and a plugin process.
//
// A third party writing a sandbox backend or a before-hook imports only this
// package (and, in tests, driverapi/drivertest). A driver binary is a main
// package that calls Serve(myDriver); a hook binary calls ServeHook(myHook).
package driverapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"path/filepath"
	"strings"
	"time"
)

// ProtocolVersion is the major version of the wire protocol. A host and a
// plugin of different versions refuse each other during the handshake.
const ProtocolVersion = 1

// Size limits shared by every implementation.
const (
	// DefaultMaxOutputBytes is the default output budget, split evenly
	// between stdout and stderr.
	DefaultMaxOutputBytes = 1 << 20
	// MaxStdinBytes bounds the stdin a command may be given; it travels in a
	// single gRPC message.
	MaxStdinBytes = 2 << 20
	// MaxHookStdinBytes bounds the stdin shown to hooks (the scan target).
	MaxHookStdinBytes = 256 << 10
	// MaxOutputChunk is the largest output chunk a driver sends in one event.
	MaxOutputChunk = 32 << 10
)

// Feature names a driver may claim in HostCapabilities.Features. A driver
// claims a feature only when it enforces it on this host now; the conformance
// suite tests every claimed feature and skips cases whose feature is not
// claimed.
const (
	// FeatureFSReadIsolation: paths outside the system read set, the
	// workspace and fs_read grants cannot be read (host secrets invisible).
	FeatureFSReadIsolation = "fs_read_isolation"
	// FeatureFSWriteIsolation: only the workspace and fs_write grants are writable.
	FeatureFSWriteIsolation = "fs_write_isolation"
	// FeatureProtectedPaths: .git, .aleph, .codex, .agents in the workspace
	// are read-only and cannot be created.
	FeatureProtectedPaths = "protected_paths"
	// FeatureNetworkNone: NetworkNone blocks every socket family that can
	// reach outside (TCP, UDP, unix, abstract).
	FeatureNetworkNone = "network_none"
	// FeatureNetworkAll: NetworkAllowAll gives ordinary network access.
	FeatureNetworkAll = "network_all"
	// FeatureNetworkViaProxy: NetworkAllowHosts is enforced by routing all
	// egress through the host's managed proxy and nothing else.
	FeatureNetworkViaProxy = "network_via_proxy"
	// FeatureSubprocessControl: spawn_subprocess=false stops new processes
	// (threads still work).
	FeatureSubprocessControl = "subprocess_control"
	// FeatureMemoryLimit: max_memory_mb is enforced.
	FeatureMemoryLimit = "memory_limit"
	// FeaturePidLimit: the number of processes/threads is capped.
	FeaturePidLimit = "pid_limit"
	// FeatureCPULimit: CPU time share is capped.
	FeatureCPULimit = "cpu_limit"
	// FeatureEnvIsolation: the child sees exactly the environment it is given.
	FeatureEnvIsolation = "env_isolation"
	// FeatureProcessTreeKill: timeout and cancel kill every descendant,
	// daemonised ones included.
	FeatureProcessTreeKill = "process_tree_kill"
)

// KnownFeatures lists every feature name defined by this protocol version.
func KnownFeatures() []string {
	return []string{
		FeatureFSReadIsolation, FeatureFSWriteIsolation, FeatureProtectedPaths,
		FeatureNetworkNone, FeatureNetworkAll, FeatureNetworkViaProxy,
		FeatureSubprocessControl, FeatureMemoryLimit, FeaturePidLimit,
		FeatureCPULimit, FeatureEnvIsolation, FeatureProcessTreeKill,
	}
}

// IsKnownFeature reports whether name is a feature of this protocol version.
func IsKnownFeature(name string) bool {
	for _, f := range KnownFeatures() {
		if f == name {
			return true
		}
	}
	return false
}

// DefaultProtectedEntries are the top-level entries of the workspace (and of
// every fs_write grant) that stay read-only whatever the command asks for,
// and that cannot be created when missing: the places where host tools
// (git, editors, agent CLIs, direnv, MCP clients) find code to run or
// instructions to follow when they open the folder. ProfileRequest.Protected
// overrides the list; an empty one means this list.
func DefaultProtectedEntries() []string {
	return []string{".git", ".aleph", ".codex", ".agents", ".claude", ".vscode", ".idea", ".cursor", ".envrc", ".mcp.json"}
}

// ProtectedDirs is the original fixed protected set, kept for drivers that
// have not moved to ProfileRequest.Protected.
//
// Deprecated: use ProfileRequest.Protected, which defaults to
// DefaultProtectedEntries.
func ProtectedDirs() []string { return []string{".git", ".aleph", ".codex", ".agents"} }

// Unavailable says why a feature cannot be enforced on this host and how to
// fix that.
type Unavailable struct {
	Feature string `json:"feature"`
	Reason  string `json:"reason"`
	Fix     string `json:"fix,omitempty"`
}

// HostCapabilities is a driver's fingerprint of what it enforces here, now.
type HostCapabilities struct {
	Backend         string            `json:"backend"`
	DriverVersion   string            `json:"driver_version"`
	ProtocolVersion uint32            `json:"protocol_version"`
	Features        []string          `json:"features"`
	Unavailable     []Unavailable     `json:"unavailable,omitempty"`
	LandlockABI     uint32            `json:"landlock_abi,omitempty"`
	Seccomp         bool              `json:"seccomp"`
	CgroupMode      string            `json:"cgroup_mode,omitempty"`
	OS              string            `json:"os"`
	Arch            string            `json:"arch"`
	Details         map[string]string `json:"details,omitempty"`
}

// Has reports whether the driver claims feature.
func (h HostCapabilities) Has(feature string) bool {
	for _, f := range h.Features {
		if f == feature {
			return true
		}
	}
	return false
}

// NetworkMode is the kind of network access a command gets.
type NetworkMode int

const (
	// NetworkNone: no network at all. The zero value, so the default is strict.
	NetworkNone NetworkMode = iota
	// NetworkAllowHosts: only the listed hosts, through the managed proxy.
	NetworkAllowHosts
	// NetworkAllowAll: unrestricted network.
	NetworkAllowAll
)

func (m NetworkMode) String() string {
	switch m {
	case NetworkNone:
		return "none"
	case NetworkAllowHosts:
		return "allow_hosts"
	case NetworkAllowAll:
		return "allow_all"
	}
	return "unknown"
}

// NetworkPolicy is the network part of a capability request. Hosts entries
// are exact names, "*.suffix" wildcards or IP literals, each with an
// optional ":port".
type NetworkPolicy struct {
	Mode  NetworkMode `json:"mode"`
	Hosts []string    `json:"hosts,omitempty"`
}

// Capabilities is what a command asks to be allowed beyond running in its
// workspace. The zero value is the strict baseline: no extra paths, no
// network, no subprocesses, no explicit memory limit or timeout.
type Capabilities struct {
	FSRead          []string      `json:"fs_read,omitempty"`
	FSWrite         []string      `json:"fs_write,omitempty"`
	Network         NetworkPolicy `json:"network"`
	SpawnSubprocess bool          `json:"spawn_subprocess"`
	// MaxMemoryMB is a memory ceiling; 0 means no explicit limit.
	MaxMemoryMB uint64 `json:"max_memory_mb,omitempty"`
	// TimeoutSecs overrides the configured default timeout; 0 means unset.
	TimeoutSecs uint64 `json:"timeout_secs,omitempty"`
}

// ProxyEndpoint says where the host's managed proxy listens.
type ProxyEndpoint struct {
	UnixSocket string `json:"unix_socket,omitempty"`
	TCPAddr    string `json:"tcp_addr,omitempty"`
}

// ProfileRequest asks a driver for a launch plan.
type ProfileRequest struct {
	Capabilities Capabilities `json:"capabilities"`
	// Workspace is the canonical absolute workspace directory.
	Workspace string `json:"workspace"`
	// Cwd is the canonical absolute working directory, inside Workspace.
	Cwd string `json:"cwd"`
	// Proxy is set when Capabilities.Network.Mode is NetworkAllowHosts.
	Proxy *ProxyEndpoint `json:"proxy,omitempty"`
	// Protected are the top-level entry names (one path component each)
	// kept read-only and uncreatable in the workspace and in every fs_write
	// grant. Empty means DefaultProtectedEntries: a host that says nothing
	// gets the full set, never none.
	Protected []string `json:"protected,omitempty"`
}

// Profile is an opaque, driver-specific launch plan (SBPL text on macOS, a
// serialized plan elsewhere). Drivers refuse a profile whose digest does not
// match its data or whose backend is not theirs.
type Profile struct {
	Backend string `json:"backend"`
	Data    []byte `json:"-"`
	Digest  string `json:"digest"`
}

// NewProfile builds a Profile with its digest.
func NewProfile(backend string, data []byte) Profile {
	return Profile{Backend: backend, Data: data, Digest: Digest(data)}
}

// Verify checks the profile belongs to backend and is intact.
func (p Profile) Verify(backend string) error {
	if p.Backend != backend {
		return &ProfileError{Reason: "profile is for backend " + quote(p.Backend) + ", this driver is " + quote(backend)}
	}
	if p.Digest != Digest(p.Data) {
		return &ProfileError{Reason: "profile digest does not match its data"}
	}
	return nil
}

// Digest is the lower-case hex SHA-256 of data.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// EnvVar is one environment entry of the child.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"-"`
}

// RunSpec is one command for a driver to run under a profile.
type RunSpec struct {
	Program string
	Args    []string
	// Env is the child's complete environment; drivers add nothing from the host.
	Env     []EnvVar
	Stdin   []byte
	Cwd     string
	Profile Profile
	Timeout time.Duration
	// MaxOutputBytes is the total budget; each stream keeps at most half.
	MaxOutputBytes int64
	SessionID      string
	CommandID      string
}

// StreamBudgets splits a total output budget between stdout and stderr.
func StreamBudgets(total int64) (stdout, stderr int64) {
	if total <= 0 {
		total = DefaultMaxOutputBytes
	}
	stdout = total / 2
	return stdout, total - stdout
}

// Streams receives a command's output as it is produced. Each writer is
// called from one goroutine at a time; a driver must not write more than the
// stream's budget into it.
type Streams struct {
	Stdout io.Writer
	Stderr io.Writer
}

// ResourceUsage is what the command consumed.
type ResourceUsage struct {
	MaxRSSKB int64 `json:"max_rss_kb"`
	UserMS   int64 `json:"user_ms"`
	SystemMS int64 `json:"system_ms"`
}

// Exit is how a command ended.
type Exit struct {
	ExitCode    int32             `json:"exit_code"`
	Signal      int32             `json:"signal"`
	TimedOut    bool              `json:"timed_out"`
	Truncated   bool              `json:"truncated"`
	OOMKilled   bool              `json:"oom_killed"`
	StdoutBytes int64             `json:"stdout_bytes"`
	StderrBytes int64             `json:"stderr_bytes"`
	Duration    time.Duration     `json:"duration"`
	Usage       ResourceUsage     `json:"usage"`
	Details     map[string]string `json:"details,omitempty"`
}

// Driver is an OS sandbox backend. Implementations must be safe for
// concurrent use: the core runs many commands at once through one driver.
type Driver interface {
	// Capabilities reports what this driver enforces on this host now.
	Capabilities(ctx context.Context) (HostCapabilities, error)
	// ProfileFor builds the launch plan for caps. Equal input gives an equal
	// profile (byte for byte).
	ProfileFor(ctx context.Context, req ProfileRequest) (Profile, error)
	// Run runs spec, writing output to streams as it comes, and returns how
	// it ended. Cancelling ctx kills the whole process tree. The driver
	// enforces spec.Timeout and the output budget itself.
	Run(ctx context.Context, spec RunSpec, streams Streams) (Exit, error)
}

// Action is a hook's verdict kind.
type Action int

const (
	// ActionAllow lets the command go on.
	ActionAllow Action = iota + 1
	// ActionWarn lets it go on and records why.
	ActionWarn
	// ActionDeny stops it.
	ActionDeny
)

func (a Action) String() string {
	switch a {
	case ActionAllow:
		return "allow"
	case ActionWarn:
		return "warn"
	case ActionDeny:
		return "deny"
	}
	return "unknown"
}

// HookInfo names a hook.
type HookInfo struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description,omitempty"`
}

// HookRequest is what a hook sees of a command. Never environment values.
type HookRequest struct {
	SessionID    string
	CommandID    string
	Program      string
	Args         []string
	Stdin        []byte // UTF-8 only, at most MaxHookStdinBytes
	Cwd          string
	Capabilities Capabilities
	EnvNames     []string
}

// Verdict is a hook's answer.
type Verdict struct {
	Action     Action        `json:"action"`
	Rule       string        `json:"rule,omitempty"`
	Reason     string        `json:"reason,omitempty"`
	RetryAfter time.Duration `json:"retry_after,omitempty"`
	// Hook is the name of the hook that gave the verdict (filled by the core).
	Hook string `json:"hook,omitempty"`
}

// Hook is a before-hook. Implementations must be safe for concurrent use.
type Hook interface {
	Describe(ctx context.Context) (HookInfo, error)
	Before(ctx context.Context, req HookRequest) (Verdict, error)
}

// AfterHook is implemented by hooks that hold state per command (for
// example concurrency slots): After is called once for every command that
// Before allowed, when it has ended or failed to start.
type AfterHook interface {
	Hook
	After(ctx context.Context, sessionID, commandID string, ran bool)
}

// IsWithin reports whether c asks for nothing beyond base: every fs_read and
// fs_write path lies under a path base grants (path-prefix, not string
// prefix), the network mode is no wider (None ⊆ AllowHosts ⊆ AllowAll; for
// AllowHosts, every host is listed in base), a subprocess is asked for only
// when base allows it, a memory limit is no looser, and a timeout is no
// longer. A zero memory limit or timeout means "unlimited"/"default": it is
// within base only when base also leaves it unset.
func (c Capabilities) IsWithin(base Capabilities) bool {
	if !pathsWithin(c.FSRead, append(append([]string{}, base.FSRead...), base.FSWrite...)) {
		return false
	}
	if !pathsWithin(c.FSWrite, base.FSWrite) {
		return false
	}
	if !networkWithin(c.Network, base.Network) {
		return false
	}
	if c.SpawnSubprocess && !base.SpawnSubprocess {
		return false
	}
	if base.MaxMemoryMB != 0 && (c.MaxMemoryMB == 0 || c.MaxMemoryMB > base.MaxMemoryMB) {
		return false
	}
	if base.TimeoutSecs != 0 && (c.TimeoutSecs == 0 || c.TimeoutSecs > base.TimeoutSecs) {
		return false
	}
	return true
}

func networkWithin(c, base NetworkPolicy) bool {
	if c.Mode < base.Mode {
		return true
	}
	if c.Mode > base.Mode {
		return false
	}
	if c.Mode != NetworkAllowHosts {
		return true
	}
	allowed := make(map[string]bool, len(base.Hosts))
	for _, h := range base.Hosts {
		allowed[strings.ToLower(strings.TrimSuffix(h, "."))] = true
	}
	for _, h := range c.Hosts {
		if !allowed[strings.ToLower(strings.TrimSuffix(h, "."))] {
			return false
		}
	}
	return true
}

func pathsWithin(paths, roots []string) bool {
	for _, p := range paths {
		ok := false
		for _, r := range roots {
			if PathWithin(p, r) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// PathWithin reports whether path equals root or lies below it, comparing
// cleaned paths component by component ("/a/bc" is not within "/a/b").
func PathWithin(path, root string) bool {
	p, r := filepath.Clean(path), filepath.Clean(root)
	if p == r {
		return true
	}
	if r == string(filepath.Separator) {
		return filepath.IsAbs(p)
	}
	return strings.HasPrefix(p, r+string(filepath.Separator))
}

func quote(s string) string { return "\"" + s + "\"" }
