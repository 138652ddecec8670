package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// Identity: which server answered, and which life of a session there.
//
// Behind a router that places sessions on several servers, a session's
// state (workspace, grants, processes) lives on one server. When that
// server goes away, the router sends the session's next call elsewhere,
// and without more the new server would make the session afresh: an
// empty workspace the caller takes for its own. So every result names
// the server (its node id) and the session's incarnation there (a random
// id set when this server made the session), and a caller that sends the
// incarnation it expects is refused with session_moved, before anything
// runs, when this server does not hold that incarnation.

// ReasonSessionMoved is the reason code of a call whose expected session
// incarnation this server does not hold: the session's server is gone,
// or the session was forgotten and made again.
const ReasonSessionMoved = "session_moved"

// IncarnationHeader carries the incarnation the caller expects, beside
// the request's expect_incarnation (they must agree), for the calls that
// have no such field and for a proxy to see.
const IncarnationHeader = "X-Aleph-Incarnation"

// newIncarnation is 16 random bytes, hex: unguessable and never reused,
// so an incarnation names one life of one session on one server.
func newIncarnation() string {
	var b [16]byte
	// crypto/rand.Read never fails (it panics where the OS has no
	// randomness, and such a host cannot run a sandbox either).
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DefaultNodeID is the node id of a server not given one: its hostname,
// or the hostname's first label when the whole name is not a valid node
// id (longer than 63 characters).
func DefaultNodeID() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", &core.ConfigError{Key: "serve.node_id", Reason: fmt.Sprintf("not set, and the hostname cannot be read (%v): give --node-id", err)}
	}
	if core.ValidateNodeID("serve.node_id", h) == nil {
		return h, nil
	}
	if first, _, _ := strings.Cut(h, "."); core.ValidateNodeID("serve.node_id", first) == nil {
		return first, nil
	}
	return "", &core.ConfigError{Key: "serve.node_id", Reason: fmt.Sprintf("not set, and the hostname %q is not a valid node id (1-63 of A-Z a-z 0-9 . _ -): give --node-id", h)}
}

// NodeID is the server's node id.
func (s *Server) NodeID() string { return s.nodeID }

// incarnation is session's incarnation on this server ("" when it holds
// none).
func (s *Server) incarnation(session string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[session]
}

// sessionMoved is the refusal of a call expecting incarnation want of
// session, which this server holds as have ("" for not at all).
func (s *Server) sessionMoved(session, want, have string) error {
	why := "this server does not hold it: the server that held it is gone, or the session was forgotten"
	if have != "" {
		why = fmt.Sprintf("this server holds it as incarnation %s: it was forgotten or deleted and made again", have)
	}
	return withDetail(connect.CodeFailedPrecondition,
		fmt.Errorf("session %q incarnation %s is not here (node %s): %s; nothing ran. Start a new session (its workspace starts empty), or send no expected incarnation to accept a fresh one",
			session, want, s.nodeID, why),
		&hostv1.ErrorDetail{ReasonCode: ReasonSessionMoved, Field: "expect_incarnation"})
}

// expectedIncarnation is the incarnation msg's body expects ("" for none)
// and whether msg has such a field.
func expectedIncarnation(msg any) (string, bool) {
	switch m := msg.(type) {
	case *hostv1.ExecuteRequest:
		return m.GetExpectIncarnation(), true
	case *hostv1.StartProcessRequest:
		outer, inner := m.GetExpectIncarnation(), m.GetCommand().GetExpectIncarnation()
		if outer == "" {
			return inner, true
		}
		return outer, true
	case *hostv1.ReadFileRequest:
		return m.GetExpectIncarnation(), true
	case *hostv1.WriteFileRequest:
		return m.GetExpectIncarnation(), true
	case *hostv1.ListFilesRequest:
		return m.GetExpectIncarnation(), true
	case *hostv1.StatFileRequest:
		return m.GetExpectIncarnation(), true
	case *hostv1.RemoveFileRequest:
		return m.GetExpectIncarnation(), true
	}
	return "", false
}

// checkIncarnation refuses, before the handler does anything, a call whose
// expected incarnation (body or header) this server does not hold for the
// session the call names. A header and a body that disagree are refused
// invalid_argument, as the session header is. Forget and delete are
// never refused: dropping a session that moved is what the caller is told
// to do.
func (s *Server) checkIncarnation(h http.Header, msg any) (context.Context, error) {
	header := ""
	switch values := h.Values(IncarnationHeader); len(values) {
	case 0:
	case 1:
		header = values[0]
	default:
		return nil, incarnationHeaderInvalid(fmt.Sprintf("%s is given %d times: send it once", IncarnationHeader, len(values)))
	}
	body, _ := expectedIncarnation(msg)
	if m, ok := msg.(*hostv1.StartProcessRequest); ok {
		if o, i := m.GetExpectIncarnation(), m.GetCommand().GetExpectIncarnation(); o != "" && i != "" && o != i {
			return nil, invalid("expect_incarnation", fmt.Sprintf("%q disagrees with command.expect_incarnation %q: send one, or the same in both", o, i))
		}
	}
	if header != "" && body != "" && header != body {
		return nil, incarnationHeaderInvalid(fmt.Sprintf("%s %q disagrees with the request's expect_incarnation %q: send the same in both, or leave the header out",
			IncarnationHeader, header, body))
	}
	want := body
	if want == "" {
		want = header
	}
	if want == "" {
		return nil, nil
	}
	if m, ok := msg.(*hostv1.SessionsRequest); ok && (m.GetForget() != nil || m.GetDelete() != nil) {
		return nil, nil
	}
	session, _, ok := s.sessionOf(msg)
	if !ok {
		return nil, nil
	}
	// The incarnation and the session's life are read together: a
	// forget after this check cancels the life the call is bound to, so
	// a call let through never goes on in the session's next
	// incarnation (an empty workspace the caller did not expect).
	s.mu.Lock()
	have := s.sessions[session]
	var life context.Context
	if have == want {
		l := s.lives[session]
		if l == nil {
			l = newSessionLife()
			s.lives[session] = l
		}
		life = l.ctx
	}
	s.mu.Unlock()
	if have != want {
		return nil, s.sessionMoved(session, want, have)
	}
	return life, nil
}

func incarnationHeaderInvalid(msg string) error {
	return withDetail(connect.CodeInvalidArgument, errors.New(msg),
		&hostv1.ErrorDetail{ReasonCode: ReasonInvalidRequest, Field: IncarnationHeader})
}

// peerUIDKey is the context key of a unix-socket peer's uid.
type peerUIDKey struct{}

// WithPeerUID is the ConnContext of a server on unix sockets: it keeps
// the peer's uid in every request's context, for the calls that are the
// socket owner's alone (Drain).
func WithPeerUID(ctx context.Context, c net.Conn) context.Context {
	if uid, ok := connPeerUID(c); ok {
		return context.WithValue(ctx, peerUIDKey{}, uid)
	}
	return ctx
}

// connPeerUID is the peer uid of c, through the wrappers of the
// connection count.
func connPeerUID(c net.Conn) (uint32, bool) {
	for {
		if uc, ok := c.(*net.UnixConn); ok {
			uid, err := peerUID(uc)
			return uid, err == nil
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return 0, false
		}
		c = u.NetConn()
	}
}

// Drain implements the service: the drain a stopping serve starts,
// without the stop (health.go). On a unix socket it is the socket
// owner's (the server's uid) alone; over TCP the listener's
// authentication (mTLS or a token) has admitted the caller already.
func (s *Server) Drain(ctx context.Context, _ *connect.Request[hostv1.DrainRequest]) (*connect.Response[hostv1.DrainResponse], error) {
	if uid, ok := ctx.Value(peerUIDKey{}).(uint32); ok && uid != uint32(os.Getuid()) {
		return nil, withDetail(connect.CodePermissionDenied,
			fmt.Errorf("peer uid %d may run commands here but not drain the server: only its owner (uid %d) may", uid, os.Getuid()),
			&hostv1.ErrorDetail{ReasonCode: "not_owner"})
	}
	started := s.BeginDrain()
	s.mu.Lock()
	held := len(s.sessions)
	s.mu.Unlock()
	s.metrics.mu.Lock()
	running := s.metrics.inFlight
	s.metrics.mu.Unlock()
	procs := 0
	for _, p := range s.procs.List("") {
		if !p.Exited {
			procs++
		}
	}
	s.log.Info("drain requested", "started", started, "sessions", held, "running_commands", running, "running_processes", procs)
	return connect.NewResponse(&hostv1.DrainResponse{NodeId: s.nodeID, Started: started, Sessions: int64(held),
		RunningCommands: int64(running), RunningProcesses: int64(procs)}), nil
}

// errSessionEnded is the cause a session's life is cancelled with when the
// session is forgotten, deleted or expired.
var errSessionEnded = errors.New("the session was forgotten, deleted or expired while the call ran")

// sessionLife is one incarnation's life on this server.
type sessionLife struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newSessionLife() *sessionLife {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &sessionLife{ctx: ctx, cancel: cancel}
}

// endSession cancels the life of session id, ending the calls let through
// expecting its incarnation (their refusal is session_moved). The session
// stays held, with its cancelled life, until dropSession: a call checked
// in between is bound to the cancelled life and ends at once.
func (s *Server) endSession(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.lives[id]; l != nil {
		l.cancel(errSessionEnded)
	}
}

// dropSession is the end of session id on this server: no longer held,
// its incarnation and life gone.
func (s *Server) dropSession(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.lives[id]; l != nil {
		l.cancel(errSessionEnded)
		delete(s.lives, id)
	}
	delete(s.sessions, id)
}

// boundToLife is ctx, also cancelled when life is (nil: ctx itself);
// release frees what binds them.
func boundToLife(ctx context.Context, life context.Context) (context.Context, func()) {
	if life == nil {
		return ctx, func() {}
	}
	bound, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(life, func() { cancel(context.Cause(life)) })
	return bound, func() {
		stop()
		cancel(nil)
	}
}

// endedDuring turns err, the result of a call bound to a session's life
// that was cancelled meanwhile, into session_moved: the incarnation the
// call expected ended while it ran (what it had started was ended too,
// as forget ends a session's commands).
//
// A call that succeeded all the same is refused too: what it did was in
// the incarnation that ended (or, past the end, in a fresh workspace the
// caller did not expect), so it did not do what the caller asked.
func (s *Server) endedDuring(ctx context.Context, msg any, err error) error {
	if !errors.Is(context.Cause(ctx), errSessionEnded) {
		return err
	}
	session, _, _ := s.sessionOf(msg)
	want, _ := expectedIncarnation(msg)
	return withDetail(connect.CodeFailedPrecondition,
		fmt.Errorf("session %q incarnation %s ended while the call ran (node %s): it was forgotten, deleted or expired, and the call was ended with it. Start a new session, or send no expected incarnation to accept a fresh one", session, want, s.nodeID),
		&hostv1.ErrorDetail{ReasonCode: ReasonSessionMoved, Field: "expect_incarnation"})
}
