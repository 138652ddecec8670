package service_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
	"github.com/aleph-sandbox/aleph-sandbox/service/client"
)

// markerDriver is the stand-in driver that leaves a file behind for
// every command it runs: a refused call must leave none.
type markerDriver struct {
	*drivertest.FakeDriver
	marker string
}

func (d *markerDriver) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	f, err := os.OpenFile(d.marker, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return driverapi.Exit{}, err
	}
	_, _ = f.WriteString(strings.Join(spec.Args, " ") + "\n")
	_ = f.Close()
	return d.FakeDriver.Run(ctx, spec, streams)
}

type identityServer struct {
	c         hostv1connect.ServiceClient
	srv       *service.Server
	url       string
	metrics   string
	marker    string
	workspace string
}

func newIdentityServer(t *testing.T, nodeID string) *identityServer {
	t.Helper()
	return newIdentityServerWith(t, nodeID, nil)
}

// newIdentityServerWith is newIdentityServer whose driver, when wrap is
// set, is wrap's of the marker driver.
func newIdentityServerWith(t *testing.T, nodeID string, wrap func(driverapi.Driver) driverapi.Driver) *identityServer {
	t.Helper()
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	cfg := core.DefaultConfig()
	cfg.Sandbox.WorkspaceRoot = filepath.Join(t.TempDir(), "ws")
	cfg.Sandbox.AuditLog = ""
	is := &identityServer{marker: filepath.Join(t.TempDir(), "ran"), workspace: cfg.Sandbox.WorkspaceRoot}
	var d driverapi.Driver = &markerDriver{FakeDriver: &drivertest.FakeDriver{Stdout: []byte("ok\n")}, marker: is.marker}
	if wrap != nil {
		d = wrap(d)
	}
	rt, err := alephsandbox.New(cfg, alephsandbox.WithDriver(drivertest.Connect(t, d)), alephsandbox.WithoutGrantStore())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	is.srv, err = service.New(service.Options{Host: rt, Broker: service.NewBroker(false, nil), NodeID: nodeID,
		Limits: cfg.Serve.Limits(cfg.Sandbox.MaxOutputBytes)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(is.srv.Close)
	hs := httptest.NewServer(is.srv.Handler())
	t.Cleanup(hs.Close)
	ms := httptest.NewServer(is.srv.MetricsHandler())
	t.Cleanup(ms.Close)
	is.c, is.url, is.metrics = hostv1connect.NewServiceClient(http.DefaultClient, hs.URL), hs.URL, ms.URL
	return is
}

// runs is how many commands the driver ran.
func (is *identityServer) runs(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(is.marker)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// workspaces are the workspace directories made so far.
func (is *identityServer) workspaces(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir(is.workspace)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// exec runs argv in session expecting incarnation expect (and header, if
// set, as X-Aleph-Incarnation).
func (is *identityServer) exec(t *testing.T, session, expect, header string) (*hostv1.ExecResult, error) {
	t.Helper()
	req := connect.NewRequest(&hostv1.ExecuteRequest{Session: session, Argv: []string{"/bin/echo", "hi"}, ExpectIncarnation: expect})
	if header != "" {
		req.Header().Set(service.IncarnationHeader, header)
	}
	st, err := is.c.Execute(context.Background(), req)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var res *hostv1.ExecResult
	for st.Receive() {
		if r := st.Msg().GetResult(); r != nil {
			res = r
		}
	}
	if err := st.Err(); err != nil {
		return nil, err
	}
	if res == nil {
		t.Fatal("no result")
	}
	return res, nil
}

var hex32 = regexp.MustCompile(`^[0-9a-f]{32}$`)

// Every result names the server and the session's incarnation: stable
// across a session's calls (commands, processes, files, describe), new
// when the session is made again after forget.
func TestIdentityInResults(t *testing.T) {
	is := newIdentityServer(t, "node-a")
	ctx := context.Background()
	first, err := is.exec(t, "s1", "", "")
	if err != nil {
		t.Fatal(err)
	}
	inc := first.GetSessionIncarnation()
	if first.GetNodeId() != "node-a" || !hex32.MatchString(inc) {
		t.Fatalf("first result: node %q incarnation %q", first.GetNodeId(), inc)
	}
	again, err := is.exec(t, "s1", inc, "")
	if err != nil || again.GetSessionIncarnation() != inc {
		t.Fatalf("second call of the session: %v %q, want %q", err, again.GetSessionIncarnation(), inc)
	}
	other, err := is.exec(t, "s2", "", "")
	if err != nil || other.GetSessionIncarnation() == inc || !hex32.MatchString(other.GetSessionIncarnation()) {
		t.Fatalf("another session: %v %q", err, other.GetSessionIncarnation())
	}

	d, err := is.c.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Describe{Describe: &hostv1.DescribeSession{Session: "s1"}}}))
	if err != nil || d.Msg.GetSessions()[0].GetIncarnation() != inc || d.Msg.GetSessions()[0].GetNodeId() != "node-a" {
		t.Fatalf("describe: %v %+v", err, d)
	}
	w, err := is.c.WriteFile(ctx, connect.NewRequest(&hostv1.WriteFileRequest{Session: "s1", Path: "a", Data: []byte("x"), ExpectIncarnation: inc}))
	if err != nil || w.Msg.GetSessionIncarnation() != inc || w.Msg.GetNodeId() != "node-a" {
		t.Fatalf("write file: %v %+v", err, w)
	}
	l, err := is.c.ListFiles(ctx, connect.NewRequest(&hostv1.ListFilesRequest{Session: "s1"}))
	if err != nil || l.Msg.GetSessionIncarnation() != inc {
		t.Fatalf("list files: %v %+v", err, l)
	}
	p, err := is.c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{Command: &hostv1.ExecuteRequest{Session: "s1", Argv: []string{"/bin/true"}}, ExpectIncarnation: inc}))
	if err != nil || p.Msg.GetSessionIncarnation() != inc || p.Msg.GetNodeId() != "node-a" {
		t.Fatalf("start process: %v %+v", err, p)
	}
	pw, err := is.c.WaitProcess(ctx, connect.NewRequest(&hostv1.WaitProcessRequest{Id: p.Msg.GetId()}))
	if err != nil || pw.Msg.GetResult().GetSessionIncarnation() != inc || pw.Msg.GetResult().GetNodeId() != "node-a" {
		t.Fatalf("wait process: %v %+v", err, pw)
	}
	caps, err := is.c.Capabilities(ctx, connect.NewRequest(&hostv1.CapabilitiesRequest{}))
	if err != nil || caps.Msg.GetNodeId() != "node-a" {
		t.Fatalf("capabilities: %v %+v", err, caps)
	}
	resp, err := http.Get(is.metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !strings.Contains(string(body), "aleph_sandbox_node_info{node_id=\"node-a\"} 1\n") {
		t.Fatalf("/metrics lacks the node info gauge:\n%s", body)
	}

	if _, err := is.c.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Forget{Forget: &hostv1.ForgetSession{Session: "s1"}}})); err != nil {
		t.Fatal(err)
	}
	re, err := is.exec(t, "s1", "", "")
	if err != nil || !hex32.MatchString(re.GetSessionIncarnation()) || re.GetSessionIncarnation() == inc {
		t.Fatalf("after forget: %v %q, want a new incarnation (was %q)", err, re.GetSessionIncarnation(), inc)
	}
}

func wantMoved(t *testing.T, what string, err error) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeFailedPrecondition {
		t.Fatalf("%s: %v, want failed_precondition", what, err)
	}
	if code, d := detail(t, err); code != connect.CodeFailedPrecondition || d.GetReasonCode() != service.ReasonSessionMoved {
		t.Fatalf("%s: %v %+v, want session_moved", what, code, d)
	}
	if !strings.Contains(ce.Message(), "new session") {
		t.Fatalf("%s: the message does not say what to do: %q", what, ce.Message())
	}
}

// A call expecting an incarnation this server does not hold (an unknown
// session: its server is gone; or another incarnation: it was made
// again) is refused session_moved before anything runs and before a
// workspace is made; the right expectation runs (the control).
func TestSessionMovedRefusedBeforeAnythingRuns(t *testing.T) {
	is := newIdentityServer(t, "node-b")
	ctx := context.Background()
	const stale = "0123456789abcdef0123456789abcdef"

	_, err := is.exec(t, "gone", stale, "")
	wantMoved(t, "execute of an unknown session", err)
	_, err = is.c.WriteFile(ctx, connect.NewRequest(&hostv1.WriteFileRequest{Session: "gone", Path: "a", Data: []byte("x"), ExpectIncarnation: stale}))
	wantMoved(t, "write file of an unknown session", err)
	_, err = is.c.ListFiles(ctx, connect.NewRequest(&hostv1.ListFilesRequest{Session: "gone", ExpectIncarnation: stale}))
	wantMoved(t, "list files of an unknown session", err)
	_, err = is.c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{Command: &hostv1.ExecuteRequest{Session: "gone", Argv: []string{"/bin/true"}}, ExpectIncarnation: stale}))
	wantMoved(t, "start process of an unknown session", err)
	if n := is.runs(t); n != 0 {
		t.Fatalf("%d commands ran for refused calls", n)
	}
	if n := is.workspaces(t); n != 0 {
		t.Fatalf("%d workspaces made for refused calls", n)
	}

	// The control: without an expectation the session is made and runs.
	res, err := is.exec(t, "s1", "", "")
	if err != nil || is.runs(t) != 1 || is.workspaces(t) == 0 {
		t.Fatalf("the control: %v, runs %d, workspaces %d", err, is.runs(t), is.workspaces(t))
	}
	inc := res.GetSessionIncarnation()
	if _, err := is.exec(t, "s1", inc, inc); err != nil || is.runs(t) != 2 {
		t.Fatalf("the right expectation (body and header): %v, runs %d", err, is.runs(t))
	}

	// Another incarnation (the body's or the header's alone).
	_, err = is.exec(t, "s1", stale, "")
	wantMoved(t, "execute of another incarnation", err)
	_, err = is.exec(t, "s1", "", stale)
	wantMoved(t, "execute of another incarnation in the header", err)
	_, err = is.c.Sessions(ctx, func() *connect.Request[hostv1.SessionsRequest] {
		r := connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Describe{Describe: &hostv1.DescribeSession{Session: "s1"}}})
		r.Header().Set(service.IncarnationHeader, stale)
		return r
	}())
	wantMoved(t, "describe with another incarnation in the header", err)

	// Forgotten and made again: the old incarnation is refused.
	if _, err := is.c.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Forget{Forget: &hostv1.ForgetSession{Session: "s1"}}})); err != nil {
		t.Fatal(err)
	}
	_, err = is.exec(t, "s1", inc, "")
	wantMoved(t, "execute after forget", err)
	if n := is.runs(t); n != 2 {
		t.Fatalf("runs %d after refused calls, want 2", n)
	}

	// A header that disagrees with the body is refused invalid_argument.
	other := "fedcba9876543210fedcba9876543210"
	_, err = is.exec(t, "s2", inc, other)
	if code, d := detail(t, err); code != connect.CodeInvalidArgument || d.GetField() != service.IncarnationHeader {
		t.Fatalf("header and body disagree: %v %+v", code, d)
	}
	if n := is.runs(t); n != 2 {
		t.Fatalf("runs %d after a refused disagreement, want 2", n)
	}
}

// Drain over the API: ready goes off, a new session is refused draining,
// the held session is still served; the answer counts what is held, and
// a second call says the drain had started already.
func TestDrainCall(t *testing.T) {
	is := newIdentityServer(t, "node-c")
	ctx := context.Background()
	if _, err := is.exec(t, "held", "", ""); err != nil {
		t.Fatal(err)
	}
	if ok, why := is.srv.Readiness(ctx); !ok {
		t.Fatalf("not ready before draining: %s", why)
	}
	d, err := is.c.Drain(ctx, connect.NewRequest(&hostv1.DrainRequest{}))
	if err != nil || !d.Msg.GetStarted() || d.Msg.GetSessions() != 1 || d.Msg.GetNodeId() != "node-c" || d.Msg.GetRunningCommands() != 0 {
		t.Fatalf("drain: %v %+v", err, d)
	}
	if ok, _ := is.srv.Readiness(ctx); ok {
		t.Fatal("ready after Drain")
	}
	if d, err := is.c.Drain(ctx, connect.NewRequest(&hostv1.DrainRequest{})); err != nil || d.Msg.GetStarted() {
		t.Fatalf("second drain: %v %+v", err, d)
	}
	_, err = is.exec(t, "new", "", "")
	if _, det := detail(t, err); det.GetReasonCode() != service.ReasonDraining {
		t.Fatalf("a new session while draining: %v", err)
	}
	if _, err := is.exec(t, "held", "", ""); err != nil {
		t.Fatalf("the held session while draining: %v", err)
	}
}

// A node id is 1-63 characters of A-Z a-z 0-9 . _ -; another is refused
// with a configuration error naming where it came from.
func TestNodeIDValidated(t *testing.T) {
	for _, ok := range []string{"a", "node-1", "pod_2.example", strings.Repeat("x", 63)} {
		if err := core.ValidateNodeID("--node-id", ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", 64), "a b", "a/b", "é", "a\x00"} {
		err := core.ValidateNodeID("--node-id", bad)
		var ce *core.ConfigError
		if !errors.As(err, &ce) || ce.Key != "--node-id" {
			t.Errorf("%q: %v, want a ConfigError naming --node-id", bad, err)
		}
	}
	var ce *core.ConfigError
	if err := (core.ServeConfig{NodeID: "bad id"}).Validate(); !errors.As(err, &ce) || ce.Key != "serve.node_id" {
		t.Fatalf("serve.node_id \"bad id\": %v", err)
	}
	if id, err := service.DefaultNodeID(); err != nil || core.ValidateNodeID("x", id) != nil {
		t.Fatalf("default node id %q: %v", id, err)
	}
}

// The Go client's Tracker: it remembers a session's incarnation from the
// first answer, sends it with later calls (a session made again
// elsewhere fails with ErrSessionMoved, and nothing runs), drops it on
// forget through it, and sends the session header.
func TestGoClientTracksIncarnations(t *testing.T) {
	is := newIdentityServer(t, "node-go")
	ctx := context.Background()
	tr := client.NewTracker()
	var headers []http.Header
	spy := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			headers = append(headers, req.Header().Clone())
			return next(ctx, req)
		}
	})
	c := hostv1connect.NewServiceClient(http.DefaultClient, is.url, client.WithTracker(tr), connect.WithInterceptors(spy))
	exec := func(session string) (*hostv1.ExecResult, error) {
		st, err := c.Execute(ctx, connect.NewRequest(&hostv1.ExecuteRequest{Session: session, Argv: []string{"/bin/true"}}))
		if err != nil {
			return nil, err
		}
		defer st.Close()
		var res *hostv1.ExecResult
		for st.Receive() {
			if r := st.Msg().GetResult(); r != nil {
				res = r
			}
		}
		return res, st.Err()
	}
	first, err := exec("go-1")
	if err != nil || tr.Incarnation("go-1") != first.GetSessionIncarnation() || first.GetSessionIncarnation() == "" {
		t.Fatalf("first call: %v, remembered %q of %+v", err, tr.Incarnation("go-1"), first)
	}
	if _, err := c.ListFiles(ctx, connect.NewRequest(&hostv1.ListFilesRequest{Session: "go-1"})); err != nil {
		t.Fatal(err)
	}
	h := headers[len(headers)-1]
	if h.Get(service.IncarnationHeader) != first.GetSessionIncarnation() || h.Get(service.SessionHeader) != "go-1" {
		t.Fatalf("headers of a later call: %v", h)
	}

	// Forgotten by another client: the tracked one is refused.
	other := hostv1connect.NewServiceClient(http.DefaultClient, is.url)
	if _, err := other.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Forget{Forget: &hostv1.ForgetSession{Session: "go-1"}}})); err != nil {
		t.Fatal(err)
	}
	runs := is.runs(t)
	_, err = exec("go-1")
	var sm *client.SessionMovedError
	var ce *connect.Error
	if !errors.Is(err, client.ErrSessionMoved) || !errors.As(err, &sm) || sm.Session != "go-1" || !errors.As(err, &ce) {
		t.Fatalf("a moved session: %v", err)
	}
	if _, err := c.WriteFile(ctx, connect.NewRequest(&hostv1.WriteFileRequest{Session: "go-1", Path: "a", Data: []byte("x")})); !errors.Is(err, client.ErrSessionMoved) {
		t.Fatalf("a file call of a moved session: %v", err)
	}
	if is.runs(t) != runs {
		t.Fatal("a command ran for a moved session")
	}
	// Forget through the tracked client: the next call makes it afresh.
	if _, err := c.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Forget{Forget: &hostv1.ForgetSession{Session: "go-1"}}})); err != nil {
		t.Fatal(err)
	}
	if tr.Incarnation("go-1") != "" {
		t.Fatal("forget kept the incarnation")
	}
	again, err := exec("go-1")
	if err != nil || again.GetSessionIncarnation() == first.GetSessionIncarnation() || tr.Incarnation("go-1") != again.GetSessionIncarnation() {
		t.Fatalf("after forget: %v %+v", err, again)
	}
	if client.SessionHeaderValue("a b%é") != "a%20b%25%C3%A9" {
		t.Fatalf("header value %q", client.SessionHeaderValue("a b%é"))
	}
}

// holdingDriver runs "hold" until its context ends, telling started
// first; anything else goes to the wrapped driver.
type holdingDriver struct {
	driverapi.Driver
	started chan struct{}
}

func (d *holdingDriver) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	if spec.Program != "hold" {
		return d.Driver.Run(ctx, spec, streams)
	}
	d.started <- struct{}{}
	<-ctx.Done()
	return driverapi.Exit{}, ctx.Err()
}

// A call let through expecting an incarnation is bound to that
// incarnation's life: forgetting the session while it runs ends it with
// session_moved, and the server does not hold the session again
// afterwards (the call made no new incarnation). A call with no
// expectation, forgotten the same way, is not answered session_moved
// (the control: the refusal comes from the binding).
func TestForgetEndsCallsExpectingTheIncarnation(t *testing.T) {
	started := make(chan struct{}, 1)
	is := newIdentityServerWith(t, "n1", func(d driverapi.Driver) driverapi.Driver { return &holdingDriver{Driver: d, started: started} })
	ctx := context.Background()
	for _, expect := range []bool{true, false} {
		session := fmt.Sprintf("held-%v", expect)
		first, err := is.exec(t, session, "", "")
		if err != nil {
			t.Fatal(err)
		}
		inc := first.GetSessionIncarnation()
		want := ""
		if expect {
			want = inc
		}
		done := make(chan error, 1)
		go func() {
			st, err := is.c.Execute(ctx, connect.NewRequest(&hostv1.ExecuteRequest{Session: session, Argv: []string{"hold"}, ExpectIncarnation: want}))
			if err != nil {
				done <- err
				return
			}
			defer st.Close()
			for st.Receive() {
			}
			done <- st.Err()
		}()
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("the held command ended before it started: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the held command did not start")
		}
		if _, err := is.c.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Forget{Forget: &hostv1.ForgetSession{Session: session}}})); err != nil {
			t.Fatal(err)
		}
		var err2 error
		select {
		case err2 = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the held command outlived its session's forget")
		}
		_, d := detail(t, err2)
		if expect {
			wantMoved(t, "a call expecting the forgotten incarnation", err2)
		} else if d.GetReasonCode() == service.ReasonSessionMoved {
			t.Fatalf("a call expecting nothing was answered session_moved: %v", err2)
		}
		l, err := is.c.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_List{List: &hostv1.ListSessions{}}}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ses := range l.Msg.GetSessions() {
			if ses.GetSession() == session && ses.GetIncarnation() != "" && !ses.GetPersistedOnly() {
				if expect {
					t.Fatalf("the ended call made the session again (incarnation %s)", ses.GetIncarnation())
				}
			}
		}
	}
}
