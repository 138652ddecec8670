package core

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// MaxTimeout is the longest timeout a command may ask for (by Timeout or
// Capabilities.TimeoutSecs); it keeps deadline arithmetic far from overflow.
const MaxTimeout = 365 * 24 * time.Hour

// maxSessionIDLen bounds a session id; it only names a directory via its
// hash, but an unbounded id is a memory and ledger hazard.
const maxSessionIDLen = 1024

// WorkspaceSandbox is the pipeline described in the package documentation.
type WorkspaceSandbox struct {
	cfg      Config
	driver   driverapi.Driver
	ownedDrv io.Closer // closed by Close: a DriverHost New launched
	hooks    []*hookEntry
	gate     *ApprovalGate
	ledger   *ledger
	ownSink  io.Closer
	mediator NetworkMediator
	logger   hclog.Logger
	store    GrantStore // nil: grants live as long as this process
	baseline driverapi.Capabilities
	// protect are files no write grant or named workspace may hold
	// (WithProtectedPaths, hook plugins).
	protect []string

	mu       sync.RWMutex
	sessions map[string]*session
	closed   bool

	capsMu   sync.Mutex
	hostCaps *driverapi.HostCapabilities

	// profiles caches driver profiles by request: the contract makes
	// ProfileFor deterministic, and the cache saves one driver round trip
	// per command. Requests with a proxy endpoint (new per command) are not
	// cached; any driver error clears it (a relaunched driver may see a
	// different host).
	profMu   sync.Mutex
	profiles map[string]driverapi.Profile

	// runGrace is how long past a command's timeout the core waits for the
	// driver to report before giving up on it (the driver enforces the
	// timeout; this only bounds a driver that does not).
	runGrace time.Duration
}

// defaultRunGrace is the default WorkspaceSandbox.runGrace.
const defaultRunGrace = 10 * time.Second

// maxCachedProfiles bounds the profile cache; it is emptied when full.
const maxCachedProfiles = 256

var _ Sandbox = (*WorkspaceSandbox)(nil)

type hookEntry struct {
	hook driverapi.Hook
	idx  int
	mu   sync.Mutex
	name string // from Describe, cached once known
}

type session struct {
	id       string
	dir      string // canonical, once created
	baseline driverapi.Capabilities

	mu       sync.RWMutex
	dirReady bool
	grants   []driverapi.Capabilities
	netHosts []string // network grants (ApplyNetworkGrant), one AllowHosts set
	// unkept is set while a change of the grants could not be written to
	// the store: this process's copy is then the session's state, and is
	// not replaced by the store's older one.
	unkept atomic.Bool
}

// NewWorkspaceSandbox builds the pipeline regardless of sandbox.enabled
// (New is the entry point that honours it).
func NewWorkspaceSandbox(cfg Config, opts ...Option) (*WorkspaceSandbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	logger := o.logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	s := &WorkspaceSandbox{
		cfg:      cfg,
		driver:   o.driver,
		gate:     NewApprovalGate(o.requester, time.Duration(cfg.Sandbox.ApprovalTimeoutSeconds)*time.Second),
		mediator: o.mediator,
		logger:   logger,
		store:    o.grants,
		baseline: o.baseline,
		sessions: map[string]*session{},
		runGrace: defaultRunGrace,
	}
	for _, p := range o.protect {
		if p != "" {
			s.protect = append(s.protect, p)
		}
	}
	for _, h := range cfg.Sandbox.HookPlugins {
		if filepath.IsAbs(h) {
			s.protect = append(s.protect, h)
		}
	}
	if err := validateCommand("baseline", Command{Program: "baseline", Capabilities: s.baseline}); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	if err := s.grantsReachOwnState(s.baseline); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	for i, h := range o.hooks {
		if h == nil {
			return nil, fmt.Errorf("hook %d is nil", i)
		}
		s.hooks = append(s.hooks, &hookEntry{hook: h, idx: i})
	}
	sink := o.sink
	if sink == nil && cfg.Sandbox.AuditLog != "" {
		js, err := OpenJSONLinesSink(cfg.Sandbox.AuditLog)
		if err != nil {
			return nil, &ConfigError{Key: "sandbox.audit_log", Reason: err.Error()}
		}
		sink, s.ownSink = js, js
	}
	s.ledger = &ledger{log: logger.ResetNamed("capability_ledger"), sink: sink}
	if s.driver == nil {
		path, looked, err := FindDriver(cfg.Sandbox.Driver, nil)
		if err != nil {
			s.closeOwned()
			_ = looked
			return nil, err
		}
		h, err := NewDriverHost(DriverHostConfig{
			Path:    path,
			SHA256:  cfg.Sandbox.DriverSHA256,
			Options: cfg.DriverOptions(runtime.GOOS),
			Logger:  logger,
			Env:     o.driverEnv,
		})
		if err != nil {
			s.closeOwned()
			return nil, err
		}
		s.driver, s.ownedDrv = h, h
	}
	return s, nil
}

// Close ends the driver plugin New launched (if any) and closes the ledger
// file. Commands after Close fail.
func (s *WorkspaceSandbox) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return s.closeOwned()
}

func (s *WorkspaceSandbox) closeOwned() error {
	var errs []error
	if s.ownedDrv != nil {
		errs = append(errs, s.ownedDrv.Close())
	}
	if s.ownSink != nil {
		errs = append(errs, s.ownSink.Close())
	}
	return errors.Join(errs...)
}

// SessionDirName is the directory name of a session's workspace:
// hex(sha256(json(id))[:16]). Hashing keeps any id (slashes, dots, unicode)
// from choosing a path.
func SessionDirName(id string) string {
	j, _ := json.Marshal(id)
	sum := sha256.Sum256(j)
	return hex.EncodeToString(sum[:16])
}

// session returns the session's state, creating it (not its directory) on
// first use: read-lock fast path, write-lock double-checked slow path.
func (s *WorkspaceSandbox) session(id string) (*session, error) {
	s.mu.RLock()
	sess, ok := s.sessions[id]
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if ok {
		return sess, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if sess, ok := s.sessions[id]; ok {
		return sess, nil
	}
	sess = &session{id: id, baseline: cloneCaps(s.baseline)}
	s.restoreGrants(sess)
	s.sessions[id] = sess
	return sess, nil
}

// workspaceDir creates the session's directory on first use and returns its
// canonical path.
func (s *WorkspaceSandbox) workspaceDir(sess *session) (string, error) {
	sess.mu.RLock()
	if sess.dirReady {
		d := sess.dir
		sess.mu.RUnlock()
		return d, nil
	}
	sess.mu.RUnlock()
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.dirReady {
		return sess.dir, nil
	}
	root := s.cfg.Sandbox.WorkspaceRoot
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", &WorkspaceError{Path: root, Err: err}
	}
	dir := filepath.Join(root, SessionDirName(sess.id))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", &WorkspaceError{Path: dir, Err: err}
	}
	// The session directory itself must be a real directory: a symlink
	// planted under the root would otherwise move the workspace anywhere.
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		return "", &WorkspaceError{Path: dir, Err: errors.New("not a directory (symlinks are refused)")}
	}
	canon, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", &WorkspaceError{Path: dir, Err: err}
	}
	sess.dir, sess.dirReady = canon, true
	return canon, nil
}

// run collects what the audit record of one Execute reports.
type run struct {
	rec      AuditRecord
	verdicts []driverapi.Verdict
}

// Execute runs cmd through the pipeline.
func (s *WorkspaceSandbox) Execute(ctx context.Context, cmd Command) (out *Output, err error) {
	start := time.Now()
	r := &run{rec: AuditRecord{
		CommandID: newCommandID(),
		Program:   cmd.Program,
		ArgCount:  len(cmd.Args),
	}}
	r.rec.CapabilityDigest = capsDigest(cmd.Capabilities)
	defer func() {
		r.rec.Verdicts = r.verdicts
		r.rec.DurationMS = time.Since(start).Milliseconds()
		if err != nil {
			classify(&r.rec, err, ctx)
		} else {
			r.rec.Decision = DecisionAllow
			if r.rec.Reason == "" {
				r.rec.Reason = ReasonAllowed
			}
			if out.Exit.TimedOut {
				r.rec.Reason = ReasonTimeout
			}
		}
		s.ledger.record(ctx, r.rec)
	}()

	// 0. Input.
	sid := cmd.SessionID
	if sid == "" {
		sid, _ = SessionFrom(ctx)
	}
	r.rec.SessionID = sid
	if err := validateCommand(sid, cmd); err != nil {
		return nil, err
	}

	// 1. Session.
	sess, err := s.session(sid)
	if err != nil {
		return nil, err
	}
	var ws string
	if cmd.Workspace != "" {
		ws, err = canonicalDir("workspace", cmd.Workspace)
		if err == nil {
			err = s.reachesOwnState("workspace", ws, true)
		}
	} else {
		ws, err = s.workspaceDir(sess)
	}
	if err != nil {
		return nil, err
	}

	// 2. cwd and secrets.
	cwd, err := confineCwd(ws, cmd.Cwd)
	if err != nil {
		return nil, err
	}
	if len(cmd.Secrets) > 0 && (cmd.Capabilities.Network.Mode != driverapi.NetworkAllowHosts || s.mediator == nil) {
		return nil, &DeniedError{Code: ReasonSecretRequiresMediation,
			Reason: "secrets need network mode allow_hosts and a network mediator; without mediation nothing would ever substitute them, so the command is refused"}
	}

	// 3. Before-hooks.
	allowed, err := s.runHooks(ctx, r, sid, cwd, cmd)
	ran := false
	defer s.afterHooks(ctx, allowed, sid, r.rec.CommandID, &ran)
	if err != nil {
		return nil, err
	}

	// 4. Capabilities. Enforceability is checked before approval: nobody
	// should be asked to approve what the driver cannot enforce, and no
	// grant is cached for it.
	hc, err := s.capabilities(ctx)
	if err != nil {
		return nil, err
	}
	r.rec.Backend = hc.Backend
	if err := s.enforceable(hc, cmd.Capabilities); err != nil {
		return nil, err
	}
	if err := s.checkCapabilities(ctx, r, sess, sid, cmd); err != nil {
		return nil, err
	}

	// Environment, then mediation for AllowHosts.
	env, err := buildEnv(ws, cmd)
	if err != nil {
		return nil, err
	}
	preq := driverapi.ProfileRequest{Capabilities: cmd.Capabilities, Workspace: ws, Cwd: cwd, Protected: s.cfg.ProtectedEntries()}
	if cmd.Capabilities.Network.Mode == driverapi.NetworkAllowHosts {
		med, err := s.mediator.Start(ctx, sid, r.rec.CommandID, append([]string(nil), cmd.Capabilities.Network.Hosts...), cmd.Secrets)
		if err != nil {
			return nil, &MediationError{Err: err}
		}
		defer med.Close()
		ep := med.Endpoint()
		preq.Proxy = &ep
		env = mergeEnv(env, med.Env())
	}

	// 5. Profile.
	prof, err := s.profileFor(ctx, preq)
	if err != nil {
		return nil, s.driverErr("ProfileFor", err)
	}
	r.rec.ProfileDigest = prof.Digest

	// 6. Run.
	timeout := time.Duration(s.cfg.Sandbox.DefaultTimeoutSeconds) * time.Second
	if cmd.Capabilities.TimeoutSecs > 0 {
		timeout = time.Duration(cmd.Capabilities.TimeoutSecs) * time.Second
	}
	if cmd.Timeout > 0 {
		timeout = roundUpMS(cmd.Timeout)
	}
	budget := s.cfg.Sandbox.MaxOutputBytes
	if cmd.MaxOutputBytes > 0 {
		budget = cmd.MaxOutputBytes
	}
	outBudget, errBudget := driverapi.StreamBudgets(budget)
	var stdout, stderr limitedBuffer
	stdout.limit, stderr.limit = outBudget, errBudget
	streams := driverapi.Streams{Stdout: tee(&stdout, cmd.Stdout, outBudget), Stderr: tee(&stderr, cmd.Stderr, errBudget)}
	spec := driverapi.RunSpec{
		Program: cmd.Program, Args: cmd.Args, Env: env, Stdin: cmd.Stdin, Cwd: cwd,
		Profile: prof, Timeout: timeout, MaxOutputBytes: budget,
		SessionID: sid, CommandID: r.rec.CommandID,
	}
	ran = true
	sigCtx, cancelSig := context.WithCancelCause(ctx)
	runCtx, cancelRun := context.WithTimeout(sigCtx, timeout+s.runGrace)
	stopSignals := s.forwardSignals(runCtx, cancelSig, hc, r.rec.CommandID, cmd.Signals)
	runStart := time.Now()
	exit, err := s.driver.Run(runCtx, spec, streams)
	stopSignals()
	killedBySignal := errors.Is(context.Cause(sigCtx), ErrSignalEnded)
	overdue := runCtx.Err() != nil && ctx.Err() == nil && !killedBySignal
	cancelRun()
	cancelSig(nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("command %s canceled: %w", r.rec.CommandID, ctx.Err())
		}
		if killedBySignal {
			return nil, fmt.Errorf("command %s: %w", r.rec.CommandID, context.Cause(sigCtx))
		}
		if overdue {
			err = fmt.Errorf("driver did not end the command within its %s timeout (plus %s grace); it was cancelled: %w", timeout, s.runGrace, err)
			return nil, s.driverErr("Run", err)
		}
		elapsed := time.Since(runStart)
		if elapsed < timeout || !setupMayHaveTimedOut(err) {
			return nil, s.driverErr("Run", err)
		}
		// The timeout passed before the driver had the command running:
		// the driver's deadline cut its setup short (or the setup took
		// longer than the whole timeout). Either way the command ran out
		// of time, and a timeout is what the caller must see, not a
		// sandbox failure.
		exit = setupTimeoutExit(elapsed, err)
	}
	exit.Truncated = exit.Truncated || stdout.truncated || stderr.truncated
	r.rec.ExitCode, r.rec.Signal = exit.ExitCode, exit.Signal
	r.rec.TimedOut, r.rec.Truncated = exit.TimedOut, exit.Truncated
	r.rec.Details = maps.Clone(exit.Details)
	return &Output{
		Stdout: stdout.buf, Stderr: stderr.buf, Exit: exit, Backend: hc.Backend,
		CommandID: r.rec.CommandID, ProfileDigest: prof.Digest, Verdicts: r.verdicts,
	}, nil
}

// roundUpMS rounds d up to a whole millisecond, the resolution of the
// driver protocol's timeout (which would otherwise truncate 999µs to 0).
func roundUpMS(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d
}

// setupMayHaveTimedOut reports whether a failed Run may be the command's
// own timeout firing during setup: not when the driver refused the request
// or its plugin died or could not be reached (those are failures whatever
// the clock says).
func setupMayHaveTimedOut(err error) bool {
	var ie *driverapi.InvalidSpecError
	var pe *driverapi.ProfileError
	var ple *driverapi.PluginError
	var pm *driverapi.ProtocolMismatchError
	return !errors.As(err, &ie) && !errors.As(err, &pe) && !errors.As(err, &ple) && !errors.As(err, &pm)
}

// setupTimeoutExit is the outcome of a command whose timeout fired before
// it started: timed out, killed as every timed-out command is (SIGKILL),
// with what the driver said kept in the details.
func setupTimeoutExit(elapsed time.Duration, err error) driverapi.Exit {
	return driverapi.Exit{
		TimedOut: true, ExitCode: 128 + 9, Signal: 9, Duration: elapsed,
		Details: map[string]string{"timed_out_during": "setup", "setup_error": err.Error()},
	}
}

// classify fills the record's decision and reason from the error Execute returns.
func classify(rec *AuditRecord, err error, ctx context.Context) {
	rec.Detail = err.Error()
	var de *DeniedError
	var ie *InvalidCommandError
	var he *HookError
	var me *MediationError
	var we *WorkspaceError
	switch {
	case errors.As(err, &de):
		rec.Decision, rec.Reason, rec.Rule, rec.Hook = DecisionDeny, de.Code, de.Rule, de.Hook
	case errors.As(err, &ie):
		rec.Decision, rec.Reason = DecisionError, ReasonInvalidCommand
	case errors.As(err, &he):
		rec.Decision, rec.Reason, rec.Hook = DecisionError, ReasonHookFailed, he.Hook
	case errors.As(err, &me):
		rec.Decision, rec.Reason = DecisionError, ReasonMediationFailed
	case errors.As(err, &we):
		rec.Decision, rec.Reason = DecisionError, ReasonWorkspaceFailed
	case errors.Is(err, ErrClosed):
		rec.Decision, rec.Reason = DecisionError, ReasonClosed
	case ctx.Err() != nil:
		rec.Decision, rec.Reason = DecisionError, ReasonCanceled
	default:
		rec.Decision, rec.Reason = DecisionError, ReasonDriverFailed
	}
}

func newCommandID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "cmd-" + hex.EncodeToString(b[:])
}

func capsDigest(c driverapi.Capabilities) string {
	b, _ := json.Marshal(c)
	return driverapi.Digest(b)
}

func validateCommand(sid string, cmd Command) error {
	bad := func(field, reason string) error { return &InvalidCommandError{Field: field, Reason: reason} }
	switch {
	case sid == "":
		return bad("session_id", "empty: set Command.SessionID or carry one in the context with WithSession")
	case len(sid) > maxSessionIDLen:
		return bad("session_id", fmt.Sprintf("longer than %d bytes", maxSessionIDLen))
	case !utf8.ValidString(sid) || strings.IndexByte(sid, 0) >= 0:
		return bad("session_id", "must be valid UTF-8 without NUL bytes")
	case cmd.Program == "":
		return bad("program", "empty")
	case !utf8.ValidString(cmd.Program):
		return bad("program", "not valid UTF-8 (the driver protocol carries text)")
	case !utf8.ValidString(cmd.Cwd):
		return bad("cwd", "not valid UTF-8")
	case !utf8.ValidString(cmd.Workspace):
		return bad("workspace", "not valid UTF-8")
	case strings.IndexByte(cmd.Program, 0) >= 0:
		return bad("program", "contains a NUL byte")
	case cmd.Timeout < 0:
		return bad("timeout", "must not be negative")
	case cmd.Timeout > MaxTimeout:
		return bad("timeout", fmt.Sprintf("longer than the %s maximum", MaxTimeout))
	case cmd.Capabilities.TimeoutSecs > uint64(MaxTimeout/time.Second):
		return bad("capabilities.timeout_secs", fmt.Sprintf("longer than the %s maximum", MaxTimeout))
	case cmd.MaxOutputBytes < 0:
		return bad("max_output_bytes", "must not be negative")
	case len(cmd.Stdin) > driverapi.MaxStdinBytes:
		return bad("stdin", fmt.Sprintf("%d bytes exceeds the %d byte limit", len(cmd.Stdin), driverapi.MaxStdinBytes))
	case strings.IndexByte(cmd.Cwd, 0) >= 0:
		return bad("cwd", "contains a NUL byte")
	case strings.IndexByte(cmd.Workspace, 0) >= 0:
		return bad("workspace", "contains a NUL byte")
	}
	for i, a := range cmd.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return bad(fmt.Sprintf("args[%d]", i), "contains a NUL byte")
		}
		if !utf8.ValidString(a) {
			return bad(fmt.Sprintf("args[%d]", i), "not valid UTF-8 (the driver protocol carries text)")
		}
	}
	for name, v := range cmd.Env {
		if err := driverapi.ValidateEnvName(name); err != nil {
			return bad(fmt.Sprintf("env %q", name), "invalid name (empty, '=', NUL or not UTF-8)")
		}
		if strings.IndexByte(v, 0) >= 0 {
			return bad("env "+name, "value contains a NUL byte")
		}
		if !utf8.ValidString(v) {
			return bad("env "+name, "value is not valid UTF-8")
		}
	}
	for name, v := range cmd.Secrets {
		if err := driverapi.ValidateEnvName(name); err != nil {
			return bad(fmt.Sprintf("secret %q", name), "invalid name (empty, '=', NUL or not UTF-8)")
		}
		if strings.ContainsAny(v, "\x00\r\n") || !utf8.ValidString(v) {
			return bad("secret "+name, "value contains NUL, CR or LF, or is not valid UTF-8")
		}
		if _, dup := cmd.Env[name]; dup {
			return bad("secret "+name, "collides with an Env entry of the same name")
		}
		if isDefaultEnvName(name) {
			return bad("secret "+name, "collides with a variable the sandbox sets")
		}
	}
	for i, p := range cmd.Capabilities.FSRead {
		if !filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 || !utf8.ValidString(p) {
			return bad(fmt.Sprintf("capabilities.fs_read[%d]", i), fmt.Sprintf("%q is not an absolute path", p))
		}
	}
	for i, p := range cmd.Capabilities.FSWrite {
		if !filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 || !utf8.ValidString(p) {
			return bad(fmt.Sprintf("capabilities.fs_write[%d]", i), fmt.Sprintf("%q is not an absolute path", p))
		}
	}
	n := cmd.Capabilities.Network
	switch n.Mode {
	case driverapi.NetworkNone, driverapi.NetworkAllowAll:
		if len(n.Hosts) > 0 {
			return bad("capabilities.network.hosts", "only allowed with mode allow_hosts")
		}
	case driverapi.NetworkAllowHosts:
		if len(n.Hosts) == 0 {
			return bad("capabilities.network.hosts", "allow_hosts needs at least one host")
		}
		for i, h := range n.Hosts {
			if h == "" || strings.ContainsAny(h, " \t\r\n/\x00") || !utf8.ValidString(h) {
				return bad(fmt.Sprintf("capabilities.network.hosts[%d]", i), fmt.Sprintf("%q is not a host", h))
			}
		}
	default:
		return bad("capabilities.network.mode", fmt.Sprintf("unknown mode %d", n.Mode))
	}
	return nil
}

// canonicalDir resolves an existing absolute directory.
func canonicalDir(field, p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", &InvalidCommandError{Field: field, Reason: fmt.Sprintf("%q is not an absolute path", p)}
	}
	canon, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", &InvalidCommandError{Field: field, Reason: fmt.Sprintf("%q does not exist or cannot be resolved", p)}
	}
	st, err := os.Stat(canon)
	if err != nil || !st.IsDir() {
		return "", &InvalidCommandError{Field: field, Reason: fmt.Sprintf("%q is not a directory", p)}
	}
	// A workspace named through a symbolic link is refused, not followed:
	// a sandboxed command can plant a link in a directory it may write
	// (W/project -> $HOME), and a later command naming that link as its
	// workspace would make the link's target writable. Grants and the
	// driver's mounts refuse links for the same reason.
	if canon != filepath.Clean(p) {
		return "", &InvalidCommandError{Field: field, Reason: fmt.Sprintf("%q goes through a symbolic link (it resolves to %s); name the real directory", p, canon)}
	}
	return canon, nil
}

// confineCwd resolves cwd (symlinks included) and requires it inside ws.
func confineCwd(ws, cwd string) (string, error) {
	if cwd == "" {
		return ws, nil
	}
	if !filepath.IsAbs(cwd) {
		cwd = filepath.Join(ws, cwd)
	}
	canon, err := filepath.EvalSymlinks(cwd)
	if err != nil {
		// A path that does not resolve may still be an escape attempt;
		// report escape first when it is lexically outside.
		if !driverapi.PathWithin(filepath.Clean(cwd), ws) {
			return "", &DeniedError{Code: ReasonCwdOutsideWorkspace, Reason: fmt.Sprintf("cwd %q is outside the workspace %s", cwd, ws)}
		}
		return "", &InvalidCommandError{Field: "cwd", Reason: fmt.Sprintf("%q does not exist", cwd)}
	}
	if !driverapi.PathWithin(canon, ws) {
		return "", &DeniedError{Code: ReasonCwdOutsideWorkspace, Reason: fmt.Sprintf("cwd %q resolves to %s, outside the workspace %s", cwd, canon, ws)}
	}
	if st, err := os.Stat(canon); err != nil || !st.IsDir() {
		return "", &InvalidCommandError{Field: "cwd", Reason: fmt.Sprintf("%q is not a directory", cwd)}
	}
	return canon, nil
}

// ---- hooks ----

func (h *hookEntry) label(ctx context.Context, timeout time.Duration) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.name != "" {
		return h.name, nil
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	info, err := callWithDeadline(dctx, func(c context.Context) (driverapi.HookInfo, error) { return h.hook.Describe(c) })
	if err != nil {
		return fmt.Sprintf("hook#%d", h.idx), err
	}
	if info.Name == "" {
		info.Name = fmt.Sprintf("hook#%d", h.idx)
	}
	h.name = info.Name
	return h.name, nil
}

// callWithDeadline runs f and gives up at ctx's deadline even if f ignores
// ctx: a stuck in-process hook must not hold a command forever.
func callWithDeadline[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		// A panicking in-process hook fails its command (closed), not the host.
		defer func() {
			if p := recover(); p != nil {
				var zero T
				ch <- res{zero, fmt.Errorf("panic: %v", p)}
			}
		}()
		v, err := f(ctx)
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		if r.err == nil && ctx.Err() != nil {
			var zero T
			return zero, ctx.Err()
		}
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func (s *WorkspaceSandbox) hookRequest(sid, cid, cwd string, cmd Command) driverapi.HookRequest {
	names := make([]string, 0, len(cmd.Env)+len(cmd.Secrets))
	for n := range cmd.Env {
		names = append(names, n)
	}
	for n := range cmd.Secrets {
		names = append(names, n)
	}
	sort.Strings(names)
	req := driverapi.HookRequest{
		// Copies: a hook must not be able to change what then runs.
		SessionID: sid, CommandID: cid, Program: cmd.Program, Args: append([]string(nil), cmd.Args...),
		Cwd: cwd, Capabilities: cloneCaps(cmd.Capabilities), EnvNames: names,
	}
	// Hooks scan stdin (the "sh -s" script path) as text, bounded. Bytes
	// that are not UTF-8 become spaces: a shell runs the text around them
	// all the same, so one stray byte must not hide the whole script from
	// the policy.
	if in := cmd.Stdin; len(in) > 0 {
		if len(in) > driverapi.MaxHookStdinBytes {
			in = trimPartialRune(in[:driverapi.MaxHookStdinBytes])
		}
		req.Stdin = bytes.ToValidUTF8(in, []byte(" ")) // a copy
	}
	return req
}

// runHooks runs the before-hooks in order and returns those that allowed
// (for After).
func (s *WorkspaceSandbox) runHooks(ctx context.Context, r *run, sid, cwd string, cmd Command) ([]*hookEntry, error) {
	if len(s.hooks) == 0 {
		return nil, nil
	}
	timeout := time.Duration(s.cfg.Sandbox.HookTimeoutMS) * time.Millisecond
	req := s.hookRequest(sid, r.rec.CommandID, cwd, cmd)
	var allowed []*hookEntry
	for _, h := range s.hooks {
		name, err := h.label(ctx, timeout)
		if err != nil {
			return allowed, &HookError{Hook: name, Err: fmt.Errorf("describe: %w", hookCause(err, timeout))}
		}
		hctx, cancel := context.WithTimeout(ctx, timeout)
		v, err := callWithDeadline(hctx, func(c context.Context) (driverapi.Verdict, error) { return h.hook.Before(c, req) })
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return allowed, ctx.Err()
			}
			return allowed, &HookError{Hook: name, Err: hookCause(err, timeout)}
		}
		v.Hook = name
		switch v.Action {
		case driverapi.ActionAllow:
			allowed = append(allowed, h)
			r.verdicts = append(r.verdicts, v)
		case driverapi.ActionWarn:
			allowed = append(allowed, h)
			r.verdicts = append(r.verdicts, v)
			r.rec.Reason = ReasonHookWarned
			s.logger.Warn("hook warned", "hook", name, "rule", v.Rule, "reason", v.Reason, "command_id", r.rec.CommandID)
		case driverapi.ActionDeny:
			r.verdicts = append(r.verdicts, v)
			return allowed, &DeniedError{Code: ReasonHookDenied, Reason: v.Reason, Rule: v.Rule, Hook: name, RetryAfter: v.RetryAfter}
		default:
			return allowed, &HookError{Hook: name, Err: fmt.Errorf("unknown verdict action %d", v.Action)}
		}
	}
	return allowed, nil
}

func hookCause(err error, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s (sandbox.hook_timeout_ms): %w", timeout, err)
	}
	return err
}

func (s *WorkspaceSandbox) afterHooks(ctx context.Context, allowed []*hookEntry, sid, cid string, ran *bool) {
	if len(allowed) == 0 {
		return
	}
	// After must run even when the command's context was cancelled: a hook
	// holding a concurrency slot would otherwise leak it.
	timeout := time.Duration(s.cfg.Sandbox.HookTimeoutMS) * time.Millisecond
	base := context.WithoutCancel(ctx)
	for _, h := range allowed {
		ah, ok := h.hook.(driverapi.AfterHook)
		if !ok {
			continue
		}
		actx, cancel := context.WithTimeout(base, timeout)
		_, _ = callWithDeadline(actx, func(c context.Context) (struct{}, error) { ah.After(c, sid, cid, *ran); return struct{}{}, nil })
		cancel()
	}
}

// ---- capabilities ----

func (s *WorkspaceSandbox) checkCapabilities(ctx context.Context, r *run, sess *session, sid string, cmd Command) error {
	caps := cmd.Capabilities
	if err := s.grantsReachOwnState(caps); err != nil {
		return err
	}
	if caps.IsWithin(sess.baseline) {
		return nil
	}
	s.refreshGrants(sess)
	if sess.withinGrant(caps) {
		r.rec.Reason = ReasonGrantCached
		return nil
	}
	req := driverapi.ApprovalRequest{
		SessionID: sid, CommandID: r.rec.CommandID, Program: cmd.Program, Args: cmd.Args,
		Requested: caps, Baseline: sess.baseline, Summary: Summary(caps, sess.baseline),
	}
	outcome, err := s.gate.Decide(ctx, req)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	switch {
	case err != nil:
		return &DeniedError{Code: ReasonApprovalDenied, Reason: req.Summary + ": " + err.Error()}
	case outcome == driverapi.ApprovalApproved:
		sess.addGrant(caps)
		s.persist(sid, func(st *StoredGrants) { mergeGrant(st, caps) })
		r.rec.Reason = ReasonApprovalGranted
		return nil
	case outcome == driverapi.ApprovalTimeout:
		return &DeniedError{Code: ReasonApprovalTimeout, Reason: fmt.Sprintf("%s: no answer within %ds (sandbox.approval_timeout_seconds)", req.Summary, s.cfg.Sandbox.ApprovalTimeoutSeconds)}
	}
	return &DeniedError{Code: ReasonApprovalDenied, Reason: req.Summary + ": not approved"}
}

func (ss *session) withinGrant(c driverapi.Capabilities) bool {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	for _, g := range ss.grants {
		if c.IsWithin(g) {
			return true
		}
	}
	if len(ss.netHosts) > 0 {
		g := driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: ss.netHosts}}
		if c.IsWithin(g) {
			return true
		}
	}
	return false
}

func (ss *session) addGrant(c driverapi.Capabilities) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.grants = append(ss.grants, cloneCaps(c))
}

func cloneCaps(c driverapi.Capabilities) driverapi.Capabilities {
	c.FSRead = append([]string(nil), c.FSRead...)
	c.FSWrite = append([]string(nil), c.FSWrite...)
	c.Network.Hosts = append([]string(nil), c.Network.Hosts...)
	return c
}

// capabilities fetches the driver's fingerprint once and keeps it.
func (s *WorkspaceSandbox) capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	s.capsMu.Lock()
	if s.hostCaps != nil {
		hc := *s.hostCaps
		s.capsMu.Unlock()
		return hc, nil
	}
	s.capsMu.Unlock()
	// Not under the lock: a slow first launch must not serialise errors,
	// and two concurrent first fetches are harmless.
	hc, err := s.driver.Capabilities(ctx)
	if err != nil {
		return hc, s.driverErr("Capabilities", err)
	}
	s.capsMu.Lock()
	s.hostCaps = &hc
	s.capsMu.Unlock()
	return hc, nil
}

// RequiredFeatures lists the driver features a command with caps relies on.
// The baseline promises (host files invisible, writes confined to the
// workspace) need the fs isolation features for every command; the rest
// follow from what caps asks for.
func RequiredFeatures(caps driverapi.Capabilities) []string {
	req := []string{driverapi.FeatureFSReadIsolation, driverapi.FeatureFSWriteIsolation}
	switch caps.Network.Mode {
	case driverapi.NetworkNone:
		req = append(req, driverapi.FeatureNetworkNone)
	case driverapi.NetworkAllowAll:
		req = append(req, driverapi.FeatureNetworkAll)
	case driverapi.NetworkAllowHosts:
		req = append(req, driverapi.FeatureNetworkViaProxy)
	}
	if !caps.SpawnSubprocess {
		req = append(req, driverapi.FeatureSubprocessControl)
	}
	if caps.MaxMemoryMB > 0 {
		req = append(req, driverapi.FeatureMemoryLimit)
	}
	return req
}

func (s *WorkspaceSandbox) enforceable(hc driverapi.HostCapabilities, caps driverapi.Capabilities) error {
	for _, f := range RequiredFeatures(caps) {
		if hc.Has(f) {
			continue
		}
		why := "the driver does not claim it"
		for _, u := range hc.Unavailable {
			if u.Feature == f {
				why = u.Reason
				if u.Fix != "" {
					why += " (fix: " + u.Fix + ")"
				}
			}
		}
		return &DeniedError{Code: ReasonUnenforceable,
			Reason: fmt.Sprintf("driver %s cannot enforce %s here: %s", hc.Backend, f, why)}
	}
	if caps.Network.Mode == driverapi.NetworkAllowHosts && s.mediator == nil {
		return &DeniedError{Code: ReasonUnenforceable,
			Reason: "network mode allow_hosts needs the managed proxy, and no network mediator is configured"}
	}
	return nil
}

func (s *WorkspaceSandbox) profileFor(ctx context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	if req.Proxy != nil {
		return s.driver.ProfileFor(ctx, req)
	}
	kb, _ := json.Marshal(req)
	key := string(kb)
	s.profMu.Lock()
	p, ok := s.profiles[key]
	s.profMu.Unlock()
	if ok {
		return p, nil
	}
	p, err := s.driver.ProfileFor(ctx, req)
	if err != nil {
		return p, err
	}
	s.profMu.Lock()
	if s.profiles == nil || len(s.profiles) >= maxCachedProfiles {
		s.profiles = map[string]driverapi.Profile{}
	}
	s.profiles[key] = p
	s.profMu.Unlock()
	return p, nil
}

func (s *WorkspaceSandbox) driverErr(op string, err error) error {
	s.profMu.Lock()
	s.profiles = nil
	s.profMu.Unlock()
	var de *DriverError
	if errors.As(err, &de) {
		return err
	}
	name := "driver"
	if n, ok := s.driver.(interface{ Name() string }); ok {
		name = n.Name()
	} else {
		s.capsMu.Lock()
		if s.hostCaps != nil {
			name = s.hostCaps.Backend
		}
		s.capsMu.Unlock()
	}
	return &DriverError{Driver: name, Op: op, Err: err}
}

// ---- environment ----

func defaultEnv(ws string) map[string]string {
	return map[string]string{
		"PATH": DefaultPath, "HOME": ws, "LANG": "C.UTF-8", "TERM": "dumb", "TZ": "UTC",
	}
}

func isDefaultEnvName(n string) bool {
	_, ok := defaultEnv("")[n]
	return ok
}

// buildEnv is the child's whole environment: the allowlisted defaults,
// Command.Env, and placeholders for secrets. Never the host's environment.
func buildEnv(ws string, cmd Command) ([]driverapi.EnvVar, error) {
	m := defaultEnv(ws)
	for k, v := range cmd.Env {
		m[k] = v
	}
	for k := range cmd.Secrets {
		m[k] = SecretPlaceholderPrefix + k
	}
	out := make([]driverapi.EnvVar, 0, len(m))
	for k, v := range m {
		out = append(out, driverapi.EnvVar{Name: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// mergeEnv adds extra, whose entries win: the mediation's proxy settings
// must not be overridden by the command.
func mergeEnv(env, extra []driverapi.EnvVar) []driverapi.EnvVar {
	idx := map[string]int{}
	for i, e := range env {
		idx[e.Name] = i
	}
	for _, e := range extra {
		if i, ok := idx[e.Name]; ok {
			env[i] = e
			continue
		}
		idx[e.Name] = len(env)
		env = append(env, e)
	}
	return env
}

// ---- output ----

// limitedBuffer keeps the first limit bytes and counts the rest.
type limitedBuffer struct {
	mu        sync.Mutex
	buf       []byte
	limit     int64
	truncated bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.limit - int64(len(b.buf))
	if int64(len(p)) > room {
		b.truncated = true
		if room > 0 {
			b.buf = append(b.buf, p[:room]...)
		}
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// tee sends p to the capture buffer and, within budget, to the live writer.
func tee(buf *limitedBuffer, live io.Writer, budget int64) io.Writer {
	if live == nil {
		return buf
	}
	return io.MultiWriter(buf, driverapi.NewBudgetWriter(live, budget))
}

// trimPartialRune drops a character cut in two at the end of b (by a length
// bound), so that it does not turn into a replacement.
func trimPartialRune(b []byte) []byte {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}
