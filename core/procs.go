package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Processes that outlive the call that started them. A ProcessTable runs
// each through Execute (hooks, approval, audit: one audit record per
// process, written when it ends, with its exit and duration) in a
// goroutine, with a streamed stdin fed by Write and its output (stdout and
// stderr, in order of arrival) kept in a bounded ring readers page through
// by offset. A process has no default timeout: it lives until it ends,
// is signalled or killed, its session is forgotten (ForgetSession), the
// table is closed, or its maximum lifetime passes.

// Executor is what a ProcessTable runs commands through (a
// WorkspaceSandbox, or a runtime built on one).
type Executor interface {
	Execute(ctx context.Context, cmd Command) (*Output, error)
}

// ProcessLimits bound a ProcessTable. Zero fields take the defaults.
type ProcessLimits struct {
	// PerSession is how many processes one session may hold (running, or
	// ended and not yet waited for). Default 16.
	PerSession int
	// Total is how many the table may hold. Default 64.
	Total int
	// RingBytes is the output kept per process. Default 1 MiB.
	RingBytes int
	// StdinBytes is how much written stdin may wait unread. Default 64 KiB.
	StdinBytes int
	// MaxLifetime ends a process that has run this long (and bounds the
	// timeout a command asks for). Default 24h.
	MaxLifetime time.Duration
}

func (l ProcessLimits) withDefaults() ProcessLimits {
	// The defaults are written once, in DefaultProcessConfig.
	d := DefaultProcessConfig()
	if l.PerSession <= 0 {
		l.PerSession = d.MaxPerSession
	}
	if l.Total <= 0 {
		l.Total = d.MaxTotal
	}
	if l.RingBytes <= 0 {
		l.RingBytes = d.RingBytes
	}
	if l.StdinBytes <= 0 {
		l.StdinBytes = d.StdinBytes
	}
	if l.MaxLifetime <= 0 || l.MaxLifetime > MaxTimeout {
		l.MaxLifetime = time.Duration(d.MaxLifetimeSeconds) * time.Second
	}
	return l
}

// ProcessNotFoundError: no process of that id is in the table (never
// started, waited for already, or its session was forgotten).
type ProcessNotFoundError struct{ ID string }

func (e *ProcessNotFoundError) Error() string {
	return fmt.Sprintf("no process %q (never started, already waited for, or its session was forgotten)", e.ID)
}

// ProcessLimitError: starting one more process would pass a cap.
type ProcessLimitError struct {
	Scope string // "session" or "total"
	Limit int
}

func (e *ProcessLimitError) Error() string {
	return fmt.Sprintf("too many processes (%s limit %d): wait for or forget some first", e.Scope, e.Limit)
}

// ErrProcessEnded is returned by Write, Signal and Resize for a process
// that has ended.
var ErrProcessEnded = errors.New("the process has ended")

// ErrStdinClosed is returned by Write after CloseStdin.
var ErrStdinClosed = errors.New("the process's stdin is closed")

// ProcessInfo describes one process of List.
type ProcessInfo struct {
	ID       string
	Session  string
	Program  string
	Started  time.Time
	Exited   bool
	ExitCode int32
}

// ProcessResult is how a process ended: Execute's output (its Stdout and
// Stderr are what Execute kept; the ring is what Read gives) or error.
type ProcessResult struct {
	Output *Output
	Err    error
}

// ProcessRead is one Read.
type ProcessRead struct {
	Data []byte
	// Next is the offset to read from next.
	Next int64
	// Dropped is how many bytes between the offset asked for and Data's
	// start were lost to the ring's bound.
	Dropped int64
	// Exited is set once the process has ended and Data reaches the end
	// of its output; Result is then set.
	Exited bool
	Result *ProcessResult
}

// ProcessTable holds the processes of every session of one host.
type ProcessTable struct {
	exec   Executor
	limits ProcessLimits

	mu     sync.Mutex
	procs  map[string]*process
	closed bool
	// started and exited count every process since the table was made
	// (ProcessStats); exited by ProcessOutcome.
	started uint64
	exited  map[string]uint64
}

// NewProcessTable returns a table running commands through exec.
func NewProcessTable(exec Executor, limits ProcessLimits) *ProcessTable {
	return &ProcessTable{exec: exec, limits: limits.withDefaults(), procs: map[string]*process{}, exited: map[string]uint64{}}
}

// Limits are the table's bounds, defaults filled in.
func (t *ProcessTable) Limits() ProcessLimits { return t.limits }

// Outcomes of a process, as ProcessStats counts them.
const (
	ProcessOK       = "ok"        // it ran and exited (any status)
	ProcessTimedOut = "timed_out" // its maximum lifetime (or timeout) ended it
	ProcessDenied   = "denied"    // the pipeline refused it
	ProcessKilled   = "killed"    // its session was forgotten, the table closed, a KILL cancelled its run, or a signal stopped it before it started
	ProcessError    = "error"     // the sandbox could not run it
)

func processOutcome(r ProcessResult, cancelled bool) string {
	var denied *DeniedError
	switch {
	case r.Err == nil && r.Output != nil && r.Output.Exit.TimedOut:
		return ProcessTimedOut
	case errors.As(r.Err, &denied):
		return ProcessDenied
	case errors.Is(r.Err, ErrSignalBeforeStart):
		// Signalled during the hooks or the approval: stopped, as asked.
		return ProcessKilled
	case cancelled && (r.Err != nil || r.Output == nil || r.Output.Exit.Signal != 0):
		// Killed by ForgetSession, Close or Signal's KILL backstop,
		// whether the driver reported the kill as an exit (by a signal)
		// or as the cancellation. A run cancelled as it returned with
		// an exit of the command's own (the backstop firing just after
		// the command ended) was not killed: it ran and exited.
		return ProcessKilled
	case r.Err == nil:
		return ProcessOK
	}
	return ProcessError
}

// ProcessStats is the table's state for the service's metrics.
type ProcessStats struct {
	// Running are the processes that have not ended.
	Running int
	// Held are the processes in the table (running, or ended and not yet
	// waited for).
	Held int
	// OutputBytes is the output the rings hold, StdinBytes the written
	// stdin not yet read, ResultBytes the output kept for the results
	// Wait returns (of running processes, and of ended ones not yet
	// waited for).
	OutputBytes, StdinBytes, ResultBytes int64
	// Started counts the processes started; Exited those ended, by
	// outcome (ProcessOK, ...).
	Started uint64
	Exited  map[string]uint64
}

// Stats reads the table's state.
func (t *ProcessTable) Stats() ProcessStats {
	t.mu.Lock()
	st := ProcessStats{Held: len(t.procs), Started: t.started, Exited: make(map[string]uint64, len(t.exited))}
	for k, v := range t.exited {
		st.Exited[k] = v
	}
	ps := make([]*process, 0, len(t.procs))
	for _, p := range t.procs {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	for _, p := range ps {
		p.mu.Lock()
		st.OutputBytes += int64(len(p.ring))
		st.ResultBytes += int64(len(p.stdout) + len(p.stderr))
		if o := p.result.Output; o != nil {
			st.ResultBytes += int64(len(o.Stdout) + len(o.Stderr))
		}
		if !p.ended() {
			st.Running++
		}
		p.mu.Unlock()
		st.StdinBytes += int64(p.stdin.buffered())
	}
	return st
}

type process struct {
	id, session, program string
	started              time.Time
	cancel               context.CancelFunc
	stdin                *boundedPipe
	signals              chan driverapi.Signal
	resize               chan driverapi.WindowSize
	tty                  bool

	mu    sync.Mutex
	ring  []byte
	start int64 // offset of ring[0]
	// stdout and stderr are the copy kept for the result while it runs
	// (within the budget); then the result holds it.
	stdout, stderr []byte
	notify         chan struct{}
	done           chan struct{}
	result         ProcessResult
	// backstop cancels the run killBackstop after the first KILL (one
	// timer however many come); the run's end stops it.
	backstop *time.Timer
}

// Start runs cmd as a process of its session and returns its id once it
// is running in the background: the hooks, approval and the driver's
// start happen there, and a refusal is the process's result.
func (t *ProcessTable) Start(ctx context.Context, cmd Command) (string, error) {
	if cmd.SessionID == "" {
		cmd.SessionID, _ = SessionFrom(ctx)
	}
	if cmd.SessionID == "" {
		return "", &InvalidCommandError{Field: "session", Reason: "a process belongs to a session: one is required"}
	}
	if len(cmd.Stdin) > 0 || cmd.StdinStream != nil || cmd.Signals != nil || cmd.Resize != nil {
		return "", &InvalidCommandError{Field: "stdin", Reason: "a process's stdin, signals and window sizes come through the table (Write, Signal, Resize)"}
	}
	if cmd.Timeout <= 0 || cmd.Timeout > t.limits.MaxLifetime {
		cmd.Timeout = t.limits.MaxLifetime
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	p := &process{
		id: "proc-" + hex.EncodeToString(b[:]), session: cmd.SessionID, program: cmd.Program, started: time.Now(),
		stdin:   newBoundedPipe(t.limits.StdinBytes),
		signals: make(chan driverapi.Signal, 8), resize: make(chan driverapi.WindowSize, 1),
		tty: cmd.Tty != nil, notify: make(chan struct{}), done: make(chan struct{}),
	}
	ring := &ringWriter{p: p, limit: t.limits.RingBytes}
	cmd.StdinStream, cmd.Signals = p.stdin, p.signals
	// The output goes to the ring and, for the result Wait returns, to a
	// copy the table keeps itself (not the pipeline: StreamOnly), so that
	// ProcessStats counts every byte a process holds. The pipeline hands
	// the writers no more than the budget of each stream.
	cmd.Stdout = io.MultiWriter(ring, keepWriter{p: p, buf: &p.stdout})
	cmd.Stderr = io.MultiWriter(ring, keepWriter{p: p, buf: &p.stderr})
	cmd.StreamOnly = true
	if cmd.Tty != nil {
		cmd.Resize = p.resize
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return "", ErrClosed
	}
	n := 0
	for _, o := range t.procs {
		if o.session == cmd.SessionID {
			n++
		}
	}
	switch {
	case n >= t.limits.PerSession:
		t.mu.Unlock()
		return "", &ProcessLimitError{Scope: "session", Limit: t.limits.PerSession}
	case len(t.procs) >= t.limits.Total:
		t.mu.Unlock()
		return "", &ProcessLimitError{Scope: "total", Limit: t.limits.Total}
	}
	// The process outlives ctx (the call that started it): only its
	// values are kept (the session, an approver bound to the call).
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	t.procs[p.id] = p
	t.started++
	t.mu.Unlock()
	go func() {
		out, err := t.exec.Execute(runCtx, cmd)
		cancelled := runCtx.Err() != nil
		cancel()
		p.stdin.CloseRead()
		t.mu.Lock()
		t.exited[processOutcome(ProcessResult{Output: out, Err: err}, cancelled)]++
		t.mu.Unlock()
		p.mu.Lock()
		if p.backstop != nil {
			p.backstop.Stop()
		}
		if out != nil && out.Streamed {
			// The result's output is the whole of it: the table's copy,
			// then what the writers did not take (nothing: they never
			// fail).
			out.Stdout = append(p.stdout, out.Stdout...)
			out.Stderr = append(p.stderr, out.Stderr...)
			out.Streamed, out.StreamedStdout, out.StreamedStderr = false, 0, 0
		}
		p.stdout, p.stderr = nil, nil
		p.result = ProcessResult{Output: out, Err: err}
		close(p.done)
		close(p.notify)
		p.notify = make(chan struct{})
		p.mu.Unlock()
	}()
	return p.id, nil
}

// keepWriter appends output to the copy a process keeps for its result.
type keepWriter struct {
	p   *process
	buf *[]byte
}

func (w keepWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	*w.buf = append(*w.buf, b...)
	return len(b), nil
}

// ringWriter appends output to a process's ring, dropping the oldest bytes
// past the bound.
type ringWriter struct {
	p     *process
	limit int
}

func (w *ringWriter) Write(b []byte) (int, error) {
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ring = append(p.ring, b...)
	if over := len(p.ring) - w.limit; over > 0 {
		p.ring = append(p.ring[:0:0], p.ring[over:]...)
		p.start += int64(over)
	}
	close(p.notify)
	p.notify = make(chan struct{})
	return len(b), nil
}

func (t *ProcessTable) get(id string) (*process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.procs[id]
	if !ok {
		return nil, &ProcessNotFoundError{ID: id}
	}
	return p, nil
}

// Settled is closed once process id no longer waits for a decision: its
// sandbox takes its stdin (hooks and approval passed) or it ended (a
// denial included). An approver serving only this process may go then.
func (t *ProcessTable) Settled(id string) (<-chan struct{}, error) {
	p, err := t.get(id)
	if err != nil {
		return nil, err
	}
	ch := make(chan struct{})
	go func() {
		select {
		case <-p.stdin.opened:
		case <-p.done:
		}
		close(ch)
	}()
	return ch, nil
}

func (p *process) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Write gives b to the process's stdin, waiting while the pipe is full
// (backpressure) until ctx ends. It returns how much was taken.
func (t *ProcessTable) Write(ctx context.Context, id string, b []byte) (int, error) {
	p, err := t.get(id)
	if err != nil {
		return 0, err
	}
	if p.ended() {
		return 0, ErrProcessEnded
	}
	return p.stdin.write(ctx, b, p.done)
}

// CloseStdin ends the process's stdin (it reads EOF once what was written
// is read).
func (t *ProcessTable) CloseStdin(id string) error {
	p, err := t.get(id)
	if err != nil {
		return err
	}
	p.stdin.CloseWrite()
	return nil
}

// Read returns the output from offset on, waiting up to wait for some when
// there is none yet and the process still runs.
func (t *ProcessTable) Read(ctx context.Context, id string, offset int64, wait time.Duration) (ProcessRead, error) {
	p, err := t.get(id)
	if err != nil {
		return ProcessRead{}, err
	}
	if offset < 0 {
		return ProcessRead{}, &InvalidCommandError{Field: "offset", Reason: "must not be negative"}
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		p.mu.Lock()
		end := p.start + int64(len(p.ring))
		done := p.ended()
		if offset < end || done || wait <= 0 {
			r := ProcessRead{Next: offset}
			if offset > end {
				offset = end
				r.Next = end
			}
			from := offset
			if from < p.start {
				r.Dropped = p.start - from
				from = p.start
			}
			r.Data = append([]byte(nil), p.ring[from-p.start:]...)
			r.Next = end
			if done {
				r.Exited = true
				res := p.result
				r.Result = &res
			}
			p.mu.Unlock()
			return r, nil
		}
		ch := p.notify
		p.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			wait = 0
		case <-ctx.Done():
			return ProcessRead{}, ctx.Err()
		}
	}
}

// Signal delivers sig to the process (the pipeline forwards it through the
// driver, as for a command of exec).
//
// KILL is never lost. A burst of other signals may fill the process's
// queue (the pipeline reads it only once the command runs, and forwards
// one at a time); a KILL that does not fit, or that has not ended the
// process killBackstop later (a driver that did not deliver it; during
// the hooks or the approval any signal but WINCH and PIPE stops the
// process at once, watchEarlySignals), cancels the process's run instead,
// which ends its whole tree as a timeout does.
func (t *ProcessTable) Signal(id string, sig driverapi.Signal) error {
	p, err := t.get(id)
	if err != nil {
		return err
	}
	if p.ended() {
		return ErrProcessEnded
	}
	select {
	case p.signals <- sig:
	default: // a burst: the process has been told already
		if sig == driverapi.SignalKILL {
			p.cancel()
		}
	}
	if sig == driverapi.SignalKILL {
		p.armBackstop()
	}
	return nil
}

// armBackstop starts the KILL backstop unless it runs already or the run
// has ended. Once per process: a client repeating KILL must not start a
// timer (before, a timer and a goroutine) per call while the run ends.
func (p *process) armBackstop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.backstop == nil && !p.ended() {
		p.backstop = time.AfterFunc(killBackstop, p.cancel)
	}
}

// killBackstop is how long a KILL may take through the pipeline before
// the process's run is cancelled.
const killBackstop = 3 * time.Second

// Resize sets a terminal process's window size.
func (t *ProcessTable) Resize(id string, ws driverapi.WindowSize) error {
	p, err := t.get(id)
	if err != nil {
		return err
	}
	if !p.tty {
		return &InvalidCommandError{Field: "resize", Reason: "the process has no terminal"}
	}
	if p.ended() {
		return ErrProcessEnded
	}
	// Only the latest size matters: replace one not yet delivered.
	for {
		select {
		case p.resize <- ws:
			return nil
		default:
		}
		select {
		case <-p.resize:
		default:
		}
	}
}

// Wait waits for the process to end (or ctx), removes it from the table
// and returns how it ended.
func (t *ProcessTable) Wait(ctx context.Context, id string) (ProcessResult, error) {
	p, err := t.get(id)
	if err != nil {
		return ProcessResult{}, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return ProcessResult{}, ctx.Err()
	}
	t.mu.Lock()
	delete(t.procs, id)
	t.mu.Unlock()
	return p.result, nil
}

// List describes the processes of a session ("" lists all), oldest first.
func (t *ProcessTable) List(session string) []ProcessInfo {
	t.mu.Lock()
	var ps []*process
	for _, p := range t.procs {
		if session == "" || p.session == session {
			ps = append(ps, p)
		}
	}
	t.mu.Unlock()
	out := []ProcessInfo{}
	for _, p := range ps {
		pi := ProcessInfo{ID: p.id, Session: p.session, Program: p.program, Started: p.started}
		p.mu.Lock()
		if p.ended() {
			pi.Exited = true
			if p.result.Output != nil {
				pi.ExitCode = p.result.Output.Exit.ExitCode
			}
		}
		p.mu.Unlock()
		out = append(out, pi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out
}

// ForgetSession kills the session's processes, waits for them to end and
// removes them. Call it beside the sandbox's ForgetSession.
func (t *ProcessTable) ForgetSession(session string) {
	t.mu.Lock()
	var ps []*process
	for id, p := range t.procs {
		if p.session == session {
			ps = append(ps, p)
			delete(t.procs, id)
		}
	}
	t.mu.Unlock()
	killAll(ps)
}

// Close kills every process and refuses new ones.
func (t *ProcessTable) Close() {
	t.mu.Lock()
	t.closed = true
	var ps []*process
	for id, p := range t.procs {
		ps = append(ps, p)
		delete(t.procs, id)
	}
	t.mu.Unlock()
	killAll(ps)
}

// killAll cancels the processes (the driver kills a cancelled command's
// tree) and waits for their Execute to return.
func killAll(ps []*process) {
	for _, p := range ps {
		p.cancel()
		p.stdin.CloseRead()
	}
	for _, p := range ps {
		<-p.done
	}
}

// boundedPipe is a stdin pipe holding at most limit unread bytes.
type boundedPipe struct {
	mu      sync.Mutex
	buf     []byte
	limit   int
	wclosed bool
	rclosed bool
	changed chan struct{}
	// opened is closed at the first Read: the run got past its hooks and
	// approval and the sandbox takes its stdin.
	opened     chan struct{}
	openedOnce sync.Once
}

func newBoundedPipe(limit int) *boundedPipe {
	return &boundedPipe{limit: limit, changed: make(chan struct{}), opened: make(chan struct{})}
}

func (b *boundedPipe) signalLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// Read implements io.Reader for the command.
func (b *boundedPipe) Read(p []byte) (int, error) {
	b.openedOnce.Do(func() { close(b.opened) })
	for {
		b.mu.Lock()
		if len(b.buf) > 0 {
			n := copy(p, b.buf)
			b.buf = b.buf[n:]
			b.signalLocked()
			b.mu.Unlock()
			return n, nil
		}
		if b.wclosed || b.rclosed {
			b.mu.Unlock()
			return 0, io.EOF
		}
		ch := b.changed
		b.mu.Unlock()
		<-ch
	}
}

func (b *boundedPipe) write(ctx context.Context, p []byte, done <-chan struct{}) (int, error) {
	n := 0
	for len(p) > 0 {
		b.mu.Lock()
		if b.wclosed {
			b.mu.Unlock()
			return n, ErrStdinClosed
		}
		if b.rclosed {
			b.mu.Unlock()
			return n, ErrProcessEnded
		}
		if room := b.limit - len(b.buf); room > 0 {
			k := min(room, len(p))
			b.buf = append(b.buf, p[:k]...)
			p, n = p[k:], n+k
			b.signalLocked()
			b.mu.Unlock()
			continue
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			return n, ErrProcessEnded
		case <-ctx.Done():
			return n, ctx.Err()
		}
	}
	return n, nil
}

func (b *boundedPipe) buffered() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buf)
}

// CloseWrite ends the input: the reader sees EOF after what is buffered.
func (b *boundedPipe) CloseWrite() {
	b.mu.Lock()
	if !b.wclosed {
		b.wclosed = true
		b.signalLocked()
	}
	b.mu.Unlock()
}

// CloseRead ends the pipe for good: the process is gone.
func (b *boundedPipe) CloseRead() {
	b.mu.Lock()
	if !b.rclosed {
		b.rclosed = true
		b.buf = nil
		b.signalLocked()
	}
	b.mu.Unlock()
}
