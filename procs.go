package alephsandbox

import (
	"context"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The runtime's process API: commands that outlive the call starting
// them, with stdin written in pieces, output read by offset, signals and
// a final wait. It is the service's StartProcess family in Go, on the same
// core.ProcessTable (so the same semantics, bounds and errors): each
// process runs through the whole pipeline (hooks, approval, audit: one
// record when it ends), its output (stdout and stderr in order of arrival)
// is kept in a ring of [sandbox.processes] ring_bytes that readers page
// through, and it lives until it ends, is signalled, its session is
// forgotten or deleted, the runtime is closed, or max_lifetime_seconds
// passes. Errors are typed: *core.ProcessNotFoundError,
// *core.ProcessLimitError, core.ErrProcessEnded, core.ErrStdinClosed,
// *core.InvalidCommandError; a refusal of the command itself (a hook, an
// approval) is the process's result, seen by ReadProcess and WaitProcess.

// StartProcess starts cmd (its SessionID is required) and returns the
// process's id once it runs in the background. cmd.Stdin, StdinStream,
// Signals and Resize must be unset: WriteProcess, SignalProcess feed them.
// cmd.Timeout 0 (or above max_lifetime_seconds) is the maximum lifetime.
func (r *Runtime) StartProcess(ctx context.Context, cmd core.Command) (string, error) {
	if r.procs == nil {
		return "", ErrDisabled
	}
	return r.procs.Start(ctx, cmd)
}

// WriteProcess writes data to the process's stdin. It blocks while
// [sandbox.processes] stdin_bytes wait unread, until ctx ends; it returns
// how much was taken.
func (r *Runtime) WriteProcess(ctx context.Context, id string, data []byte) (int, error) {
	if r.procs == nil {
		return 0, ErrDisabled
	}
	return r.procs.Write(ctx, id, data)
}

// CloseProcessStdin closes the process's stdin: it reads EOF once it has
// read what was written.
func (r *Runtime) CloseProcessStdin(id string) error {
	if r.procs == nil {
		return ErrDisabled
	}
	return r.procs.CloseStdin(id)
}

// ReadProcess returns the output from offset on, waiting up to wait for
// some when there is none yet. Next is where the following read starts;
// Dropped counts bytes lost to the ring's bound before Data; Exited (with
// Result) once the process has ended and Data reaches its end.
func (r *Runtime) ReadProcess(ctx context.Context, id string, offset int64, wait time.Duration) (core.ProcessRead, error) {
	if r.procs == nil {
		return core.ProcessRead{}, ErrDisabled
	}
	return r.procs.Read(ctx, id, offset, wait)
}

// SignalProcess sends sig to the process (KILL ends its whole tree).
func (r *Runtime) SignalProcess(id string, sig driverapi.Signal) error {
	if r.procs == nil {
		return ErrDisabled
	}
	return r.procs.Signal(id, sig)
}

// WaitProcess waits until the process ends (or ctx does) and returns how:
// Output with its exit status and whole output, or the pipeline's refusal
// in Err. The process is then removed: its id is unknown afterwards.
func (r *Runtime) WaitProcess(ctx context.Context, id string) (core.ProcessResult, error) {
	if r.procs == nil {
		return core.ProcessResult{}, ErrDisabled
	}
	return r.procs.Wait(ctx, id)
}

// ListProcesses describes the processes of a session ("" lists every
// session's), running or ended and not yet waited for, oldest first.
func (r *Runtime) ListProcesses(session string) []core.ProcessInfo {
	if r.procs == nil {
		return []core.ProcessInfo{}
	}
	return r.procs.List(session)
}
