package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The process tools' names (docs/mcp.md).
const (
	ToolStartProcess  = "start_process"
	ToolWriteProcess  = "write_process"
	ToolReadProcess   = "read_process"
	ToolSignalProcess = "signal_process"
	ToolStopProcess   = "stop_process"
	ToolListProcesses = "list_processes"
)

// Processes runs the process tools: a core.ProcessTable over the server's
// own pipeline (TableProcesses), or a running service (--host). Its errors
// are core's: *core.ProcessNotFoundError, *core.ProcessLimitError,
// core.ErrProcessEnded, core.ErrStdinClosed, *core.InvalidCommandError.
type Processes interface {
	Start(ctx context.Context, cmd core.Command) (string, error)
	Write(ctx context.Context, id string, data []byte) (int, error)
	CloseStdin(ctx context.Context, id string) error
	Read(ctx context.Context, id string, offset int64, wait time.Duration) (core.ProcessRead, error)
	Signal(ctx context.Context, id string, sig driverapi.Signal) error
	Wait(ctx context.Context, id string) (core.ProcessResult, error)
	List(ctx context.Context, session string) ([]core.ProcessInfo, error)
}

// TableProcesses is Processes on a process table of this host.
func TableProcesses(t *core.ProcessTable) Processes { return tableProcs{t} }

type tableProcs struct{ t *core.ProcessTable }

func (p tableProcs) Start(ctx context.Context, cmd core.Command) (string, error) {
	return p.t.Start(ctx, cmd)
}
func (p tableProcs) Write(ctx context.Context, id string, b []byte) (int, error) {
	return p.t.Write(ctx, id, b)
}
func (p tableProcs) CloseStdin(_ context.Context, id string) error { return p.t.CloseStdin(id) }
func (p tableProcs) Read(ctx context.Context, id string, off int64, wait time.Duration) (core.ProcessRead, error) {
	return p.t.Read(ctx, id, off, wait)
}
func (p tableProcs) Signal(_ context.Context, id string, sig driverapi.Signal) error {
	return p.t.Signal(id, sig)
}
func (p tableProcs) Wait(ctx context.Context, id string) (core.ProcessResult, error) {
	return p.t.Wait(ctx, id)
}
func (p tableProcs) List(_ context.Context, session string) ([]core.ProcessInfo, error) {
	return p.t.List(session), nil
}

// StartProcessArgs are start_process's arguments: run_command's, without
// stdin (write_process gives it), with a terminal on request and a first
// wait for output.
type StartProcessArgs struct {
	Argv           []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run directly without a shell, e.g. [\"/usr/bin/python3\", \"-m\", \"http.server\"]"`
	Command        string            `json:"command,omitempty" jsonschema:"a shell command line, run by /bin/sh -c; a shell starts subprocesses, so a command asks for spawn by itself (approved by the user, or given by the server's baseline)"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory, relative to or inside the session's workspace"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables for the process; the host's environment is never passed through"`
	Network        string            `json:"network,omitempty" jsonschema:"none (the default), all, or a comma-separated list of hosts (exact, *.suffix, IP, optional :port)"`
	Spawn          bool              `json:"spawn,omitempty" jsonschema:"allow the process to start subprocesses (implied by command)"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit in seconds; 0 means none (the process runs until it ends or is stopped, within the server's maximum lifetime)"`
	Tty            bool              `json:"tty,omitempty" jsonschema:"give the process a pseudo-terminal (24 rows, 80 columns): its output is then one stream"`
	WaitSeconds    *float64          `json:"wait_seconds,omitempty" jsonschema:"how long to wait for the first output before returning (default 1, at most 60); a refusal or an early end is reported within it"`
	Layered        bool              `json:"layered,omitempty" jsonschema:"run over the session's layer (as run_command's layered); the session's first command fixes it"`
}

// ProcessIDArgs name a process (write, signal and list take more).
type ProcessIDArgs struct {
	ID string `json:"id" jsonschema:"the process id start_process returned"`
}

// WriteProcessArgs are write_process's arguments.
type WriteProcessArgs struct {
	ID         string `json:"id" jsonschema:"the process id start_process returned"`
	Data       string `json:"data,omitempty" jsonschema:"text for the process's standard input (add \\n to end a line)"`
	CloseStdin bool   `json:"close_stdin,omitempty" jsonschema:"close the standard input after data: the process reads end-of-file"`
}

// ReadProcessArgs are read_process's arguments.
type ReadProcessArgs struct {
	ID          string  `json:"id" jsonschema:"the process id start_process returned"`
	Offset      int64   `json:"offset,omitempty" jsonschema:"output offset to read from: 0 for the beginning, next_offset of the previous result to follow on"`
	WaitSeconds float64 `json:"wait_seconds,omitempty" jsonschema:"how long to wait for output when there is none yet (0 returns at once, at most 60)"`
}

// SignalProcessArgs are signal_process's arguments.
type SignalProcessArgs struct {
	ID     string `json:"id" jsonschema:"the process id start_process returned"`
	Signal string `json:"signal" jsonschema:"TERM, INT, HUP, QUIT, KILL, USR1, USR2, WINCH or PIPE"`
}

// StopProcessArgs are stop_process's arguments.
type StopProcessArgs struct {
	ID           string   `json:"id" jsonschema:"the process id start_process returned"`
	Offset       int64    `json:"offset,omitempty" jsonschema:"output offset from which the result's output starts (next_offset of the last read)"`
	GraceSeconds *float64 `json:"grace_seconds,omitempty" jsonschema:"how long the process has to end after TERM before it is killed (default 5, at most 60)"`
}

// ListProcessesArgs are list_processes's (none).
type ListProcessesArgs struct{}

// ProcessResult is the structured result of start_process, read_process and
// stop_process: the output from the offset asked for, and once the process
// has ended how it ended.
type ProcessResult struct {
	ID string `json:"id"`
	// Output is stdout and stderr in order of arrival (one stream on a
	// terminal), from Offset on; bytes that are not UTF-8 are replaced.
	Output     string `json:"output"`
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"next_offset"`
	// Dropped counts the bytes between Offset and Output lost to the
	// output's bound (the last 1 MiB is kept).
	Dropped int64 `json:"dropped"`
	Running bool  `json:"running"`
	// The end: set once Running is false.
	ExitCode   int   `json:"exit_code"`
	Signal     int   `json:"signal"`
	TimedOut   bool  `json:"timed_out"`
	Truncated  bool  `json:"truncated"`
	DurationMS int64 `json:"duration_ms"`
	// Denied, Reason, ReasonCode and Rule as for run_command.
	Denied     bool   `json:"denied"`
	Reason     string `json:"reason,omitempty"`
	ReasonCode string `json:"reason_code,omitempty"`
	Rule       string `json:"rule,omitempty"`
	Error      string `json:"error,omitempty"`
	// SpawnRefused and Hint as for run_command: the process's attempts
	// to start a subprocess that the sandbox refused, and how to get
	// spawn; Hint also says why a start asking for spawn was refused.
	SpawnRefused int64  `json:"spawn_refused,omitempty"`
	Hint         string `json:"hint,omitempty"`
	// Usage is what the process consumed, once it has ended (absent when
	// it did not run).
	Usage *core.AuditUsage `json:"usage,omitempty"`
	// Violations, ViolationsDropped and ViolationKinds as for
	// run_command, once the process has ended.
	Violations        []driverapi.Violation `json:"violations,omitempty"`
	ViolationsDropped int64                 `json:"violations_dropped,omitempty"`
	ViolationKinds    []string              `json:"violation_kinds,omitempty"`
}

// procSpawnHint is the process tools' hint for spawn_refused
// (core.SpawnRefusedHint in the tools' terms).
const procSpawnHint = `the process tried to start a subprocess and the sandbox refused it: start it again with "spawn": true (the client is asked to approve it, or the server's --allow-spawn gives it)`

// WriteProcessResult is write_process's result.
type WriteProcessResult struct {
	ID          string `json:"id"`
	Written     int    `json:"written"`
	StdinClosed bool   `json:"stdin_closed"`
	ReasonCode  string `json:"reason_code,omitempty"`
	Error       string `json:"error,omitempty"`
}

// SignalProcessResult is signal_process's result.
type SignalProcessResult struct {
	ID         string `json:"id"`
	Signal     string `json:"signal"`
	ReasonCode string `json:"reason_code,omitempty"`
	Error      string `json:"error,omitempty"`
}

// ProcessEntry is one process of list_processes.
type ProcessEntry struct {
	ID       string `json:"id"`
	Program  string `json:"program"`
	Started  string `json:"started"`
	Running  bool   `json:"running"`
	ExitCode int    `json:"exit_code"`
}

// ListProcessesResult is list_processes's result.
type ListProcessesResult struct {
	Processes  []ProcessEntry `json:"processes"`
	ReasonCode string         `json:"reason_code,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// Reason codes of the process tools' own refusals (those of the pipeline
// are core's).
const (
	ReasonProcessUnknown = "process_unknown"
	ReasonProcessLimit   = "process_limit"
	ReasonProcessEnded   = "process_ended"
	ReasonStdinClosed    = "stdin_closed"
	ReasonInvalid        = "invalid_arguments"
	ReasonFailed         = "failed"
)

const (
	defaultStartWait = time.Second
	maxWait          = 60 * time.Second
	defaultGrace     = 5 * time.Second
	// startSettle bounds how long start_process waits for the pipeline
	// to decide (hooks, approval) before it returns.
	startSettle = 10 * time.Second
	// killWait bounds how long ending an MCP session (or the server)
	// waits for one killed process.
	killWait = 10 * time.Second
)

// startedKey carries a start_process call's *started into the pipeline.
type startedKey struct{}

// started is closed when the process reached the driver: the pipeline's
// hooks and approval have let it through.
type started struct {
	once sync.Once
	ch   chan struct{}
}

func (s *started) fire() { s.once.Do(func() { close(s.ch) }) }

// startWatch is the Executor of the server's own process table: it marks
// a process started when the driver first reads its stdin, which the
// driver protocol's client does as soon as the run begins. So
// start_process can wait for the pipeline's verdict, an approval question
// included, instead of guessing how long it takes.
type startWatch struct{ r Runner }

func (w startWatch) Execute(ctx context.Context, cmd core.Command) (*core.Output, error) {
	if s, ok := ctx.Value(startedKey{}).(*started); ok && cmd.StdinStream != nil {
		cmd.StdinStream = &firstRead{Reader: cmd.StdinStream, s: s}
	}
	return w.r.Execute(ctx, cmd)
}

type firstRead struct {
	io.Reader
	s *started
}

func (f *firstRead) Read(p []byte) (int, error) {
	f.s.fire()
	return f.Reader.Read(p)
}

// procTracker knows which processes each MCP session started: a session
// reaches only its own, and when it ends they are killed.
type procTracker struct {
	procs Processes
	// watchStarts: procs runs through startWatch.
	watchStarts bool

	mu     sync.Mutex
	owned  map[*mcp.ServerSession]map[string]bool
	closed bool
	// ending counts the sessions whose processes are being killed. close
	// waits for them: a session ends (its goroutine takes its processes)
	// just as the server's Run returns, and the process must not exit
	// with those kills still unsent, leaving the processes running on a
	// service.
	ending sync.WaitGroup
}

func (t *procTracker) add(ss *mcp.ServerSession, id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	m, ok := t.owned[ss]
	if !ok {
		m = map[string]bool{}
		t.owned[ss] = m
		if ss != nil {
			go func() {
				_ = ss.Wait()
				t.endSession(ss)
			}()
		}
	}
	m[id] = true
	return true
}

func (t *procTracker) has(ss *mcp.ServerSession, id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.owned[ss][id]
}

func (t *procTracker) drop(ss *mcp.ServerSession, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.owned[ss], id)
}

func (t *procTracker) ids(ss *mcp.ServerSession) map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]bool{}
	for id := range t.owned[ss] {
		out[id] = true
	}
	return out
}

func (t *procTracker) endSession(ss *mcp.ServerSession) {
	t.mu.Lock()
	ids := t.owned[ss]
	delete(t.owned, ss)
	if t.closed {
		// close took them all (ids is empty) and may be waiting.
		t.mu.Unlock()
		return
	}
	t.ending.Add(1)
	t.mu.Unlock()
	defer t.ending.Done()
	t.kill(ids)
}

// close kills every process any session started and refuses new ones.
func (t *procTracker) close() {
	t.mu.Lock()
	t.closed = true
	all := map[string]bool{}
	for _, m := range t.owned {
		for id := range m {
			all[id] = true
		}
	}
	t.owned = map[*mcp.ServerSession]map[string]bool{}
	t.mu.Unlock()
	t.kill(all)
	t.ending.Wait()
}

// kill ends the processes (KILL) and removes them from the table or the
// service, waiting a bounded time for each.
func (t *procTracker) kill(ids map[string]bool) {
	var wg sync.WaitGroup
	for id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), killWait)
			defer cancel()
			_ = t.procs.Signal(ctx, id, driverapi.SignalKILL)
			_, _ = t.procs.Wait(ctx, id)
		}()
	}
	wg.Wait()
}

func addProcessTools(s *mcp.Server, cfg Config, tr *procTracker, asked *askedSet) {
	mcp.AddTool(s, &mcp.Tool{
		Name:        ToolStartProcess,
		Annotations: annotateStart,
		Description: "Start a long-running or interactive process in the aleph-sandbox OS sandbox (a server, a REPL, a watcher), " +
			"under the same rules as run_command. It runs in the background in this session's sandbox, which its " +
			"run_command calls share (so a server on 127.0.0.1 answers them). Returns its id and its first output; " +
			"follow it with read_process, feed it with write_process, end it with stop_process.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in StartProcessArgs) (*mcp.CallToolResult, ProcessResult, error) {
		st := &callState{canAsk: canElicit(req.Session), responses: req.Params.InputResponses, asked: asked}
		res, out := startProcess(context.WithValue(ctx, callKey{}, st), req.Session, tr, cfg, in)
		if id, q := st.finish(); q != nil {
			return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{id: q}}, ProcessResult{}, nil
		}
		return res, out, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        ToolWriteProcess,
		Annotations: annotateWrite,
		Description: "Write text to the standard input of a process started by start_process; close_stdin sends end-of-file.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in WriteProcessArgs) (*mcp.CallToolResult, WriteProcessResult, error) {
		out := WriteProcessResult{ID: in.ID}
		if err := owned(tr, req.Session, in.ID); err != nil {
			return procFailure(&out, &out.ReasonCode, &out.Error, err)
		}
		if in.Data != "" {
			n, err := tr.procs.Write(ctx, in.ID, []byte(in.Data))
			out.Written = n
			if err != nil {
				return procFailure(&out, &out.ReasonCode, &out.Error, err)
			}
		}
		if in.CloseStdin {
			if err := tr.procs.CloseStdin(ctx, in.ID); err != nil {
				return procFailure(&out, &out.ReasonCode, &out.Error, err)
			}
			out.StdinClosed = true
		}
		text := fmt.Sprintf("wrote %d bytes", out.Written)
		if out.StdinClosed {
			text += "; stdin closed"
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, out, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        ToolReadProcess,
		Annotations: annotateRead,
		Description: "Read the output of a process started by start_process from an offset (next_offset of the previous read " +
			"follows on), waiting up to wait_seconds for some. Once it has ended the result says how, and the process is gone.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ReadProcessArgs) (*mcp.CallToolResult, ProcessResult, error) {
		out := ProcessResult{ID: in.ID, Offset: in.Offset}
		if err := owned(tr, req.Session, in.ID); err != nil {
			return procFailure(&out, &out.ReasonCode, &out.Error, err)
		}
		wait, err := waitArg("wait_seconds", in.WaitSeconds, maxWait)
		if err != nil {
			return procFailure(&out, &out.ReasonCode, &out.Error, err)
		}
		return readProcess(ctx, req.Session, tr, in.ID, in.Offset, wait)
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        ToolSignalProcess,
		Annotations: annotateSignal,
		Description: "Send a signal (TERM, INT, HUP, QUIT, KILL, USR1, USR2, WINCH, PIPE) to a process started by start_process.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in SignalProcessArgs) (*mcp.CallToolResult, SignalProcessResult, error) {
		out := SignalProcessResult{ID: in.ID}
		if err := owned(tr, req.Session, in.ID); err != nil {
			return procFailure(&out, &out.ReasonCode, &out.Error, err)
		}
		sig, err := driverapi.ParseSignal(in.Signal)
		if err != nil {
			return procFailure(&out, &out.ReasonCode, &out.Error, &core.InvalidCommandError{Field: "signal", Reason: err.Error()})
		}
		out.Signal = string(sig)
		if err := tr.procs.Signal(ctx, in.ID, sig); err != nil {
			return procFailure(&out, &out.ReasonCode, &out.Error, err)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sent SIG" + string(sig)}}}, out, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        ToolStopProcess,
		Annotations: annotateStop,
		Description: "Stop a process started by start_process: TERM, then KILL after grace_seconds. Returns its remaining " +
			"output from offset and how it ended; the process is then gone. A process that has ended is reaped the same way.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in StopProcessArgs) (*mcp.CallToolResult, ProcessResult, error) {
		out := ProcessResult{ID: in.ID, Offset: in.Offset}
		if err := owned(tr, req.Session, in.ID); err != nil {
			return procFailure(&out, &out.ReasonCode, &out.Error, err)
		}
		grace := defaultGrace
		if in.GraceSeconds != nil {
			g, err := waitArg("grace_seconds", *in.GraceSeconds, maxWait)
			if err != nil {
				return procFailure(&out, &out.ReasonCode, &out.Error, err)
			}
			grace = g
		}
		return stopProcess(ctx, req.Session, tr, in.ID, in.Offset, grace)
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        ToolListProcesses,
		Annotations: annotateList,
		Description: "List the processes this session started with start_process and has not stopped (or read to their end).",
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ ListProcessesArgs) (*mcp.CallToolResult, ListProcessesResult, error) {
		out := ListProcessesResult{Processes: []ProcessEntry{}}
		all, err := tr.procs.List(ctx, cfg.Session)
		if err != nil {
			return procFailure(&out, &out.ReasonCode, &out.Error, err)
		}
		mine := tr.ids(req.Session)
		var b strings.Builder
		for _, p := range all {
			if !mine[p.ID] {
				continue
			}
			e := ProcessEntry{ID: p.ID, Program: p.Program, Started: p.Started.UTC().Format(time.RFC3339), Running: !p.Exited, ExitCode: int(p.ExitCode)}
			out.Processes = append(out.Processes, e)
			state := "running"
			if !e.Running {
				state = fmt.Sprintf("ended, exit code %d", e.ExitCode)
			}
			fmt.Fprintf(&b, "%s %s (%s, started %s)\n", e.ID, e.Program, state, e.Started)
		}
		if len(out.Processes) == 0 {
			b.WriteString("no processes")
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, out, nil
	})
}

// owned refuses an id this MCP session did not start (or has reaped): one
// session cannot reach another's processes, even within one sandbox
// session.
func owned(tr *procTracker, ss *mcp.ServerSession, id string) error {
	if id == "" {
		return &core.InvalidCommandError{Field: "id", Reason: "required: the id start_process returned"}
	}
	if !tr.has(ss, id) {
		return &core.ProcessNotFoundError{ID: id}
	}
	return nil
}

func waitArg(field string, secs float64, limit time.Duration) (time.Duration, error) {
	if secs < 0 || secs != secs {
		return 0, &core.InvalidCommandError{Field: field, Reason: "must not be negative"}
	}
	if secs > limit.Seconds() {
		return limit, nil
	}
	return time.Duration(secs * float64(time.Second)), nil
}

func startProcess(ctx context.Context, ss *mcp.ServerSession, tr *procTracker, cfg Config, in StartProcessArgs) (*mcp.CallToolResult, ProcessResult) {
	var out ProcessResult
	fail := func(err error) (*mcp.CallToolResult, ProcessResult) {
		res, o, _ := procFailure(&out, &out.ReasonCode, &out.Error, err)
		if o.Hint != "" {
			res.Content = append(res.Content, &mcp.TextContent{Text: "\nhint: " + o.Hint})
		}
		return res, o
	}
	cmd, err := toCommand(cfg, RunCommandArgs{Argv: in.Argv, Command: in.Command, Cwd: in.Cwd, Env: in.Env,
		Network: in.Network, Spawn: in.Spawn, TimeoutSeconds: in.TimeoutSeconds, Layered: in.Layered})
	if err != nil {
		return fail(&core.InvalidCommandError{Field: "arguments", Reason: err.Error()})
	}
	cmd.Stdin = nil
	if in.Tty {
		cmd.Tty = &driverapi.WindowSize{Rows: 24, Cols: 80}
	}
	wait := defaultStartWait
	if in.WaitSeconds != nil {
		if wait, err = waitArg("wait_seconds", *in.WaitSeconds, maxWait); err != nil {
			return fail(err)
		}
	}
	s := &started{ch: make(chan struct{})}
	id, err := tr.procs.Start(context.WithValue(ctx, startedKey{}, s), cmd)
	var de *core.DeniedError
	if errors.As(err, &de) && spawnDenied(cfg, cmd, de.Code) {
		out.Hint = mcpSpawnDeniedHint
	}
	if err != nil {
		return fail(err)
	}
	if !tr.add(ss, id) {
		// The server is closing: the process goes with it.
		tr.kill(map[string]bool{id: true})
		return fail(core.ErrClosed)
	}
	if tr.watchStarts {
		// Until the pipeline has decided: the process reached the driver,
		// or it ended (a refusal, or an approval question to return).
		rctx, cancel := context.WithCancel(ctx)
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			_, _ = tr.procs.Read(rctx, id, 0, startSettle)
		}()
		select {
		case <-s.ch:
		case <-ended:
		}
		cancel()
		<-ended
	}
	res, o, _ := readProcess(ctx, ss, tr, id, 0, wait)
	if o.Denied && spawnDenied(cfg, cmd, core.ReasonCode(o.ReasonCode)) {
		// Refused by the pipeline after the start returned its id.
		o.Hint = mcpSpawnDeniedHint
		res.StructuredContent = o
		res.Content = append(res.Content, &mcp.TextContent{Text: "\nhint: " + o.Hint})
	}
	return res, o
}

// readProcess reads from offset; an ended process, read to its end, is
// reaped.
func readProcess(ctx context.Context, ss *mcp.ServerSession, tr *procTracker, id string, offset int64, wait time.Duration) (*mcp.CallToolResult, ProcessResult, error) {
	out := ProcessResult{ID: id, Offset: offset}
	r, err := tr.procs.Read(ctx, id, offset, wait)
	if err != nil {
		return procFailure(&out, &out.ReasonCode, &out.Error, err)
	}
	out.Output, out.NextOffset, out.Dropped, out.Running = string(r.Data), r.Next, r.Dropped, !r.Exited
	if r.Exited {
		// Reaped: the result is all there is to know.
		_, _ = tr.procs.Wait(ctx, id)
		tr.drop(ss, id)
		if r.Result != nil {
			return endResult(out, *r.Result)
		}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: processText(out)}}}, out, nil
}

func stopProcess(ctx context.Context, ss *mcp.ServerSession, tr *procTracker, id string, offset int64, grace time.Duration) (*mcp.CallToolResult, ProcessResult, error) {
	out := ProcessResult{ID: id, Offset: offset}
	if err := tr.procs.Signal(ctx, id, driverapi.SignalTERM); err != nil && !errors.Is(err, core.ErrProcessEnded) {
		return procFailure(&out, &out.ReasonCode, &out.Error, err)
	}
	// Wait for the end by reading (the output is wanted anyway), then KILL.
	var data []byte
	deadline := time.Now().Add(grace)
	next := offset
	killed := false
	var killedAt time.Time
	for {
		w := time.Until(deadline)
		if killed || w < 0 {
			w = killWait
		}
		r, err := tr.procs.Read(ctx, id, next, min(w, maxWait))
		if err != nil {
			return procFailure(&out, &out.ReasonCode, &out.Error, err)
		}
		if next == offset {
			out.Dropped = r.Dropped
		}
		data, next = append(data, r.Data...), r.Next
		if r.Exited {
			_, _ = tr.procs.Wait(ctx, id)
			tr.drop(ss, id)
			out.Output, out.NextOffset = string(data), next
			if r.Result == nil {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: processText(out)}}}, out, nil
			}
			return endResult(out, *r.Result)
		}
		if killed && time.Since(killedAt) > killWait {
			return procFailure(&out, &out.ReasonCode, &out.Error, fmt.Errorf("process %s did not end within %s of KILL", id, killWait))
		}
		if !killed && time.Now().After(deadline) {
			killed, killedAt = true, time.Now()
			if err := tr.procs.Signal(ctx, id, driverapi.SignalKILL); err != nil && !errors.Is(err, core.ErrProcessEnded) {
				return procFailure(&out, &out.ReasonCode, &out.Error, err)
			}
		}
	}
}

// endResult fills out with how the process ended.
func endResult(out ProcessResult, r core.ProcessResult) (*mcp.CallToolResult, ProcessResult, error) {
	out.Running = false
	var de *core.DeniedError
	switch {
	case errors.As(r.Err, &de):
		out.Denied, out.Reason, out.ReasonCode, out.Rule = true, de.Error(), string(de.Code), de.Rule
		res := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "denied: " + de.Error()}}, StructuredContent: out}
		return res, out, nil
	case r.Err != nil:
		out.Error, out.ReasonCode = r.Err.Error(), ReasonFailed
		res := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the sandbox failed to run the process: " + r.Err.Error()}}, StructuredContent: out}
		return res, out, nil
	case r.Output != nil:
		e := r.Output.Exit
		out.ExitCode, out.Signal, out.TimedOut, out.Truncated = int(e.ExitCode), int(e.Signal), e.TimedOut, e.Truncated
		out.DurationMS = e.Duration.Milliseconds()
		if r.Output.Reason() == core.ReasonSpawnRefused {
			out.ReasonCode, out.SpawnRefused, out.Hint = string(core.ReasonSpawnRefused), e.SpawnRefused, procSpawnHint
		}
		out.Usage = core.UsageOf(e.Usage)
		out.Violations, out.ViolationsDropped, out.ViolationKinds = e.Violations, e.ViolationsDropped, e.ViolationKinds
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: processText(out)}}}, out, nil
}

// procFailure is a process tool's refusal as a tool error: its reason code
// goes to *code and its message to *msg, fields of *out.
func procFailure[T any](out *T, code, msg *string, err error) (*mcp.CallToolResult, T, error) {
	var nf *core.ProcessNotFoundError
	var le *core.ProcessLimitError
	var ic *core.InvalidCommandError
	var de *core.DeniedError
	switch {
	case errors.As(err, &nf):
		*code = ReasonProcessUnknown
	case errors.As(err, &le):
		*code = ReasonProcessLimit
	case errors.As(err, &ic):
		*code = ReasonInvalid
	case errors.As(err, &de):
		*code = string(de.Code)
	case errors.Is(err, core.ErrProcessEnded):
		*code = ReasonProcessEnded
	case errors.Is(err, core.ErrStdinClosed):
		*code = ReasonStdinClosed
	default:
		*code = ReasonFailed
	}
	*msg = err.Error()
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: *code + ": " + err.Error()}}, StructuredContent: *out}, *out, nil
}

// processText is the text form of a process result.
func processText(r ProcessResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "process %s: ", r.ID)
	switch {
	case r.Running:
		b.WriteString("running")
	case r.TimedOut:
		fmt.Fprintf(&b, "timed out after %d ms (gone)", r.DurationMS)
	case r.Signal != 0:
		fmt.Fprintf(&b, "killed by signal %d (gone)", r.Signal)
	default:
		fmt.Fprintf(&b, "exited with code %d (gone)", r.ExitCode)
	}
	fmt.Fprintf(&b, "; next_offset %d", r.NextOffset)
	if r.Dropped > 0 {
		fmt.Fprintf(&b, " (%d bytes dropped)", r.Dropped)
	}
	if r.Hint != "" {
		b.WriteString("\nhint: " + r.Hint)
	}
	if r.Output != "" {
		b.WriteString("\noutput:\n" + r.Output)
	}
	return b.String()
}
