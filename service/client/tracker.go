package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// ErrSessionMoved is what errors.Is finds in a call refused because the
// server does not hold the session incarnation this client saw: the
// session's server is gone, or the session was forgotten and made again.
// Nothing ran. Start a new session, or forget this one (through the same
// client) to accept a fresh, empty one under its name.
var ErrSessionMoved = errors.New("session moved")

// SessionMovedError is a call refused with reason session_moved: Session
// names the session, Err is the service's error (a *connect.Error).
type SessionMovedError struct {
	Session string
	Err     error
}

func (e *SessionMovedError) Error() string {
	return fmt.Sprintf("session %q moved: %v", e.Session, e.Err)
}

// Unwrap gives both ErrSessionMoved and the service's error, so that
// errors.Is(err, ErrSessionMoved) and errors.As(err, **connect.Error)
// both hold.
func (e *SessionMovedError) Unwrap() []error { return []error{ErrSessionMoved, e.Err} }

// Tracker remembers the incarnation of each session from its first answer
// and sends it (the body's expect_incarnation and X-Aleph-Incarnation)
// with every later call of that session, so that behind a router a
// session whose server went away fails with ErrSessionMoved instead of
// running in a fresh, empty workspace. A forget or delete of a session
// through it drops what it remembers. It also sends X-Aleph-Session on
// every call naming a session in its body, for the router. Use it as a
// connect.Interceptor of the client (Unix does with WithTracker); one
// Tracker per client: what it remembers is that client's view.
//
// A process started through it is remembered with its session, so that
// the calls naming the process by id (write, read, signal, wait, close
// stdin, resize), whose bodies name no session, carry its session header and
// incarnation too: behind a router they reach the server that runs it.
type Tracker struct {
	mu    sync.Mutex
	inc   map[string]string
	procs map[string]string // process id -> session
}

// maxTrackedProcesses bounds what a Tracker remembers of processes: past
// it the table starts afresh (a process it forgot is still reachable on
// one server; behind a router its calls then go without the header).
const maxTrackedProcesses = 4096

// NewTracker is a Tracker remembering nothing yet.
func NewTracker() *Tracker { return &Tracker{inc: map[string]string{}, procs: map[string]string{}} }

// learnProcess remembers that process id belongs to session.
func (t *Tracker) learnProcess(id, session string) {
	if id == "" || session == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.procs) >= maxTrackedProcesses {
		clear(t.procs)
	}
	t.procs[id] = session
}

// processSession is the session of process id ("" when not remembered).
func (t *Tracker) processSession(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.procs[id]
}

// processOfRequest is the process id a by-id process call names.
func processOfRequest(msg any) string {
	switch m := msg.(type) {
	case *hostv1.WriteProcessRequest:
		return m.GetId()
	case *hostv1.CloseProcessStdinRequest:
		return m.GetId()
	case *hostv1.ReadProcessRequest:
		return m.GetId()
	case *hostv1.SignalProcessRequest:
		return m.GetId()
	case *hostv1.WaitProcessRequest:
		return m.GetId()
	case *hostv1.ResizeProcessRequest:
		return m.GetId()
	}
	return ""
}

// Incarnation is the incarnation of session this tracker saw first ("" for
// none).
func (t *Tracker) Incarnation(session string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inc[session]
}

// Forget drops what the tracker remembers of session: its next call makes
// it afresh.
func (t *Tracker) Forget(session string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.inc, session)
	for id, s := range t.procs {
		if s == session {
			delete(t.procs, id)
		}
	}
}

func (t *Tracker) learn(session, inc string) {
	if session == "" || inc == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.inc[session]; !ok {
		t.inc[session] = inc
	}
}

// sessionOfRequest is the session msg names in its body, and whether msg
// drops it (forget, delete).
func sessionOfRequest(msg any) (session string, drops bool) {
	switch m := msg.(type) {
	case *hostv1.ExecuteRequest:
		return m.GetSession(), false
	case *hostv1.StartProcessRequest:
		return m.GetCommand().GetSession(), false
	case *hostv1.ReadFileRequest:
		return m.GetSession(), false
	case *hostv1.WriteFileRequest:
		return m.GetSession(), false
	case *hostv1.ListFilesRequest:
		return m.GetSession(), false
	case *hostv1.StatFileRequest:
		return m.GetSession(), false
	case *hostv1.RemoveFileRequest:
		return m.GetSession(), false
	case *hostv1.SessionsRequest:
		switch {
		case m.GetDescribe() != nil:
			return m.GetDescribe().GetSession(), false
		case m.GetForget() != nil:
			return m.GetForget().GetSession(), true
		case m.GetDelete() != nil:
			return m.GetDelete().GetSession(), true
		}
	case *hostv1.GrantsRequest:
		switch {
		case m.GetList() != nil:
			return m.GetList().GetSession(), false
		case m.GetRevoke() != nil:
			return m.GetRevoke().GetSession(), false
		case m.GetApplyNetwork() != nil:
			return m.GetApplyNetwork().GetSession(), false
		}
	}
	return "", false
}

// routedSessionOf is the session of a call whose body names one but
// carries no expected incarnation (the layered calls, a process list of
// one session): the session header is all it gets, for the router.
func routedSessionOf(msg any) string {
	switch m := msg.(type) {
	case *hostv1.ChangesRequest:
		return m.GetSession()
	case *hostv1.DiffRequest:
		return m.GetSession()
	case *hostv1.ApplyRequest:
		return m.GetSession()
	case *hostv1.DiscardRequest:
		return m.GetSession()
	case *hostv1.ListProcessesRequest:
		return m.GetSession()
	}
	return ""
}

// setExpect puts inc in msg's expect_incarnation, unless it names one.
func setExpect(msg any, inc string) {
	switch m := msg.(type) {
	case *hostv1.ExecuteRequest:
		if m.ExpectIncarnation == "" {
			m.ExpectIncarnation = inc
		}
	case *hostv1.StartProcessRequest:
		if m.ExpectIncarnation == "" && m.GetCommand().GetExpectIncarnation() == "" {
			m.ExpectIncarnation = inc
		}
	case *hostv1.ReadFileRequest:
		if m.ExpectIncarnation == "" {
			m.ExpectIncarnation = inc
		}
	case *hostv1.WriteFileRequest:
		if m.ExpectIncarnation == "" {
			m.ExpectIncarnation = inc
		}
	case *hostv1.ListFilesRequest:
		if m.ExpectIncarnation == "" {
			m.ExpectIncarnation = inc
		}
	case *hostv1.StatFileRequest:
		if m.ExpectIncarnation == "" {
			m.ExpectIncarnation = inc
		}
	case *hostv1.RemoveFileRequest:
		if m.ExpectIncarnation == "" {
			m.ExpectIncarnation = inc
		}
	}
}

// incarnationOf is the session incarnation an answer names ("" for none).
func incarnationOf(msg any) string {
	switch m := msg.(type) {
	case *hostv1.ExecuteResponse:
		return m.GetResult().GetSessionIncarnation()
	case *hostv1.StartProcessResponse:
		return m.GetSessionIncarnation()
	case *hostv1.ReadFileResponse:
		return m.GetSessionIncarnation()
	case *hostv1.WriteFileResponse:
		return m.GetSessionIncarnation()
	case *hostv1.ListFilesResponse:
		return m.GetSessionIncarnation()
	case *hostv1.StatFileResponse:
		return m.GetSessionIncarnation()
	case *hostv1.RemoveFileResponse:
		return m.GetSessionIncarnation()
	}
	return ""
}

type sessionKey struct{}

// WithSession is ctx for calls that concern session though their request
// names none (those of a command named by its signal key): a Tracker sends
// X-Aleph-Session with them too. A request that names a session is sent
// with that one.
func WithSession(ctx context.Context, session string) context.Context {
	return context.WithValue(ctx, sessionKey{}, session)
}

// SessionHeaderValue is session as the X-Aleph-Session header carries it:
// percent-encoded (a byte outside the printable ASCII range, and '%', as
// %XX), so that any session name is a valid header value.
func SessionHeaderValue(session string) string {
	var b strings.Builder
	for i := 0; i < len(session); i++ {
		c := session[i]
		if c <= ' ' || c > '~' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// before prepares a request of session: the forget of a session drops it;
// another call carries the session header and, when one is remembered,
// the expected incarnation (header and body).
func (t *Tracker) before(ctx context.Context, msg any, set func(k, v string)) string {
	session, drops := sessionOfRequest(msg)
	if s := routedSessionOf(msg); s != "" {
		set(service.SessionHeader, SessionHeaderValue(s))
		return ""
	}
	if session == "" {
		// A call whose body names no session (Signal, WriteStdin,
		// CloseStdin, ResizeTerminal: by signal key) still concerns the
		// session its caller named in ctx: the header only, so that a
		// router sends it where the session's command runs. The server
		// has nothing in such a body to compare it with.
		if s, ok := ctx.Value(sessionKey{}).(string); ok && s != "" {
			set(service.SessionHeader, SessionHeaderValue(s))
			return ""
		}
		// A process named by id: the session it was started in, with
		// the incarnation remembered of it (the server compares the
		// header with the process's session).
		if s := t.processSession(processOfRequest(msg)); s != "" {
			set(service.SessionHeader, SessionHeaderValue(s))
			if inc := t.Incarnation(s); inc != "" {
				set(service.IncarnationHeader, inc)
			}
			return s
		}
		return ""
	}
	set(service.SessionHeader, SessionHeaderValue(session))
	if drops {
		t.Forget(session)
		return ""
	}
	if inc := t.Incarnation(session); inc != "" {
		setExpect(msg, inc)
		set(service.IncarnationHeader, inc)
	}
	return session
}

// after learns from an answer, or makes a session_moved refusal an
// ErrSessionMoved.
func (t *Tracker) after(session string, msg any, err error) error {
	if err != nil {
		if Reason(err) == service.ReasonSessionMoved {
			return &SessionMovedError{Session: session, Err: err}
		}
		return err
	}
	t.learn(session, incarnationOf(msg))
	if r, ok := msg.(*hostv1.StartProcessResponse); ok {
		t.learnProcess(r.GetId(), session)
	}
	return nil
}

// WrapUnary implements connect.Interceptor.
func (t *Tracker) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			session := t.before(ctx, req.Any(), req.Header().Set)
			resp, err := next(ctx, req)
			var msg any
			if err == nil {
				msg = resp.Any()
			}
			return resp, t.after(session, msg, err)
		}
		return next(ctx, req)
	}
}

// WrapStreamingClient implements connect.Interceptor.
func (t *Tracker) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return &trackedConn{StreamingClientConn: next(ctx, spec), t: t, ctx: ctx}
	}
}

// WrapStreamingHandler implements connect.Interceptor (nothing: a client's).
func (t *Tracker) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// trackedConn is a server stream of the client (Execute, ReadFile).
type trackedConn struct {
	connect.StreamingClientConn
	t       *Tracker
	session string
	// ctx is the call's (WithSession).
	ctx context.Context
}

func (c *trackedConn) Send(msg any) error {
	c.session = c.t.before(c.ctx, msg, c.RequestHeader().Set)
	return c.StreamingClientConn.Send(msg)
}

func (c *trackedConn) Receive(msg any) error {
	err := c.StreamingClientConn.Receive(msg)
	if errors.Is(err, io.EOF) {
		return err
	}
	return c.t.after(c.session, msg, err)
}
