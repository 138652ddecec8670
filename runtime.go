package alephsandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	"github.com/aleph-sandbox/aleph-sandbox/core/proxy"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/pluginhost"
)

// Host is what a host program calls on the runtime: commands, and the
// session state around them. Implemented by *Runtime.
type Host interface {
	// Execute runs one command through the whole pipeline.
	Execute(ctx context.Context, cmd core.Command) (*core.Output, error)
	// Capabilities is the driver's capability report (as doctor shows it).
	Capabilities(ctx context.Context) (driverapi.HostCapabilities, error)
	// PolicyDigest is the digest of a session's baseline and grants.
	PolicyDigest(sessionID string) string
	// ApplyNetworkGrant widens a session by one allow-hosts origin, pinned
	// to the digest the user saw; it returns the new digest.
	ApplyNetworkGrant(ctx context.Context, sessionID, host string, port uint16, expectedDigest string) (string, error)
	// Grants lists what a session holds.
	Grants(sessionID string) core.SessionGrants
	// RevokeGrant removes one grant (by its ID in Grants).
	RevokeGrant(ctx context.Context, sessionID, grantID string) (string, error)
	// ForgetSession drops a session's grants and its private HOME (its
	// workspace stays on disk).
	ForgetSession(sessionID string)
	// WorkspacePath is the session's workspace directory.
	WorkspacePath(sessionID string) (string, error)
	// Close ends the driver, hook plugins and the audit files.
	Close() error
	// The files API over sessions' workspaces.
	FileHost
	// Layered sessions' changes.
	LayerHost
}

// LayerHost is what a host calls on a layered session (Request.Layered):
// the session's commands see the workspace through an overlay, and the
// host's directory changes only on Apply. Implemented by *Runtime.
type LayerHost interface {
	// Changes lists what the session changed (added, modified, deleted,
	// type changes, modes), sorted by path.
	Changes(ctx context.Context, session string) ([]layer.Change, error)
	// Diff is a unified diff of the session's text changes (binary files
	// named), all or those at or below paths.
	Diff(ctx context.Context, session string, paths ...string) (string, error)
	// Apply brings the session's changes (all when paths is empty) to the
	// host and says what it applied, what it refused and why, and what
	// conflicted; the git import brings commits as objects and refs.
	Apply(ctx context.Context, session string, paths []string, opt layer.ApplyOptions) (layer.ApplyResult, error)
	// Discard drops the session's layer (its sandbox ends first); the
	// host never saw any of it.
	Discard(ctx context.Context, session string) error
}

// ErrDisabled is returned by every call of a runtime built from a
// configuration with sandbox.enabled = false; core.FailureReason gives it
// as core.ReasonDisabled ("sandbox_disabled"), as the service and exec
// --json do.
var ErrDisabled = core.ErrDisabled

// Option is something a host supplies.
type Option func(*options)

type options struct {
	approver   core.ApprovalRequester
	logger     hclog.Logger
	sinks      []core.AuditSink
	hooks      []driverapi.Hook
	driverDirs []string
	driver     driverapi.Driver
	driverEnv  []string
	warn       io.Writer
	noRate     bool
	baseline   *driverapi.Capabilities
	protect    []string
	store      core.GrantStore
	noStore    bool
}

// WithApprover sets who answers elevation requests. Without one, every
// elevation beyond the session's baseline and grants is denied.
func WithApprover(a core.ApprovalRequester) Option { return func(o *options) { o.approver = a } }

// WithLogger receives the runtime's and the plugins' log lines. Default: none.
func WithLogger(l hclog.Logger) Option { return func(o *options) { o.logger = l } }

// WithAuditSink adds a sink for audit records, beside the configured
// sandbox.audit_log file (it does not replace it).
func WithAuditSink(s core.AuditSink) Option { return func(o *options) { o.sinks = append(o.sinks, s) } }

// WithHooks adds before-hooks after the configured ones.
func WithHooks(h ...driverapi.Hook) Option {
	return func(o *options) { o.hooks = append(o.hooks, h...) }
}

// WithDriverDirs adds directories searched first for the driver binary
// (before the host executable's directory, $ALEPH_SANDBOX_PLUGIN_DIR and
// $PATH).
func WithDriverDirs(dirs ...string) Option {
	return func(o *options) { o.driverDirs = append(o.driverDirs, dirs...) }
}

// WithDriver runs commands with d instead of launching the configured
// driver binary (tests, in-process drivers). The caller keeps ownership of d.
func WithDriver(d driverapi.Driver) Option { return func(o *options) { o.driver = d } }

// WithDriverEnv adds NAME=VALUE entries to the driver plugin's environment.
func WithDriverEnv(env ...string) Option {
	return func(o *options) { o.driverEnv = append(o.driverEnv, env...) }
}

// WithWarnings receives one line for each configuration problem the
// runtime works around (a custom command-policy rule that does not compile,
// say). Default: discarded (the logger still gets them).
func WithWarnings(w io.Writer) Option { return func(o *options) { o.warn = w } }

// WithBaseline sets what every session may have without approval
// (core.WithBaseline): requests within it are not asked about and not kept
// as grants. The default is nothing.
func WithBaseline(c driverapi.Capabilities) Option { return func(o *options) { o.baseline = &c } }

// WithProtectedPaths names files no command may be granted write access
// to (core.WithProtectedPaths). The configuration file cfg was loaded
// from, DefaultConfigPath, the host program, the driver and the configured
// hook plugins are protected without it.
func WithProtectedPaths(paths ...string) Option {
	return func(o *options) { o.protect = append(o.protect, paths...) }
}

// WithoutRateLimit leaves the in-process rate limit out whatever the
// configuration says (benchmarks measure the sandbox, not the throttle).
func WithoutRateLimit() Option { return func(o *options) { o.noRate = true } }

// WithGrantStore keeps sessions' grants in st instead of the default file
// store under the data directory.
func WithGrantStore(st core.GrantStore) Option { return func(o *options) { o.store = st } }

// WithoutGrantStore keeps grants in memory only, for the life of the
// runtime.
func WithoutGrantStore() Option { return func(o *options) { o.noStore = true } }

// DefaultGrantStoreDir is where the CLI and the service keep sessions'
// grants: DATA/sessions under the data directory (core.DataDir), "" when
// there is none.
func DefaultGrantStoreDir() string {
	if d := core.DataDir(); d != "" {
		return filepath.Join(d, "sessions")
	}
	return ""
}

// Runtime is the assembled pipeline and everything it owns. Safe for
// concurrent use.
type Runtime struct {
	ws     *core.WorkspaceSandbox // nil when disabled
	driver *pluginhost.DriverHost // nil with WithDriver
	policy *PolicyChecker
	files  fileConfig
	// procLimits are [sandbox.processes] resolved once, by New: the
	// process table's bounds and every front end's (ProcessLimits).
	procLimits core.ProcessLimits
	// procs are the processes of StartProcess (procs.go); nil when
	// disabled.
	procs   *core.ProcessTable
	closers []func()
	once    sync.Once
}

var _ Host = (*Runtime)(nil)

// New builds the runtime cfg describes. The driver is found now (a missing
// one is a *core.DriverNotFoundError here) and launched in the background,
// so its start overlaps building the hooks; the first command waits for it.
func New(cfg core.Config, opts ...Option) (*Runtime, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.logger == nil {
		o.logger = hclog.NewNullLogger()
	}
	if o.warn == nil {
		o.warn = io.Discard
	}
	// Validated once here; core is handed the same value (NewPipeline) and
	// does not check it again.
	valid, err := cfg.Validated()
	if err != nil {
		return nil, err
	}
	if err := checkComponents(cfg); err != nil {
		return nil, err
	}
	// The configuration is validated and resolved here, once, and core is
	// handed the parts it runs with: it finds, launches and opens nothing,
	// and reads no section a component owns.
	procCfg, err := core.ProcessConfigOf(cfg)
	if err != nil {
		return nil, err
	}
	// The command policy is built even when the sandbox is disabled:
	// "would this be refused" has an answer without a driver.
	rt := &Runtime{policy: newPolicyChecker(cfg, o.logger, o.warn), files: fileConfigOf(cfg), procLimits: procCfg.Limits()}
	if !cfg.Sandbox.Enabled {
		return rt, nil
	}
	ok := false
	defer func() {
		if !ok {
			rt.Close()
		}
	}()
	coreOpts := []core.Option{core.WithLogger(o.logger)}
	protect := protectedPaths(cfg, o.protect)
	drv := o.driver
	if drv == nil {
		path, _, err := pluginhost.FindDriver(cfg.Sandbox.Driver, o.driverDirs)
		if err != nil {
			return nil, err
		}
		protect = append(protect, path, filepath.Join(filepath.Dir(path), "aleph-sandbox-init"))
		host, err := pluginhost.NewDriverHost(pluginhost.DriverHostConfig{
			Path:    path,
			SHA256:  cfg.Sandbox.DriverSHA256,
			Options: cfg.DriverOptions(goos()),
			Section: cfg.DriverSection,
			Logger:  o.logger,
			Env:     o.driverEnv,
		})
		if err != nil {
			return nil, err
		}
		rt.driver = host
		rt.closers = append(rt.closers, func() { _ = host.Close() })
		go func() { _ = host.Start(context.Background()) }()
		drv = host
	}
	coreOpts = append(coreOpts, core.WithDriver(drv))

	hooks, closeHooks, err := hooksFromConfig(cfg, hookBuild{logger: o.logger, policy: rt.policy, noRate: o.noRate})
	rt.closers = append(rt.closers, closeHooks)
	if err != nil {
		return nil, err
	}
	coreOpts = append(coreOpts, core.WithHooks(append(hooks, o.hooks...)...))

	sink, closeSink, err := auditSink(cfg, o.sinks)
	if err != nil {
		return nil, err
	}
	rt.closers = append(rt.closers, closeSink)
	coreOpts = append(coreOpts, core.WithAuditSink(sink))
	if o.approver != nil {
		coreOpts = append(coreOpts, core.WithApprovalRequester(o.approver))
	}
	coreOpts = append(coreOpts, core.WithProtectedPaths(protect...))
	if o.baseline != nil {
		coreOpts = append(coreOpts, core.WithBaseline(*o.baseline))
	}
	// Grants approved for a session hold across processes: the CLI's and
	// the service's commands of one session share them.
	switch {
	case o.noStore:
	case o.store != nil:
		coreOpts = append(coreOpts, core.WithGrantStore(o.store))
	case DefaultGrantStoreDir() != "":
		coreOpts = append(coreOpts, core.WithGrantStore(core.NewFileGrantStore(DefaultGrantStoreDir())))
	}
	// The proxy's decisions go to the ledger of the sandbox built below;
	// no command (and so no decision) exists before it does.
	mediator := mediatorFromConfig(cfg)
	coreOpts = append(coreOpts, core.WithNetworkMediator(routedMediator{m: mediator, driver: drv}))
	ws, err := core.NewPipeline(valid, coreOpts...)
	if err != nil {
		return nil, err
	}
	mediator.Audit = func(d proxy.Decision) {
		ws.RecordNetwork(context.Background(), d.SessionID, d.CommandID, core.NetworkAudit{
			Host: d.Host, Port: d.Port, Protocol: string(d.Protocol), Allowed: d.Allowed,
			Reason: string(d.ReasonCode), Detail: d.Detail, Suppressed: d.Suppressed,
		})
	}
	rt.ws = ws
	rt.procs = core.NewProcessTable(ws, rt.procLimits)
	ok = true
	return rt, nil
}

// ProcessLimits are the bounds of the processes of StartProcess
// ([sandbox.processes]), as New resolved them: a front end that keeps a
// process table of its own, or that needs a process's longest lifetime,
// takes them from here rather than reading the section again.
func (r *Runtime) ProcessLimits() core.ProcessLimits { return r.procLimits }

// protectedPaths are the files no write grant or named workspace may hold,
// as the assembly resolves them (core is handed the list and reads none
// of it from the configuration): extra (WithProtectedPaths), the
// configuration file read, the per-user one, this program and the hook
// plugins New launches. The driver New finds is added where it is found.
func protectedPaths(cfg core.Config, extra []string) []string {
	// The programs the host runs outside any sandbox: a command that could
	// rewrite one (a workspace holding the checkout's bin/, say) would run
	// unconfined on the next call. No write grant or workspace may hold
	// them.
	protect := append([]string(nil), extra...)
	if src := cfg.Source(); src != "" {
		protect = append(protect, src)
	}
	// The per-user configuration file, whether or not it exists yet: a
	// command that could write (or create) it could name its own driver or
	// hook plugin for the next run of the CLI, serve or mcp. Protected here
	// and not by each front end, so that no way of building a runtime
	// forgets it.
	if def := DefaultConfigPath(); def != "" {
		if abs, err := filepath.Abs(def); err == nil {
			protect = append(protect, abs)
		}
	}
	if exe, err := os.Executable(); err == nil {
		protect = append(protect, exe)
	}
	// The hook plugins New launches run outside any sandbox, as the
	// driver does: protected for the same reason, by what launches them.
	for _, h := range cfg.Sandbox.HookPlugins {
		if filepath.IsAbs(h) {
			protect = append(protect, h)
		}
	}
	return protect
}

// Policy is the command policy the pipeline runs (built once, whether or
// not [sandbox.command_policy] enables it in the pipeline), for questions
// such as the service's CheckPolicy.
func (r *Runtime) Policy() *PolicyChecker { return r.policy }

// Driver is the driver plugin host, or nil (disabled, or WithDriver).
func (r *Runtime) Driver() *pluginhost.DriverHost { return r.driver }

// Execute implements Host.
func (r *Runtime) Execute(ctx context.Context, cmd core.Command) (*core.Output, error) {
	return r.Pipeline().Execute(ctx, cmd)
}

// Pipeline is what Execute runs each command through: core's pipeline,
// or, for a disabled runtime, one that refuses every command with
// ErrDisabled. Execute adds nothing to it, so a host that runs many
// commands (the service) holds the pipeline and calls it directly: one
// call fewer on every command's way down (docs/architecture.md, "The walk
// of one Python exec").
func (r *Runtime) Pipeline() core.Executor {
	if r.ws == nil {
		return disabledPipeline{}
	}
	return r.ws
}

// disabledPipeline is the pipeline of a disabled runtime.
type disabledPipeline struct{}

func (disabledPipeline) Execute(context.Context, core.Command) (*core.Output, error) {
	return nil, ErrDisabled
}

// Capabilities implements Host.
func (r *Runtime) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	if r.ws == nil {
		return driverapi.HostCapabilities{}, ErrDisabled
	}
	return r.ws.Capabilities(ctx)
}

// PolicyDigest implements Host ("" when disabled).
func (r *Runtime) PolicyDigest(sessionID string) string {
	if r.ws == nil {
		return ""
	}
	return r.ws.PolicyDigest(sessionID)
}

// ApplyNetworkGrant implements Host.
func (r *Runtime) ApplyNetworkGrant(ctx context.Context, sessionID, host string, port uint16, expectedDigest string) (string, error) {
	if r.ws == nil {
		return "", ErrDisabled
	}
	return r.ws.ApplyNetworkGrant(ctx, sessionID, host, port, expectedDigest)
}

// Grants implements Host.
func (r *Runtime) Grants(sessionID string) core.SessionGrants {
	if r.ws == nil {
		return core.SessionGrants{SessionID: sessionID, Grants: []core.Grant{}}
	}
	return r.ws.Grants(sessionID)
}

// RevokeGrant implements Host.
func (r *Runtime) RevokeGrant(ctx context.Context, sessionID, grantID string) (string, error) {
	if r.ws == nil {
		return "", ErrDisabled
	}
	return r.ws.RevokeGrant(ctx, sessionID, grantID)
}

// ForgetSession implements Host.
func (r *Runtime) ForgetSession(sessionID string) {
	if r.ws != nil {
		// Its processes go first: none may outlive the session.
		r.procs.ForgetSession(sessionID)
		r.ws.ForgetSession(sessionID)
	}
}

// DeleteSession forgets a session (its commands end, its HOME and kept
// grants go) and removes the workspace the runtime made for it; a
// workspace the caller named is never removed.
func (r *Runtime) DeleteSession(sessionID string) error {
	if r.ws == nil {
		return nil
	}
	r.procs.ForgetSession(sessionID)
	return r.ws.DeleteSession(sessionID)
}

// ExpireSession is DeleteSession for a session that sat idle for idle,
// audited as such (serve's serve.session_idle_ttl).
func (r *Runtime) ExpireSession(ctx context.Context, sessionID string, idle time.Duration) error {
	if r.ws == nil {
		return nil
	}
	r.procs.ForgetSession(sessionID)
	return r.ws.ExpireSession(ctx, sessionID, idle)
}

// ExpireIdleSession deletes a session as ExpireSession does if it has
// been idle for ttl in every process sharing the workspace root (seen is
// the caller's own last sight of a call of it, zero for none): nobody
// holds it and its record's stamp is older. Otherwise it returns a
// *core.SessionKeptError and changes nothing. It returns how long the
// session had been idle.
func (r *Runtime) ExpireIdleSession(ctx context.Context, sessionID string, ttl time.Duration, seen time.Time) (time.Duration, error) {
	if r.ws == nil {
		return 0, ErrDisabled
	}
	idle, err := r.ws.ExpireIdleSession(ctx, sessionID, ttl, seen)
	var kept *core.SessionKeptError
	if !errors.As(err, &kept) {
		// Its processes went with it (an ended one not waited for is
		// all a session nobody holds can have).
		r.procs.ForgetSession(sessionID)
	}
	return idle, err
}

// RecordedSessions lists, sorted, the sessions whose workspace is on disk
// under the workspace root with its record (core.RecordedSessions), made
// by this process or another.
func (r *Runtime) RecordedSessions() []string {
	if r.ws == nil {
		return nil
	}
	return r.ws.RecordedSessions()
}

// KeptSessions lists the sessions whose grants are kept on disk (from
// earlier processes too), sorted.
func (r *Runtime) KeptSessions() []string {
	if r.ws == nil {
		return nil
	}
	return r.ws.KeptSessions()
}

// HomePath is a session's private HOME (sandbox.session.home), or its
// workspace when HOME is the workspace.
func (r *Runtime) HomePath(sessionID string) (string, error) {
	if r.ws == nil {
		return "", ErrDisabled
	}
	return r.ws.HomePath(sessionID)
}

// Changes implements LayerHost.
func (r *Runtime) Changes(ctx context.Context, session string) ([]layer.Change, error) {
	if r.ws == nil {
		return nil, ErrDisabled
	}
	return r.ws.Changes(ctx, session)
}

// Diff implements LayerHost.
func (r *Runtime) Diff(ctx context.Context, session string, paths ...string) (string, error) {
	if r.ws == nil {
		return "", ErrDisabled
	}
	return r.ws.Diff(ctx, session, paths...)
}

// Apply implements LayerHost.
func (r *Runtime) Apply(ctx context.Context, session string, paths []string, opt layer.ApplyOptions) (layer.ApplyResult, error) {
	if r.ws == nil {
		return layer.ApplyResult{}, ErrDisabled
	}
	return r.ws.Apply(ctx, session, paths, opt)
}

// Discard implements LayerHost.
func (r *Runtime) Discard(ctx context.Context, session string) error {
	if r.ws == nil {
		return ErrDisabled
	}
	return r.ws.Discard(ctx, session)
}

// WorkspacePath implements Host.
func (r *Runtime) WorkspacePath(sessionID string) (string, error) {
	if r.ws == nil {
		return "", ErrDisabled
	}
	return r.ws.WorkspacePath(sessionID)
}

// Close implements Host: the pipeline first (no command may start after),
// then what it used, in reverse order of creation.
func (r *Runtime) Close() error {
	var err error
	r.once.Do(func() {
		if r.procs != nil {
			// Processes are killed while the driver still runs.
			r.procs.Close()
		}
		if r.ws != nil {
			err = r.ws.Close()
		}
		for i := len(r.closers) - 1; i >= 0; i-- {
			r.closers[i]()
		}
	})
	return err
}

// auditSink is the configured JSON-lines file (if any) and the host's own
// sinks, each record going to all of them.
func auditSink(cfg core.Config, extra []core.AuditSink) (core.AuditSink, func(), error) {
	sinks := append([]core.AuditSink(nil), extra...)
	closeAll := func() {}
	if cfg.Sandbox.AuditLog != "" {
		js, err := core.OpenJSONLinesSink(cfg.Sandbox.AuditLog)
		if err != nil {
			return nil, closeAll, fmt.Errorf("sandbox.audit_log: %w", err)
		}
		sinks = append([]core.AuditSink{js}, sinks...)
		closeAll = func() { _ = js.Close() }
	}
	return fanOut(sinks), closeAll, nil
}

// fanOut sends each record to every sink; the first error is returned after
// all have been tried.
type fanOut []core.AuditSink

func (f fanOut) Record(ctx context.Context, rec core.AuditRecord) error {
	var first error
	for _, s := range f {
		if err := s.Record(ctx, rec); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// AuditFailures is how many audit records could not be written since the
// runtime was built (the audit_write_failures metric of serve).
func (r *Runtime) AuditFailures() int64 {
	if r.ws == nil {
		return 0
	}
	return r.ws.AuditFailures()
}
