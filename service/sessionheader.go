package service

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"connectrpc.com/connect"

	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// SessionHeader carries the session a call concerns, beside the request's
// body, so that a proxy in front of several servers can route a call by it
// without parsing the body (every call of one session must reach the
// server holding it: its grants, processes and network namespace). The
// clients send it on every call that concerns a session, process calls
// included. Its value is the session name percent-encoded as UTF-8 (a
// byte outside the printable ASCII range, and '%', as %XX), so that any
// session name is a valid header value; a plain name ("s1") is itself.
const SessionHeader = "X-Aleph-Session"

// FieldSessionHeader is the ErrorDetail field of a refused SessionHeader.
const FieldSessionHeader = "X-Aleph-Session"

// sessionHeaderCheck refuses a call whose SessionHeader disagrees with the
// session its body names (or, for a process call, the session of the
// process its id names). A proxy routes by the header and the server acts
// on the body: if the two could differ, a call routed as one session's
// would act on another's, on a server the proxy did not mean, so a
// mismatch is an error (invalid_argument naming the header), never
// silently served. A call without the header is served as before (the
// header is for routing, not authority: the session is the body's).
func (s *Server) sessionHeaderCheck() connect.HandlerOption {
	return connect.WithInterceptors(sessionHeaderInterceptor{s})
}

type sessionHeaderInterceptor struct{ s *Server }

func (i sessionHeaderInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := i.s.checkSessionHeader(req.Header(), req.Any()); err != nil {
			return nil, err
		}
		life, err := i.s.checkIncarnation(req.Header(), req.Any())
		if err != nil {
			return nil, err
		}
		ctx, release := boundToLife(ctx, life)
		defer release()
		resp, err := next(ctx, req)
		return resp, i.s.endedDuring(ctx, req.Any(), err)
	}
}

func (sessionHeaderInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler adds nothing: a server stream's one request is
// checked by its handler (streamRequest), since a wrapped connection would
// lie on the way of every message the stream sends, each output chunk of
// an Execute included, and forward it only.
func (sessionHeaderInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// streamRequest is, for the one request of a server stream (Execute,
// ReadFile, Approvals), what the interceptors are for a unary call's: the
// session header and the expected incarnation checked before anything is
// done (the refusal is the stream's error, and nothing else runs), the
// call's context bound to the session's life when it expects an
// incarnation (the handler uses the returned one), then the session
// marked busy (idle.go) until the returned end is called, which the
// handler defers. Each server-streaming handler calls it first:
// TestStreamingHandlersCheckTheirRequest lists them, so that a new one is
// not served unchecked.
func (s *Server) streamRequest(ctx context.Context, h http.Header, msg any) (_ context.Context, end func(), err error) {
	if err := s.checkSessionHeader(h, msg); err != nil {
		return ctx, nil, err
	}
	life, err := s.checkIncarnation(h, msg)
	if err != nil {
		return ctx, nil, err
	}
	ctx, release := boundToLife(ctx, life)
	if session, _, ok := s.sessionOf(msg); ok && session != "" {
		idleEnd := s.idle.begin(ctx, session)
		return ctx, func() { idleEnd(); release() }, nil
	}
	return ctx, release, nil
}

// checkSessionHeader compares the header, when present, with the session
// msg concerns: its body's, or for a call naming a running command by
// its signal_key (Signal, WriteStdin, CloseStdin, ResizeTerminal) that
// command's, for an Approve the session of the request it answers, for
// a process call the process's. Calls that name no session
// (Capabilities, CheckPolicy, Approvals, Sessions list, ListProcesses of
// every session), and a key or id nothing runs under (left to the
// handler's NotFound), are not compared: the header may still route
// them.
func (s *Server) checkSessionHeader(h http.Header, msg any) error {
	values := h.Values(SessionHeader)
	if len(values) == 0 {
		return nil
	}
	if len(values) > 1 {
		return headerInvalid(fmt.Sprintf("%s is given %d times: send it once", SessionHeader, len(values)))
	}
	want, err := url.PathUnescape(values[0])
	if err != nil {
		return headerInvalid(fmt.Sprintf("%s %q is not percent-encoded UTF-8 (%v)", SessionHeader, values[0], err))
	}
	got, field, ok := s.sessionOf(msg)
	if !ok || got == want {
		return nil
	}
	return headerInvalid(fmt.Sprintf("%s names session %q but the request's %s is %q: send the same session in both, or leave the header out",
		SessionHeader, want, field, got))
}

func headerInvalid(msg string) error {
	return withDetail(connect.CodeInvalidArgument, fmt.Errorf("%s", msg),
		&hostv1.ErrorDetail{ReasonCode: ReasonInvalidRequest, Field: FieldSessionHeader})
}

// sessionOf is the session msg concerns and where it says so; ok is false
// when it names none (nothing to compare).
func (s *Server) sessionOf(msg any) (session, field string, ok bool) {
	switch m := msg.(type) {
	case *hostv1.ExecuteRequest:
		return m.GetSession(), "session", true
	case *hostv1.StartProcessRequest:
		if m.GetCommand() == nil {
			return "", "", false
		}
		return m.GetCommand().GetSession(), "command.session", true
	case *hostv1.SessionsRequest:
		if d := m.GetDescribe(); d != nil {
			return d.GetSession(), "describe.session", true
		}
		if f := m.GetForget(); f != nil {
			return f.GetSession(), "forget.session", true
		}
		if d := m.GetDelete(); d != nil {
			return d.GetSession(), "delete.session", true
		}
	case *hostv1.GrantsRequest:
		if l := m.GetList(); l != nil {
			return l.GetSession(), "list.session", true
		}
		if r := m.GetRevoke(); r != nil {
			return r.GetSession(), "revoke.session", true
		}
		if a := m.GetApplyNetwork(); a != nil {
			return a.GetSession(), "apply_network.session", true
		}
	case *hostv1.ReadFileRequest:
		return m.GetSession(), "session", true
	case *hostv1.WriteFileRequest:
		return m.GetSession(), "session", true
	case *hostv1.ListFilesRequest:
		return m.GetSession(), "session", true
	case *hostv1.StatFileRequest:
		return m.GetSession(), "session", true
	case *hostv1.RemoveFileRequest:
		return m.GetSession(), "session", true
	case *hostv1.ChangesRequest:
		return m.GetSession(), "session", true
	case *hostv1.DiffRequest:
		return m.GetSession(), "session", true
	case *hostv1.ApplyRequest:
		return m.GetSession(), "session", true
	case *hostv1.DiscardRequest:
		return m.GetSession(), "session", true
	case *hostv1.ListProcessesRequest:
		if m.GetSession() != "" {
			return m.GetSession(), "session", true
		}
	case *hostv1.WriteProcessRequest:
		return s.processSession(m.GetId())
	case *hostv1.CloseProcessStdinRequest:
		return s.processSession(m.GetId())
	case *hostv1.ReadProcessRequest:
		return s.processSession(m.GetId())
	case *hostv1.SignalProcessRequest:
		return s.processSession(m.GetId())
	case *hostv1.ResizeProcessRequest:
		return s.processSession(m.GetId())
	case *hostv1.WaitProcessRequest:
		return s.processSession(m.GetId())
	case *hostv1.SignalRequest:
		return s.callSession(m.GetSignalKey())
	case *hostv1.WriteStdinRequest:
		return s.callSession(m.GetSignalKey())
	case *hostv1.CloseStdinRequest:
		return s.callSession(m.GetSignalKey())
	case *hostv1.ResizeTerminalRequest:
		return s.callSession(m.GetSignalKey())
	case *hostv1.ApproveRequest:
		if session, ok := s.broker.pendingSessionOf(m.GetId()); ok {
			return session, "approval request's session", true
		}
	}
	return "", "", false
}

// processSession is the session of the process id names, if one does: a
// process call is routed by the session the process belongs to. An id no
// process has is left to the handler (NotFound / process_unknown).
func (s *Server) processSession(id string) (string, string, bool) {
	if id == "" {
		return "", "", false
	}
	for _, p := range s.procs.List("") {
		if p.ID == id {
			return p.Session, "process's session", true
		}
	}
	return "", "", false
}

// callSession is the session of the running command key names, if one
// does.
func (s *Server) callSession(key string) (string, string, bool) {
	if key == "" {
		return "", "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.calls[key]; ok {
		return c.session, "command's session", true
	}
	return "", "", false
}
