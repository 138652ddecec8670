package driverapi

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Versioned extensions of the contract.
//
// The go-plugin handshake carries only the major version (ProtocolVersion):
// a driver of another major version is refused before any call. Within a
// major version the contract grows by minor versions, negotiated in the
// Capabilities call: the host sends the minor version it speaks, the driver
// answers with its own and with the list of optional calls it implements
// (HostCapabilities.ProtocolMinor and Calls). The host never makes a call the
// driver did not list; a protocol-1.0 driver lists nothing and keeps working,
// reported as lacking the newer calls. A driver may list a call only when it
// implements it fully; the conformance suite exercises every listed call.
//
// Minor versions so far:
//
//	1.0  Capabilities, ProfileFor, Run.
//	1.1  Signal (call "signal"): signals to a running command.
//	     ConfigSchema and SetConfig (call "config"): driver-owned configuration.
//	     Errors carry an ErrorDetail status detail.
//	1.2  RunStream (call "run_stream"): streamed stdin, an optional
//	     pseudo-terminal with window-size changes (stream.go).
//	     ForgetSession (call "forget_session"): the host forgot a session.
//	1.3  Session sandboxes (call "session_sandbox"): RunSpec.SessionSandbox
//	     runs a command in its session's persistent sandbox.
//	1.4  Layered workspaces (call "layered_workspace"): RunSpec.Layered
//	     mounts the workspace as an overlay in the session's sandbox.
//	1.5  Violations (feature "violation_report"): Exit.Violations, the
//	     bounded list of what the sandbox refused the command, and
//	     Exit.ViolationKinds, the kinds the driver watched for it.
//	1.6  LayeredView (call "layered_view"): where the host reaches a
//	     layered session's mounted overlay (the files API over its view).
//	1.7  OpenLayeredView (call "layered_view_open"): the driver mounts a
//	     layer's overlay for the host while no session sandbox has it
//	     mounted, and keeps it until the host ends the call.
const ProtocolMinor = 7

// Optional calls a driver may list in HostCapabilities.Calls.
const (
	// CallSignal: the driver implements Signaler.
	CallSignal = "signal"
	// CallConfig: the driver implements Configurable.
	CallConfig = "config"
	// CallForgetSession: the driver implements SessionForgetter.
	CallForgetSession = "forget_session"
	// CallRunStream: the driver implements StreamRunner.
	CallRunStream = "run_stream"
	// CallSessionSandbox: the driver honours RunSpec.SessionSandbox (and
	// implements SessionForgetter, which ends a session's sandboxes).
	CallSessionSandbox = "session_sandbox"
	// CallLayeredWorkspace: the driver honours RunSpec.Layered (see
	// LayeredWorkspace). A driver that implements it but cannot here
	// leaves it out and says why in Details[DetailLayeredWorkspace].
	CallLayeredWorkspace = "layered_workspace"
	// CallLayeredView: the driver implements LayeredViewer.
	CallLayeredView = "layered_view"
	// CallLayeredViewOpen: the driver implements LayeredViewOpener.
	CallLayeredViewOpen = "layered_view_open"
)

// FeatureLayeredWorkspace names layered workspaces in errors refusing
// RunSpec.Layered (UnavailableError.Feature). It is not one of
// KnownFeatures: whether a driver honours RunSpec.Layered is the call
// CallLayeredWorkspace, and why not is Details[DetailLayeredWorkspace].
const FeatureLayeredWorkspace = "layered_workspace"

// LayeredWorkspacer is implemented by drivers that may list
// CallLayeredWorkspace; driverapi.Serve lists it when LayeredWorkspaces
// reports true.
type LayeredWorkspacer interface {
	// LayeredWorkspaces reports whether the driver honours RunSpec.Layered
	// on this host, as it is configured now.
	LayeredWorkspaces() bool
}

// LayeredView is where the host reaches the overlay a session sandbox
// mounts (protocol 1.6, CallLayeredView).
//
// Writing an overlay's upper directory while the overlay is mounted is
// undefined in overlayfs, so the host never does: its file operations on
// a layered session go through the mounted overlay itself, the very
// mount the session's commands see. Path opens the overlay's root
// directory from the host (the bwrap driver keeps a descriptor of it and
// answers /proc/<its pid>/fd/<n>); Dev and Ino identify that directory,
// and the host refuses what it opened unless they match (the descriptor
// may have been closed and its number reused in between). Path is valid
// only while the session sandbox lives. The host takes the layer's views
// lock (the Work directory's flock, shared) before it asks and holds it
// until it has closed what it opened (see LayeredWorkspace).
type LayeredView struct {
	// Mounted is false when no sandbox of the session has its layer
	// mounted now; the other fields are then empty.
	Mounted  bool   `json:"mounted"`
	Path     string `json:"path,omitempty"`
	Dev, Ino uint64 `json:"-"`
	// Ended is set by OpenLayeredView alone: it is closed once the view
	// has ended and the driver no longer holds its descriptor nor the
	// layer's locks (LayeredViewOpener says when that is).
	Ended <-chan struct{} `json:"-"`
}

// LayeredViewer is implemented by drivers that list CallLayeredView.
type LayeredViewer interface {
	// LayeredView says where the session's mounted overlay is, if a
	// session sandbox of sessionID has one. Safe for concurrent use with
	// Run.
	LayeredView(ctx context.Context, sessionID string) (LayeredView, error)
}

// LayeredViewRequest names the layer whose overlay OpenLayeredView mounts
// for the host: Workspace is the lower (the host's directory), Layered
// the layer's directories, as a layered command's RunSpec names them.
type LayeredViewRequest struct {
	SessionID string
	Workspace string
	Layered   LayeredWorkspace
}

// LayeredViewOpener is implemented by drivers that list
// CallLayeredViewOpen (protocol 1.7): drivers whose layered sessions'
// overlays the host cannot mount itself (the bwrap driver unprivileged
// mounts them with userxattr in a user namespace, which a process of the
// initial namespace cannot make an overlay in, nor a Go process enter).
type LayeredViewOpener interface {
	// OpenLayeredView mounts req's overlay for the host's file operations
	// when no session sandbox has the layer mounted, and answers where
	// the host opens its root, as LayeredView does (Mounted true, Path
	// /proc/<driver pid>/fd/<n>, Dev and Ino of the root, Ended set).
	//
	// The contract:
	//
	//   - the overlay is the session sandbox's: the same lower, upper,
	//     work and options (userxattr where the layer is UserNS), nosuid
	//     and nodev, and nothing of it stays in any mount table: the
	//     driver's descriptor is its one reference;
	//   - the view lives until ctx ends. Then the driver closes its
	//     descriptor, releases the layer's locks, and closes Ended. Over
	//     gRPC the call is a stream that the host ends (closing its side,
	//     or cancelling), and the driver ends it once it has released
	//     everything, so Ended closing means what it says;
	//   - to mount, the driver takes what a layered command's mount takes:
	//     the layer's lock (Layered.Lock) shared, the upper directory's
	//     flock exclusively without waiting, the views lock (the Work
	//     directory's flock) exclusively without waiting for the mount
	//     only. It holds the first two until the view ends, so no session
	//     sandbox mounts the upper meanwhile (two overlays sharing an
	//     upper are undefined), in this driver or in another process: a
	//     layered command of the session is refused, an UnavailableError
	//     for FeatureLayeredWorkspace, as for a layer mounted elsewhere;
	//   - a layer mounted elsewhere (a session sandbox of this driver or of
	//     another process), or one whose views lock the host holds, gives
	//     an UnavailableError for FeatureLayeredWorkspace with the reason
	//     and fix; so does a kernel that refuses the mount.
	//
	// The host holds the views lock shared from the answer until it has
	// closed what it opened from Path, as for LayeredView, and ends ctx
	// after that. Safe for concurrent use with Run.
	OpenLayeredView(ctx context.Context, req LayeredViewRequest) (LayeredView, error)
}

// Layered workspaces (protocol 1.4).
//
// A command whose RunSpec carries Layered sees the workspace (the
// profile's) through an overlay: the host's workspace is its lower layer,
// Layered.Upper and Layered.Work (directories of the host's data
// directory, on one file system) the upper layer and overlayfs's work
// directory. Everything the command writes lands in the upper layer; the
// host's directory is never written. The contract:
//
//   - the overlay is mounted once per session sandbox and kept for its
//     life: overlayfs forbids two mounts sharing an upper directory, so a
//     driver never mounts one upper twice at once, and refuses (an
//     UnavailableError for FeatureLayeredWorkspace) a command that would
//     need a second mount of an upper already mounted (another capability
//     set of the same session while the first's sandbox lives);
//   - a layered command never runs over the live workspace: where the
//     driver cannot run it in a session sandbox with the overlay (a
//     terminal, a route it keeps no session sandbox for), it refuses it,
//     typed, rather than run it in a sandbox of its own;
//   - the workspace's protected entries are not guarded inside the
//     overlay (nothing there reaches the host but through the host's
//     apply, which refuses them); fs_write grants outside the workspace
//     keep theirs;
//   - while the overlay is mounted, the driver holds a shared flock(2) on
//     Layered.Lock, so the host can tell a mounted layer (and refuses to
//     remove it) across processes;
//   - to mount, the driver takes the flock(2) of the Layered.Work
//     directory exclusively, without waiting, and releases it once
//     mounted; if it is held, the command is refused (an UnavailableError
//     for FeatureLayeredWorkspace). The host holds it shared while it has
//     an overlay of the layer open through LayeredView: such an overlay
//     outlives its sandbox as long as the host's descriptor does, and a
//     mount then would make two overlays of one upper.
//
// The host sets Layered only with SessionSandbox and a SessionID, and only
// for a driver that lists CallLayeredWorkspace.
type LayeredWorkspace struct {
	// Upper and Work are absolute host directories: overlayfs's upperdir
	// and workdir.
	Upper string `json:"upper"`
	Work  string `json:"work"`
	// Lock is the layer's lock file (absolute).
	Lock string `json:"lock"`
	// UserNS: the host expects the overlay mounted in a user namespace
	// (userxattr: markers in user.overlay.*); a driver that mounts it
	// otherwise refuses, since the layer would be misread.
	UserNS bool `json:"user_ns,omitempty"`
}

// Validate checks the fields a driver relies on.
func (l *LayeredWorkspace) Validate() error {
	for _, f := range []struct{ name, path string }{{"layered.upper", l.Upper}, {"layered.work", l.Work}, {"layered.lock", l.Lock}} {
		if f.path == "" || f.path[0] != '/' {
			return &InvalidSpecError{Field: f.name, Reason: fmt.Sprintf("%q is not an absolute path", f.path)}
		}
		if strings.ContainsAny(f.path, ",:\\\n\x00") {
			return &InvalidSpecError{Field: f.name, Reason: "holds a comma, colon, backslash, newline or NUL, which overlay mount options cannot carry"}
		}
	}
	return nil
}

// SessionSandboxer is implemented by drivers that may list
// CallSessionSandbox; driverapi.Serve lists it when SessionSandboxes
// reports true.
type SessionSandboxer interface {
	SessionForgetter
	// SessionSandboxes reports whether the driver honours
	// RunSpec.SessionSandbox on this host, as it is configured now.
	SessionSandboxes() bool
}

// Session sandboxes (protocol 1.3).
//
// A driver that lists CallSessionSandbox keeps, for a RunSpec with
// SessionSandbox set, one persistent sandbox per session and capability
// set (the profile): built by the first such command of the session (or
// ahead of it), every later command of that session and profile runs in
// it as a process of its own. The contract, which the conformance suite
// checks:
//
//   - shared by the commands of one session and profile: the sandbox's
//     own filesystem state outside the workspace and grants (its /tmp),
//     its loopback network, what a command's background process started
//     with the process API serves;
//   - never shared: anything with another session; anything with another
//     profile of the same session (a command granted network never runs
//     in the sandbox of one that was not, nor the other way round); a
//     command's own process tree, which ends with it, as without session
//     sandboxes; its limits, timeout, output budget, spawn rule, stdin
//     and terminal, which are the command's, never the session's;
//   - a session sandbox ends on ForgetSession, on the driver's idle limit,
//     with the driver, or when it died or went stale; the next command
//     then builds one, and its Exit says so (ExitDetailSessionSandbox).
const (
	// ExitDetailSessionSandbox is the Exit.Details key that says how a
	// command with RunSpec.SessionSandbox ran: SessionSandboxNew,
	// SessionSandboxReused or SessionSandboxRebuilt. Absent: the command
	// ran in a sandbox of its own.
	ExitDetailSessionSandbox = "session_sandbox"
	// SessionSandboxNew: the session had no sandbox for this profile;
	// one was built for this command.
	SessionSandboxNew = "new"
	// SessionSandboxReused: the command ran in the session's existing
	// sandbox.
	SessionSandboxReused = "reused"
	// SessionSandboxRebuilt: the session's sandbox for this profile was
	// gone (it died, went stale, the driver restarted) and a new one was
	// built: what earlier commands left in it is gone.
	SessionSandboxRebuilt = "rebuilt"
)

// KnownCalls lists every optional call of this protocol version.
func KnownCalls() []string {
	return []string{CallSignal, CallConfig, CallForgetSession, CallRunStream, CallSessionSandbox, CallLayeredWorkspace, CallLayeredView, CallLayeredViewOpen}
}

// SessionForgetter is implemented by drivers that list CallForgetSession:
// drivers that keep something per session (RunSpec.SessionID), such as
// the network namespace the commands of a session share.
type SessionForgetter interface {
	// ForgetSession releases what the driver keeps for sessionID; the
	// session's next command starts afresh. Commands of the session still
	// running keep what they have until they end. Forgetting a session the
	// driver does not know is not an error. Safe for concurrent use with Run.
	ForgetSession(ctx context.Context, sessionID string) error
}

// Supports reports whether the driver listed call in its capability report.
func (h HostCapabilities) Supports(call string) bool { return slices.Contains(h.Calls, call) }

// Keys of HostCapabilities.Details with a meaning fixed by the contract.
// Backends may add keys of their own, prefixed with their backend name.
const (
	// DetailLinuxLandlockABI: the Landlock ABI level enforced (decimal), "0"
	// when Landlock is unavailable. Replaces HostCapabilities.LandlockABI.
	DetailLinuxLandlockABI = "linux.landlock_abi"
	// DetailLinuxSeccomp: "true" when seccomp filters are installed.
	// Replaces HostCapabilities.Seccomp.
	DetailLinuxSeccomp = "linux.seccomp"
	// DetailLinuxCgroupMode: "v2", "v1" or "none". Replaces
	// HostCapabilities.CgroupMode.
	DetailLinuxCgroupMode = "linux.cgroup_mode"
	// DetailNetworkRoute: the ProxyRoute the driver uses for
	// NetworkAllowHosts, when it claims FeatureNetworkViaProxy.
	DetailNetworkRoute = "network.route"
	// DetailNetworkNoneLoopback: what a command under NetworkNone may reach
	// on loopback. "session": a loopback of its own that the commands of
	// its session (RunSpec.SessionID) share, never the host's nor another
	// session's; "command": a loopback of its own, shared with nothing.
	// Absent: no loopback (inet sockets fail).
	DetailNetworkNoneLoopback = "network.none_loopback"
	// DetailNetworkNoneUnixSockets: "own" when a command under NetworkNone
	// may create, bind and connect unix sockets of its own (a path in a
	// directory it may write, its working directory included, and on
	// Linux an abstract name) and use socket pairs of every type, while
	// every socket the host created stays unreachable. Absent: socket
	// (AF_UNIX) may be refused. The conformance case net/unix-own-sockets
	// holds a driver to it.
	DetailNetworkNoneUnixSockets = "network.none_unix_sockets"
	// DetailProfileHome: "1" when the driver honours ProfileRequest.Home
	// (a writable directory without protected entries). A host sends Home
	// only to a driver that reports it; to any other it passes the same
	// directory as one more fs_write path, protected entries included.
	DetailProfileHome = "profile.home"
	// DetailLayeredWorkspace: for a driver that implements layered
	// workspaces, "on: ..." when it lists CallLayeredWorkspace, otherwise
	// why it cannot here (unprivileged, no namespaces, no overlayfs).
	DetailLayeredWorkspace = "layered_workspace"
	// DetailLayeredUserNS: "true" when the driver mounts layered
	// sessions' overlays in a user namespace (userxattr: overlayfs keeps
	// its whiteout and opaque markers in user.overlay.*), so the host
	// makes its layers with LayeredWorkspace.UserNS; absent otherwise.
	DetailLayeredUserNS = "layered_workspace.user_ns"
)

// NetworkRoute is the route the driver reported for NetworkAllowHosts
// (Details[DetailNetworkRoute]), "" when it reported none. The host starts
// the command's proxy for this route: it decides what the proxy listens on
// and what the child's proxy variables say.
func (hc HostCapabilities) NetworkRoute() ProxyRoute {
	return ProxyRoute(hc.Details[DetailNetworkRoute])
}

// ProfileHome reports whether the driver honours ProfileRequest.Home
// (Details[DetailProfileHome] == "1").
func (hc HostCapabilities) ProfileHome() bool {
	return hc.Details[DetailProfileHome] == "1"
}

// Signal names a signal to deliver to a running command, without the SIG
// prefix. Names, not numbers, cross the wire: numbers differ between
// systems, and a driver maps each name to what its OS has.
type Signal string

// The signals a host may forward. Drivers refuse other names.
const (
	SignalTERM  Signal = "TERM"
	SignalINT   Signal = "INT"
	SignalHUP   Signal = "HUP"
	SignalQUIT  Signal = "QUIT"
	SignalKILL  Signal = "KILL"
	SignalUSR1  Signal = "USR1"
	SignalUSR2  Signal = "USR2"
	SignalWINCH Signal = "WINCH"
	// SignalPIPE tells a command that the reader of its output went away,
	// as the kernel would tell a writer to a closed pipe: the host's own
	// output was closed, but the command writes to the driver, not to it.
	SignalPIPE Signal = "PIPE"
)

// KnownSignals lists the signals of this protocol version.
func KnownSignals() []Signal {
	return []Signal{SignalTERM, SignalINT, SignalHUP, SignalQUIT, SignalKILL, SignalUSR1, SignalUSR2, SignalWINCH, SignalPIPE}
}

// ParseSignal accepts a known signal name, with or without "SIG", in any case.
func ParseSignal(name string) (Signal, error) {
	s := Signal(strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "SIG"))
	if slices.Contains(KnownSignals(), s) {
		return s, nil
	}
	return "", &InvalidSpecError{Field: "signal", Reason: fmt.Sprintf("%q is not one of TERM, INT, HUP, QUIT, KILL, USR1, USR2, WINCH, PIPE", name)}
}

// Signaler is implemented by drivers that list CallSignal.
type Signaler interface {
	// Signal delivers sig to the command whose RunSpec.CommandID is
	// commandID while its Run is in progress: to the command's process (the
	// program the RunSpec named), not to the driver's own helpers. It returns
	// once the signal was sent, not when it was handled. A commandID with no
	// Run in progress (not started yet, or already ended) gives a
	// *NotRunningError; an unknown signal an *InvalidSpecError. Signals never
	// end a Run by themselves: the Run ends, as always, with the command's
	// Exit (its own status when it handled the signal, Signal=N when it died
	// of it). Safe for concurrent use with Run.
	Signal(ctx context.Context, commandID string, sig Signal) error
}

// ConfigFieldType is the type of a configuration key.
type ConfigFieldType string

// Configuration key types.
const (
	ConfigString     ConfigFieldType = "string"
	ConfigBool       ConfigFieldType = "bool"
	ConfigInt        ConfigFieldType = "int"
	ConfigUint       ConfigFieldType = "uint"
	ConfigStringList ConfigFieldType = "string_list"
	// ConfigNumber is an integer or a fraction (a rate per second).
	ConfigNumber ConfigFieldType = "number"
	// ConfigTableList is an array of tables ([[section.key]] in TOML). The
	// loader checks only that it is one; the keys of each table are the
	// section owner's to judge (its check function), and it cannot be set
	// from the environment.
	ConfigTableList ConfigFieldType = "table_list"
)

// ConfigField describes one key of a driver's configuration section.
type ConfigField struct {
	Name        string          `json:"name"`
	Type        ConfigFieldType `json:"type"`
	Description string          `json:"description,omitempty"`
	// DefaultJSON is the default as JSON text; empty when there is none.
	DefaultJSON string   `json:"default,omitempty"`
	Enum        []string `json:"enum,omitempty"`
}

// ConfigSchema describes a driver's configuration section, [sandbox.SECTION].
type ConfigSchema struct {
	Section string        `json:"section"`
	Fields  []ConfigField `json:"fields"`
}

// Field returns the field called name.
func (s ConfigSchema) Field(name string) (ConfigField, bool) {
	for _, f := range s.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return ConfigField{}, false
}

// Configurable is implemented by drivers that list CallConfig: the driver
// owns its configuration section (its type, defaults and validation), and the
// host routes the section to it without linking the driver.
type Configurable interface {
	// ConfigSchema describes the section. It is the same for the whole life
	// of the driver process.
	ConfigSchema(ctx context.Context) (ConfigSchema, error)
	// SetConfig validates the section (one JSON object; empty means every
	// default) and applies it to every later call. A refused section gives a
	// *ConfigError naming the key, and changes nothing. Unknown keys are
	// refused: a setting the driver ignored would be a limit nobody
	// enforces. Capabilities reflects the new configuration once SetConfig
	// returns.
	SetConfig(ctx context.Context, configJSON []byte) error
}

// UnavailableError: the request needs a feature this host cannot enforce.
type UnavailableError struct {
	Feature string
	Reason  string
	Fix     string
}

func (e *UnavailableError) Error() string {
	s := fmt.Sprintf("%s cannot be enforced on this host: %s", e.Feature, e.Reason)
	if e.Fix != "" {
		s += " (fix: " + e.Fix + ")"
	}
	return s
}

// ConfigError is the project's one configuration error: a value in the
// configuration file or environment, a section a driver or hook refuses,
// or a setting of a component's own (the conformance suite's Config) that
// cannot be used. It lives here, in the bottom layer, so that core, the
// drivers, the hooks and the conformance suite all return this type (core
// and conformance re-export it as an alias) and a caller branches on every
// configuration error with one errors.As.
type ConfigError struct {
	// Source is where the value came from: a configuration file's path,
	// "environment NAME", or the component whose own settings these are
	// (e.g. "conformance"); empty when validating a value on its own. It
	// does not travel over the driver protocol.
	Source string
	// Section is the section name under [sandbox] (e.g. "linux") when the
	// error is a component's refusal of its section; Key is then relative
	// to it. With no Section, Key is the full dotted name (e.g.
	// "serve.grace_seconds"). Key is empty when the section, file or
	// setting as a whole is at fault.
	Section string
	Key     string
	Reason  string
}

// FullKey is the full dotted name of the refused key, e.g.
// "sandbox.linux.max_pids" for {Section: "linux", Key: "max_pids"}; ""
// when no key is named.
func (e *ConfigError) FullKey() string {
	if e.Section == "" {
		return e.Key
	}
	if e.Key == "" {
		return "sandbox." + e.Section
	}
	return "sandbox." + e.Section + "." + e.Key
}

// Error keeps the wording each source has always had, which the docs quote:
// a section's refusal reads "invalid sandbox.SECTION.KEY: reason", a
// configuration key "config SOURCE: KEY: reason", a component's own setting
// "SOURCE: reason".
func (e *ConfigError) Error() string {
	switch {
	case e.Section != "":
		return fmt.Sprintf("invalid %s: %s", e.FullKey(), e.Reason)
	case e.Key != "" && e.Source != "":
		return fmt.Sprintf("config %s: %s: %s", e.Source, e.Key, e.Reason)
	case e.Key != "":
		return fmt.Sprintf("config: %s: %s", e.Key, e.Reason)
	case e.Source != "":
		return e.Source + ": " + e.Reason
	}
	return "invalid driver configuration: " + e.Reason
}

// LimitError: a configured capacity limit of the driver was reached (the
// command did not run). Limit is the limit's full configuration key, e.g.
// "sandbox.linux.max_session_networks"; Value its value.
type LimitError struct {
	Limit  string
	Value  int64
	Reason string
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s (limit %s = %d)", e.Reason, e.Limit, e.Value)
}

// NotRunningError: a call names a command that has no Run in progress.
type NotRunningError struct{ CommandID string }

func (e *NotRunningError) Error() string {
	return fmt.Sprintf("command %q is not running", e.CommandID)
}

// UnsupportedCallError: the driver does not implement an optional call
// (it is older, or its backend has no such thing).
type UnsupportedCallError struct {
	Plugin string
	Call   string
	// Minor is the protocol minor version the driver reported.
	Minor uint32
	// Feature, when set, is the feature the call was needed for.
	Feature string
	// Reason and Fix, when set, are the driver's own explanation: its
	// Unavailable entry for Feature (see HostCapabilities.UnsupportedCall).
	Reason string
	Fix    string
}

func (e *UnsupportedCallError) Error() string {
	since := callSince(e.Call)
	var why string
	switch {
	case e.Reason != "":
		why = e.Reason
		if e.Fix != "" {
			why += " (fix: " + e.Fix + ")"
		}
	case e.Minor < since:
		why = fmt.Sprintf("it speaks protocol 1.%d, and the %q call came with protocol 1.%d: use a driver for protocol 1.%d or newer", e.Minor, e.Call, since, since)
	default:
		// A driver as new as the call that does not implement it: its
		// backend has no such thing, and no upgrade of the protocol helps.
		why = fmt.Sprintf("it does not implement the optional %q call", e.Call)
	}
	if e.Feature != "" {
		return fmt.Sprintf("driver %s cannot give %s: %s", e.Plugin, e.Feature, why)
	}
	if e.Reason != "" {
		return fmt.Sprintf("driver %s does not implement the %q call: %s", e.Plugin, e.Call, why)
	}
	return fmt.Sprintf("driver %s: %s", e.Plugin, why)
}

// callSince is the protocol minor version that introduced call.
func callSince(call string) uint32 {
	switch call {
	case CallSignal, CallConfig:
		return 1
	case CallForgetSession, CallRunStream:
		return 2
	case CallSessionSandbox:
		return 3
	case CallLayeredWorkspace:
		return 4
	case CallLayeredView:
		return 6
	case CallLayeredViewOpen:
		return 7
	}
	return ProtocolMinor
}

// UnavailableFor returns the driver's Unavailable entry for feature.
func (h HostCapabilities) UnavailableFor(feature string) (Unavailable, bool) {
	for _, u := range h.Unavailable {
		if u.Feature == feature {
			return u, true
		}
	}
	return Unavailable{}, false
}

// UnsupportedCall is the error for a call missing from h (plugin names the
// driver), needed for feature (may be empty). When the driver lists the
// feature as unavailable, the error carries the driver's own reason and
// fix: it knows why better than a version number does.
func (h HostCapabilities) UnsupportedCall(plugin, call, feature string) *UnsupportedCallError {
	e := &UnsupportedCallError{Plugin: plugin, Call: call, Minor: h.ProtocolMinor, Feature: feature}
	if u, ok := h.UnavailableFor(feature); ok && feature != "" {
		e.Reason, e.Fix = u.Reason, u.Fix
	}
	return e
}

type hostMinorKey struct{}

func withHostProtocolMinor(ctx context.Context, minor uint32) context.Context {
	return context.WithValue(ctx, hostMinorKey{}, minor)
}

// HostProtocolMinor is, in a Go driver's Capabilities, the protocol minor
// version the host said it speaks (CapabilitiesRequest.host_protocol_minor);
// ok is false outside a Capabilities call served by Serve. Most drivers
// need not read it: the host never makes a call the driver does not list,
// so a driver lists what it implements whatever the host's version. A
// host of protocol 1.0 sends 0.
func HostProtocolMinor(ctx context.Context) (minor uint32, ok bool) {
	minor, ok = ctx.Value(hostMinorKey{}).(uint32)
	return minor, ok
}
