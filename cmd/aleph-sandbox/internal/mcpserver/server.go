// Package mcpserver is `aleph-sandbox mcp`: a Model Context Protocol server
// whose tool run_command runs a command in the sandbox, through the same
// assembled runtime as the CLI (package alephsandbox), and whose process
// tools (start_process, write_process, read_process, signal_process,
// stop_process, list_processes) keep processes running across calls. Approvals go to the
// MCP client as elicitation where it supports it; otherwise the server's
// configured answer (deny by default) applies.
package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/termsafe"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// ToolRunCommand is the tool's name (docs/mcp.md).
const ToolRunCommand = "run_command"

// Runner runs one command; *alephsandbox.Runtime is one.
type Runner interface {
	Execute(ctx context.Context, cmd core.Command) (*core.Output, error)
}

// Config is what the server is told at start.
type Config struct {
	// Session is the sandbox session every call of this server runs in:
	// its workspace and its grants.
	Session string
	// Baseline is what calls get without asking: a request within it is
	// approved by the server itself; beyond it the client is asked
	// (elicitation), or Fallback decides. The zero value is strict.
	Baseline driverapi.Capabilities
	// Fallback answers an elevation beyond Baseline when the client cannot
	// be asked: false denies (the default), true approves.
	Fallback bool
	// Version is reported to the client.
	Version string
	// Processes runs the process tools; nil gives the server a process
	// table of its own over the Runner (with core's default limits),
	// closed by Server.Close.
	Processes Processes
	// Workspace, when set, is an existing directory (absolute) every
	// call runs in as its workspace instead of the session's own
	// directory: the user's project (mcp --workspace).
	Workspace string
	// DefaultTimeout and MaxOutputBytes are the configuration's
	// (sandbox.default_timeout_seconds, sandbox.max_output_bytes), said
	// in the tools' descriptions and the instructions; with mcp --host
	// the service's (its Capabilities); zero when not known.
	DefaultTimeout time.Duration
	MaxOutputBytes int64
	// Host is the service this server sends its calls to (mcp --host,
	// "unix:PATH"); empty in-process. The command apply's refusal names
	// for the user reaches the session there.
	Host string
	// HostOptions are the options that reach Host over TCP (--ca-file,
	// --cert-file, --key-file and their files), given to that command
	// too; the token stays in the user's environment.
	HostOptions []string
}

// RunCommandArgs are run_command's arguments. Exactly one of Argv and
// Command is given.
type RunCommandArgs struct {
	Argv           []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run directly without a shell, e.g. [\"/bin/ls\", \"-l\"]"`
	Command        string            `json:"command,omitempty" jsonschema:"a shell command line, run by /bin/sh -c; a shell starts subprocesses, so a command asks for spawn by itself (approved by the user, or given by the server's baseline)"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory, relative to or inside the session's workspace"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables for the command; the host's environment is never passed through"`
	Network        string            `json:"network,omitempty" jsonschema:"none (the default), all, or a comma-separated list of hosts (exact, *.suffix, IP, optional :port)"`
	Spawn          bool              `json:"spawn,omitempty" jsonschema:"allow the command to start subprocesses (implied by command)"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit in seconds; 0 means the configured default"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"standard input for the command"`
	Layered        bool              `json:"layered,omitempty" jsonschema:"run over the session's layer: everything is writable (.git included) and the user's files change only when the user applies (tools changes, diff, apply); the session's first command fixes it"`
}

// RunCommandResult is run_command's structured result.
type RunCommandResult struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exit_code"`
	Signal     int    `json:"signal"`
	TimedOut   bool   `json:"timed_out"`
	Truncated  bool   `json:"truncated"`
	DurationMS int64  `json:"duration_ms"`
	Backend    string `json:"backend,omitempty"`
	// Denied is set when the sandbox refused the command: Reason says why,
	// ReasonCode is the audit's code, Rule the hook rule when a hook denied.
	Denied     bool   `json:"denied"`
	Reason     string `json:"reason,omitempty"`
	ReasonCode string `json:"reason_code,omitempty"`
	Rule       string `json:"rule,omitempty"`
	// Error is set when the sandbox failed (the command did not run).
	Error string `json:"error,omitempty"`
	// SpawnRefused counts the command's attempts to start a process that
	// the sandbox refused (it lacked spawn); non-zero goes with
	// reason_code spawn_refused and Hint.
	SpawnRefused int64 `json:"spawn_refused,omitempty"`
	// Hint is one line saying how to get what was refused.
	Hint string `json:"hint,omitempty"`
	// Usage is what the command consumed (CPU time, peak RSS); absent
	// when it did not run.
	Usage *core.AuditUsage `json:"usage,omitempty"`
	// Violations are what the sandbox refused the command (kind:
	// spawn, syscall, network or filesystem; operation; target; count),
	// at most the configured bound, ViolationsDropped the refusals past
	// it; ViolationKinds the kinds the sandbox watched (none of those
	// refused when Violations is empty).
	Violations        []driverapi.Violation `json:"violations,omitempty"`
	ViolationsDropped int64                 `json:"violations_dropped,omitempty"`
	ViolationKinds    []string              `json:"violation_kinds,omitempty"`
}

// mcpSpawnHint is run_command's hint for spawn_refused
// (core.SpawnRefusedHint in the tool's terms).
const mcpSpawnHint = `the command tried to start a subprocess and the sandbox refused it: call run_command again with "spawn": true (the client is asked to approve it, or the server's --allow-spawn gives it)`

// mcpSpawnDeniedHint is the hint of a call refused because the spawn it
// asked for (a shell command asks for it by itself) was not approved.
const mcpSpawnDeniedHint = `the command needs spawn (permission to start subprocesses; a shell command, the command argument, always does) and it was not approved: ` +
	`the user can approve it when asked, or the server be started with --allow-spawn or sandbox.session.baseline = "agent"; ` +
	`to run a single program without a shell and without spawn, give argv instead`

// spawnDenied reports whether a refusal coded code is of an elevation that
// included spawn beyond the server's baseline: its hint names spawn, so
// that a model that never wrote "spawn" learns why its shell line was
// refused.
func spawnDenied(cfg Config, cmd core.Command, code core.ReasonCode) bool {
	return (code == core.ReasonApprovalDenied || code == core.ReasonApprovalTimeout) &&
		cmd.Capabilities.SpawnSubprocess && !cfg.Baseline.SpawnSubprocess
}

type callKey struct{}

// callState is one run_command call's view of approvals. Approvals use
// the protocol's multi round-trip requests: a server may not send its own
// request to the client while it serves one, so a call that needs approval
// returns an elicitation as an input request, and the client calls again
// with the answer (the SDK does both halves, and falls back to a direct
// elicitation for clients of older protocol versions).
type callState struct {
	canAsk    bool
	responses mcp.InputResponseMap
	asked     *askedSet

	// mu guards what follows: a process's approval is asked from the
	// goroutine that runs it, while its start_process call waits.
	mu sync.Mutex
	// pending is set when an approval is needed that no response answers.
	pendingID string
	pending   *mcp.ElicitParams
	// done is set once the call has returned: a later approval request
	// (of a process whose pipeline was slower than its start's wait)
	// cannot be asked any more.
	done bool
}

// finish ends the call and returns the question it must return, if any.
func (st *callState) finish() (string, *mcp.ElicitParams) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.done = true
	return st.pendingID, st.pending
}

// askable reports whether the client can still be asked within this call.
func (st *callState) askable() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.canAsk && !st.done && st.pending == nil
}

// Approver answers elevation requests of run_command calls: within the
// baseline it approves, beyond it it asks the calling client by
// elicitation, and where the client cannot be asked Fallback decides. The
// runtime must be built with it (alephsandbox.WithApprover).
type Approver struct {
	cfg Config
	// reach is cfg.Baseline with where its paths resolved (core.Reach).
	reach driverapi.Capabilities
}

// maxShownCommand bounds the command line a question shows.
const maxShownCommand = 300

// NewApprover returns the approver for cfg.
func NewApprover(cfg Config) *Approver { return &Approver{cfg: cfg, reach: core.Reach(cfg.Baseline)} }

// approvalID names an elevation request in the input-request map: the
// digest of what is asked for, so the retried call's request finds its
// answer, and a random part, so that only an answer to a question this
// server asked counts (askedSet): a client cannot name an answer in
// advance and skip the question.
func approvalID(req driverapi.ApprovalRequest) string {
	return approvalPrefix(req) + randomHex()
}

func approvalPrefix(req driverapi.ApprovalRequest) string {
	b, _ := json.Marshal(req.Requested)
	return "approve-" + driverapi.Digest(b)[:16] + "-"
}

func randomHex() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// maxAsked bounds the questions a server remembers: a client that never
// answers must not grow the set without end. The oldest is forgotten first.
const maxAsked = 64

// askedSet holds the ids of the approval questions a server has asked and
// not seen answered. An answer is used once.
type askedSet struct {
	mu    sync.Mutex
	order []string
}

func (a *askedSet) add(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.order) >= maxAsked {
		a.order = a.order[1:]
	}
	a.order = append(a.order, id)
}

// take removes and reports an asked id for req among responses.
func (a *askedSet) take(req driverapi.ApprovalRequest, responses mcp.InputResponseMap) (mcp.InputResponse, bool) {
	return a.takePrefix(approvalPrefix(req), responses)
}

// takePrefix removes and reports an asked id starting with prefix among
// responses.
func (a *askedSet) takePrefix(prefix string, responses mcp.InputResponseMap) (mcp.InputResponse, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, id := range a.order {
		if r, ok := responses[id]; ok && strings.HasPrefix(id, prefix) {
			a.order = slices.Delete(a.order, i, i+1)
			return r, true
		}
	}
	return nil, false
}

// RequestApproval implements core.ApprovalRequester.
func (a *Approver) RequestApproval(ctx context.Context, req driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error) {
	// By name and by where the paths lead: a link under the baseline
	// leads out of it.
	//
	// The yes is for this command only: the baseline is this server's,
	// not the session's, and kept as a grant of the session it would be
	// lent to every later command of the session, of whatever front end
	// (mcp --host shares the service's sessions).
	if core.Covered(req.Requested, a.cfg.Baseline, a.reach) {
		return driverapi.ApprovalApprovedOnce, nil
	}
	st, _ := ctx.Value(callKey{}).(*callState)
	if st == nil || !st.canAsk {
		if a.cfg.Fallback {
			return driverapi.ApprovalApproved, nil
		}
		return driverapi.ApprovalDenied, nil
	}
	if r, ok := st.asked.take(req, st.responses); ok {
		if er, ok := r.(*mcp.ElicitResult); ok && er.Action == "accept" {
			if v, ok := er.Content["approve"].(bool); ok && v {
				return driverapi.ApprovalApproved, nil
			}
		}
		return driverapi.ApprovalDenied, nil
	}
	if !st.askable() {
		// The call has returned (a process whose pipeline was slower
		// than its start's wait): nobody relays a question now.
		if a.cfg.Fallback {
			return driverapi.ApprovalApproved, nil
		}
		return driverapi.ApprovalDenied, nil
	}
	id := approvalID(req)
	q := &mcp.ElicitParams{
		Mode: "form",
		// Escaped and quoted: the command line is the caller's, and must
		// not add lines or reorder the question its user answers.
		Message: fmt.Sprintf("aleph-sandbox: %s (%s). Allow it for this session?",
			termsafe.Escape(req.Summary), termsafe.CommandLine(req.Program, req.Args, maxShownCommand)),
		RequestedSchema: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"approve": map[string]any{"type": "boolean", "title": "Allow", "description": "allow this elevation for the rest of the session"},
			},
			"required": []string{"approve"},
		},
	}
	st.mu.Lock()
	if st.done || st.pending != nil {
		// Too late to ask (or asked already): nobody relays an answer.
		st.mu.Unlock()
		return driverapi.ApprovalDenied, nil
	}
	st.asked.add(id)
	st.pendingID, st.pending = id, q
	st.mu.Unlock()
	// Denied for this round: the call returns the question instead of a
	// result, and the retried call carries the answer.
	return driverapi.ApprovalDenied, nil
}

func canElicit(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	p := ss.InitializeParams()
	return p != nil && p.Capabilities != nil && p.Capabilities.Elicitation != nil
}

// RuntimeOptions are what the runtime serving cfg is built with: the
// approver, and cfg.Baseline as every session's baseline, so that a call
// within it is let through by the pipeline itself instead of approved, and
// so never kept as a grant of the session: a server started later with a
// narrower baseline must not inherit what this one let through.
func RuntimeOptions(cfg Config) []alephsandbox.Option {
	return []alephsandbox.Option{alephsandbox.WithApprover(NewApprover(cfg)), alephsandbox.WithBaseline(cfg.Baseline)}
}

// Server is the MCP server: the SDK's, and the processes its sessions
// started.
type Server struct {
	*mcp.Server
	tracker *procTracker
	table   *core.ProcessTable
}

// Close kills the processes every session started (each session's are
// killed when it ends as well) and refuses new ones.
func (s *Server) Close() {
	s.tracker.close()
	if s.table != nil {
		s.table.Close()
	}
}

// New is the MCP server with the run_command tool and the process tools,
// running commands on r. Close it when done with it.
func New(r Runner, cfg Config) *Server {
	if cfg.Session == "" {
		cfg.Session = "mcp"
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "aleph-sandbox", Version: cfg.Version}, &mcp.ServerOptions{Instructions: instructions(cfg)})
	asked := &askedSet{}
	mcp.AddTool(s, &mcp.Tool{
		Name:        ToolRunCommand,
		Description: runCommandDescription(cfg),
		Annotations: annotateRun,
	}, func(ctx context.Context, req *mcp.CallToolRequest, in RunCommandArgs) (*mcp.CallToolResult, RunCommandResult, error) {
		st := &callState{canAsk: canElicit(req.Session), responses: req.Params.InputResponses, asked: asked}
		prog := startProgress(ctx, req.Session, req.Params.GetProgressToken())
		res, out, err := runCommand(context.WithValue(ctx, callKey{}, st), r, cfg, in, prog)
		prog.finish()
		if id, q := st.finish(); q != nil {
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{id: q}}, RunCommandResult{}, nil
		}
		return res, out, err
	})
	srv := &Server{Server: s}
	procs := cfg.Processes
	if procs == nil {
		srv.table = core.NewProcessTable(startWatch{r}, core.ProcessLimits{})
		procs = TableProcesses(srv.table)
	}
	srv.tracker = &procTracker{procs: procs, watchStarts: cfg.Processes == nil, owned: map[*mcp.ServerSession]map[string]bool{}}
	addProcessTools(s, cfg, srv.tracker, asked)
	if fh, ok := fileHost(r, cfg.Workspace); ok {
		addFileTools(s, cfg, fh)
	}
	if lh, ok := r.(alephsandbox.LayerHost); ok {
		addLayerTools(s, cfg, lh, asked)
	}
	return srv
}

func runCommand(ctx context.Context, r Runner, cfg Config, in RunCommandArgs, prog *progress) (*mcp.CallToolResult, RunCommandResult, error) {
	cmd, err := toCommand(cfg, in)
	if err != nil {
		return errorResult(RunCommandResult{Error: err.Error()}, "invalid arguments: "+err.Error()), RunCommandResult{Error: err.Error()}, nil
	}
	if prog != nil {
		// The output as it comes, as well as in the result (with
		// --host too: the service's chunks are written here as they
		// arrive).
		cmd.Stdout, cmd.Stderr = prog, prog
	}
	out, err := r.Execute(ctx, cmd)
	var de *core.DeniedError
	switch {
	case errors.As(err, &de):
		res := RunCommandResult{Denied: true, Reason: de.Error(), ReasonCode: string(de.Code), Rule: de.Rule}
		text := "denied: " + de.Error()
		if spawnDenied(cfg, cmd, de.Code) {
			res.Hint = mcpSpawnDeniedHint
			text += "\nhint: " + res.Hint
		}
		return errorResult(res, text), res, nil
	case err != nil:
		res := RunCommandResult{Error: err.Error()}
		return errorResult(res, "the sandbox failed to run the command: "+err.Error()), res, nil
	}
	e := out.Exit
	res := RunCommandResult{
		Stdout: string(out.Stdout), Stderr: string(out.Stderr),
		ExitCode: int(e.ExitCode), Signal: int(e.Signal), TimedOut: e.TimedOut, Truncated: e.Truncated,
		DurationMS: e.Duration.Milliseconds(), Backend: out.Backend,
		ReasonCode: string(out.Reason()), SpawnRefused: e.SpawnRefused, Usage: core.UsageOf(e.Usage),
		Violations: e.Violations, ViolationsDropped: e.ViolationsDropped, ViolationKinds: e.ViolationKinds,
	}
	if out.Reason() == core.ReasonSpawnRefused {
		res.Hint = mcpSpawnHint
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: summary(res)}}}, res, nil
}

func errorResult(res RunCommandResult, text string) *mcp.CallToolResult {
	r := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	r.StructuredContent = res
	return r
}

// summary is the text form of a result, for clients that show text only.
func summary(r RunCommandResult) string {
	var b strings.Builder
	switch {
	case r.TimedOut:
		fmt.Fprintf(&b, "timed out after %d ms", r.DurationMS)
	case r.Signal != 0:
		fmt.Fprintf(&b, "killed by signal %d", r.Signal)
	default:
		fmt.Fprintf(&b, "exit code %d", r.ExitCode)
	}
	if r.Truncated {
		b.WriteString(" (output truncated)")
	}
	if r.Hint != "" {
		b.WriteString("\nhint: " + r.Hint)
	}
	if r.Stdout != "" {
		b.WriteString("\nstdout:\n" + r.Stdout)
	}
	if r.Stderr != "" {
		b.WriteString("\nstderr:\n" + r.Stderr)
	}
	return b.String()
}

// toCommand maps run_command's arguments onto the one request type
// (alephsandbox.Request), which validates them as every front end's.
func toCommand(cfg Config, in RunCommandArgs) (core.Command, error) {
	req := alephsandbox.Request{Session: cfg.Session, Workspace: cfg.Workspace, Cwd: in.Cwd, Env: in.Env, Net: in.Network,
		Spawn: in.Spawn, TimeoutSeconds: in.TimeoutSeconds, Layered: in.Layered}
	if in.Stdin != "" {
		req.Stdin = []byte(in.Stdin)
	}
	switch {
	case len(in.Argv) > 0 && in.Command != "":
		return core.Command{}, errors.New("give argv or command, not both")
	case len(in.Argv) > 0:
		req.Argv = in.Argv
	case in.Command != "":
		// A shell forks for all but the simplest line: without spawn it
		// would run and fail ("/bin/sh: Cannot fork", exit 2, not a tool
		// error), and models leave spawn out. So a shell line asks for
		// spawn by itself, approved or refused as any elevation is (the
		// baseline, a grant, the user, --yes); argv is the way to run one
		// program without it.
		req.Argv = []string{"/bin/sh", "-c", in.Command}
		req.Spawn = true
	default:
		return core.Command{}, errors.New("give argv (an array: program and arguments) or command (a shell line)")
	}
	cmd, err := req.Command()
	if err != nil {
		var re *alephsandbox.RequestError
		if errors.As(err, &re) {
			// In the tool's own names: its network argument is the
			// request's net.
			field := re.Field
			if field == "net" {
				field = "network"
			}
			return core.Command{}, fmt.Errorf("%s: %s", field, re.Reason)
		}
		return core.Command{}, err
	}
	return cmd, nil
}

// fileHost is the files API the file tools use: over the workspace every
// call runs in (mcp --workspace: the user's project), so that write_file
// writes what run_command's command reads. A runner that cannot name a
// workspace for its files gets no file tools when one is set: they would
// read and write the session's own directory, which no command sees.
func fileHost(r any, workspace string) (alephsandbox.FileHost, bool) {
	fh, ok := r.(alephsandbox.FileHost)
	if !ok || workspace == "" {
		return fh, ok
	}
	wh, ok := r.(alephsandbox.WorkspaceFileHost)
	if !ok {
		return nil, false
	}
	return wh.FilesIn(workspace), true
}
