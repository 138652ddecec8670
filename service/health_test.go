package service

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// healthStatus asks the server's gRPC health service (as a load balancer
// does) about service.
func healthStatus(t *testing.T, base, service string) (grpchealth.Status, error) {
	t.Helper()
	c := grpchealth.NewClient(http.DefaultClient, base)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := c.Check(ctx, &grpchealth.CheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return r.Status, nil
}

// A server is alive and ready; draining turns ready off at once (on
// /readyz, the gRPC health service and the gauges) while /healthz stays
// up, refuses a new session with the draining reason and serves the
// session it held.
func TestDrainTurnsReadyOffAndRefusesNewSessions(t *testing.T) {
	srv, h, hs := newLimitServer(t, core.ServeLimits{})
	ms := httptest.NewServer(srv.MetricsHandler())
	t.Cleanup(ms.Close)

	if code, body := get(t, ms.URL+"/readyz"); code != 200 || body != "ready\n" {
		t.Fatalf("/readyz of a fresh server: %d %q", code, body)
	}
	for _, svc := range []string{"", hostv1connect.ServiceName} {
		if st, err := healthStatus(t, hs.URL, svc); err != nil || st != grpchealth.StatusServing {
			t.Fatalf("gRPC health of %q before draining: %v %v", svc, st, err)
		}
	}
	if _, err := healthStatus(t, hs.URL, "no.such.Service"); err == nil {
		t.Fatal("gRPC health of an unknown service answered")
	}
	if code, _, _ := execute(t, hs.URL, `{"session":"held","argv":["/bin/true"]}`); code != "" {
		t.Fatalf("a command before draining: %s", code)
	}

	srv.BeginDrain()
	if code, body := get(t, ms.URL+"/readyz"); code != 503 || !strings.Contains(body, "draining") {
		t.Fatalf("/readyz while draining: %d %q", code, body)
	}
	if code, body := get(t, ms.URL+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz while draining: %d %q", code, body)
	}
	if st, err := healthStatus(t, hs.URL, hostv1connect.ServiceName); err != nil || st != grpchealth.StatusNotServing {
		t.Fatalf("gRPC health while draining: %v %v", st, err)
	}
	_, metrics := get(t, ms.URL+"/metrics")
	for _, want := range []string{"aleph_sandbox_ready 0\n", "aleph_sandbox_draining 1\n", `aleph_sandbox_capacity_free{resource="sessions"} 0` + "\n"} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("/metrics while draining lacks %q:\n%s", want, metrics)
		}
	}
	before := h.runs()
	code, msg, _ := execute(t, hs.URL, `{"session":"new-one","argv":["/bin/true"]}`)
	if code != "unavailable" || !strings.Contains(msg, "draining") {
		t.Fatalf("a new session while draining: %s %q", code, msg)
	}
	if code, _, _ := execute(t, hs.URL, `{"session":"held","argv":["/bin/true"]}`); code != "" {
		t.Fatalf("the held session while draining: %s", code)
	}
	if h.runs() != before+1 {
		t.Fatalf("runs %d, want %d: the held session's command ran and the new one's did not", h.runs(), before+1)
	}
}

// Once DrainWait has seen no command running, the server takes no more:
// a held session's command is refused with the draining reason (it would
// otherwise run while the listeners close, and an HTTP/2 stream is not
// waited for by the HTTP server's shutdown), and the driver runs nothing.
// Control: while draining, before that, the held session's command runs.
func TestDrainWaitStopsTakingCommands(t *testing.T) {
	srv, h, hs := newLimitServer(t, core.ServeLimits{})
	if code, _, _ := execute(t, hs.URL, `{"session":"held","argv":["/bin/true"]}`); code != "" {
		t.Fatalf("a command before draining: %s", code)
	}
	srv.BeginDrain()
	if code, _, _ := execute(t, hs.URL, `{"session":"held","argv":["/bin/true"]}`); code != "" {
		t.Fatalf("control: the held session while draining: %s", code)
	}
	before := h.runs()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !srv.DrainWait(ctx, nil) {
		t.Fatal("DrainWait with no command running did not return true")
	}
	code, msg, _ := execute(t, hs.URL, `{"session":"held","argv":["/bin/true"]}`)
	if code != "unavailable" || !strings.Contains(msg, "stopping") {
		t.Fatalf("the held session after DrainWait: %s %q, want unavailable (draining)", code, msg)
	}
	if h.runs() != before {
		t.Fatalf("runs %d, want %d: the refused command ran", h.runs(), before)
	}
	if d := srv.metrics; d.inFlight != 0 {
		t.Fatalf("in flight after a refused command: %d", d.inFlight)
	}
}

// The server is not ready at its session cap, nor when its driver cannot
// start; it says which.
func TestReadinessNamesWhatIsMissing(t *testing.T) {
	srv, _, hs := newLimitServer(t, core.ServeLimits{MaxSessions: 1})
	if ok, why := srv.Readiness(context.Background()); !ok {
		t.Fatalf("a fresh server is not ready: %s", why)
	}
	if code, _, _ := execute(t, hs.URL, `{"session":"one","argv":["/bin/true"]}`); code != "" {
		t.Fatalf("the first session: %s", code)
	}
	if ok, why := srv.Readiness(context.Background()); ok || !strings.Contains(why, "serve.max_sessions") {
		t.Fatalf("at the session cap: ready %v %q", ok, why)
	}

	srv2, _, _ := newLimitServer(t, core.ServeLimits{})
	srv2.driverCheck = func(context.Context) error { return errors.New("exec: no such\nfile") }
	if ok, why := srv2.Readiness(context.Background()); ok || why != "driver down: exec: no such file" {
		t.Fatalf("with a driver that cannot start: ready %v %q", ok, why)
	}
}

// Drain on a unix socket is its owner's alone: a peer of another uid
// (one [serve] allowed_uids lets run commands) is refused and nothing
// drains; the owner's call drains (the control).
func TestDrainCallIsTheOwners(t *testing.T) {
	srv, _, _ := newLimitServer(t, core.ServeLimits{})
	other := context.WithValue(context.Background(), peerUIDKey{}, uint32(os.Getuid()+1))
	if _, err := srv.Drain(other, connect.NewRequest(&hostv1.DrainRequest{})); connect.CodeOf(err) != connect.CodePermissionDenied || srv.Draining() {
		t.Fatalf("another uid's drain: %v, draining %v", err, srv.Draining())
	}
	owner := context.WithValue(context.Background(), peerUIDKey{}, uint32(os.Getuid()))
	if r, err := srv.Drain(owner, connect.NewRequest(&hostv1.DrainRequest{})); err != nil || !r.Msg.GetStarted() || !srv.Draining() {
		t.Fatalf("the owner's drain: %v, draining %v", err, srv.Draining())
	}
}

// The capacity gauges say the configured caps and what is free under
// them: a session held takes one of serve.max_sessions, a process started
// and not yet waited for one of the process table's, and waiting for it
// gives that back; draining leaves no session free while the processes
// stay what they are.
func TestCapacityGauges(t *testing.T) {
	srv, _, hs := newLimitServer(t, core.ServeLimits{MaxSessions: 3, MaxConnections: 10})
	ms := httptest.NewServer(srv.MetricsHandler())
	t.Cleanup(ms.Close)
	gauge := func(name, resource string) string {
		t.Helper()
		_, body := get(t, ms.URL+"/metrics")
		prefix := name + `{resource="` + resource + `"} `
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				return v
			}
		}
		t.Fatalf("no %s{resource=%q} in:\n%s", name, resource, body)
		return ""
	}
	maxProcs := strconv.Itoa(srv.procs.Limits().Total)
	for _, c := range []struct{ name, resource, want string }{
		{"aleph_sandbox_capacity", "sessions", "3"},
		{"aleph_sandbox_capacity", "connections", "10"},
		{"aleph_sandbox_capacity", "processes", maxProcs},
		{"aleph_sandbox_capacity_free", "sessions", "3"},
		{"aleph_sandbox_capacity_free", "processes", maxProcs},
	} {
		if got := gauge(c.name, c.resource); got != c.want {
			t.Errorf("%s{%s} of a fresh server: %s, want %s", c.name, c.resource, got, c.want)
		}
	}
	c := hostv1connect.NewServiceClient(hs.Client(), hs.URL, connect.WithProtoJSON())
	ctx := context.Background()
	st, err := c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{Command: &hostv1.ExecuteRequest{Session: "s", Argv: []string{"/bin/true"}}}))
	if err != nil {
		t.Fatal(err)
	}
	less := strconv.Itoa(srv.procs.Limits().Total - 1)
	if s, p := gauge("aleph_sandbox_capacity_free", "sessions"), gauge("aleph_sandbox_capacity_free", "processes"); s != "2" || p != less {
		t.Errorf("with a session and a process held: sessions free %s, processes free %s; want 2 and %s", s, p, less)
	}
	if _, err := c.WaitProcess(ctx, connect.NewRequest(&hostv1.WaitProcessRequest{Id: st.Msg.GetId()})); err != nil {
		t.Fatal(err)
	}
	if p := gauge("aleph_sandbox_capacity_free", "processes"); p != maxProcs {
		t.Errorf("after the process was waited for: processes free %s, want %s", p, maxProcs)
	}
	srv.BeginDrain()
	if s, p := gauge("aleph_sandbox_capacity_free", "sessions"), gauge("aleph_sandbox_capacity_free", "processes"); s != "0" || p != maxProcs {
		t.Errorf("draining: sessions free %s, processes free %s; want 0 and %s", s, p, maxProcs)
	}
}
