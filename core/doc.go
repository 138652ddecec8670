// Package core is the aleph-sandbox pipeline: it takes a Command from a host
// program, decides whether and how it may run, and hands it to an OS sandbox
// driver (a driverapi.Driver). Core launches no process and opens no file of
// its own: the driver (usually a plugin process kept by pluginhost.DriverHost),
// hooks, audit sink, grant store and network mediator are injected, and the
// assembly package (alephsandbox.New) is what builds them from a Config.
//
// # API shape
//
//	type Sandbox interface {
//	    Execute(ctx context.Context, cmd Command) (*Output, error)
//	    Close() error
//	}
//	func NewWorkspaceSandbox(cfg Config, opts ...Option) (*WorkspaceSandbox, error) // WithDriver required
//	func NewPipeline(v ValidConfig, opts ...Option) (*WorkspaceSandbox, error) // v from cfg.Validated(): checked once
//	func LoadConfig(path string, opts ...LoadOption) (Config, error) // defaults + TOML file + ALEPH_SANDBOX_SANDBOX__* env
//	func WithSession(ctx, id) context.Context / SessionFrom(ctx) (string, bool)
//	Options: WithDriver, WithHooks, WithApprovalRequester, WithAuditSink,
//	         WithLogger, WithNetworkMediator, WithGrantStore, WithBaseline,
//	         WithProtectedPaths
//
// # Pipeline (WorkspaceSandbox.Execute)
//
//  0. Input validation (ValidateCommand, the one check of a command's form,
//     which alephsandbox.Request also calls): bad input is an
//     *InvalidCommandError naming the field.
//  1. Session resolve: a map under an RWMutex (read-lock fast path,
//     write-lock double-checked slow path). The workspace directory is
//     workspace_root/hex(sha256(json(session_id))[:16]), created lazily with
//     mode 0700. Command.Workspace replaces it with an existing directory.
//  2. cwd validate: canonicalized with symlinks resolved and confined to the
//     canonical workspace, else DeniedError{Code: ReasonCwdOutsideWorkspace}.
//     Secrets are checked here too (they need AllowHosts and a mediator).
//  3. Before-hooks, in order, each under sandbox.hook_timeout_ms. An error, a
//     timeout or an unknown action fails the command closed naming the hook;
//     Warn is recorded; Deny ends with a DeniedError carrying rule, hook and
//     RetryAfter. AfterHook.After runs for every hook that allowed, once the
//     command has ended.
//  4. Capability check. First the request must be enforceable by the
//     driver's HostCapabilities (RequiredFeatures), or it fails closed naming
//     the feature and the driver's reason; this comes before approval so no
//     one is asked to approve what cannot be enforced. Then: within the
//     session baseline, or within a cached grant, goes on; otherwise the
//     approval gate asks (Approved caches the grant; Denied and Timeout deny).
//  5. Profile: driver.ProfileFor with the canonical workspace and cwd (and the
//     mediation endpoint for AllowHosts).
//  6. Run: timeout precedence Command.Timeout > Capabilities.TimeoutSecs >
//     sandbox.default_timeout_seconds; output budget Command.MaxOutputBytes,
//     else sandbox.max_output_bytes (split stdout/stderr). Output is captured
//     into Output within the budget and, when Command.Stdout/Stderr are set,
//     streamed there as it comes.
//  7. Audit: one AuditRecord per command and per denial, to the hclog logger
//     named "capability_ledger" and to an AuditSink. Never env values or
//     secrets; the program name and the argument count, not the arguments.
//
// # Configuration
//
// LoadConfig layers, in order: DefaultConfig; the TOML file; environment
// overrides. An override is ALEPH_SANDBOX_ followed by the key path with
// "__" between levels, upper-cased: ALEPH_SANDBOX_SANDBOX__DEFAULT_TIMEOUT_SECONDS=30
// sets sandbox.default_timeout_seconds, ALEPH_SANDBOX_SANDBOX__RATE_LIMIT__BURST=5
// sets sandbox.rate_limit.burst; string lists take comma-separated values;
// lists of tables are file-only. Other ALEPH_SANDBOX_* variables (such as
// ALEPH_SANDBOX_PLUGIN_DIR) are not configuration. Unknown keys, values of
// the wrong type and invalid values are refused with a *ConfigError naming
// the full key ("sandbox.rate_limit.per_sesion: unknown key"). Config.String
// prints the effective configuration as TOML (it loads back unchanged);
// Config.Effective gives flat keys for JSON. A section owned by another
// component is a Section, kept as given: [sandbox.rate_limit] is the
// rate-limit hook's, checked here only against the schema the assembly
// passes (WithSection); the [sandbox.linux] table is the Linux driver's and
// reaches it as JSON (Config.DriverOptions), through SetConfig and
// ALEPH_DRIVER_OPTIONS, where it is validated.
//
// # Environment of the child
//
// The host environment never reaches the child. It gets PATH, HOME (the
// session's private HOME, or the workspace: sandbox.session.home), LANG=C.UTF-8, TERM=dumb and TZ=UTC, then Command.Env on top,
// then one "aleph:secret:NAME" placeholder per secret, then the mediation's
// proxy variables.
//
// # Errors
//
// *InvalidCommandError (bad input), *DeniedError (a policy decision, with a
// ReasonCode), *DriverError (the driver failed or died; names the driver),
// *StaleGrantError (ApplyNetworkGrant against an outdated digest),
// *HookError (a hook failed, timed out or answered nonsense; fail closed),
// *MediationError (the network mediation did not start), *WorkspaceError,
// *DriverNotFoundError (pluginhost.FindDriver), *HookPluginError (a hook
// plugin process failed), *ConfigError (= driverapi.ConfigError, the one
// configuration error type: LoadConfig/Validate, a section a driver or hook
// refuses, and a pipeline
// built without its driver or audit sink), and ErrClosed after Close. Every outcome,
// success or not, leaves one AuditRecord whose ReasonCode says which.
package core
