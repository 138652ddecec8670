// Package service is the host service of `aleph-sandbox serve`: the
// aleph.host.v1 handlers over one assembled runtime (package alephsandbox),
// the approval broker that routes elevation requests to connected clients,
// and the unix-socket listener that checks every peer's uid before any RPC.
//
// The handlers are served with connectrpc.com/connect, so one handler
// speaks gRPC, gRPC-Web and the Connect protocol (JSON over HTTP/1.1).
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/hashicorp/go-hclog"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
)

// ReasonProtectedPath is the reason code of a request refused because a
// path it asks for covers the service's own socket or data directory: a
// sandboxed command that could reach the socket would pass the same-uid
// check and could approve its own elevations.
const ReasonProtectedPath = "protected_path"

// ReasonInvalidRequest is the reason code of a malformed request.
const ReasonInvalidRequest = "invalid_request"

// ReasonSignalEnded is the reason code of a command a signal ended through
// a driver that cannot forward signals (its tree was killed).
const ReasonSignalEnded = string(core.ReasonSignalEnded)

// ErrStopping is the cause with which a stopping server cancels the calls
// still running (the context its listeners' requests derive from).
var ErrStopping = errors.New("the service is stopping")

// ReasonServiceStopping is the reason code of a command the server killed
// as it stopped, after its grace period.
const ReasonServiceStopping = "service_stopping"

// ReasonSignalBeforeStart is the reason code of a command a signal reached
// before it started (during its hooks or approval): nothing ran.
const ReasonSignalBeforeStart = string(core.ReasonSignalBeforeStart)

// ReasonNotRunning is the reason code of a Signal for no running command.
const ReasonNotRunning = "not_running"

// Options configure a Server.
type Options struct {
	// Host is the assembled pipeline. Its approver must be Broker.
	Host   alephsandbox.Host
	Broker *Broker
	Logger hclog.Logger
	// Protected are directories no request may read, write or use as a
	// workspace, nor any ancestor of them (the socket's directory, the data
	// directory).
	Protected []string
	// Policy is the command policy CheckPolicy answers from: the
	// runtime's own (alephsandbox.Runtime.Policy). Nil: a policy that
	// is off.
	Policy *alephsandbox.PolicyChecker
	// DriverLaunches, when set, counts the driver processes started (the
	// driver_restarts metric).
	DriverLaunches func() int64
	// DriverCheck, when set, starts the driver if it is not running and
	// says why it cannot be: a server whose driver cannot start is not
	// ready (health.go).
	DriverCheck func(context.Context) error
	// Processes bound the processes of StartProcess (zero: the defaults).
	Processes core.ProcessLimits
	// Limits bound requests, output, sessions and connections (zero
	// fields: the defaults of core.ServeConfig.Limits).
	Limits core.ServeLimits
	// NodeID names this server in every result (identity.go); empty: the
	// hostname (DefaultNodeID).
	NodeID string
}

// Server implements hostv1connect.ServiceHandler.
type Server struct {
	host alephsandbox.Host
	// pipeline runs the commands of Execute and StartProcess: the host's
	// own pipeline when it offers it (pipelineHost), so that no call
	// that only forwards lies on every command's way; else the host.
	pipeline  core.Executor
	broker    *Broker
	log       hclog.Logger
	protected []string
	policy    *alephsandbox.PolicyChecker

	metrics        *Metrics
	held           heldBytes
	driverLaunches func() int64
	limits         core.ServeLimits
	conns          *connLimits

	nodeID string

	mu sync.Mutex
	// sessions are the sessions this server holds, each with its
	// incarnation (identity.go).
	sessions map[string]string
	// lives are the held sessions' lives (identity.go): each is cancelled
	// when its session is forgotten, deleted or expired, and ends the
	// calls that were let through expecting its incarnation.
	lives map[string]*sessionLife
	// calls are the running commands that can be signalled (and, for
	// exec -i/-t, written to and resized), by the signal_key of their
	// request.
	calls map[string]*call
	// procs are the processes that outlive the call starting them.
	procs *core.ProcessTable
	// running counts Execute calls in progress, so a stopping server can
	// wait for their commands to be gone.
	running sync.WaitGroup
	// live are the signal channels of the Execute calls in progress, so a
	// stopping server can warn them (Terminate) before it kills them.
	live map[chan driverapi.Signal]struct{}
	// uploads are the files being written in parts (WriteFile with
	// upload_id), by upload_id.
	uploads map[string]*upload
	// terminating: Terminate ran; a command ending now ended because the
	// service stopped.
	terminating atomic.Bool
	// draining: Drain ran; new sessions are refused (health.go).
	draining    atomic.Bool
	driverCheck func(context.Context) error
	// idle is the sessions' activity, for serve.session_idle_ttl (idle.go).
	idle *idleTracker
}

var _ hostv1connect.ServiceHandler = (*Server)(nil)

// pipelineHost is a host that hands out the pipeline its Execute runs
// (alephsandbox.Runtime.Pipeline).
type pipelineHost interface {
	Pipeline() core.Executor
}

// New returns the handlers over opts.Host.
func New(opts Options) (*Server, error) {
	if opts.Host == nil || opts.Broker == nil {
		return nil, errors.New("service: Host and Broker are required")
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	policy := opts.Policy
	if policy == nil {
		policy = alephsandbox.NewPolicyChecker(core.Config{})
	}
	// Zero fields take the defaults; the output ceiling's default is the
	// configured sandbox budget's default.
	def := core.ServeConfig{}.Limits(core.DefaultConfig().Sandbox.MaxOutputBytes)
	l := opts.Limits
	for _, f := range []struct{ v, d *int64 }{{&l.MaxRequestBytes, &def.MaxRequestBytes}, {&l.MaxOutputBytes, &def.MaxOutputBytes}} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	for _, f := range []struct{ v, d *int }{{&l.FilesMaxUploads, &def.FilesMaxUploads}, {&l.MaxSessions, &def.MaxSessions}, {&l.MaxConnections, &def.MaxConnections}, {&l.MaxConnectionsPerPeer, &def.MaxConnectionsPerPeer}} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	for _, f := range []struct{ v, d *time.Duration }{{&l.ReadHeaderTimeout, &def.ReadHeaderTimeout}, {&l.ReadTimeout, &def.ReadTimeout}, {&l.IdleTimeout, &def.IdleTimeout}} {
		if *f.v <= 0 {
			*f.v = *f.d
		}
	}
	metrics := NewMetrics()
	pipeline := core.Executor(opts.Host)
	if p, ok := opts.Host.(pipelineHost); ok {
		pipeline = p.Pipeline()
	}
	s := &Server{host: opts.Host, pipeline: pipeline, broker: opts.Broker, log: opts.Logger, policy: policy,
		metrics: metrics, driverLaunches: opts.DriverLaunches, driverCheck: opts.DriverCheck, limits: l, conns: newConnLimits(l),
		sessions: map[string]string{}, lives: map[string]*sessionLife{}, calls: map[string]*call{}, uploads: map[string]*upload{}, live: map[chan driverapi.Signal]struct{}{},
		procs: core.NewProcessTable(meteredHost{pipeline, metrics}, opts.Processes), idle: newIdleTracker()}
	s.nodeID = opts.NodeID
	if s.nodeID == "" {
		id, err := DefaultNodeID()
		if err != nil {
			return nil, err
		}
		s.nodeID = id
	}
	if err := core.ValidateNodeID("serve.node_id", s.nodeID); err != nil {
		return nil, err
	}
	for _, p := range opts.Protected {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, fmt.Errorf("service: protected path %q: %w", p, err)
		}
		s.protected = append(s.protected, Canonical(abs))
	}
	return s, nil
}

// Wait waits until no Execute call is in progress, or timeout; it reports
// whether they all ended. Called after their contexts are cancelled, it
// returns once their commands have been killed.
func (s *Server) Wait(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() { s.running.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Terminate sends SIGTERM to every command an Execute call is running
// and to every running process: a stopping server warns them before it
// kills them, so a command's TERM handler runs. It returns at once.
func (s *Server) Terminate() {
	s.terminating.Store(true)
	s.mu.Lock()
	for ch := range s.live {
		select {
		case ch <- driverapi.SignalTERM:
		default: // a burst: the command has been told already
		}
	}
	s.mu.Unlock()
	for _, p := range s.procs.List("") {
		if !p.Exited {
			_ = s.procs.Signal(p.ID, driverapi.SignalTERM)
		}
	}
}

// Handler is the HTTP handler serving the service and the standard gRPC
// health service.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	opts := append(handlerOptions(s.limits.MaxRequestBytes), s.sessionHeaderCheck(), s.idleTouch())
	path, h := hostv1connect.NewServiceHandler(s, opts...)
	mux.Handle(path, h)
	mux.Handle(grpchealth.NewHandler(healthChecker{s}, opts...))
	return limitBody(s.limits.MaxRequestBytes, mux)
}

// Limits are the server's effective bounds (serve sets its HTTP
// timeouts from them).
func (s *Server) Limits() core.ServeLimits { return s.limits }

// checkPath refuses an absolute path p (alephsandbox.Request made it so)
// that reaches one of the service's own directories.
func (s *Server) checkPath(field, p string) error {
	c := Canonical(p)
	for _, d := range s.protected {
		if Covers(c, d) || Covers(filepath.Clean(p), d) {
			// Both ways reach it: a path inside the directory names what
			// the service keeps there (its grants, its socket), and one
			// that contains it reaches all of it.
			how := "contains"
			if driverapi.PathWithin(c, d) || driverapi.PathWithin(filepath.Clean(p), d) {
				how = "lies inside"
			}
			return withDetail(connect.CodePermissionDenied,
				fmt.Errorf("%s %q %s the service's own directory %s, which no sandbox may reach", field, p, how, d),
				&hostv1.ErrorDetail{ReasonCode: ReasonProtectedPath, Field: field})
		}
	}
	return nil
}

func withDetail(code connect.Code, err error, d *hostv1.ErrorDetail) *connect.Error {
	ce := connect.NewError(code, err)
	if det, derr := connect.NewErrorDetail(d); derr == nil {
		ce.AddDetail(det)
	}
	return ce
}

func invalid(field, reason string) *connect.Error {
	return withDetail(connect.CodeInvalidArgument, fmt.Errorf("%s: %s", field, reason),
		&hostv1.ErrorDetail{ReasonCode: ReasonInvalidRequest, Field: field})
}

// command turns a request into a core.Command through the one request
// type (alephsandbox.Request), then refuses what reaches the service's own
// directories and what is above its ceilings.
//
// The session is checked by Request, with every other field, and named
// as the protocol names it.
func (s *Server) command(req *hostv1.ExecuteRequest) (core.Command, error) {
	if m := req.GetMaxOutput(); m > s.limits.MaxOutputBytes {
		return core.Command{}, exhausted("serve.max_output_bytes", s.limits.MaxOutputBytes,
			fmt.Sprintf("max_output %d is above the server's ceiling", m))
	}
	cmd, err := alephsandbox.Request{
		Session: req.GetSession(), Argv: req.GetArgv(), Workspace: req.GetWorkspace(), Cwd: req.GetCwd(),
		Read: req.GetRead(), Write: req.GetWrite(), Net: req.GetNet(), NetHosts: req.GetNetHosts(),
		Spawn: req.GetSpawn(), MemoryMB: req.GetMemoryMb(), TimeoutSeconds: req.GetTimeoutSeconds(),
		MaxOutputBytes: req.GetMaxOutput(), Env: req.GetEnv(), Stdin: req.GetStdin(), Secrets: req.GetSecrets(),
		Layered: req.GetLayered(),
	}.Command()
	if err != nil {
		var re *alephsandbox.RequestError
		if errors.As(err, &re) {
			return core.Command{}, invalid(re.Field, re.Reason)
		}
		return core.Command{}, invalid("request", err.Error())
	}
	// The paths are absolute and clean now; none may reach the service's
	// own directories (the request names them in the same order).
	for i, p := range cmd.Capabilities.FSRead {
		if err := s.checkPath(fmt.Sprintf("read[%d]", i), p); err != nil {
			return core.Command{}, err
		}
	}
	for i, p := range cmd.Capabilities.FSWrite {
		if err := s.checkPath(fmt.Sprintf("write[%d]", i), p); err != nil {
			return core.Command{}, err
		}
	}
	if cmd.Workspace != "" {
		if err := s.checkPath("workspace", cmd.Workspace); err != nil {
			return core.Command{}, err
		}
	}
	if cmd.MaxOutputBytes == 0 && s.limits.DefaultOutputBytes > s.limits.MaxOutputBytes {
		// The configured budget is above the server's ceiling: the
		// ceiling is the default here.
		cmd.MaxOutputBytes = s.limits.MaxOutputBytes
	}
	return cmd, nil
}

// remember makes session the server's, with a new incarnation if it
// held none, and returns its incarnation. A call bound to a life that
// ended (identity.go) makes nothing: its session was forgotten while it
// ran, and its answer is session_moved.
func (s *Server) remember(ctx context.Context, session string) string {
	if errors.Is(context.Cause(ctx), errSessionEnded) {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	inc, ok := s.sessions[session]
	if !ok {
		inc = newIncarnation()
		s.sessions[session] = inc
	}
	return inc
}

// known reports whether the service holds session.
func (s *Server) known(session string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.sessions[session]
	return ok
}

// admit refuses a command of a session the service does not hold yet
// when it holds serve.max_sessions already. (Concurrent first commands of
// new sessions may pass it together: the bound is exceeded by at most
// the commands in flight.)
func (s *Server) admit(session string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, held := s.sessions[session]
	if err := s.refuseIfDraining(held); err != nil {
		return err
	}
	if held || len(s.sessions) < s.limits.MaxSessions {
		return nil
	}
	return exhausted("serve.max_sessions", int64(s.limits.MaxSessions),
		fmt.Sprintf("the service holds %d sessions already; forget one (Sessions forget) or reuse one", len(s.sessions)))
}

// checkSession refuses a session name the pipeline would refuse (empty,
// over 1024 bytes, not UTF-8, with a NUL) before anything is kept about
// it.
func checkSession(field, session string) error {
	if session == "" {
		return invalid(field, "required")
	}
	if err := core.ValidateSessionID(session); err != nil {
		var ie *core.InvalidCommandError
		if errors.As(err, &ie) {
			return invalid(field, ie.Reason)
		}
		return invalid(field, err.Error())
	}
	return nil
}

// streamWriter sends what the command writes as output chunks; one mutex
// per call keeps chunks and approval requests in order of arrival.
//
// The command runs StreamOnly: what Write sends is not kept by the
// pipeline for the result, so the service holds a command's output only
// while one chunk is on its way (at most driverapi.MaxOutputChunk, as the
// driver delivers it), counted in held. Send returns once the chunk is
// written to the connection, so a client that does not read holds the
// command back (flow control) instead of making the service buffer.
type streamWriter struct {
	mu     *sync.Mutex
	stream *connect.ServerStream[hostv1.ExecuteResponse]
	which  hostv1.OutputChunk_Stream
	held   *heldBytes
}

func (w *streamWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// No copy of p: Send marshals the message onto the connection before
	// it returns (connect keeps no reference to it), and p is the
	// caller's until Write returns.
	w.held.add(int64(len(p)))
	defer w.held.add(-int64(len(p)))
	if err := w.stream.Send(&hostv1.ExecuteResponse{Event: &hostv1.ExecuteResponse_Output{
		Output: &hostv1.OutputChunk{Stream: w.which, Data: p}}}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// heldBytes counts the output bytes Execute calls hold (chunks on their
// way, and the unstreamed rest a result carries) and the most ever held
// at once: the aleph_sandbox_execute_output_held_bytes gauges.
type heldBytes struct {
	now, peak atomic.Int64
}

func (h *heldBytes) add(n int64) {
	v := h.now.Add(n)
	for {
		p := h.peak.Load()
		if v <= p || h.peak.CompareAndSwap(p, v) {
			return
		}
	}
}

// Execute implements the service.
func (s *Server) Execute(ctx context.Context, req *connect.Request[hostv1.ExecuteRequest], stream *connect.ServerStream[hostv1.ExecuteResponse]) (rerr error) {
	ctx, end, err := s.streamRequest(ctx, req.Header(), req.Msg)
	if err != nil {
		return err
	}
	defer end()
	defer func() { rerr = s.endedDuring(ctx, req.Msg, rerr) }()
	if !s.metrics.started() {
		return withDetail(connect.CodeUnavailable,
			errors.New("the server is stopping and takes no more commands; run the command on another server"),
			&hostv1.ErrorDetail{ReasonCode: ReasonDraining})
	}
	s.running.Add(1)
	defer s.running.Done()
	start := time.Now()
	outcome, reason := OutcomeError, ReasonInvalidRequest
	defer func() { s.metrics.finished(outcome, reason, time.Since(start)) }()
	cmd, err := s.command(req.Msg)
	if err != nil {
		if d := detailOf(err); d != nil {
			reason = d.GetReasonCode()
		}
		return err
	}
	interactive, err := s.interactive(req.Msg, &cmd)
	if err != nil {
		return err
	}
	if err := s.admit(cmd.SessionID); err != nil {
		reason = ReasonResourceExhausted
		return err
	}
	var mu sync.Mutex
	// finished ends the StdinOpen sender before the result is sent: no
	// Send may follow the handler's return.
	finished := make(chan struct{})
	var senders sync.WaitGroup
	// The key is released before the result is sent: once a client has
	// the result, the calls naming the key find no command.
	releaseKey := func() {}
	var sigCh chan driverapi.Signal
	if key := req.Msg.GetSignalKey(); key != "" {
		c, release, err := s.registerCall(key, cmd.SessionID, interactive)
		if err != nil {
			return err
		}
		var once sync.Once
		releaseKey = func() { once.Do(release) }
		defer releaseKey()
		cmd.Signals, sigCh = c.signals, c.signals
		if c.stdin != nil {
			cmd.StdinStream = c.stdin
			// The client starts writing (and puts its terminal in raw
			// mode) once the command reads: until then the user's
			// terminal may still be answering an approval prompt.
			senders.Add(1)
			go func() {
				defer senders.Done()
				select {
				case <-c.stdin.Opened():
					mu.Lock()
					_ = stream.Send(&hostv1.ExecuteResponse{Event: &hostv1.ExecuteResponse_StdinOpen{StdinOpen: &hostv1.StdinOpen{}}})
					mu.Unlock()
				case <-finished:
				}
			}()
		}
		if c.resize != nil {
			cmd.Resize = c.resize
		}
	}
	if sigCh == nil {
		// No signal_key: the channel is the server's alone (Terminate).
		sigCh = make(chan driverapi.Signal, 8)
		cmd.Signals = sigCh
	}
	s.mu.Lock()
	s.live[sigCh] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.live, sigCh)
		s.mu.Unlock()
	}()
	cmd.Stdout = &streamWriter{mu: &mu, stream: stream, which: hostv1.OutputChunk_STREAM_STDOUT, held: &s.held}
	cmd.Stderr = &streamWriter{mu: &mu, stream: stream, which: hostv1.OutputChunk_STREAM_STDERR, held: &s.held}
	// Streamed bytes are sent once and never held again: the result
	// carries only what could not be streamed (output_streamed says so).
	cmd.StreamOnly = true
	if req.Msg.GetAnswerApprovals() {
		ctx = withOwnApprover(ctx, func(r *hostv1.ApprovalRequest) error {
			mu.Lock()
			defer mu.Unlock()
			return stream.Send(&hostv1.ExecuteResponse{Event: &hostv1.ExecuteResponse_ApprovalRequest{ApprovalRequest: r}})
		})
	}
	out, err := s.pipeline.Execute(ctx, cmd)
	// The session is the service's from the first command that reached
	// the pipeline's decision (ran, or was denied): a request refused
	// before that keeps nothing.
	incarnation := ""
	if denied := (*core.DeniedError)(nil); err == nil || errors.As(err, &denied) {
		incarnation = s.remember(ctx, cmd.SessionID)
	}
	close(finished)
	senders.Wait()
	releaseKey()
	res, rerr := s.result(ctx, out, err)
	if rerr == nil && !res.GetDenied() && s.terminating.Load() {
		// The service sent it SIGTERM as it stopped: its end is the
		// service's doing, as a kill after the grace period is (what it
		// wrote on the way out was streamed).
		rerr = withDetail(connect.CodeUnavailable, fmt.Errorf("the service stopped while the command ran: it was sent SIGTERM and ended (exit status %d, signal %d)", res.GetExitCode(), res.GetSignal()),
			&hostv1.ErrorDetail{ReasonCode: ReasonServiceStopping})
	}
	switch {
	case rerr != nil:
		reason = ""
		if d := detailOf(rerr); d != nil {
			reason = d.GetReasonCode()
		}
	case res.GetDenied():
		outcome, reason = OutcomeDenied, res.GetReasonCode()
	default:
		outcome, reason = OutcomeOK, res.GetReasonCode()
		s.metrics.used(res.GetUsage())
		s.metrics.violated(res.GetViolations(), res.GetViolationsDropped())
	}
	s.log.Info("command", "session", cmd.SessionID, "program", cmd.Program, "reason_code", res.GetReasonCode(),
		"command_id", res.GetCommandId(), "exit_code", res.GetExitCode(), "duration", time.Since(start), "error", rerr)
	if rerr != nil {
		return rerr
	}
	res.NodeId, res.SessionIncarnation = s.nodeID, incarnation
	mu.Lock()
	defer mu.Unlock()
	rest := int64(len(res.GetStdout()) + len(res.GetStderr()))
	s.held.add(rest)
	defer s.held.add(-rest)
	return stream.Send(&hostv1.ExecuteResponse{Event: &hostv1.ExecuteResponse_Result{Result: res}})
}

// result is the final message for a command, or the error status for a
// failure: a denial is a result (as `exec --json` reports it), anything
// that kept the sandbox from answering is a status with an ErrorDetail.
func (s *Server) result(ctx context.Context, out *core.Output, err error) (*hostv1.ExecResult, error) {
	var (
		denied  *core.DeniedError
		invCmd  *core.InvalidCommandError
		drvErr  *core.DriverError
		hookErr *core.HookError
		wsErr   *core.WorkspaceError
		medErr  *core.MediationError
	)
	// The reason codes are core's, as exec --json gives them; this switch
	// picks the status code.
	reason, _ := core.FailureReason(err)
	detail := &hostv1.ErrorDetail{ReasonCode: string(reason)}
	switch {
	case err == nil:
	case errors.As(err, &denied):
		return &hostv1.ExecResult{Denied: true, Reason: denied.Error(), Rule: denied.Rule, ReasonCode: string(denied.Code)}, nil
	case errors.As(err, &invCmd):
		detail.Field = invCmd.Field
		return nil, withDetail(connect.CodeInvalidArgument, err, detail)
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrStopping):
		// Not the client's cancel: the server stopped under the command.
		return nil, withDetail(connect.CodeUnavailable, fmt.Errorf("the service stopped while the command ran, and killed it: %w", err),
			&hostv1.ErrorDetail{ReasonCode: ReasonServiceStopping})
	case ctx.Err() != nil:
		return nil, withDetail(connect.CodeCanceled, err, &hostv1.ErrorDetail{ReasonCode: string(core.ReasonCanceled)})
	case layerError(err) != nil:
		return nil, layerError(err)
	case core.LimitOf(err) != "":
		// A capacity limit (the pipeline's or the driver's): the client
		// is told which key to raise, not that the sandbox failed.
		return nil, withDetail(connect.CodeResourceExhausted, driverLimitHint(err),
			&hostv1.ErrorDetail{ReasonCode: ReasonResourceExhausted, Field: core.LimitOf(err)})
	case errors.As(err, &drvErr):
		detail.Driver = drvErr.Driver
		return nil, withDetail(connect.CodeUnavailable, err, detail)
	case errors.As(err, &hookErr):
		detail.Hook = hookErr.Hook
		return nil, withDetail(connect.CodeInternal, err, detail)
	case errors.As(err, &wsErr):
		return nil, withDetail(connect.CodeFailedPrecondition, err, detail)
	case errors.As(err, &medErr):
		return nil, withDetail(connect.CodeInternal, err, detail)
	case errors.Is(err, core.ErrSignalBeforeStart):
		return nil, withDetail(connect.CodeAborted, err, detail)
	case errors.Is(err, core.ErrSignalEnded):
		// The driver cannot forward signals, so the one sent ended the
		// command as a cancel does: no exit status of its own.
		return nil, withDetail(connect.CodeAborted, err, detail)
	case errors.Is(err, alephsandbox.ErrDisabled):
		return nil, withDetail(connect.CodeFailedPrecondition, err, detail)
	default:
		return nil, withDetail(connect.CodeInternal, err, detail)
	}
	e := out.Exit
	res := &hostv1.ExecResult{
		Stdout: out.Stdout, Stderr: out.Stderr,
		ExitCode: e.ExitCode, Signal: e.Signal, TimedOut: e.TimedOut, Truncated: e.Truncated,
		OomKilled: e.OOMKilled, DurationMs: e.Duration.Milliseconds(), Backend: out.Backend,
		CommandId: out.CommandID, ProfileDigest: out.ProfileDigest, ReasonCode: string(out.Reason()),
		OutputStreamed: out.Streamed, StreamedStdoutBytes: out.StreamedStdout, StreamedStderrBytes: out.StreamedStderr,
		// The hint in the pipeline's terms: each client says it in its
		// own (spawn=True, spawn: true, --spawn) from reason_code.
		SpawnRefused: e.SpawnRefused, Hint: out.Hint(), SpawnReported: out.SpawnReported,
	}
	u := core.UsageOf(e.Usage)
	res.Usage = &hostv1.CommandUsage{CpuMs: u.CPUMS, MaxRssKb: u.MaxRSSKB, UserMs: u.UserMS, SystemMs: u.SystemMS}
	res.Violations, res.ViolationsDropped, res.ViolationKinds = ViolationsToPB(e.Violations), e.ViolationsDropped, e.ViolationKinds
	for _, v := range out.Verdicts {
		res.Verdicts = append(res.Verdicts, &hostv1.Verdict{Action: v.Action.String(), Rule: v.Rule, Reason: v.Reason, Hook: v.Hook})
	}
	return res, nil
}

// Approvals implements the service: requests are sent until the client
// goes away or the service stops.
//
// With a key, the stream carries only the requests of the calls naming
// that key (StartProcessRequest.approval_key), and ends when such a call
// ends: a client's own approver answering its unary calls.
func (s *Server) Approvals(ctx context.Context, req *connect.Request[hostv1.ApprovalsRequest], stream *connect.ServerStream[hostv1.ApprovalRequest]) error {
	ctx, end, err := s.streamRequest(ctx, req.Header(), req.Msg)
	if err != nil {
		return err
	}
	defer end()
	var ch chan *hostv1.ApprovalRequest
	var callDone <-chan struct{}
	if key := req.Msg.GetKey(); key != "" {
		if len(key) > maxApprovalKey {
			return invalid("key", fmt.Sprintf("longer than %d bytes", maxApprovalKey))
		}
		bx, release := s.broker.box(key)
		defer release(false)
		ch, callDone = bx.ch, bx.done
	} else {
		var done func()
		ch, done = s.broker.subscribe()
		defer done()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.broker.closed:
			return nil
		case <-callDone:
			// Requests sent before the call ended are still delivered.
			for {
				select {
				case r := <-ch:
					if err := stream.Send(r); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		case r := <-ch:
			if err := stream.Send(r); err != nil {
				return err
			}
		}
	}
}

// Approve implements the service.
func (s *Server) Approve(_ context.Context, req *connect.Request[hostv1.ApproveRequest]) (*connect.Response[hostv1.ApproveResponse], error) {
	if req.Msg.GetId() == "" {
		return nil, invalid("id", "required")
	}
	if !s.broker.answer(req.Msg.GetId(), req.Msg.GetApproved(), req.Msg.GetOnce()) {
		return nil, withDetail(connect.CodeNotFound, fmt.Errorf("no pending approval request %q (answered, timed out, or never asked)", req.Msg.GetId()),
			&hostv1.ErrorDetail{ReasonCode: "approval_unknown", Field: "id"})
	}
	return connect.NewResponse(&hostv1.ApproveResponse{}), nil
}

func capsMsg(c driverapi.Capabilities) *hostv1.Capabilities {
	return &hostv1.Capabilities{
		FsRead: c.FSRead, FsWrite: c.FSWrite, NetworkMode: c.Network.Mode.String(), NetworkHosts: c.Network.Hosts,
		Spawn: c.SpawnSubprocess, MemoryMb: c.MaxMemoryMB, TimeoutSeconds: int64(c.TimeoutSecs),
	}
}

func grantsMsg(g core.SessionGrants) []*hostv1.Grant {
	out := []*hostv1.Grant{}
	for _, gr := range g.Grants {
		m := &hostv1.Grant{Id: gr.ID, NetworkHost: gr.NetworkHost}
		if gr.Capabilities != nil {
			m.Capabilities = capsMsg(*gr.Capabilities)
		}
		out = append(out, m)
	}
	return out
}

func (s *Server) describe(session string) *hostv1.Session {
	g := s.host.Grants(session)
	ws := ""
	if s.known(session) {
		ws, _ = s.host.WorkspacePath(session)
	}
	return &hostv1.Session{Session: session, Workspace: ws, Baseline: capsMsg(g.Baseline), Grants: grantsMsg(g), PolicyDigest: g.PolicyDigest,
		Incarnation: s.incarnation(session), NodeId: s.nodeID}
}

// Sessions implements the service. The list is of the sessions this
// service has run or been asked about since it started, and of those kept
// on disk (PersistedOnly).
func (s *Server) Sessions(_ context.Context, req *connect.Request[hostv1.SessionsRequest]) (*connect.Response[hostv1.SessionsResponse], error) {
	resp := &hostv1.SessionsResponse{Sessions: []*hostv1.Session{}}
	switch a := req.Msg.GetAction().(type) {
	case *hostv1.SessionsRequest_List:
		s.mu.Lock()
		names := make([]string, 0, len(s.sessions))
		for n := range s.sessions {
			names = append(names, n)
		}
		s.mu.Unlock()
		// And the sessions kept on disk from earlier (their workspace
		// and its record, their grants): a restarted service lists what
		// it will resume, marked as not active here.
		if k, ok := s.host.(interface{ KeptSessions() []string }); ok {
			names = append(names, k.KeptSessions()...)
		}
		sort.Strings(names)
		names = slices.Compact(names)
		for _, n := range names {
			d := s.describe(n)
			d.PersistedOnly = d.GetIncarnation() == ""
			resp.Sessions = append(resp.Sessions, d)
		}
	case *hostv1.SessionsRequest_Describe:
		if err := checkSession("describe.session", a.Describe.GetSession()); err != nil {
			return nil, err
		}
		// A read: a session the service does not hold is described
		// (baseline, kept grants) without being created, and its
		// workspace is not made.
		resp.Sessions = append(resp.Sessions, s.describe(a.Describe.GetSession()))
	case *hostv1.SessionsRequest_Forget:
		if err := checkSession("forget.session", a.Forget.GetSession()); err != nil {
			return nil, err
		}
		// The calls let through expecting its incarnation end first,
		// then its processes: none may outlive it.
		s.endSession(a.Forget.GetSession())
		s.procs.ForgetSession(a.Forget.GetSession())
		s.host.ForgetSession(a.Forget.GetSession())
		s.dropSession(a.Forget.GetSession())
	case *hostv1.SessionsRequest_Delete:
		id := a.Delete.GetSession()
		if err := checkSession("delete.session", id); err != nil {
			return nil, err
		}
		d, ok := s.host.(interface{ DeleteSession(string) error })
		if !ok {
			return nil, withDetail(connect.CodeUnimplemented, errors.New("this runtime cannot delete sessions"), &hostv1.ErrorDetail{Field: "delete"})
		}
		// The calls let through expecting its incarnation end first,
		// then its processes: none may outlive it, nor write into the
		// workspace being removed.
		s.endSession(id)
		s.procs.ForgetSession(id)
		err := d.DeleteSession(id)
		s.dropSession(id)
		if err != nil {
			return nil, withDetail(connect.CodeFailedPrecondition, err, &hostv1.ErrorDetail{ReasonCode: string(core.ReasonWorkspaceFailed), Field: "delete.session"})
		}
		s.log.Info("session deleted", "session", id)
	default:
		return nil, invalid("action", "one of list, describe, forget, delete is required")
	}
	return connect.NewResponse(resp), nil
}

// Grants implements the service.
func (s *Server) Grants(ctx context.Context, req *connect.Request[hostv1.GrantsRequest]) (*connect.Response[hostv1.GrantsResponse], error) {
	var session string
	switch a := req.Msg.GetAction().(type) {
	case *hostv1.GrantsRequest_List:
		session = a.List.GetSession()
		if err := checkSession("list.session", session); err != nil {
			return nil, err
		}
	case *hostv1.GrantsRequest_Revoke:
		session = a.Revoke.GetSession()
		if err := checkSession("revoke.session", session); err != nil {
			return nil, err
		}
		if a.Revoke.GetGrantId() == "" {
			return nil, invalid("revoke.grant_id", "required")
		}
		if _, err := s.host.RevokeGrant(ctx, session, a.Revoke.GetGrantId()); err != nil {
			return nil, withDetail(connect.CodeNotFound, err, &hostv1.ErrorDetail{ReasonCode: "grant_unknown", Field: "revoke.grant_id"})
		}
	case *hostv1.GrantsRequest_ApplyNetwork:
		an := a.ApplyNetwork
		session = an.GetSession()
		if err := checkSession("apply_network.session", session); err != nil {
			return nil, err
		}
		if err := s.admit(session); err != nil {
			return nil, err
		}
		switch {
		case an.GetHost() == "":
			return nil, invalid("apply_network.host", "required")
		case an.GetPort() > 65535:
			return nil, invalid("apply_network.port", "must be at most 65535")
		case an.GetExpectedDigest() == "":
			return nil, invalid("apply_network.expected_digest", "required: a grant is pinned to the policy the user saw")
		}
		if _, err := s.host.ApplyNetworkGrant(ctx, session, an.GetHost(), uint16(an.GetPort()), an.GetExpectedDigest()); err != nil {
			var stale *core.StaleGrantError
			if errors.As(err, &stale) {
				return nil, withDetail(connect.CodeFailedPrecondition, err, &hostv1.ErrorDetail{ReasonCode: string(core.ReasonGrantStale), Field: "apply_network.expected_digest"})
			}
			return nil, withDetail(connect.CodeInvalidArgument, err, &hostv1.ErrorDetail{ReasonCode: ReasonInvalidRequest, Field: "apply_network.host"})
		}
	default:
		return nil, invalid("action", "one of list, revoke, apply_network is required")
	}
	// A grant applied or revoked is state of the session; a list is a
	// read and keeps nothing.
	if _, isList := req.Msg.GetAction().(*hostv1.GrantsRequest_List); !isList {
		s.remember(ctx, session)
	}
	g := s.host.Grants(session)
	return connect.NewResponse(&hostv1.GrantsResponse{Session: session, Grants: grantsMsg(g), PolicyDigest: g.PolicyDigest}), nil
}

// Capabilities implements the service.
func (s *Server) Capabilities(ctx context.Context, _ *connect.Request[hostv1.CapabilitiesRequest]) (*connect.Response[hostv1.CapabilitiesResponse], error) {
	caps, err := s.host.Capabilities(ctx)
	if err != nil {
		_, rerr := s.result(ctx, nil, err)
		return nil, rerr
	}
	b, err := json.Marshal(caps)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("encoding the capability report: %w", err))
	}
	resp := &hostv1.CapabilitiesResponse{ReportJson: string(b), NodeId: s.nodeID}
	s.sayDefaults(resp)
	return connect.NewResponse(resp), nil
}

// CheckPolicy implements the service: the command policy alone, on the
// string as `sh -c COMMAND` would be scanned (as `policy check`).
func (s *Server) CheckPolicy(ctx context.Context, req *connect.Request[hostv1.CheckPolicyRequest]) (*connect.Response[hostv1.CheckPolicyResponse], error) {
	if strings.TrimSpace(req.Msg.GetCommand()) == "" {
		return nil, invalid("command", "required")
	}
	v, err := s.policy.Check(ctx, req.Msg.GetCommand(), req.Msg.GetStdin())
	if err != nil {
		return nil, withDetail(connect.CodeInternal, err, &hostv1.ErrorDetail{ReasonCode: string(core.ReasonHookFailed), Hook: "command_policy"})
	}
	verdict := "allow"
	switch v.Action {
	case driverapi.ActionDeny:
		verdict = "block"
	case driverapi.ActionWarn:
		verdict = "warn"
	}
	return connect.NewResponse(&hostv1.CheckPolicyResponse{Verdict: verdict, Rule: v.Rule, Reason: v.Reason}), nil
}

// detailOf is the ErrorDetail of a connect error, if it has one.
func detailOf(err error) *hostv1.ErrorDetail {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*hostv1.ErrorDetail); ok {
				return ed
			}
		}
	}
	return nil
}

// call is a running Execute reachable by its signal_key: its signals and,
// for a streamed stdin or a terminal, its stdin pipe and window sizes.
type call struct {
	// session is the command's (its calls' session header is compared
	// with it).
	session string
	signals chan driverapi.Signal
	stdin   *core.StdinPipe           // nil: stdin was given up front
	resize  chan driverapi.WindowSize // nil: no terminal
	ended   chan struct{}
}

// registerCall makes the command of an Execute call reachable by Signal
// (and WriteStdin, CloseStdin, ResizeTerminal) under key until release is
// called.
func (s *Server) registerCall(key, session string, ia interactiveCall) (*call, func(), error) {
	if len(key) > 256 {
		return nil, nil, invalid("signal_key", "longer than 256 bytes")
	}
	c := &call{session: session, signals: make(chan driverapi.Signal, 8), ended: make(chan struct{})}
	if ia.stdin {
		c.stdin = core.NewStdinPipe(s.procs.Limits().StdinBytes)
	}
	if ia.tty {
		c.resize = make(chan driverapi.WindowSize, 1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.calls[key]; dup {
		return nil, nil, invalid("signal_key", "already names a running command")
	}
	s.calls[key] = c
	return c, func() {
		s.mu.Lock()
		delete(s.calls, key)
		s.mu.Unlock()
		close(c.ended)
		if c.stdin != nil {
			// Writers waiting for room return: the command is gone.
			c.stdin.CloseRead()
		}
	}, nil
}

// Signal implements the service: the signal goes to the command as a
// signal reaching in-process `exec` does (the pipeline forwards it through
// the driver; the command decides what it means).
func (s *Server) Signal(_ context.Context, req *connect.Request[hostv1.SignalRequest]) (*connect.Response[hostv1.SignalResponse], error) {
	if req.Msg.GetSignalKey() == "" {
		return nil, invalid("signal_key", "required")
	}
	sig, err := driverapi.ParseSignal(req.Msg.GetSignal())
	if err != nil {
		return nil, invalid("signal", err.Error())
	}
	s.mu.Lock()
	c, ok := s.calls[req.Msg.GetSignalKey()]
	if ok {
		select {
		case c.signals <- sig:
		default: // a burst: the command has been told already
		}
	}
	s.mu.Unlock()
	if !ok {
		return nil, withDetail(connect.CodeNotFound, fmt.Errorf("no running command has signal_key %q (not started yet, or ended)", req.Msg.GetSignalKey()),
			&hostv1.ErrorDetail{ReasonCode: ReasonNotRunning, Field: "signal_key"})
	}
	return connect.NewResponse(&hostv1.SignalResponse{}), nil
}

// ViolationsToPB is vs as the service sends them.
func ViolationsToPB(vs []driverapi.Violation) []*hostv1.Violation {
	var out []*hostv1.Violation
	for _, v := range vs {
		out = append(out, &hostv1.Violation{Kind: v.Kind, Operation: v.Operation, Target: v.Target, Count: v.Count})
	}
	return out
}
