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
	"fmt"
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
	// FeatureProtectedPaths: every entry of ProfileRequest.Protected
	// (DefaultProtectedEntries when it is empty: the conformance suite
	// tests all of them) at the top of the workspace and of every fs_write
	// grant is read-only and cannot be created when missing, and so is
	// every .git below the top level.
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
	// FeaturePidLimit: the number of tasks the command may have, processes
	// and threads counted together (as a pids cgroup counts them), is
	// capped. A cap on processes alone is not this feature.
	FeaturePidLimit = "pid_limit"
	// FeatureCPULimit: CPU time share is capped.
	FeatureCPULimit = "cpu_limit"
	// FeatureEnvIsolation: the child sees exactly the environment it is given.
	FeatureEnvIsolation = "env_isolation"
	// FeatureProcessTreeKill: timeout and cancel kill every descendant,
	// daemonised ones included.
	FeatureProcessTreeKill = "process_tree_kill"
	// FeatureStdinStream (protocol 1.2): RunStream feeds the command's
	// stdin as it arrives and closes it on request.
	FeatureStdinStream = "stdin_stream"
	// FeaturePTY (protocol 1.2): RunSpec.Tty gives the command a
	// pseudo-terminal allocated inside the sandbox (never one of the
	// host's), that follows window-size changes, and through which no
	// input can be injected (TIOCSTI and the like are denied).
	FeaturePTY = "pty"
	// FeatureSignals: Signal (CallSignal) delivers signals to the running
	// command, streamed runs included.
	FeatureSignals = "signals"
	// FeatureSpawnRefusedReport: a command without spawn_subprocess that
	// tries to start a process has Exit.SpawnRefused > 0 (each refused
	// fork, vfork or process-making clone counted where the sandbox
	// refuses it), and one that starts none has 0. Without the feature, 0
	// says nothing.
	FeatureSpawnRefusedReport = "spawn_refused_report"
	// FeatureViolationReport (protocol 1.5): the driver reports what its
	// sandbox refused the command, as a bounded list (Exit.Violations), and
	// names in Exit.ViolationKinds the kinds it watched for that command:
	// no violation of a watched kind means none was refused, while a kind
	// it did not watch says nothing. Without the feature, an empty list
	// says nothing.
	FeatureViolationReport = "violation_report"
)

// KnownFeatures lists every feature name defined by this protocol version.
func KnownFeatures() []string {
	return []string{
		FeatureFSReadIsolation, FeatureFSWriteIsolation, FeatureProtectedPaths,
		FeatureNetworkNone, FeatureNetworkAll, FeatureNetworkViaProxy,
		FeatureSubprocessControl, FeatureMemoryLimit, FeaturePidLimit,
		FeatureCPULimit, FeatureEnvIsolation, FeatureProcessTreeKill,
		FeatureStdinStream, FeaturePTY, FeatureSignals, FeatureSpawnRefusedReport,
		FeatureViolationReport,
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
//
// Each one names commands or servers a host program starts: .gemini
// (settings.json mcpServers, hooks), .zed (settings.json language and
// context servers, tasks.json), .continue (config and mcpServers files),
// .amazonq (mcp.json), .roo (mcp.json), .kiro (settings/mcp.json, hooks),
// .opencode and opencode.json (MCP servers, plugins), .aider.conf.yml
// (lint-cmd, test-cmd), .devcontainer (initializeCommand runs on the
// host). Instruction prose an agent reads (AGENTS.md, CLAUDE.md,
// GEMINI.md) is not in the set: agents edit it as part of their work, and
// it runs nothing by itself (docs/threat-model.md).
func DefaultProtectedEntries() []string {
	return []string{".git", ".aleph", ".codex", ".agents", ".claude", ".vscode", ".idea", ".cursor", ".envrc", ".mcp.json",
		".gemini", ".zed", ".continue", ".amazonq", ".roo", ".kiro", ".opencode", "opencode.json", ".aider.conf.yml", ".devcontainer"}
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
	Backend         string `json:"backend"`
	DriverVersion   string `json:"driver_version"`
	ProtocolVersion uint32 `json:"protocol_version"`
	// ProtocolMinor is the minor version the driver speaks; Serve fills in
	// ProtocolMinor of this package when a driver leaves it zero (with or
	// without optional calls: what the driver lacks is said by Calls).
	// Zero from the wire means a protocol-1.0 driver.
	ProtocolMinor uint32 `json:"protocol_minor"`
	// Calls lists the optional calls the driver implements (Call*). Serve
	// fills it from the interfaces the driver implements when left nil.
	Calls       []string      `json:"calls,omitempty"`
	Features    []string      `json:"features"`
	Unavailable []Unavailable `json:"unavailable,omitempty"`
	// Deprecated: use Details[DetailLinuxLandlockABI]. Kept on the wire for
	// protocol-1.0 hosts and drivers; the host fills one from the other.
	LandlockABI uint32 `json:"landlock_abi,omitempty"`
	// Deprecated: use Details[DetailLinuxSeccomp].
	Seccomp bool `json:"seccomp"`
	// Deprecated: use Details[DetailLinuxCgroupMode].
	CgroupMode string `json:"cgroup_mode,omitempty"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	// Details holds backend-specific facts: the Detail* keys of this
	// package, and keys a backend defines for itself.
	Details map[string]string `json:"details,omitempty"`
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
	// Home, when set, is a canonical absolute directory the command may
	// read and write like an fs_write grant but without protected entries:
	// the sandbox's own HOME, which no host tool opens as a project, so
	// nothing there needs guarding. A host sets it only for a driver whose
	// capability report has Details[DetailProfileHome] == "1". The driver
	// refuses (InvalidSpecError) a Home that overlaps the workspace or a
	// grant: protected entries must not lose their protection through it.
	Home string `json:"home,omitempty"`
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
	// Tty, when set, gives the command a pseudo-terminal of this initial
	// size as its stdin, stdout and stderr (protocol 1.2, StreamRunner
	// only; Run refuses it). Its output then arrives as one stream, on
	// Streams.Stdout, within the stdout budget.
	Tty *WindowSize
	// SessionSandbox asks that the command run in the persistent sandbox
	// of its session (SessionID) and capability set, built by the
	// session's first such command and kept until ForgetSession, the
	// driver's idle limit or its end (protocol 1.3, call
	// "session_sandbox"; extensions.go says what a session shares). A
	// host sets it only for a driver that lists CallSessionSandbox, and
	// only with a SessionID; a driver that cannot honour it for this
	// command (a terminal, a profile it never keeps) runs it in a sandbox
	// of its own and reports no ExitDetailSessionSandbox.
	SessionSandbox bool
	// Layered, when set, mounts the workspace as an overlay with these
	// upper and work directories in the session's sandbox (protocol 1.4,
	// call "layered_workspace"; extensions.go says the contract). Set only
	// with SessionSandbox.
	Layered *LayeredWorkspace
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
	// SpawnRefused counts the command's attempts to start a process
	// (fork, vfork, clone without CLONE_THREAD) that the sandbox refused
	// because the command may not spawn. A driver that cannot tell leaves
	// it 0: 0 means "none seen", never "none made".
	SpawnRefused int64 `json:"spawn_refused,omitempty"`
	// Violations are what the sandbox refused the command, one entry per
	// distinct (kind, operation, target) with how many times, at most the
	// driver's configured cap; ViolationsDropped counts the refusals of
	// entries past the cap. ViolationKinds are the kinds the driver
	// watched for this command (FeatureViolationReport): an absent kind
	// means "not known", never "none".
	Violations        []Violation `json:"violations,omitempty"`
	ViolationsDropped int64       `json:"violations_dropped,omitempty"`
	ViolationKinds    []string    `json:"violation_kinds,omitempty"`
}

// Driver is an OS sandbox backend: the contract every driver binary serves
// (through Serve) and every host consumes (through LaunchDriver).
//
// Terms. The host is the process that runs the pipeline (the CLI, a service,
// an embedding program); the driver is the plugin process. A command is one
// RunSpec. The workspace is the directory a command may read and write by
// default; grants (Capabilities.FSRead, FSWrite) add host paths; the system
// read set is what a program needs to start: the driver's choice of system
// directories (/usr, /bin, /lib*, the minimal /etc entries for name
// resolution, time zone, users and TLS trust roots on Linux), never a home
// directory, a credential store or the host's /tmp.
//
// Lifecycle. The host launches the driver and calls Capabilities; a driver
// that lists the config call is then given its section (SetConfig) and asked
// Capabilities again. This happens again after every relaunch. Then, per
// command, ProfileFor and Run, or RunStream for a command with streamed
// stdin or a terminal; Signal may come while a Run is in progress, and
// ForgetSession when the host forgets a session. A driver process may be
// killed at any moment; it must make everything it started die with it
// (processes, mounts, cgroups) and leave nothing in the host's directories.
//
// Optional calls are negotiated through Capabilities (ProtocolMinor and
// Calls, which Serve fills in: this package's minor version, and the calls
// of the interfaces the driver implements), and the host makes no call the
// driver did not list. Protocol 1.1 adds
// Signaler (CallSignal) and Configurable (CallConfig); protocol 1.2 adds
// StreamRunner (CallRunStream) and SessionForgetter (CallForgetSession).
// Inside the plugin process, Serve also uses Preparer (slow start-up work,
// overlapped with the handshake) and Closer (release at shutdown); they are
// not on the wire.
//
// Concurrency. Every method is safe for concurrent use: the host runs many
// commands at once through one driver, and may call Signal while Run runs.
//
// Errors. Return the package's typed errors (*InvalidSpecError for a request
// field that cannot be honoured, *ProfileError for a garbled or foreign
// profile, *UnavailableError for a feature this host cannot enforce now,
// *NotRunningError, *ConfigError); they reach the host as the same types
// (ErrorDetail status details). Any other error reaches the host as a
// *RemoteError carrying the message. A driver never degrades silently: a
// request it cannot enforce fails.
type Driver interface {
	// Capabilities reports what this driver enforces on this host now: a
	// feature is listed in Features only when every command that asks for it
	// gets it, here, today; a feature it knows but cannot give goes in
	// Unavailable with the reason and a fix (features it has no notion of may
	// simply be absent). The conformance suite tests every claimed feature.
	Capabilities(ctx context.Context) (HostCapabilities, error)
	// ProfileFor builds the launch plan for req. Equal input gives an equal
	// profile (byte for byte). It refuses (*InvalidSpecError) paths that are
	// relative, missing or not canonical, a Cwd outside Workspace, and grants
	// it cannot honour; and (*UnavailableError) a request needing a feature it
	// does not claim. ProfileRequest.Cwd is the default working directory of
	// commands run under the profile. Workspace and Cwd arrive canonical
	// (CheckCanonicalDir): one with a ".", "..", doubled or trailing
	// separator, or a symbolic link on the way, is refused with an
	// *InvalidSpecError for "workspace" or "cwd", never resolved by the
	// driver, which would follow a link swapped in since the host resolved
	// it (CheckWorkspaceCwd does both checks).
	ProfileFor(ctx context.Context, req ProfileRequest) (Profile, error)
	// Run runs spec under spec.Profile (which it verifies first), writing
	// output to streams as it comes, and returns how it ended. RunSpec.Cwd
	// wins over ProfileRequest.Cwd; it must be canonical and lie inside the
	// profile's workspace (a driver may also accept one inside a granted
	// path), else Run refuses it with *InvalidSpecError{Field: "cwd"} and
	// starts nothing. The child gets exactly spec.Env
	// (nothing added, PWD included) and spec.Stdin then EOF. The driver
	// enforces spec.Timeout (TimedOut in the Exit) and the output budget
	// (Truncated; it keeps draining the child so it never blocks on a full
	// pipe). Exit says how the command ended, from its real wait status: a
	// command killed by signal N reports Signal N and ExitCode 128+N (what a
	// shell would show); one that exited by itself reports its status and
	// Signal 0, whatever the number (a command that exits 130 reports
	// ExitCode 130 and Signal 0). Cancelling ctx kills the whole process tree
	// and returns ctx's error. A returned error means the command did not
	// run to an Exit (setup failed, driver fault). A driver that does not
	// end the command within spec.Timeout is given 10 s more by the core,
	// which then cancels the call and fails the command.
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

// Hook is a before-hook: asked about every command after the session and
// cwd are resolved and before any capability is approved or any process
// started. Hooks run in order (the command policy, the rate limit, then
// plugins in configuration order); the first Deny ends the chain.
//
// Contract. Before sees the command's program, arguments, the first
// MaxHookStdinBytes of stdin (UTF-8; other bytes as spaces), its cwd, the
// capabilities asked for and the environment's names, never their values.
// It answers Allow, Warn (the command runs, the audit records why) or Deny
// with a rule name and a reason the user can act on; RetryAfter, when set,
// says when a Deny would become an Allow (rate limits). An error or a
// timeout fails the command closed (reason code hook_failed): a hook that
// cannot decide never lets a command through. Implementations must be safe
// for concurrent use; a hook that keeps state per command implements
// AfterHook.
type Hook interface {
	// Describe names the hook; called once per launch.
	Describe(ctx context.Context) (HookInfo, error)
	// Before decides about one command.
	Before(ctx context.Context, req HookRequest) (Verdict, error)
}

// WaitingHook is implemented by hooks whose Before may wait, for a slot of
// a capacity limit (the rate limit's queue), longer than
// sandbox.hook_timeout_ms: the pipeline gives such a Before MaxWait more
// time. Its Before honours ctx (a cancelled command gives up its place)
// and refuses past its bounds with a *LimitError, which the pipeline
// reports as resource_exhausted naming the limit, not as hook_failed.
type WaitingHook interface {
	Hook
	MaxWait() time.Duration
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

// ProtectedNameProblem says what is wrong with n as a protected entry name,
// or "" when it is one: a single path component, not "." or "..", no
// slash, backslash or NUL, at most 255 bytes. Core checks the configured
// names with it and every driver the names of a ProfileRequest (a driver
// adds what its platform needs: case folding, short names...).
func ProtectedNameProblem(n string) string {
	switch {
	case n == "":
		return "must not be empty"
	case n == "." || n == "..":
		return fmt.Sprintf("%q is not an entry name", n)
	case strings.ContainsAny(n, "/\\\x00"):
		return fmt.Sprintf("%q must be one path component (no slash, backslash or NUL)", n)
	case len(n) > 255:
		return fmt.Sprintf("%q is longer than 255 bytes", n)
	}
	return ""
}
