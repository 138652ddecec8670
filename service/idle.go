package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// Idle sessions (serve.session_idle_ttl). A session that has had no call,
// no running Execute and no running process for the TTL is deleted as
// Sessions delete does: its processes end, its HOME, kept grants and the
// workspace the sandbox made for it are removed, the driver forgets its
// session sandbox. The deletion is audited (reason session_expired) and
// counted in /metrics (aleph_sandbox_sessions_expired_total).
//
// Activity is what the calls themselves say: every call naming a session
// (its body, or a process id of it: sessionOf) marks the session busy
// while it runs and touched when it ends. A process started with
// StartProcess keeps its session alive while it runs, whether or not
// anyone reads it: an agent's dev server is not idle. A call that arrives
// while its session is being expired waits for the deletion to end and
// then runs on a fresh session, never on a half-removed one.

// idleTracker is the activity of the sessions, for the expiry.
type idleTracker struct {
	mu sync.Mutex
	// last is when a session's last call ended (or the sweep first saw
	// it); active counts its calls in progress.
	last   map[string]time.Time
	active map[string]int
	// expiring are the sessions being deleted now; a call of one waits
	// for its channel to close.
	expiring map[string]chan struct{}
	expired  atomic.Uint64
}

func newIdleTracker() *idleTracker {
	return &idleTracker{last: map[string]time.Time{}, active: map[string]int{}, expiring: map[string]chan struct{}{}}
}

// begin marks a call of session in progress, after any expiry of it under
// way has ended. It returns the call's end.
func (t *idleTracker) begin(ctx context.Context, session string) func() {
	for {
		t.mu.Lock()
		ch, ok := t.expiring[session]
		if !ok {
			t.active[session]++
			t.mu.Unlock()
			break
		}
		t.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			// The handler sees the cancelled context and fails the call.
			return func() {}
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			if t.active[session]--; t.active[session] <= 0 {
				delete(t.active, session)
			}
			t.last[session] = time.Now()
			t.mu.Unlock()
		})
	}
}

// idleTouch is the interceptor that tells the tracker of each unary call
// (a server stream's handler tells it itself: streamRequest).
func (s *Server) idleTouch() connect.HandlerOption {
	return connect.WithInterceptors(idleInterceptor{s})
}

type idleInterceptor struct{ s *Server }

func (i idleInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if session, _, ok := i.s.sessionOf(req.Any()); ok && session != "" {
			defer i.s.idle.begin(ctx, session)()
		}
		return next(ctx, req)
	}
}

func (idleInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler adds nothing: a server stream's handler marks its
// session itself (streamRequest in sessionheader.go), from its request to
// its end.
func (idleInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// StartIdleExpiry starts deleting sessions idle for serve.session_idle_ttl
// (nothing when it is 0) and returns what stops it; stop waits for an
// expiry under way to end. Serve stops it when it starts draining.
func (s *Server) StartIdleExpiry() (stop func()) {
	ttl := s.limits.SessionIdleTTL
	if ttl <= 0 {
		return func() {}
	}
	// A session goes within a quarter of the TTL after it has been idle
	// for it, and a long TTL is not checked more than once a minute.
	every := min(max(ttl/4, 100*time.Millisecond), time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				s.expireIdle(ctx, ttl)
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// idleExpirer is a host that can tell whether a session is idle in every
// process sharing its workspace root (alephsandbox.Runtime): it is held
// by nobody's command or file call, and its record's stamp is older than
// the TTL. It refuses with a *core.SessionKeptError otherwise.
type idleExpirer interface {
	ExpireIdleSession(ctx context.Context, id string, ttl time.Duration, seen time.Time) (time.Duration, error)
	// RecordedSessions are the sessions kept on disk with their record,
	// made by this process or another (a CLI's exec --session, an
	// earlier serve).
	RecordedSessions() []string
}

// expireIdle deletes the sessions idle for ttl now: those this server
// holds, and those only kept on disk (persisted-only: made by an earlier
// serve or another process on the same workspace root), whose use this
// server cannot see but the host can (idleExpirer).
func (s *Server) expireIdle(ctx context.Context, ttl time.Duration) {
	s.mu.Lock()
	held := make(map[string]bool, len(s.sessions))
	for n := range s.sessions {
		held[n] = true
	}
	s.mu.Unlock()
	expirer, shared := s.host.(idleExpirer)
	var recorded []string
	if shared {
		recorded = expirer.RecordedSessions()
	}
	// Listed before the tracker is locked: a process started after this
	// list was started by a call, which is active or ended after it (so
	// its session's last is later than the cutoff below).
	running := map[string]bool{}
	for _, p := range s.procs.List("") {
		if !p.Exited {
			running[p.Session] = true
		}
	}
	t := s.idle
	type victim struct {
		id string
		// seen is this server's last sight of a call of it (zero for a
		// persisted-only session).
		seen time.Time
		ch   chan struct{}
	}
	var victims []victim
	t.mu.Lock()
	now := time.Now()
	for n := range held {
		if t.active[n] > 0 || running[n] {
			t.last[n] = now
			continue
		}
		l, ok := t.last[n]
		if !ok {
			// Held without a call seen (a session resumed from disk by
			// Grants, say): its clock starts now.
			t.last[n] = now
			continue
		}
		if now.Sub(l) >= ttl {
			ch := make(chan struct{})
			t.expiring[n] = ch
			victims = append(victims, victim{n, l, ch})
		}
	}
	// Persisted-only sessions: the host judges them by their stamp and
	// hold (one in a call here is active, and so not judged at all).
	for _, n := range recorded {
		if held[n] || t.active[n] > 0 || running[n] {
			continue
		}
		if _, ok := t.expiring[n]; ok {
			continue
		}
		ch := make(chan struct{})
		t.expiring[n] = ch
		victims = append(victims, victim{id: n, ch: ch})
	}
	// Sessions no longer held (forgotten, deleted) and not in a call are
	// not tracked further: the map stays as large as the sessions held.
	for n := range t.last {
		if !held[n] && t.active[n] == 0 {
			delete(t.last, n)
		}
	}
	t.mu.Unlock()
	for _, v := range victims {
		gone := s.expireSession(ctx, v.id, ttl, v.seen)
		t.mu.Lock()
		delete(t.expiring, v.id)
		if gone {
			delete(t.last, v.id)
		}
		t.mu.Unlock()
		close(v.ch)
	}
}

// expireSession deletes one idle session, as Sessions delete does, and
// audits it when the runtime can; it reports whether the session went (a
// session another process holds, or used within the TTL, stays).
func (s *Server) expireSession(ctx context.Context, id string, ttl time.Duration, seen time.Time) bool {
	var err error
	idle := time.Since(seen)
	switch h := s.host.(type) {
	case idleExpirer:
		// The host decides under the session's lock: a command of
		// another process that started after this sweep looked holds it
		// or has stamped it.
		idle, err = h.ExpireIdleSession(ctx, id, ttl, seen)
		var kept *core.SessionKeptError
		if errors.As(err, &kept) {
			s.log.Debug("idle session kept", "session", id, "reason", kept.Reason)
			return false
		}
		// The calls let through expecting its incarnation end (none
		// runs, or the session would be held), then its processes: none
		// runs, ended ones not waited for are dropped.
		s.endSession(id)
		s.procs.ForgetSession(id)
	case interface {
		ExpireSession(context.Context, string, time.Duration) error
	}:
		// The calls let through expecting its incarnation end first,
		// then its processes (none runs, but ended ones not waited for
		// are held): none may outlive it.
		s.endSession(id)
		s.procs.ForgetSession(id)
		err = h.ExpireSession(ctx, id, idle)
	case interface{ DeleteSession(string) error }:
		s.endSession(id)
		s.procs.ForgetSession(id)
		err = h.DeleteSession(id)
	default:
		s.endSession(id)
		s.procs.ForgetSession(id)
		s.host.ForgetSession(id)
	}
	s.dropSession(id)
	s.idle.expired.Add(1)
	if err != nil {
		s.log.Error("idle session deleted, but its workspace could not be removed", "session", id, "error", err)
		return true
	}
	s.log.Info("idle session deleted", "session", id, "idle", idle.Round(time.Second).String())
	return true
}

// writeIdleMetrics adds the expiry's counter to /metrics.
func (s *Server) writeIdleMetrics(w io.Writer) {
	_, _ = fmt.Fprintf(w, "# HELP aleph_sandbox_sessions_expired_total Sessions deleted because they sat idle for serve.session_idle_ttl.\n"+
		"# TYPE aleph_sandbox_sessions_expired_total counter\naleph_sandbox_sessions_expired_total %d\n", s.idle.expired.Load())
}
