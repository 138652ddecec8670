package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/driverapi/proto/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/proto/hostv1/hostv1connect"
	"github.com/aleph-sandbox/aleph-sandbox/service"
)

// mcpHost is `mcp --host`: run_command and the process tools go to a
// running service instead of a pipeline of the server's own. It is the
// server's Runner and Processes; its errors are core's, so the tools
// report them as they do in-process.
type mcpHost struct {
	c    hostv1connect.ServiceClient
	sock string
	// approve answers the service's approval requests of run_command
	// calls (the MCP server's approver: its baseline, then the client).
	approve core.ApprovalRequester
}

// Execute implements mcpserver.Runner.
func (h *mcpHost) Execute(ctx context.Context, cmd core.Command) (*core.Output, error) {
	req := executeRequest(cmd)
	stream, err := h.c.Execute(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, h.callError(err, "")
	}
	defer stream.Close()
	var res *hostv1.ExecResult
	// The output comes once, as chunks; the result repeats none of it.
	var got streamedOutput
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *hostv1.ExecuteResponse_Output:
			got.add(ev.Output)
		case *hostv1.ExecuteResponse_ApprovalRequest:
			r := ev.ApprovalRequest
			prog, args := mcpSplitArgv(r.GetArgv())
			// Answered in line: the MCP approver does not wait on the user
			// (a question goes back to the client as the call's result).
			o, _ := h.approve.RequestApproval(ctx, driverapi.ApprovalRequest{SessionID: r.GetSession(), CommandID: r.GetCommandId(),
				Program: prog, Args: args, Summary: r.GetSummary(), Requested: mcpCapsFrom(r.GetRequested())})
			// A yes of this server's baseline is for this call only
			// (once): the service keeps no grant of it for the session.
			ans := &hostv1.ApproveRequest{Id: r.GetId(), Approved: o == driverapi.ApprovalApproved || o == driverapi.ApprovalApprovedOnce,
				Once: o == driverapi.ApprovalApprovedOnce}
			if _, err := h.c.Approve(ctx, connect.NewRequest(ans)); err != nil && ctx.Err() == nil {
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
	o, err := mcpOutputFrom(res)
	if o != nil {
		o.Stdout, o.Stderr = got.whole(res)
	}
	return o, err
}

// mcpOutputFrom is a service result as Execute's return.
func mcpOutputFrom(res *hostv1.ExecResult) (*core.Output, error) {
	switch {
	case res.GetDenied():
		return nil, mcpDeniedFrom(res)
	case res.GetError() != "":
		return nil, fmt.Errorf("the service could not run the command (%s): %s", res.GetReasonCode(), res.GetError())
	}
	return &core.Output{Stdout: res.GetStdout(), Stderr: res.GetStderr(), Backend: res.GetBackend(), CommandID: res.GetCommandId(),
		ProfileDigest: res.GetProfileDigest(),
		Exit: driverapi.Exit{ExitCode: res.GetExitCode(), Signal: res.GetSignal(), TimedOut: res.GetTimedOut(),
			Truncated: res.GetTruncated(), OOMKilled: res.GetOomKilled(), Duration: durationMS(res.GetDurationMs())}}, nil
}

// mcpDeniedFrom rebuilds the service's denial. Its reason is the denial's
// whole message ("denied (code) rule R: why"): only the why is kept, so
// that the message is not said twice.
func mcpDeniedFrom(res *hostv1.ExecResult) *core.DeniedError {
	why := res.GetReason()
	if strings.HasPrefix(why, "denied (") {
		if i := strings.Index(why, ": "); i >= 0 {
			why = why[i+2:]
		}
	}
	return &core.DeniedError{Code: core.ReasonCode(res.GetReasonCode()), Reason: why, Rule: res.GetRule()}
}

func mcpCapsFrom(m *hostv1.Capabilities) driverapi.Capabilities {
	c := driverapi.Capabilities{FSRead: m.GetFsRead(), FSWrite: m.GetFsWrite(), SpawnSubprocess: m.GetSpawn(),
		MaxMemoryMB: m.GetMemoryMb(), TimeoutSecs: uint64(max(m.GetTimeoutSeconds(), 0))}
	switch m.GetNetworkMode() {
	case driverapi.NetworkAllowAll.String():
		c.Network.Mode = driverapi.NetworkAllowAll
	case driverapi.NetworkAllowHosts.String():
		c.Network = driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: m.GetNetworkHosts()}
	}
	return c
}

// mcpSplitArgv is argv as program and arguments.
func mcpSplitArgv(a []string) (string, []string) {
	if len(a) == 0 {
		return "", nil
	}
	return a[0], a[1:]
}

// callError is a failed call as core's error of the same meaning.
func (h *mcpHost) callError(err error, id string) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return err
	}
	msg := ce.Message()
	switch reasonOf(err) {
	case service.ReasonProcessUnknown:
		return &core.ProcessNotFoundError{ID: id}
	case service.ReasonProcessLimit:
		return &core.ProcessLimitError{Scope: "service"}
	case service.ReasonProcessEnded:
		return fmt.Errorf("%s: %w", msg, core.ErrProcessEnded)
	case service.ReasonStdinClosed:
		return fmt.Errorf("%s: %w", msg, core.ErrStdinClosed)
	case string(core.ReasonInvalidCommand):
		return &core.InvalidCommandError{Field: mcpFieldOf(err), Reason: msg}
	case string(core.ReasonClosed):
		return fmt.Errorf("%s: %w", msg, core.ErrClosed)
	}
	if ce.Code() == connect.CodeInvalidArgument {
		return &core.InvalidCommandError{Field: mcpFieldOf(err), Reason: msg}
	}
	if ce.Code() == connect.CodeUnavailable && strings.Contains(msg, "dial") {
		return fmt.Errorf("no service at %s (start it with aleph-sandbox serve): %w", h.sock, err)
	}
	return fmt.Errorf("the service at %s: %w", h.sock, err)
}

// mcpFieldOf is the field a service error names.
func mcpFieldOf(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*hostv1.ErrorDetail); ok {
				return ed.GetField()
			}
		}
	}
	return ""
}

// Start implements mcpserver.Processes. The service's own approvers (its
// --yes, or the clients on its Approvals stream) answer a process's
// approval requests: StartProcess carries no approver of the caller's.
func (h *mcpHost) Start(ctx context.Context, cmd core.Command) (string, error) {
	req := &hostv1.StartProcessRequest{Command: executeRequest(cmd)}
	req.Command.AnswerApprovals = false
	req.Command.Stdin = nil
	if cmd.Tty != nil {
		req.Tty, req.Rows, req.Cols = true, uint32(cmd.Tty.Rows), uint32(cmd.Tty.Cols)
	}
	r, err := h.c.StartProcess(ctx, connect.NewRequest(req))
	if err != nil {
		return "", h.callError(err, "")
	}
	return r.Msg.GetId(), nil
}

// Write implements mcpserver.Processes.
func (h *mcpHost) Write(ctx context.Context, id string, data []byte) (int, error) {
	r, err := h.c.WriteProcess(ctx, connect.NewRequest(&hostv1.WriteProcessRequest{Id: id, Data: data}))
	if err != nil {
		return 0, h.callError(err, id)
	}
	if n := int(r.Msg.GetWritten()); n < len(data) {
		return n, core.ErrProcessEnded
	}
	return len(data), nil
}

// CloseStdin implements mcpserver.Processes.
func (h *mcpHost) CloseStdin(ctx context.Context, id string) error {
	if _, err := h.c.CloseProcessStdin(ctx, connect.NewRequest(&hostv1.CloseProcessStdinRequest{Id: id})); err != nil {
		return h.callError(err, id)
	}
	return nil
}

// Read implements mcpserver.Processes.
func (h *mcpHost) Read(ctx context.Context, id string, offset int64, wait time.Duration) (core.ProcessRead, error) {
	r, err := h.c.ReadProcess(ctx, connect.NewRequest(&hostv1.ReadProcessRequest{Id: id, Offset: offset, WaitSeconds: wait.Seconds()}))
	if err != nil {
		return core.ProcessRead{}, h.callError(err, id)
	}
	m := r.Msg
	out := core.ProcessRead{Data: m.GetData(), Next: m.GetNextOffset(), Dropped: m.GetDropped(), Exited: m.GetExited()}
	if m.GetExited() && m.GetResult() != nil {
		o, err := mcpOutputFrom(m.GetResult())
		out.Result = &core.ProcessResult{Output: o, Err: err}
	}
	return out, nil
}

// Signal implements mcpserver.Processes.
func (h *mcpHost) Signal(ctx context.Context, id string, sig driverapi.Signal) error {
	if _, err := h.c.SignalProcess(ctx, connect.NewRequest(&hostv1.SignalProcessRequest{Id: id, Signal: string(sig)})); err != nil {
		return h.callError(err, id)
	}
	return nil
}

// Wait implements mcpserver.Processes.
func (h *mcpHost) Wait(ctx context.Context, id string) (core.ProcessResult, error) {
	r, err := h.c.WaitProcess(ctx, connect.NewRequest(&hostv1.WaitProcessRequest{Id: id}))
	if err != nil {
		return core.ProcessResult{}, h.callError(err, id)
	}
	o, oerr := mcpOutputFrom(r.Msg.GetResult())
	return core.ProcessResult{Output: o, Err: oerr}, nil
}

// List implements mcpserver.Processes.
func (h *mcpHost) List(ctx context.Context, session string) ([]core.ProcessInfo, error) {
	r, err := h.c.ListProcesses(ctx, connect.NewRequest(&hostv1.ListProcessesRequest{Session: session}))
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
