package service

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// An Execute call with stdin_stream or tty is `exec --host -i/-t`: its
// stdin comes through WriteStdin and CloseStdin, its window size through
// ResizeTerminal, all named by its signal_key. Unlike a process
// (StartProcess) it lives only as long as its call: a client that goes
// away takes the command with it.

// maxStdinChunk bounds one WriteStdin's data: a client sends its input as
// it reads it, in pieces, each answered once the service holds it.
const maxStdinChunk = 1 << 20

// interactiveCall is what an Execute request asks beyond a one-shot run.
type interactiveCall struct{ stdin, tty bool }

// interactive checks the request's stdin_stream and tty fields and sets
// cmd's terminal and, without a timeout asked for, its time limit: an
// interactive command waits for a person, so it has no default timeout,
// only the processes' maximum lifetime.
func (s *Server) interactive(req *hostv1.ExecuteRequest, cmd *core.Command) (interactiveCall, error) {
	ia := interactiveCall{stdin: req.GetStdinStream(), tty: req.GetTty()}
	if !ia.stdin && !ia.tty {
		return ia, nil
	}
	switch {
	case req.GetSignalKey() == "":
		return ia, invalid("signal_key", "required with stdin_stream or tty: WriteStdin, CloseStdin and ResizeTerminal name the command by it")
	case ia.stdin && len(req.GetStdin()) > 0:
		return ia, invalid("stdin", "given with stdin_stream: the stdin is either one buffer up front or a stream")
	}
	if ia.tty {
		rows, cols := req.GetRows(), req.GetCols()
		if rows == 0 || cols == 0 || rows > 65535 || cols > 65535 {
			return ia, invalid("rows", "a terminal needs rows and cols between 1 and 65535")
		}
		cmd.Tty = &driverapi.WindowSize{Rows: uint16(rows), Cols: uint16(cols)}
	}
	if cmd.Timeout == 0 {
		cmd.Timeout = s.procs.Limits().MaxLifetime
	}
	return ia, nil
}

// runningCall is the call key names, or NotFound (not_running).
func (s *Server) runningCall(key string) (*call, error) {
	if key == "" {
		return nil, invalid("signal_key", "required")
	}
	s.mu.Lock()
	c, ok := s.calls[key]
	s.mu.Unlock()
	if !ok {
		return nil, withDetail(connect.CodeNotFound, fmt.Errorf("no running command has signal_key %q (not started yet, or ended)", key),
			&hostv1.ErrorDetail{ReasonCode: ReasonNotRunning, Field: "signal_key"})
	}
	return c, nil
}

// WriteStdin implements the service.
func (s *Server) WriteStdin(ctx context.Context, req *connect.Request[hostv1.WriteStdinRequest]) (*connect.Response[hostv1.WriteStdinResponse], error) {
	c, err := s.runningCall(req.Msg.GetSignalKey())
	if err != nil {
		return nil, err
	}
	if c.stdin == nil {
		return nil, withDetail(connect.CodeFailedPrecondition, errors.New("the command's stdin is not a stream (its request did not set stdin_stream)"),
			&hostv1.ErrorDetail{ReasonCode: ReasonInvalidRequest, Field: "signal_key"})
	}
	if len(req.Msg.GetData()) > maxStdinChunk {
		return nil, invalid("data", fmt.Sprintf("larger than %d bytes: send it in pieces", maxStdinChunk))
	}
	n, err := c.stdin.Write(ctx, req.Msg.GetData())
	if err != nil && n == 0 {
		if errors.Is(err, core.ErrProcessEnded) {
			return nil, withDetail(connect.CodeNotFound, errors.New("the command has ended"),
				&hostv1.ErrorDetail{ReasonCode: ReasonNotRunning, Field: "signal_key"})
		}
		return nil, procErr(err)
	}
	return connect.NewResponse(&hostv1.WriteStdinResponse{Written: int64(n)}), nil
}

// CloseStdin implements the service.
func (s *Server) CloseStdin(_ context.Context, req *connect.Request[hostv1.CloseStdinRequest]) (*connect.Response[hostv1.CloseStdinResponse], error) {
	c, err := s.runningCall(req.Msg.GetSignalKey())
	if err != nil {
		return nil, err
	}
	if c.stdin == nil {
		return nil, withDetail(connect.CodeFailedPrecondition, errors.New("the command's stdin is not a stream (its request did not set stdin_stream)"),
			&hostv1.ErrorDetail{ReasonCode: ReasonInvalidRequest, Field: "signal_key"})
	}
	c.stdin.CloseWrite()
	return connect.NewResponse(&hostv1.CloseStdinResponse{}), nil
}

// ResizeTerminal implements the service.
func (s *Server) ResizeTerminal(_ context.Context, req *connect.Request[hostv1.ResizeTerminalRequest]) (*connect.Response[hostv1.ResizeTerminalResponse], error) {
	rows, cols := req.Msg.GetRows(), req.Msg.GetCols()
	if rows == 0 || cols == 0 || rows > 65535 || cols > 65535 {
		return nil, invalid("rows", "rows and cols must lie between 1 and 65535")
	}
	c, err := s.runningCall(req.Msg.GetSignalKey())
	if err != nil {
		return nil, err
	}
	if c.resize == nil {
		return nil, withDetail(connect.CodeFailedPrecondition, errors.New("the command has no terminal (its request did not set tty)"),
			&hostv1.ErrorDetail{ReasonCode: ReasonInvalidRequest, Field: "signal_key"})
	}
	ws := driverapi.WindowSize{Rows: uint16(rows), Cols: uint16(cols)}
	// Only the latest size matters: replace one not yet delivered.
	for {
		select {
		case c.resize <- ws:
			return connect.NewResponse(&hostv1.ResizeTerminalResponse{}), nil
		default:
		}
		select {
		case <-c.resize:
		default:
		}
	}
}
