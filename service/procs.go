package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// Reason codes of the process calls.
const (
	ReasonProcessUnknown = "process_unknown"
	ReasonProcessLimit   = "process_limit"
	ReasonProcessEnded   = "process_ended"
	ReasonStdinClosed    = "stdin_closed"
)

// maxReadWait bounds ReadProcess's wait, so a read never holds a
// connection longer than a proxy in between would keep it.
const maxReadWait = 60 * time.Second

// Close kills every process the service started and refuses new ones; the
// serve command calls it before the driver is stopped.
func (s *Server) Close() { s.procs.Close() }

// procErr is the status of a failed process call.
func procErr(err error) error {
	var nf *core.ProcessNotFoundError
	var le *core.ProcessLimitError
	var ic *core.InvalidCommandError
	switch {
	case errors.As(err, &nf):
		return withDetail(connect.CodeNotFound, err, &hostv1.ErrorDetail{ReasonCode: ReasonProcessUnknown, Field: "id"})
	case errors.As(err, &le):
		return withDetail(connect.CodeResourceExhausted, err, &hostv1.ErrorDetail{ReasonCode: ReasonProcessLimit})
	case core.LimitOf(err) != "":
		// A configured capacity limit of the pipeline (the rate limit's
		// queue) or the driver: the key to raise is in the detail.
		return withDetail(connect.CodeResourceExhausted, err, &hostv1.ErrorDetail{ReasonCode: ReasonResourceExhausted, Field: core.LimitOf(err)})
	case errors.As(err, &ic):
		return withDetail(connect.CodeInvalidArgument, err, &hostv1.ErrorDetail{ReasonCode: string(core.ReasonInvalidCommand), Field: ic.Field})
	case errors.Is(err, core.ErrProcessEnded):
		return withDetail(connect.CodeFailedPrecondition, err, &hostv1.ErrorDetail{ReasonCode: ReasonProcessEnded, Field: "id"})
	case errors.Is(err, core.ErrStdinClosed):
		return withDetail(connect.CodeFailedPrecondition, err, &hostv1.ErrorDetail{ReasonCode: ReasonStdinClosed, Field: "id"})
	case errors.Is(err, core.ErrClosed):
		return withDetail(connect.CodeUnavailable, err, &hostv1.ErrorDetail{ReasonCode: string(core.ReasonClosed)})
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return withDetail(connect.CodeCanceled, err, &hostv1.ErrorDetail{ReasonCode: string(core.ReasonCanceled)})
	}
	return withDetail(connect.CodeInternal, err, &hostv1.ErrorDetail{})
}

func needID(id string) error {
	if id == "" {
		return invalid("id", "required")
	}
	return nil
}

// StartProcess implements the service.
func (s *Server) StartProcess(ctx context.Context, req *connect.Request[hostv1.StartProcessRequest]) (*connect.Response[hostv1.StartProcessResponse], error) {
	if req.Msg.GetCommand() == nil {
		return nil, invalid("command", "required")
	}
	if len(req.Msg.GetCommand().GetStdin()) > 0 {
		return nil, invalid("command.stdin", "a process's stdin comes through WriteProcess")
	}
	if req.Msg.GetCommand().GetSignalKey() != "" || req.Msg.GetCommand().GetAnswerApprovals() {
		return nil, invalid("command", "signal_key and answer_approvals belong to Execute: a process is signalled by SignalProcess, and its approvals go to the connected approvers, or to the Approvals stream opened with approval_key")
	}
	if req.Msg.GetCommand().GetStdinStream() || req.Msg.GetCommand().GetTty() {
		return nil, invalid("command", "stdin_stream and tty belong to Execute: a process's stdin is WriteProcess's, its terminal StartProcess's own tty, rows and cols")
	}
	cmd, err := s.command(req.Msg.GetCommand())
	if err != nil {
		return nil, err
	}
	if req.Msg.GetTty() {
		rows, cols := req.Msg.GetRows(), req.Msg.GetCols()
		if rows == 0 || cols == 0 || rows > 65535 || cols > 65535 {
			return nil, invalid("rows", "a terminal needs rows and cols between 1 and 65535")
		}
		cmd.Tty = &driverapi.WindowSize{Rows: uint16(rows), Cols: uint16(cols)}
	}
	if err := s.admit(cmd.SessionID); err != nil {
		return nil, err
	}
	var startedID string
	if key := req.Msg.GetApprovalKey(); key != "" {
		if len(key) > maxApprovalKey {
			return nil, invalid("approval_key", fmt.Sprintf("longer than %d bytes", maxApprovalKey))
		}
		// The start's approvals go to the client's own approver (its
		// Approvals stream with this key), not to every approver.
		var done func()
		ctx, done = s.broker.withApprovalKey(ctx, key)
		// The process asks (in the background, after this call) until it
		// is past its approval or ended; then the keyed stream ends.
		defer func() {
			settled, serr := s.procs.Settled(startedID)
			if serr != nil {
				done()
				return
			}
			go func() {
				select {
				case <-settled:
				case <-s.broker.closed:
				}
				done()
			}()
		}()
	}
	id, err := s.procs.Start(ctx, cmd)
	startedID = id
	incarnation := ""
	if err == nil {
		// The session is the service's once a process of it started.
		incarnation = s.remember(ctx, cmd.SessionID)
	}
	if err != nil {
		return nil, procErr(err)
	}
	s.log.Info("process started", "session", cmd.SessionID, "program", cmd.Program, "id", id)
	return connect.NewResponse(&hostv1.StartProcessResponse{Id: id, NodeId: s.nodeID, SessionIncarnation: incarnation}), nil
}

// WriteProcess implements the service.
func (s *Server) WriteProcess(ctx context.Context, req *connect.Request[hostv1.WriteProcessRequest]) (*connect.Response[hostv1.WriteProcessResponse], error) {
	if err := needID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	n, err := s.procs.Write(ctx, req.Msg.GetId(), req.Msg.GetData())
	if err != nil && n == 0 {
		return nil, procErr(err)
	}
	return connect.NewResponse(&hostv1.WriteProcessResponse{Written: int64(n)}), nil
}

// CloseProcessStdin implements the service.
func (s *Server) CloseProcessStdin(_ context.Context, req *connect.Request[hostv1.CloseProcessStdinRequest]) (*connect.Response[hostv1.CloseProcessStdinResponse], error) {
	if err := needID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	if err := s.procs.CloseStdin(req.Msg.GetId()); err != nil {
		return nil, procErr(err)
	}
	return connect.NewResponse(&hostv1.CloseProcessStdinResponse{}), nil
}

// processResult is a process's end as an ExecResult: a pipeline failure
// is carried in its error field (Read) or returned (Wait).
func (s *Server) processResult(ctx context.Context, r *core.ProcessResult) (*hostv1.ExecResult, error) {
	return s.result(ctx, r.Output, r.Err)
}

// ReadProcess implements the service.
func (s *Server) ReadProcess(ctx context.Context, req *connect.Request[hostv1.ReadProcessRequest]) (*connect.Response[hostv1.ReadProcessResponse], error) {
	if err := needID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	w := req.Msg.GetWaitSeconds()
	if w < 0 || w != w {
		return nil, invalid("wait_seconds", "must not be negative")
	}
	wait := min(time.Duration(w*float64(time.Second)), maxReadWait)
	if w > maxReadWait.Seconds() {
		wait = maxReadWait
	}
	r, err := s.procs.Read(ctx, req.Msg.GetId(), req.Msg.GetOffset(), wait)
	if err != nil {
		return nil, procErr(err)
	}
	resp := &hostv1.ReadProcessResponse{Data: r.Data, NextOffset: r.Next, Dropped: r.Dropped, Exited: r.Exited}
	if r.Result != nil {
		res, rerr := s.processResult(ctx, r.Result)
		if rerr != nil {
			res = &hostv1.ExecResult{Error: rerr.Error()}
			if d := detailOf(rerr); d != nil {
				res.ReasonCode = d.GetReasonCode()
			}
		}
		res.NodeId, res.SessionIncarnation = s.nodeID, s.processIncarnation(req.Msg.GetId())
		resp.Result = res
	}
	return connect.NewResponse(resp), nil
}

// SignalProcess implements the service.
func (s *Server) SignalProcess(_ context.Context, req *connect.Request[hostv1.SignalProcessRequest]) (*connect.Response[hostv1.SignalProcessResponse], error) {
	if err := needID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	sig, err := driverapi.ParseSignal(req.Msg.GetSignal())
	if err != nil {
		return nil, invalid("signal", err.Error())
	}
	if err := s.procs.Signal(req.Msg.GetId(), sig); err != nil {
		return nil, procErr(err)
	}
	return connect.NewResponse(&hostv1.SignalProcessResponse{}), nil
}

// ResizeProcess implements the service.
func (s *Server) ResizeProcess(_ context.Context, req *connect.Request[hostv1.ResizeProcessRequest]) (*connect.Response[hostv1.ResizeProcessResponse], error) {
	if err := needID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	rows, cols := req.Msg.GetRows(), req.Msg.GetCols()
	if rows == 0 || cols == 0 || rows > 65535 || cols > 65535 {
		return nil, invalid("rows", "rows and cols must lie between 1 and 65535")
	}
	if err := s.procs.Resize(req.Msg.GetId(), driverapi.WindowSize{Rows: uint16(rows), Cols: uint16(cols)}); err != nil {
		return nil, procErr(err)
	}
	return connect.NewResponse(&hostv1.ResizeProcessResponse{}), nil
}

// WaitProcess implements the service.
func (s *Server) WaitProcess(ctx context.Context, req *connect.Request[hostv1.WaitProcessRequest]) (*connect.Response[hostv1.WaitProcessResponse], error) {
	if err := needID(req.Msg.GetId()); err != nil {
		return nil, err
	}
	// Before the wait: the process leaves its session's table with it.
	incarnation := s.processIncarnation(req.Msg.GetId())
	r, err := s.procs.Wait(ctx, req.Msg.GetId())
	if err != nil {
		return nil, procErr(err)
	}
	res, err := s.processResult(ctx, &r)
	if err != nil {
		return nil, err
	}
	res.NodeId, res.SessionIncarnation = s.nodeID, incarnation
	return connect.NewResponse(&hostv1.WaitProcessResponse{Result: res}), nil
}

// ListProcesses implements the service.
func (s *Server) ListProcesses(_ context.Context, req *connect.Request[hostv1.ListProcessesRequest]) (*connect.Response[hostv1.ListProcessesResponse], error) {
	resp := &hostv1.ListProcessesResponse{Processes: []*hostv1.ProcessInfo{}}
	for _, p := range s.procs.List(req.Msg.GetSession()) {
		resp.Processes = append(resp.Processes, &hostv1.ProcessInfo{Id: p.ID, Session: p.Session, Program: p.Program,
			StartedUnixMs: p.Started.UnixMilli(), Exited: p.Exited, ExitCode: p.ExitCode})
	}
	return connect.NewResponse(resp), nil
}

// processIncarnation is the incarnation of the session of process id
// ("" when no process has that id).
func (s *Server) processIncarnation(id string) string {
	if session, _, ok := s.processSession(id); ok {
		return s.incarnation(session)
	}
	return ""
}
