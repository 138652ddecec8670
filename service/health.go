package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
)

// Health and drain: what a scheduler acts on.
//
// Alive (/healthz) is the process answering. Ready (/readyz, and the gRPC
// health service, for the whole server "" and for the host service) is
// whether a new session placed here now would be served: not while the
// server drains (Drain: a stopping serve's first signal, or a host's own
// call), not when the driver cannot be started, not when the server holds
// serve.max_sessions sessions or serve.max_connections connections. A
// server that is not ready still serves the sessions it holds: a router
// that keeps a session on its node (the session header) must not lose it
// because the node stopped taking new ones.

// ReasonDraining is the reason code of a new session refused because the
// server is draining: place it on another server.
const ReasonDraining = "draining"

// readyCheckTimeout bounds the driver's start within one readiness check.
const readyCheckTimeout = 5 * time.Second

// BeginDrain makes the server refuse new sessions (typed, ReasonDraining)
// and report itself not ready, while the sessions it holds go on being
// served. It cannot be undone: a draining server is on its way out. It
// reports whether this call started the drain. A stopping serve calls
// it; so does the Drain call of the service (identity.go).
func (s *Server) BeginDrain() bool {
	if s.draining.Swap(true) {
		return false
	}
	s.log.Info("draining: new sessions are refused, held sessions are served")
	return true
}

// Draining reports whether BeginDrain was called.
func (s *Server) Draining() bool { return s.draining.Load() }

// Readiness says whether a new session placed here would be served now,
// and if not, why (one line, for /readyz and the log).
func (s *Server) Readiness(ctx context.Context) (ready bool, why string) {
	if s.draining.Load() {
		return false, "draining"
	}
	s.mu.Lock()
	held := len(s.sessions)
	s.mu.Unlock()
	if held >= s.limits.MaxSessions {
		return false, fmt.Sprintf("at capacity: %d sessions held, serve.max_sessions = %d", held, s.limits.MaxSessions)
	}
	if open, _, _ := s.conns.stats(); s.limits.MaxConnections > 0 && open >= s.limits.MaxConnections {
		return false, fmt.Sprintf("at capacity: %d connections open, serve.max_connections = %d", open, s.limits.MaxConnections)
	}
	if s.driverCheck != nil {
		cctx, cancel := context.WithTimeout(ctx, readyCheckTimeout)
		defer cancel()
		if err := s.driverCheck(cctx); err != nil {
			return false, "driver down: " + strings.Join(strings.Fields(err.Error()), " ")
		}
	}
	return true, ""
}

// refuseIfDraining refuses a session the server does not hold while it
// drains.
func (s *Server) refuseIfDraining(held bool) error {
	if held || !s.draining.Load() {
		return nil
	}
	return withDetail(connect.CodeUnavailable,
		errors.New("the server is draining: it serves the sessions it holds and takes no new one; start the session on another server"),
		&hostv1.ErrorDetail{ReasonCode: ReasonDraining})
}

// healthChecker answers the gRPC health service from Readiness.
type healthChecker struct{ s *Server }

func (h healthChecker) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	switch req.Service {
	case "", hostv1connect.ServiceName:
	default:
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("unknown service %q", req.Service))
	}
	if ok, _ := h.s.Readiness(ctx); !ok {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

// healthRoutes adds /healthz and /readyz to mux.
func (s *Server) healthRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		ok, why := s.Readiness(r.Context())
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(why + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
}

// writeCapacity writes the gauges placement and autoscaling read: the
// configured caps, what is free under them, and readiness.
func (s *Server) writeCapacity(ctx context.Context, w io.Writer, g gauges) {
	var b strings.Builder
	// Processes are the bounded command slots: a StartProcess holds one
	// of sandbox.processes.max_total until it is waited for. Execute
	// calls have no slot count of their own (connections bound them).
	maxProcs := s.procs.Limits().Total
	b.WriteString("# HELP aleph_sandbox_capacity A configured cap, by resource (sessions: serve.max_sessions; connections: serve.max_connections; processes: sandbox.processes.max_total).\n")
	b.WriteString("# TYPE aleph_sandbox_capacity gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_capacity{resource=\"connections\"} %d\n", s.limits.MaxConnections)
	fmt.Fprintf(&b, "aleph_sandbox_capacity{resource=\"processes\"} %d\n", maxProcs)
	fmt.Fprintf(&b, "aleph_sandbox_capacity{resource=\"sessions\"} %d\n", s.limits.MaxSessions)
	b.WriteString("# HELP aleph_sandbox_capacity_free What is free under each cap now (sessions: 0 when draining, no new session is taken).\n")
	b.WriteString("# TYPE aleph_sandbox_capacity_free gauge\n")
	freeConns, freeSessions := max(s.limits.MaxConnections-g.connsOpen, 0), max(s.limits.MaxSessions-g.sessions, 0)
	if s.draining.Load() {
		freeSessions = 0
	}
	fmt.Fprintf(&b, "aleph_sandbox_capacity_free{resource=\"connections\"} %d\n", freeConns)
	fmt.Fprintf(&b, "aleph_sandbox_capacity_free{resource=\"processes\"} %d\n", max(maxProcs-g.procs.Held, 0))
	fmt.Fprintf(&b, "aleph_sandbox_capacity_free{resource=\"sessions\"} %d\n", freeSessions)
	ready, _ := s.Readiness(ctx)
	b.WriteString("# HELP aleph_sandbox_ready 1 when a new session placed here would be served (/readyz).\n")
	b.WriteString("# TYPE aleph_sandbox_ready gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_ready %d\n", boolInt(ready))
	b.WriteString("# HELP aleph_sandbox_draining 1 once the server drains (it serves the sessions it holds, takes no new one).\n")
	b.WriteString("# TYPE aleph_sandbox_draining gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_draining %d\n", boolInt(s.draining.Load()))
	b.WriteString("# HELP aleph_sandbox_node_info The server's node id (serve --node-id, else its hostname), as a label; always 1.\n")
	b.WriteString("# TYPE aleph_sandbox_node_info gauge\n")
	fmt.Fprintf(&b, "aleph_sandbox_node_info{node_id=%s} 1\n", label(s.nodeID))
	_, _ = io.WriteString(w, b.String())
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// DrainWait serves the sessions held until no Execute call runs, stop is
// closed, or ctx ends; it reports whether none runs. Processes started
// with StartProcess do not hold it: they are a session's background work
// and are warned and ended with the server, as before draining. A stopping serve calls it
// after Drain, before it closes its listeners, so that a session's next
// call in the grace period still reaches it. When it returns the server
// takes no more commands: an Execute is then refused with the draining
// reason.
func (s *Server) DrainWait(ctx context.Context, stop <-chan struct{}) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		// Once none runs, none starts: the HTTP server's shutdown that
		// follows waits for the streams its connections carry, and a held
		// session whose client keeps sending commands on an open HTTP/2
		// connection (until it reads the GOAWAY) would keep that wait,
		// and the drain, going. Such a command is refused instead, typed
		// (draining), and its client goes elsewhere.
		if s.metrics.quiesceIfIdle() {
			return true
		}
		select {
		case <-ctx.Done():
			s.metrics.quiesce()
			return false
		case <-stop:
			s.metrics.quiesce()
			return false
		case <-t.C:
		}
	}
}
