package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
)

// Pipeline is the service as a runner of commands and processes in
// core's terms (what mcpserver.Runner and mcpserver.Processes ask): the
// commands go to the service, and its errors come back as core's of the
// same meaning, so a front end reports them as it does in-process.
type Pipeline struct {
	C hostv1connect.ServiceClient
	// Socket names the service in errors: a unix socket's path, or
	// tcp:HOST:PORT for a client over TCP.
	Socket string
	// Approve answers the service's approval requests of Execute calls
	// (nil: every one is denied). A yes for the call only
	// (ApprovalApprovedOnce) is sent as such: the service keeps no grant
	// of it.
	Approve core.ApprovalRequester
	// Sessions remembers the incarnation of each session this pipeline
	// used (nil: none is remembered; see Tracker): a session whose server
	// is gone fails with ErrSessionMoved, never silently afresh.
	Sessions *Tracker
}

// NewPipeline is a Pipeline over the service on the unix socket sock,
// tracking its sessions' incarnations.
func NewPipeline(sock string, approve core.ApprovalRequester) *Pipeline {
	t := NewTracker()
	return &Pipeline{C: Unix(sock, WithTracker(t)), Socket: sock, Approve: approve, Sessions: t}
}

// Defaults are the service's time limit and output budget of a command
// naming none (its Capabilities; zero from a service that does not say).
func (h *Pipeline) Defaults(ctx context.Context) (timeout time.Duration, maxOutput int64, err error) {
	r, err := h.C.Capabilities(ctx, connect.NewRequest(&hostv1.CapabilitiesRequest{}))
	if err != nil {
		return 0, 0, h.callError(err, "")
	}
	return time.Duration(r.Msg.GetDefaultTimeoutMs()) * time.Millisecond, r.Msg.GetDefaultMaxOutputBytes(), nil
}

// Execute runs cmd on the service and returns its whole output, and
// writes it to cmd.Stdout and cmd.Stderr (when set) as it comes.
func (h *Pipeline) Execute(ctx context.Context, cmd core.Command) (*core.Output, error) {
	// The Approve calls answering its approval requests name the request
	// alone: they carry the command's session header too (Tracker).
	ctx = WithSession(ctx, cmd.SessionID)
	stream, err := h.C.Execute(ctx, connect.NewRequest(ExecuteRequest(cmd)))
	if err != nil {
		return nil, h.callError(err, "")
	}
	defer stream.Close()
	var res *hostv1.ExecResult
	// The output comes once, as chunks; the result repeats none of it.
	var got Output
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *hostv1.ExecuteResponse_Output:
			got.Add(ev.Output)
			// And as it comes, to the caller's writers (MCP's progress
			// notifications); a failing writer does not fail the call.
			if w := cmd.Stdout; ev.Output.GetStream() != hostv1.OutputChunk_STREAM_STDERR && w != nil {
				_, _ = w.Write(ev.Output.GetData())
			} else if w := cmd.Stderr; ev.Output.GetStream() == hostv1.OutputChunk_STREAM_STDERR && w != nil {
				_, _ = w.Write(ev.Output.GetData())
			}
		case *hostv1.ExecuteResponse_ApprovalRequest:
			// Answered in line: the approvers this serves (MCP's) do not
			// wait on a user (a question goes back to the client as the
			// call's result).
			o := driverapi.ApprovalDenied
			if h.Approve != nil {
				o, _ = h.Approve.RequestApproval(ctx, ApprovalFrom(ev.ApprovalRequest))
			}
			if _, err := h.C.Approve(ctx, connect.NewRequest(Answer(ev.ApprovalRequest.GetId(), o))); err != nil && ctx.Err() == nil {
				return nil, h.callError(err, "")
			}
		case *hostv1.ExecuteResponse_Result:
			res = ev.Result
		}
	}
	if err := stream.Err(); err != nil {
		return nil, h.callError(err, "")
	}
	if res == nil {
		return nil, errors.New("the service ended the call without a result")
	}
	o, err := OutputFrom(res)
	if o != nil {
		o.Stdout, o.Stderr = got.Whole(res)
	}
	return o, err
}

// callError is a failed call as core's error of the same meaning.
func (h *Pipeline) callError(err error, id string) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	msg := ce.Message()
	switch Reason(err) {
	case service.ReasonProcessUnknown:
		return &core.ProcessNotFoundError{ID: id}
	case service.ReasonProcessLimit:
		return &core.ProcessLimitError{Scope: "service"}
	case service.ReasonProcessEnded:
		return fmt.Errorf("%s: %w", msg, core.ErrProcessEnded)
	case service.ReasonStdinClosed:
		return fmt.Errorf("%s: %w", msg, core.ErrStdinClosed)
	case string(core.ReasonInvalidCommand):
		return &core.InvalidCommandError{Field: Detail(err).GetField(), Reason: msg}
	case string(core.ReasonClosed):
		return fmt.Errorf("%s: %w", msg, core.ErrClosed)
	}
	if ce.Code() == connect.CodeInvalidArgument {
		return &core.InvalidCommandError{Field: Detail(err).GetField(), Reason: msg}
	}
	if Unreachable(err) {
		return fmt.Errorf("no service at %s (start it with aleph-sandbox serve): %w", h.Socket, err)
	}
	return fmt.Errorf("the service at %s: %w", h.Socket, err)
}

// Start implements mcpserver.Processes. The service's own approvers (its
// --yes, or the clients on its Approvals stream) answer a process's
// approval requests: StartProcess carries no approver of the caller's.
func (h *Pipeline) Start(ctx context.Context, cmd core.Command) (string, error) {
	req := &hostv1.StartProcessRequest{Command: ExecuteRequest(cmd)}
	req.Command.AnswerApprovals = false
	req.Command.Stdin = nil
	if cmd.Tty != nil {
		req.Tty, req.Rows, req.Cols = true, uint32(cmd.Tty.Rows), uint32(cmd.Tty.Cols)
	}
	r, err := h.C.StartProcess(ctx, connect.NewRequest(req))
	if err != nil {
		return "", h.callError(err, "")
	}
	return r.Msg.GetId(), nil
}

// Write implements mcpserver.Processes.
func (h *Pipeline) Write(ctx context.Context, id string, data []byte) (int, error) {
	r, err := h.C.WriteProcess(ctx, connect.NewRequest(&hostv1.WriteProcessRequest{Id: id, Data: data}))
	if err != nil {
		return 0, h.callError(err, id)
	}
	if n := int(r.Msg.GetWritten()); n < len(data) {
		return n, core.ErrProcessEnded
	}
	return len(data), nil
}

// CloseStdin implements mcpserver.Processes.
func (h *Pipeline) CloseStdin(ctx context.Context, id string) error {
	if _, err := h.C.CloseProcessStdin(ctx, connect.NewRequest(&hostv1.CloseProcessStdinRequest{Id: id})); err != nil {
		return h.callError(err, id)
	}
	return nil
}

// Read implements mcpserver.Processes.
func (h *Pipeline) Read(ctx context.Context, id string, offset int64, wait time.Duration) (core.ProcessRead, error) {
	r, err := h.C.ReadProcess(ctx, connect.NewRequest(&hostv1.ReadProcessRequest{Id: id, Offset: offset, WaitSeconds: wait.Seconds()}))
	if err != nil {
		return core.ProcessRead{}, h.callError(err, id)
	}
	m := r.Msg
	out := core.ProcessRead{Data: m.GetData(), Next: m.GetNextOffset(), Dropped: m.GetDropped(), Exited: m.GetExited()}
	if m.GetExited() && m.GetResult() != nil {
		o, err := OutputFrom(m.GetResult())
		out.Result = &core.ProcessResult{Output: o, Err: err}
	}
	return out, nil
}

// Signal implements mcpserver.Processes.
func (h *Pipeline) Signal(ctx context.Context, id string, sig driverapi.Signal) error {
	if _, err := h.C.SignalProcess(ctx, connect.NewRequest(&hostv1.SignalProcessRequest{Id: id, Signal: string(sig)})); err != nil {
		return h.callError(err, id)
	}
	return nil
}

// Wait implements mcpserver.Processes.
func (h *Pipeline) Wait(ctx context.Context, id string) (core.ProcessResult, error) {
	r, err := h.C.WaitProcess(ctx, connect.NewRequest(&hostv1.WaitProcessRequest{Id: id}))
	if err != nil {
		return core.ProcessResult{}, h.callError(err, id)
	}
	o, oerr := OutputFrom(r.Msg.GetResult())
	return core.ProcessResult{Output: o, Err: oerr}, nil
}

// List implements mcpserver.Processes.
func (h *Pipeline) List(ctx context.Context, session string) ([]core.ProcessInfo, error) {
	r, err := h.C.ListProcesses(ctx, connect.NewRequest(&hostv1.ListProcessesRequest{Session: session}))
	if err != nil {
		return nil, h.callError(err, "")
	}
	var out []core.ProcessInfo
	for _, p := range r.Msg.GetProcesses() {
		out = append(out, core.ProcessInfo{ID: p.GetId(), Session: p.GetSession(), Program: p.GetProgram(),
			Started: time.UnixMilli(p.GetStartedUnixMs()), Exited: p.GetExited(), ExitCode: p.GetExitCode()})
	}
	return out, nil
}
