package core

import (
	"context"
	"io"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Command is one program to run in a session's sandbox.
type Command struct {
	// SessionID selects the workspace and the grant cache. Empty: taken from
	// ctx (SessionFrom); if neither is set the command is invalid.
	SessionID string
	Program   string
	Args      []string
	// Env is added to the child's minimal environment; the host's
	// environment is never passed through.
	Env   map[string]string
	Stdin []byte
	// Cwd is the working directory: empty means the workspace root; a
	// relative path is taken relative to the workspace.
	Cwd string
	// Workspace, when set, is an existing directory used as the workspace
	// instead of the session's own directory.
	Workspace string
	// Layered runs the command over the session's layer: it sees the
	// workspace through an overlay, and the host's directory changes only
	// on Apply (layered.go). The session's first command that starts
	// fixes whether it is layered.
	Layered      bool
	Capabilities driverapi.Capabilities
	// Timeout: 0 means Capabilities.TimeoutSecs, then the configured default.
	// Its resolution is the driver protocol's, one millisecond: a timeout
	// that is not a whole number of milliseconds is rounded up (999µs runs
	// with 1ms), never down to nothing.
	Timeout time.Duration
	// MaxOutputBytes: 0 means the configured budget (split stdout/stderr).
	MaxOutputBytes int64
	// Secrets are held by the host: the child sees only "aleph:secret:NAME"
	// placeholders, and the network mediation substitutes the real values.
	// They require Network.Mode == NetworkAllowHosts and a NetworkMediator.
	Secrets map[string]string
	// Stdout and Stderr, when set, receive the output live (within the
	// budget) in addition to the captured Output.
	Stdout io.Writer
	Stderr io.Writer
	// StreamOnly: what reaches Stdout/Stderr live is not kept again in
	// Output, which then holds only the output that could not be
	// delivered (the live writer failed: the client went away). A
	// service streaming the output sets it, so a command's output is held
	// once (in flight) and not a second time for the final result.
	// Truncation is reported as without it.
	StreamOnly bool
	// Signals, when set, are delivered to the command while it runs (a
	// signal that arrives before it starts waits; after it ends, none is
	// read). Through a driver that lacks the signal call (protocol 1.0),
	// any signal but WINCH ends the command as a cancel does, killing the
	// tree; WINCH is dropped.
	Signals <-chan driverapi.Signal
	// StdinStream, when set, is the command's stdin, read as the command
	// consumes it (never gathered up front, never beyond what the driver
	// takes) until io.EOF, which closes it. Stdin must then be empty, and
	// before-hooks see no stdin. It needs a driver with the run_stream
	// call (protocol 1.2) claiming driverapi.FeatureStdinStream; else the
	// command is refused (*DeniedError, reason unenforceable, naming the
	// feature). Execute may return while a Read is in progress: the caller
	// ends it (closing a pipe, say).
	StdinStream io.Reader
	// Tty, when set, gives the command a pseudo-terminal of this initial
	// size, allocated by the driver inside the sandbox, as its stdin,
	// stdout and stderr; its output then arrives as one stream, on
	// Stdout. Its input comes from StdinStream. Needs
	// driverapi.FeaturePTY, refused as above otherwise.
	Tty *driverapi.WindowSize
	// Resize delivers window-size changes of a Tty command while it runs.
	Resize <-chan driverapi.WindowSize
}

// Output is how a command that ran ended and what it wrote (within budget).
type Output struct {
	Stdout        []byte
	Stderr        []byte
	Exit          driverapi.Exit
	Backend       string
	CommandID     string
	ProfileDigest string
	// Verdicts are the before-hooks' answers (Allow and Warn).
	Verdicts []driverapi.Verdict
	// Streamed is set for a Command.StreamOnly command: Stdout and Stderr
	// then hold only what the live writers did not take, and
	// StreamedStdout and StreamedStderr count what they took, so a caller
	// can tell output that was streamed from output that was empty.
	Streamed                       bool
	StreamedStdout, StreamedStderr int64
	// GitQuarantine, when set, says which git repositories the command
	// planted in its workspace were neutralised after it ended (so that
	// the host's git does not run what they configure), or that the
	// search for them could not finish. Linux only so far.
	GitQuarantine *GitQuarantine
	// SpawnReported: the driver counts refused process starts
	// (driverapi.FeatureSpawnRefusedReport), so an Exit.SpawnRefused of
	// 0 means none was refused. Without it, 0 says nothing, and a front
	// end may still guess from the command's output.
	SpawnReported bool
}

// Reason is the reason code of a command that ran: timeout when it ran
// out of time, spawn_refused when the driver refused (and counted) an
// attempt of it to start a process, hook_warned when a before-hook warned,
// else allowed.
func (o *Output) Reason() ReasonCode {
	if o.Exit.TimedOut {
		return ReasonTimeout
	}
	if o.Exit.SpawnRefused > 0 {
		// Said rather than hook_warned: it is what explains the result
		// (a command that failed for want of a subprocess), and a warning
		// stays in Verdicts.
		return ReasonSpawnRefused
	}
	for _, v := range o.Verdicts {
		if v.Action == driverapi.ActionWarn {
			return ReasonHookWarned
		}
	}
	return ReasonAllowed
}

// Hint is one line saying how to get what the sandbox refused the command
// while it ran, in the pipeline's terms (SpawnRefusedHint), or "" when
// nothing was refused.
func (o *Output) Hint() string {
	if o.Reason() == ReasonSpawnRefused {
		return SpawnRefusedHint
	}
	return ""
}

// Sandbox runs commands. Implementations are safe for concurrent use.
type Sandbox interface {
	Execute(ctx context.Context, cmd Command) (*Output, error)
	Close() error
}

// secretPlaceholderPrefix starts the value a child sees for a secret.
const secretPlaceholderPrefix = "aleph:secret:"

// DefaultPath is the PATH the child gets unless Command.Env sets one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// NetworkMediator starts the host-side proxy through which a command with
// NetworkAllowHosts reaches exactly its hosts. It holds the real secret
// values and substitutes them for placeholders.
type NetworkMediator interface {
	Start(ctx context.Context, sessionID, commandID string, hosts []string, secrets map[string]string) (Mediation, error)
}

// Mediation is one command's running mediation. It is an alias of an
// unnamed interface type so that an implementation package can declare the
// identical type (core/proxy does) and satisfy NetworkMediator without
// either package importing the other.
type Mediation = interface {
	// Endpoint is where the sandboxed command must connect.
	Endpoint() driverapi.ProxyEndpoint
	// Env is added to the child's environment (HTTP_PROXY and the like).
	Env() []driverapi.EnvVar
	// Close stops the mediation; called once the command has ended.
	Close() error
}

// Option configures NewWorkspaceSandbox.
type Option func(*options)

type options struct {
	driver    driverapi.Driver
	hooks     []driverapi.Hook
	requester ApprovalRequester
	sink      AuditSink
	logger    hclog.Logger
	mediator  NetworkMediator
	grants    GrantStore
	baseline  *driverapi.Capabilities
	protect   []string
}

// WithDriver runs commands with d (required). The caller keeps ownership
// of d (Close does not close it).
func WithDriver(d driverapi.Driver) Option { return func(o *options) { o.driver = d } }

// WithHooks appends before-hooks; they run in the order given.
func WithHooks(h ...driverapi.Hook) Option {
	return func(o *options) { o.hooks = append(o.hooks, h...) }
}

// WithApprovalRequester sets who is asked about elevations. Without one,
// every elevation is denied.
func WithApprovalRequester(r ApprovalRequester) Option { return func(o *options) { o.requester = r } }

// WithAuditSink sends audit records to s instead of the configured
// sandbox.audit_log file.
func WithAuditSink(s AuditSink) Option { return func(o *options) { o.sink = s } }

// WithLogger sets the logger; the ledger logs as "capability_ledger".
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// WithNetworkMediator enables NetworkAllowHosts and Command.Secrets.
func WithNetworkMediator(m NetworkMediator) Option { return func(o *options) { o.mediator = m } }

// WithGrantStore keeps sessions' grants in st, so they outlive this
// process: a session's grants are loaded when it is first used and written
// back whenever they change; ForgetSession deletes them.
func WithGrantStore(st GrantStore) Option { return func(o *options) { o.grants = st } }

// WithBaseline sets what every session may have without approval, in place
// of the configuration's sandbox.session.baseline (Config.SessionBaseline;
// its default, "strict", is nothing: no host paths, no network, no
// subprocesses). A
// request within it runs without asking and is not kept as a grant; kept
// grants are pinned to it, so grants approved under another baseline are
// not used. Its paths must be absolute and must not reach the grant store
// or the audit log.
func WithBaseline(c driverapi.Capabilities) Option {
	return func(o *options) { b := cloneCaps(c); o.baseline = &b }
}

// WithProtectedPaths names files that no write grant and no named
// workspace may hold: the programs the host runs outside any sandbox (the
// driver binary, hook plugins) and its configuration. A command that could
// replace one would run unconfined the next time. Hook plugins named in the
// configuration are protected without it.
func WithProtectedPaths(paths ...string) Option {
	return func(o *options) { o.protect = append(o.protect, paths...) }
}
