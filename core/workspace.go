package core

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
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
	hooks    []*hookEntry
	gate     *approvalGate
	ledger   *ledger
	mediator NetworkMediator
	logger   hclog.Logger
	store    GrantStore // nil: grants live as long as this process
	baseline driverapi.Capabilities
	// baselineReach is the baseline with, beside each path, where it
	// resolved when the pipeline was built (withResolved).
	baselineReach driverapi.Capabilities
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
	// gitLimits bound the search for planted git repositories after each
	// command (zero: defaultGitScanLimits).
	gitLimits gitScanLimits
	// gitScanOff skips that search ([sandbox.protected] planted_git =
	// "allow", and the benchmark's baseline).
	gitScanOff bool
	// refusals holds, per running command (by its ID), the network
	// refusals its managed proxy reported (RecordNetwork), merged into
	// its Exit.Violations when it ends.
	refusals refusalTable
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
	// home is the private HOME's canonical path, once created (homeDir).
	home      string
	homeReady bool
	grants    []driverapi.Capabilities
	netHosts  []string // network grants (ApplyNetworkGrant), one AllowHosts set
	// unkept is set while a change of the grants could not be written to
	// the store: this process's copy is then the session's state, and is
	// not replaced by the store's older one.
	unkept atomic.Bool

	// The commands running in the session (Execute in flight), so that
	// ForgetSession ends them before it removes what they could write.
	runMu     sync.Mutex
	running   map[uint64]context.CancelCauseFunc
	runSeq    uint64
	runWG     sync.WaitGroup
	forgotten bool

	// sandboxes are the profiles (digests) the driver has run a command
	// of this session in a session sandbox for: a "new" one of a profile
	// seen before is one rebuilt (sessionsandbox.go).
	sandboxMu sync.Mutex
	sandboxes map[string]struct{}

	// modeSet, layered: the session's mode, set by its first command
	// (layered.go); under mu. modeFixed: a command started in it (or a
	// layer of the session was on disk); until then modeHeld counts the
	// commands under way in the mode set, and the mode is unset again
	// when the last of them ends without starting (settleMode).
	modeSet, layered, modeFixed bool
	modeHeld                    int
	// layer is a layered session's layer, once made or opened. layerMu
	// is held shared by a layered command from before it runs until its
	// changes are observed, and exclusively by Apply and Discard.
	layerMu sync.RWMutex
	layer   *layer.Layer
}

// track registers a command of the session; it is cancelled with
// ErrSessionForgotten if the session is forgotten while it runs. ok is
// false when the session was forgotten already (the caller takes the
// session anew). done must be called when the command has ended.
func (ss *session) track(cancel context.CancelCauseFunc) (done func(), ok bool) {
	ss.runMu.Lock()
	defer ss.runMu.Unlock()
	if ss.forgotten {
		return nil, false
	}
	if ss.running == nil {
		ss.running = map[uint64]context.CancelCauseFunc{}
	}
	ss.runSeq++
	id := ss.runSeq
	ss.running[id] = cancel
	ss.runWG.Add(1)
	return func() {
		ss.runMu.Lock()
		delete(ss.running, id)
		ss.runMu.Unlock()
		ss.runWG.Done()
	}, true
}

// endAll marks the session forgotten, cancels its running commands and
// waits for them to end (the driver kills a cancelled command's tree), at
// most wait. It reports whether they all ended.
func (ss *session) endAll(wait time.Duration) bool {
	ss.runMu.Lock()
	ss.forgotten = true
	for _, c := range ss.running {
		c(ErrSessionForgotten)
	}
	ss.runMu.Unlock()
	ended := make(chan struct{})
	go func() { ss.runWG.Wait(); close(ended) }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ended:
		return true
	case <-t.C:
		return false
	}
}

// NewWorkspaceSandbox builds the pipeline from its parts: the driver
// (WithDriver) is required, and so is an audit sink (WithAuditSink) when
// sandbox.audit_log is set. It does not look at sandbox.enabled: the
// assembly (alephsandbox.New) builds no pipeline for a disabled
// configuration.
//
// It is Validated then NewPipeline: for an embedder holding a Config.
func NewWorkspaceSandbox(cfg Config, opts ...Option) (*WorkspaceSandbox, error) {
	v, err := cfg.Validated()
	if err != nil {
		return nil, err
	}
	return NewPipeline(v, opts...)
}

// NewPipeline is NewWorkspaceSandbox for a configuration already validated
// (Config.Validated): the assembly validates once, acts on the
// configuration, and hands core the same value. A ValidConfig not made by
// Validated (its zero value) is refused: a pipeline built from a
// configuration never checked would make workspaces wherever a relative
// workspace_root points.
func NewPipeline(v ValidConfig, opts ...Option) (*WorkspaceSandbox, error) {
	if !v.valid {
		return nil, &ConfigError{Key: "sandbox", Reason: "not validated: build the pipeline from Config.Validated (or use NewWorkspaceSandbox)"}
	}
	cfg := v.cfg
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
		gate:     newApprovalGate(o.requester, time.Duration(cfg.Sandbox.ApprovalTimeoutSeconds)*time.Second),
		mediator: o.mediator,
		logger:   logger,
		store:    o.grants,
		baseline: baselineOf(cfg, o.baseline),
		sessions: map[string]*session{},
		runGrace: defaultRunGrace,
		// Set only by configuration that says so (ProtectedConfig.PlantedGit).
		gitScanOff: cfg.Sandbox.Protected.PlantedGit == PlantedGitAllow,
	}
	// The protected files are what the assembly resolved (the driver,
	// the hook plugins it launched, the configuration files): core launches
	// no plugin, so it does not read their names from the configuration.
	for _, p := range o.protect {
		if p != "" {
			s.protect = append(s.protect, p)
		}
	}
	if err := validateCommand("baseline", Command{Program: "baseline", Capabilities: s.baseline}); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	if err := s.grantsReachOwnState(s.baseline, ""); err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	s.baselineReach = withResolved(s.baseline)
	for i, h := range o.hooks {
		if h == nil {
			return nil, fmt.Errorf("hook %d is nil", i)
		}
		s.hooks = append(s.hooks, &hookEntry{hook: h, idx: i})
	}
	// Core launches nothing and opens no file: the driver and the audit
	// sink are parts the assembly (alephsandbox.New) builds and hands in.
	// Missing either is refused rather than run without: a pipeline with
	// no driver cannot run anything, and one that silently dropped the
	// configured audit log would be an unaudited sandbox.
	if s.driver == nil {
		return nil, &ConfigError{Key: "sandbox.driver", Reason: "no driver was given to the pipeline (core.WithDriver); build the runtime with alephsandbox.New, which finds and launches the configured driver"}
	}
	sink := o.sink
	if sink == nil && cfg.Sandbox.AuditLog != "" {
		return nil, &ConfigError{Key: "sandbox.audit_log", Reason: "no audit sink was given to the pipeline (core.WithAuditSink) for the configured audit log; build the runtime with alephsandbox.New, which opens it"}
	}
	s.ledger = &ledger{log: logger.ResetNamed("capability_ledger"), sink: sink,
		failClosed: cfg.Sandbox.AuditOnFailure == AuditFailClosed}
	return s, nil
}

// Close ends the pipeline: commands after Close fail with ErrClosed. The
// driver, hooks and audit sink it was given belong to their caller.
func (s *WorkspaceSandbox) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
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
	// A directory made earlier is still the session's only while it is
	// there: another process sharing the workspace root may have
	// deleted the session since (an idle expiry), and its next command
	// runs on a fresh one, as it would in that process.
	sess.mu.RLock()
	if sess.dirReady && dirStillThere(sess.dir) {
		d := sess.dir
		sess.mu.RUnlock()
		return d, nil
	}
	sess.mu.RUnlock()
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.dirReady && dirStillThere(sess.dir) {
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
	// The record that names the directory's session (sessionrecord.go),
	// written for a directory made before records were too. It serves
	// listing only: a command does not fail for want of it.
	if err := writeSessionRecord(s.cfg, sess.id); err != nil {
		s.logger.Warn("recording the session beside its workspace failed; it is not listed once this process ends", "session", sess.id, "error", err)
	}
	sess.dir, sess.dirReady = canon, true
	return canon, nil
}

// dirStillThere reports whether dir is (still) a directory.
func dirStillThere(dir string) bool {
	st, err := os.Lstat(dir)
	return err == nil && st.IsDir()
}

// run collects what the audit record of one Execute reports.
type run struct {
	rec      AuditRecord
	verdicts []driverapi.Verdict
	// handed: the command was handed to the driver.
	handed bool
}

// Execute runs cmd through the pipeline.
func (s *WorkspaceSandbox) Execute(ctx context.Context, cmd Command) (out *Output, err error) {
	start := time.Now()
	// The caller's ctx: the record is classified and written against it
	// (ctx becomes the command's own below, cancelled when its session is
	// forgotten, and a command ended that way says so in its error).
	outer := ctx
	r := &run{rec: AuditRecord{
		CommandID: newCommandID(),
		Program:   cmd.Program,
		ArgCount:  len(cmd.Args),
		// What the command was given to talk to, recorded whether it ran
		// or not.
		Interactive: cmd.StdinStream != nil,
		Tty:         cmd.Tty != nil,
	}}
	r.rec.CapabilityDigest = capsDigest(cmd.Capabilities)
	defer func() {
		r.rec.Verdicts = r.verdicts
		r.rec.DurationMS = time.Since(start).Milliseconds()
		if err != nil {
			classify(&r.rec, err, outer)
		} else {
			r.rec.Decision = DecisionAllow
			if r.rec.Reason == "" {
				r.rec.Reason = ReasonAllowed
			}
			if out.Exit.SpawnRefused > 0 {
				// What explains the result, as Output.Reason says it.
				r.rec.Reason = ReasonSpawnRefused
			}
			if out.Exit.TimedOut {
				r.rec.Reason = ReasonTimeout
			}
		}
		s.ledger.record(outer, r.rec)
	}()

	// 0. Input.
	sid := cmd.SessionID
	if sid == "" {
		sid, _ = SessionFrom(ctx)
	}
	r.rec.SessionID = sid
	// The command's form (validate.go): Request checked it already for a
	// front end, but a Go embedder may hand a Command built by hand.
	if err := validateCommand(sid, cmd); err != nil {
		return nil, err
	}
	// Failing closed: a command runs only while its record can be kept.
	// The refusal's own record (deferred above) is the probe: once it is
	// written, the next command runs.
	if s.ledger.refusing() {
		return nil, ErrAuditUnavailable
	}

	// 1. Session. It is marked in use for every process sharing the
	// workspace root (sessionactivity.go): an idle expiry, here or in
	// another process, leaves it alone until the command ends, and one
	// under way is waited for.
	release, err := s.UseSession(ctx, sid)
	if err != nil {
		return nil, err
	}
	defer release()
	// The command is tracked so that forgetting the session ends it
	// (ForgetSession).
	ctx, cancelForget := context.WithCancelCause(ctx)
	defer cancelForget(nil)
	var sess *session
	for {
		if sess, err = s.session(sid); err != nil {
			return nil, err
		}
		if done, ok := sess.track(cancelForget); ok {
			defer done()
			break
		}
		// Forgotten between the lookup and now: the session's state is
		// made anew.
		s.mu.Lock()
		if s.sessions[sid] == sess {
			delete(s.sessions, sid)
		}
		s.mu.Unlock()
	}
	var ws string
	if cmd.Workspace != "" {
		ws, err = s.namedWorkspace(sid, cmd.Workspace)
	} else {
		ws, err = s.workspaceDir(sess)
	}
	if err != nil {
		return nil, err
	}
	settle, err := s.fixMode(sess, cmd.Layered, ws)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() { settle(ctx, started) }()

	// 2. cwd and secrets.
	cwd, err := confineCwd(ws, cmd.Cwd)
	if err != nil {
		return nil, err
	}
	if len(cmd.Secrets) > 0 && (cmd.Capabilities.Network.Mode != driverapi.NetworkAllowHosts || s.mediator == nil) {
		return nil, &DeniedError{Code: ReasonSecretRequiresMediation,
			Reason: "secrets need network mode allow_hosts and a network mediator; without mediation nothing would ever substitute them, so the command is refused"}
	}

	// From here to the hand-over to the driver, a signal for the command
	// (the user's Ctrl-C at the approval prompt) stops it: it has not
	// started, and must not start only to receive that signal.
	pre, stopEarly := watchEarlySignals(ctx, cmd.Signals)
	defer stopEarly()
	out, err = s.prepareAndRun(ctx, pre, stopEarly, r, sess, sid, ws, cwd, cmd)
	started = r.handed && (err == nil || !refusedBeforeStart(err))
	if err != nil && outer.Err() == nil && errors.Is(context.Cause(ctx), ErrSessionForgotten) {
		return nil, fmt.Errorf("command %s: %w", r.rec.CommandID, ErrSessionForgotten)
	}
	if cause := context.Cause(pre); err != nil && ctx.Err() == nil && errors.Is(cause, ErrSignalBeforeStart) {
		return nil, fmt.Errorf("command %s: %w", r.rec.CommandID, cause)
	}
	return out, err
}

// prepareAndRun is Execute from the hooks on. pre is ctx until the
// command is handed to the driver (an early signal cancels it);
// stopEarly ends that watch.
func (s *WorkspaceSandbox) prepareAndRun(ctx, pre context.Context, stopEarly func(), r *run, sess *session, sid, ws, cwd string, cmd Command) (out *Output, err error) {
	// 3. Before-hooks.
	allowed, err := s.runHooks(pre, r, sid, cwd, cmd)
	ran := false
	defer s.afterHooks(ctx, allowed, sid, r.rec.CommandID, &ran)
	if err != nil {
		return nil, err
	}

	// 4. Capabilities. Enforceability is checked before approval: nobody
	// should be asked to approve what the driver cannot enforce, and no
	// grant is cached for it.
	hc, err := s.capabilities(pre)
	if err != nil {
		return nil, err
	}
	r.rec.Backend = hc.Backend
	if err := s.enforceable(hc, cmd.Capabilities); err != nil {
		return nil, err
	}
	if err := s.streamable(hc, cmd); err != nil {
		return nil, err
	}
	if cmd.Layered {
		if err := s.layeredReady(hc); err != nil {
			return nil, err
		}
	}
	if err := s.checkCapabilities(pre, r, sess, sid, cmd); err != nil {
		return nil, err
	}
	var lay *layer.Layer
	if cmd.Layered {
		if lay, err = s.layerFor(ctx, sess, ws, hc.Details[driverapi.DetailLayeredUserNS] == "true"); err != nil {
			return nil, err
		}
		if err := s.checkLayerSpace(ctx, sid, lay); err != nil {
			return nil, err
		}
	}

	// Environment, then mediation for AllowHosts.
	home, err := s.childHome(sess, ws)
	if err != nil {
		return nil, err
	}
	env, err := buildEnv(home, cmd)
	if err != nil {
		return nil, err
	}
	preq := driverapi.ProfileRequest{Capabilities: cmd.Capabilities, Workspace: ws, Cwd: cwd, Protected: s.cfg.ProtectedEntries()}
	if home != ws {
		// The private HOME is writable the way a write grant is (see
		// home.go); it was never asked about, so it joins the request
		// only, not the capabilities checked and audited above. A driver
		// that says it honours ProfileRequest.Home gets it there (no
		// protected entries to set up in it); any other gets it as one
		// more fs_write path, protected entries included.
		if hc.ProfileHome() {
			preq.Home = home
		} else {
			preq.Capabilities = cloneCaps(cmd.Capabilities)
			preq.Capabilities.FSWrite = append(preq.Capabilities.FSWrite, home)
		}
	}
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
	prof, err := s.profileFor(pre, preq)
	if err != nil {
		return nil, s.driverErr("ProfileFor", err)
	}
	stopEarly()
	if cause := context.Cause(pre); ctx.Err() == nil && errors.Is(cause, ErrSignalBeforeStart) {
		return nil, cause
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
	var liveOut, liveErr *liveFirst
	if cmd.StreamOnly {
		liveOut, liveErr = streamOnly(&stdout, cmd.Stdout), streamOnly(&stderr, cmd.Stderr)
		streams = driverapi.Streams{Stdout: liveOut, Stderr: liveErr}
	}
	spec := driverapi.RunSpec{
		Program: cmd.Program, Args: cmd.Args, Env: env, Stdin: cmd.Stdin, Cwd: cwd,
		Profile: prof, Timeout: timeout, MaxOutputBytes: budget,
		SessionID: sid, CommandID: r.rec.CommandID,
		// The session's persistent sandbox, where the driver keeps one:
		// it is keyed by the profile too, so a command never runs in the
		// sandbox of another capability set (driverapi's contract).
		SessionSandbox: s.cfg.Sandbox.SessionSandboxes == SessionSandboxesAuto && hc.Supports(driverapi.CallSessionSandbox),
	}
	if lay != nil {
		// The workspace is the session's overlay (layered.go): nothing
		// reaches the host before Apply, so no planted repository does
		// either, and the scan of the host's directory is not needed.
		spec.SessionSandbox, spec.Layered = true, layeredSpec(lay)
		sess.layerMu.RLock()
		defer sess.layerMu.RUnlock()
		defer func() {
			// The base each change is judged against at Apply.
			if err := lay.Observe(context.WithoutCancel(ctx)); err != nil {
				s.logger.Warn("recording the layered session's bases failed", "session", sid, "error", err)
			}
		}()
	}
	ran, r.handed = true, true
	// What the command writes is searched, once it has ended, for git
	// repositories planted for the host's git (gitquarantine.go); the
	// mark is taken before it can write anything.
	mark := markGitScan(ws)
	defer func() {
		if s.gitScanOff || lay != nil {
			return
		}
		gq := s.quarantineGit(ctx, ws, mark, hc)
		if gq.Empty() {
			return
		}
		r.rec.GitQuarantine = gq
		if out != nil {
			out.GitQuarantine = gq
		}
		s.logger.Warn("git repositories the command planted were neutralised", "command", r.rec.CommandID,
			"renamed", gq.Renamed, "incomplete", gq.Incomplete)
	}()
	sigCtx, cancelSig := context.WithCancelCause(ctx)
	runCtx, cancelRun := context.WithTimeout(sigCtx, timeout+s.runGrace)
	stopSignals := s.forwardSignals(runCtx, cancelSig, hc, r.rec.CommandID, cmd.Signals)
	grace, stopTerm := s.termBeforeTimeout(runCtx, hc, r.rec.CommandID, timeout)
	runStart := time.Now()
	proxyRefused := s.refusals.open(r.rec.CommandID)
	exit, err := s.runDriver(runCtx, cmd, spec, streams)
	s.refusals.close(r.rec.CommandID)
	if err == nil {
		s.mergeViolations(&exit, proxyRefused)
	}
	termSent := stopTerm()
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
	} else if err := saneExit(&exit, time.Since(runStart), stdout.received(), stderr.received()); err != nil {
		return nil, s.driverErr("Run", err)
	}
	exit.Truncated = exit.Truncated || stdout.truncated || stderr.truncated
	noteSessionSandbox(sess, prof.Digest, &exit)
	if termSent {
		// The timeout's SIGTERM reached it: however it ended (dead of
		// TERM, its handler's exit status, or killed at the timeout), it
		// ran out of time. ExitCode and Signal stay what they were, so
		// the result says which signal ended it.
		exit.TimedOut = true
		exit.Details = maps.Clone(exit.Details)
		if exit.Details == nil {
			exit.Details = map[string]string{}
		}
		exit.Details["timeout_term_grace_ms"] = strconv.FormatInt(grace.Milliseconds(), 10)
	}
	r.rec.ExitCode, r.rec.Signal = exit.ExitCode, exit.Signal
	r.rec.TimedOut, r.rec.Truncated = exit.TimedOut, exit.Truncated
	r.rec.Details = maps.Clone(exit.Details)
	r.rec.Usage = UsageOf(exit.Usage)
	r.rec.Violations, r.rec.ViolationsDropped = exit.Violations, exit.ViolationsDropped
	o := &Output{
		Stdout: stdout.buf, Stderr: stderr.buf, Exit: exit, Backend: hc.Backend,
		CommandID: r.rec.CommandID, ProfileDigest: prof.Digest, Verdicts: r.verdicts,
		SpawnReported: hc.Has(driverapi.FeatureSpawnRefusedReport),
	}
	if cmd.StreamOnly {
		o.Streamed = true
		o.StreamedStdout, o.StreamedStderr = liveOut.sent(), liveErr.sent()
	}
	return o, nil
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
	return !errors.As(err, &ie) && !errors.As(err, &pe) && !errors.As(err, &ple) && !errors.As(err, &pm) &&
		!errors.Is(err, driverapi.ErrPluginDied)
}

// saneExit checks what a driver reported against what cannot be so, and
// corrects what the host knows better. A signal number outside 0-127
// cannot be reported as an exit status (128+N), so the result is refused.
// A duration longer than the host waited, or negative, becomes the host's
// own; byte counts below what the host received become what it received.
// ExitCode is not checked: on Windows any 32-bit value is an exit code.
func saneExit(e *driverapi.Exit, elapsed time.Duration, stdout, stderr int64) error {
	if e.Signal < 0 || e.Signal > 127 {
		return fmt.Errorf("the driver reported an impossible exit: signal %d (a signal number is 1-127, 0 for none)", e.Signal)
	}
	if e.Duration < 0 || e.Duration > elapsed {
		e.Duration = elapsed
	}
	e.StdoutBytes = max(e.StdoutBytes, stdout)
	e.StderrBytes = max(e.StderrBytes, stderr)
	return nil
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
	case errors.Is(err, ErrSignalBeforeStart), errors.Is(err, ErrSessionForgotten):
		rec.Decision, rec.Reason = DecisionError, ReasonCanceled
	case errors.Is(err, ErrClosed):
		rec.Decision, rec.Reason = DecisionError, ReasonClosed
	case errors.Is(err, ErrAuditUnavailable):
		rec.Decision, rec.Reason = DecisionError, ReasonAuditUnavailable
	case errors.As(err, new(*LimitError)), errors.As(err, new(*driverapi.LimitError)):
		rec.Decision, rec.Reason = DecisionError, ReasonResourceExhausted
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

// baselineOf is the host's baseline (WithBaseline) when it gave one, else
// the configuration's.
func baselineOf(cfg Config, host *driverapi.Capabilities) driverapi.Capabilities {
	if host != nil {
		return cloneCaps(*host)
	}
	return cloneCaps(cfg.SessionBaseline())
}

// namedWorkspace is dir, a workspace the caller of session sid names (a
// command's or a files call's), canonical, after the checks a named
// workspace gets: an existing directory named without a symbolic link;
// not reaching the sandbox's own state or a protected program or file;
// not another session's workspace under the workspace root.
func (s *WorkspaceSandbox) namedWorkspace(sid, dir string) (string, error) {
	ws, err := canonicalDir("workspace", dir)
	if err == nil {
		err = s.reachesOwnState("workspace", ws, true)
	}
	if err == nil {
		err = s.reachesOtherSessions("workspace", ws, sid)
	}
	if err != nil {
		return "", err
	}
	return ws, nil
}
