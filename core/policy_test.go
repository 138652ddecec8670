package core

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// scriptedHook answers Before with a fixed verdict, error or stall, and
// records After calls.
type scriptedHook struct {
	name     string
	verdict  driverapi.Verdict
	err      error
	stall    bool
	panicMsg string

	mu     sync.Mutex
	before int
	after  []bool
	last   driverapi.HookRequest
}

func (h *scriptedHook) Describe(context.Context) (driverapi.HookInfo, error) {
	return driverapi.HookInfo{Name: h.name, Version: "1"}, nil
}

func (h *scriptedHook) Before(ctx context.Context, req driverapi.HookRequest) (driverapi.Verdict, error) {
	h.mu.Lock()
	h.before++
	h.last = req
	h.mu.Unlock()
	if h.panicMsg != "" {
		panic(h.panicMsg)
	}
	if h.stall {
		<-ctx.Done()
		return driverapi.Verdict{}, ctx.Err()
	}
	return h.verdict, h.err
}

func (h *scriptedHook) After(_ context.Context, _, _ string, ran bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.after = append(h.after, ran)
}

func (h *scriptedHook) calls() (int, []bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.before, append([]bool(nil), h.after...)
}

func allow(name string) *scriptedHook {
	return &scriptedHook{name: name, verdict: driverapi.Verdict{Action: driverapi.ActionAllow}}
}

func TestHookDeny(t *testing.T) {
	first := allow("first")
	deny := &scriptedHook{name: "policy", verdict: driverapi.Verdict{Action: driverapi.ActionDeny, Rule: "rm-root", Reason: "deletes /", RetryAfter: 3 * time.Second}}
	third := allow("third")
	// The denying hook crosses real gRPC as a plugin hook would.
	h := newHarness(t, testConfig(t), nil, WithHooks(first, drivertest.ConnectHook(t, deny), third))
	_, err := h.sb.Execute(WithSession(context.Background(), "h"), Command{Program: "rm", Args: []string{"-rf", "/"}, Stdin: []byte("script"), Env: map[string]string{"SECRETVAR": "v"}})
	de := wantDenied(t, err, ReasonHookDenied)
	if de.Rule != "rm-root" || de.Hook != "policy" || de.RetryAfter != 3*time.Second || de.Reason != "deletes /" {
		t.Fatalf("denial %+v", de)
	}
	if h.fake.Runs() != 0 {
		t.Fatal("denied command ran")
	}
	if n, _ := third.calls(); n != 0 {
		t.Fatal("hook after the denying one was asked")
	}
	if _, after := first.calls(); len(after) != 1 || after[0] {
		t.Fatalf("After for the allowing hook: %v (want one call, ran=false)", after)
	}
	if _, after := deny.calls(); len(after) != 0 {
		t.Fatal("After called for the denying hook")
	}
	req := first.last
	if req.Program != "rm" || len(req.Args) != 2 || string(req.Stdin) != "script" || len(req.EnvNames) != 1 || req.EnvNames[0] != "SECRETVAR" {
		t.Fatalf("hook request %+v", req)
	}
	r := h.sink.last(t)
	if r.Reason != ReasonHookDenied || r.Rule != "rm-root" || r.Hook != "policy" || len(r.Verdicts) != 2 {
		t.Fatalf("audit %+v", r)
	}
}

func TestHookWarnAndAllow(t *testing.T) {
	a := allow("a")
	w := &scriptedHook{name: "w", verdict: driverapi.Verdict{Action: driverapi.ActionWarn, Rule: "curl-sh", Reason: "pipes to sh"}}
	h := newHarness(t, testConfig(t), nil, WithHooks(a, w))
	out, err := h.sb.Execute(WithSession(context.Background(), "h"), Command{Program: "echo", Args: []string{"hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Verdicts) != 2 || out.Verdicts[1].Action != driverapi.ActionWarn || out.Verdicts[1].Hook != "w" || out.Verdicts[1].Rule != "curl-sh" {
		t.Fatalf("verdicts %+v", out.Verdicts)
	}
	r := h.sink.last(t)
	if r.Reason != ReasonHookWarned || r.Decision != DecisionAllow || len(r.Verdicts) != 2 {
		t.Fatalf("audit %+v", r)
	}
	for _, hk := range []*scriptedHook{a, w} {
		if _, after := hk.calls(); len(after) != 1 || !after[0] {
			t.Fatalf("%s After %v, want [true]", hk.name, after)
		}
	}
}

func TestHookFailuresFailClosed(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.HookTimeoutMS = 50
	cases := []struct {
		hook *scriptedHook
		want string
	}{
		{&scriptedHook{name: "broken", err: errors.New("rules file unreadable")}, "rules file unreadable"},
		{&scriptedHook{name: "slow", stall: true}, "sandbox.hook_timeout_ms"},
		{&scriptedHook{name: "odd", verdict: driverapi.Verdict{Action: 42}}, "unknown verdict action"},
		{&scriptedHook{name: "zero"}, "unknown verdict action"},
		{&scriptedHook{name: "panicky", panicMsg: "nil map"}, "panic: nil map"},
	}
	for _, c := range cases {
		before := allow("before")
		h := newHarness(t, cfg, nil, WithHooks(before, c.hook))
		_, err := h.sb.Execute(WithSession(context.Background(), "h"), Command{Program: "echo"})
		var he *HookError
		if !errors.As(err, &he) || he.Hook != c.hook.name || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.hook.name) {
			t.Fatalf("%s: err %T %v", c.hook.name, err, err)
		}
		if h.fake.Runs() != 0 {
			t.Fatalf("%s: command ran despite failed hook", c.hook.name)
		}
		if r := h.sink.last(t); r.Reason != ReasonHookFailed || r.Hook != c.hook.name {
			t.Fatalf("audit %+v", r)
		}
		if _, after := before.calls(); len(after) != 1 || after[0] {
			t.Fatalf("After %v", after)
		}
	}
}

func TestApprovalApprovedCachesGrant(t *testing.T) {
	ap := &drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved}
	h := newHarness(t, testConfig(t), nil, WithApprovalRequester(ap))
	ctx := WithSession(context.Background(), "ap")
	// Granted paths must exist: data/ and data/sub/ of a temp dir.
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(data, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	wide := driverapi.Capabilities{FSRead: []string{data}, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}, SpawnSubprocess: true}
	if _, err := h.sb.Execute(ctx, Command{Program: "echo", Args: []string{"secret-arg"}, Capabilities: wide}); err != nil {
		t.Fatal(err)
	}
	reqs := ap.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d approval requests", len(reqs))
	}
	if s := reqs[0].Summary; !strings.Contains(s, "network access to all hosts") || !strings.Contains(s, "read access to "+data) || !strings.Contains(s, "subprocesses") {
		t.Fatalf("summary %q", s)
	}
	if reqs[0].SessionID != "ap" || reqs[0].Program != "echo" {
		t.Fatalf("request %+v", reqs[0])
	}
	if r := h.sink.last(t); r.Reason != ReasonApprovalGranted {
		t.Fatalf("audit %+v", r)
	}
	// Same and narrower: no new question.
	narrow := driverapi.Capabilities{FSRead: []string{filepath.Join(data, "sub")}, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"x.org"}}}
	for _, c := range []driverapi.Capabilities{wide, narrow, {SpawnSubprocess: true}} {
		c := c
		if c.Network.Mode == driverapi.NetworkAllowHosts {
			continue // needs a mediator; covered in TestSecretsWithMediation
		}
		if _, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: c}); err != nil {
			t.Fatal(err)
		}
		if r := h.sink.last(t); r.Reason != ReasonGrantCached {
			t.Fatalf("audit %+v", r)
		}
	}
	if n := len(ap.Requests()); n != 1 {
		t.Fatalf("narrower request asked again: %d requests", n)
	}
	// Wider than the grant: asks again. Another session: asks again.
	if _, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{data}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.sb.Execute(WithSession(context.Background(), "other"), Command{Program: "echo", Capabilities: wide}); err != nil {
		t.Fatal(err)
	}
	if n := len(ap.Requests()); n != 3 {
		t.Fatalf("want 3 requests, got %d", n)
	}
}

// An approval for this command only runs the command and keeps nothing:
// the next command of the session asking the same is asked again, and
// no grant is listed. Control: the same command ran (the driver saw it).
func TestApprovalApprovedOnceKeepsNoGrant(t *testing.T) {
	ap := &drivertest.FakeApprover{Outcome: driverapi.ApprovalApprovedOnce}
	h := newHarness(t, testConfig(t), nil, WithApprovalRequester(ap))
	ctx := WithSession(context.Background(), "once")
	spawn := driverapi.Capabilities{SpawnSubprocess: true}
	for i := 1; i <= 2; i++ {
		if _, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: spawn}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if r := h.sink.last(t); r.Reason != ReasonApprovalGrantedOnce {
			t.Fatalf("call %d: audit %+v", i, r)
		}
		if n := len(ap.Requests()); n != i {
			t.Fatalf("call %d: %d approval requests, want %d (a once-approval was kept)", i, n, i)
		}
	}
	if h.fake.Runs() != 2 {
		t.Fatalf("%d runs, want 2", h.fake.Runs())
	}
	if g := h.sb.Grants("once"); len(g.Grants) != 0 {
		t.Fatalf("grants kept: %+v", g.Grants)
	}
	// Control: a plain yes is kept, and the next call is not asked.
	ap.Outcome = driverapi.ApprovalApproved
	for i := 0; i < 2; i++ {
		if _, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: spawn}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(ap.Requests()); n != 3 {
		t.Fatalf("control: %d approval requests, want 3", n)
	}
}

func TestApprovalDeniedAndTimeout(t *testing.T) {
	net := driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}
	cases := []struct {
		name string
		ap   ApprovalRequester
		code ReasonCode
	}{
		{"denied", &drivertest.FakeApprover{Outcome: driverapi.ApprovalDenied}, ReasonApprovalDenied},
		{"timeout-outcome", &drivertest.FakeApprover{Outcome: driverapi.ApprovalTimeout}, ReasonApprovalTimeout},
		{"error", &drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved, Err: errors.New("ui gone")}, ReasonApprovalDenied},
		{"none", nil, ReasonApprovalDenied},
	}
	for _, c := range cases {
		var opts []Option
		if c.ap != nil {
			opts = append(opts, WithApprovalRequester(c.ap))
		}
		h := newHarness(t, testConfig(t), nil, opts...)
		ctx := WithSession(context.Background(), "ap")
		_, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: net})
		de := wantDenied(t, err, c.code)
		if !strings.Contains(de.Reason, "network access to all hosts") {
			t.Fatalf("%s: reason %q", c.name, de.Reason)
		}
		if h.fake.Runs() != 0 {
			t.Fatalf("%s: ran", c.name)
		}
		if r := h.sink.last(t); r.Reason != c.code || r.Decision != DecisionDeny {
			t.Fatalf("%s: audit %+v", c.name, r)
		}
		// Nothing was cached: the baseline still runs (positive control)
		// and the elevation is still refused.
		if _, err := h.sb.Execute(ctx, Command{Program: "echo"}); err != nil {
			t.Fatal(err)
		}
		_, err = h.sb.Execute(ctx, Command{Program: "echo", Capabilities: net})
		wantDenied(t, err, c.code)
	}
}

func TestApprovalGateTimeout(t *testing.T) {
	// A requester that never answers (and ignores ctx) times out.
	stuck := requesterFunc(func(ctx context.Context, _ driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error) {
		select {}
	})
	g := newApprovalGate(stuck, 20*time.Millisecond)
	o, err := g.Decide(context.Background(), driverapi.ApprovalRequest{})
	if err != nil || o != driverapi.ApprovalTimeout {
		t.Fatalf("%v %v", o, err)
	}
	slow := &drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved, Delay: time.Minute}
	o, err = newApprovalGate(slow, 20*time.Millisecond).Decide(context.Background(), driverapi.ApprovalRequest{})
	if err != nil || o != driverapi.ApprovalTimeout {
		t.Fatalf("%v %v", o, err)
	}
	// A cancelled caller is not a timeout.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := newApprovalGate(slow, time.Minute).Decide(ctx, driverapi.ApprovalRequest{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	// Positive control: a prompt answer passes.
	o, err = newApprovalGate(&drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved}, time.Minute).Decide(context.Background(), driverapi.ApprovalRequest{})
	if err != nil || o != driverapi.ApprovalApproved {
		t.Fatalf("%v %v", o, err)
	}
}

type requesterFunc func(context.Context, driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error)

func (f requesterFunc) RequestApproval(ctx context.Context, r driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error) {
	return f(ctx, r)
}

func TestSummary(t *testing.T) {
	base := driverapi.Capabilities{}
	cases := map[string]driverapi.Capabilities{
		"this command asks for network access to all hosts":                             {Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}},
		"this command asks for network access to a.org, b.org":                          {Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"a.org", "b.org"}}},
		"this command asks for write access to /x and permission to start subprocesses": {FSWrite: []string{"/x"}, SpawnSubprocess: true},
	}
	for want, c := range cases {
		if got := Summary(c, base); got != want {
			t.Fatalf("got %q want %q", got, want)
		}
	}
}

// fakeMediator records Start and hands out a fixed endpoint.
type fakeMediator struct {
	mu      sync.Mutex
	hosts   []string
	secrets map[string]string
	closed  int
	err     error
}

func (m *fakeMediator) Start(_ context.Context, _, _ string, hosts []string, secrets map[string]string) (Mediation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	m.hosts, m.secrets = hosts, secrets
	return &fakeMediation{m: m}, nil
}

type fakeMediation struct{ m *fakeMediator }

func (f *fakeMediation) Endpoint() driverapi.ProxyEndpoint {
	return driverapi.ProxyEndpoint{UnixSocket: "/run/test-proxy.sock"}
}

func (f *fakeMediation) Env() []driverapi.EnvVar {
	return []driverapi.EnvVar{{Name: "HTTPS_PROXY", Value: "http://127.0.0.1:3128"}}
}

func (f *fakeMediation) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	f.m.closed++
	return nil
}

const secretValue = "sk-live-0123456789-do-not-leak"

func TestSecretsRequireMediation(t *testing.T) {
	ap := &drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved}
	h := newHarness(t, testConfig(t), nil, WithApprovalRequester(ap))
	ctx := WithSession(context.Background(), "sec")
	hosts := driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"api.example.com"}}}
	for _, caps := range []driverapi.Capabilities{{}, {Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}, hosts} {
		_, err := h.sb.Execute(ctx, Command{Program: "env", Capabilities: caps, Secrets: map[string]string{"API_KEY": secretValue}})
		wantDenied(t, err, ReasonSecretRequiresMediation)
		r := h.sink.last(t)
		if r.Reason != ReasonSecretRequiresMediation {
			t.Fatalf("audit %+v", r)
		}
		b, _ := json.Marshal(r)
		if strings.Contains(string(b), secretValue) {
			t.Fatal("secret in audit record")
		}
	}
	if h.fake.Runs() != 0 || len(ap.Requests()) != 0 {
		t.Fatal("secret command went past the refusal")
	}
}

func TestSecretsWithMediation(t *testing.T) {
	med := &fakeMediator{}
	ap := &drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved}
	h := newHarness(t, testConfig(t), nil, WithApprovalRequester(ap), WithNetworkMediator(med))
	ctx := WithSession(context.Background(), "sec")
	caps := driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"api.example.com"}}}
	out, err := h.sb.Execute(ctx, Command{Program: "env", Capabilities: caps, Env: map[string]string{"HTTPS_PROXY": "http://evil"}, Secrets: map[string]string{"API_KEY": secretValue}})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out.Stdout)
	if !strings.Contains(s, "API_KEY=aleph:secret:API_KEY\n") || strings.Contains(s, secretValue) {
		t.Fatalf("child env:\n%s", s)
	}
	if !strings.Contains(s, "HTTPS_PROXY=http://127.0.0.1:3128\n") {
		t.Fatalf("mediation env missing or overridden:\n%s", s)
	}
	if med.secrets["API_KEY"] != secretValue || len(med.hosts) != 1 || med.hosts[0] != "api.example.com" || med.closed != 1 {
		t.Fatalf("mediator %+v", med)
	}
	if p := h.fake.LastProfileRequest().Proxy; p == nil || p.UnixSocket != "/run/test-proxy.sock" {
		t.Fatalf("proxy endpoint not passed: %+v", p)
	}
	// A narrower AllowHosts request rides the cached grant.
	if _, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: caps}); err != nil {
		t.Fatal(err)
	}
	if len(ap.Requests()) != 1 {
		t.Fatalf("%d approvals", len(ap.Requests()))
	}
	for _, r := range h.sink.all() {
		b, _ := json.Marshal(r)
		if strings.Contains(string(b), secretValue) {
			t.Fatal("secret in audit")
		}
	}
	// A mediation that cannot start fails the command.
	med.err = errors.New("port in use")
	_, err = h.sb.Execute(ctx, Command{Program: "echo", Capabilities: caps})
	var me *MediationError
	if !errors.As(err, &me) {
		t.Fatalf("err %v", err)
	}
	if r := h.sink.last(t); r.Reason != ReasonMediationFailed {
		t.Fatalf("audit %+v", r)
	}
}

func TestNetworkGrants(t *testing.T) {
	med := &fakeMediator{}
	no := &drivertest.FakeApprover{Outcome: driverapi.ApprovalDenied}
	h := newHarness(t, testConfig(t), nil, WithApprovalRequester(no), WithNetworkMediator(med))
	ctx := WithSession(context.Background(), "g")
	caps := driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"api.example.com:443"}}}
	_, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: caps})
	wantDenied(t, err, ReasonApprovalDenied)

	d0 := h.sb.PolicyDigest("g")
	if d0 != h.sb.PolicyDigest("g") || d0 != h.sb.PolicyDigest("never-seen") {
		t.Fatal("digest not deterministic")
	}
	d1, err := h.sb.ApplyNetworkGrant(ctx, "g", "API.example.com.", 443, d0)
	if err != nil {
		t.Fatal(err)
	}
	if d1 == d0 || d1 != h.sb.PolicyDigest("g") {
		t.Fatal("grant did not change the digest")
	}
	if r := h.sink.last(t); r.Reason != ReasonGrantApplied || r.PolicyDigest != d1 {
		t.Fatalf("audit %+v", r)
	}
	if _, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: caps}); err != nil {
		t.Fatalf("granted origin refused: %v", err)
	}
	// Another port is not granted.
	other := driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"api.example.com:80"}}}
	_, err = h.sb.Execute(ctx, Command{Program: "echo", Capabilities: other})
	wantDenied(t, err, ReasonApprovalDenied)
	// A stale digest is refused and audited.
	_, err = h.sb.ApplyNetworkGrant(ctx, "g", "evil.example.com", 0, d0)
	var se *StaleGrantError
	if !errors.As(err, &se) || se.Current != d1 || se.Expected != d0 {
		t.Fatalf("err %v", err)
	}
	if r := h.sink.last(t); r.Reason != ReasonGrantStale || r.Decision != DecisionDeny {
		t.Fatalf("audit %+v", r)
	}
	if h.sb.PolicyDigest("g") != d1 {
		t.Fatal("stale grant changed the policy")
	}
	_, err = h.sb.ApplyNetworkGrant(ctx, "g", "bad host/", 0, d1)
	wantInvalid(t, err, "host")
}

func TestAuditLedgerFile(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.AuditLog = filepath.Join(t.TempDir(), "sub", "audit.jsonl")
	// The assembly opens the configured file and hands it in; so does
	// this test.
	js, err := OpenJSONLinesSink(cfg.Sandbox.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	defer js.Close()
	sb, err := NewWorkspaceSandbox(cfg, WithDriver(drivertest.Connect(t, &drivertest.FakeDriver{})), WithHooks(allow("a")), WithAuditSink(js))
	if err != nil {
		t.Fatal(err)
	}
	ctx := WithSession(context.Background(), "audit")
	if _, err := sb.Execute(ctx, Command{Program: "env", Args: []string{"arg-should-not-appear"}, Env: map[string]string{"TOKEN": "env-value-should-not-appear"}}); err != nil {
		t.Fatal(err)
	}
	_, err = sb.Execute(ctx, Command{Program: "echo", Cwd: "/", Secrets: map[string]string{"K": secretValue}})
	if err == nil {
		t.Fatal("expected a denial")
	}
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if err := js.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(cfg.Sandbox.AuditLog)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("ledger file %v %v", st, err)
	}
	f, _ := os.Open(cfg.Sandbox.AuditLog)
	defer f.Close()
	var recs []AuditRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		for _, forbidden := range []string{"env-value-should-not-appear", "arg-should-not-appear", secretValue} {
			if strings.Contains(line, forbidden) {
				t.Fatalf("ledger holds %q: %s", forbidden, line)
			}
		}
		var r AuditRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	if recs[0].Decision != DecisionAllow || recs[0].ArgCount != 1 || recs[0].Program != "env" || len(recs[0].Verdicts) != 1 ||
		recs[0].CapabilityDigest == "" || recs[0].Backend != "fake" || recs[0].Time.IsZero() {
		t.Fatalf("record %+v", recs[0])
	}
	if recs[1].Decision != DecisionDeny || recs[1].Reason != ReasonCwdOutsideWorkspace {
		t.Fatalf("record %+v", recs[1])
	}
}

func TestUnenforceableIsNotOfferedForApproval(t *testing.T) {
	ap := &drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved}
	caps := drivertest.FullCapabilities()
	caps.Features = []string{driverapi.FeatureFSReadIsolation, driverapi.FeatureFSWriteIsolation, driverapi.FeatureNetworkNone, driverapi.FeatureSubprocessControl, driverapi.FeatureEnvIsolation}
	h := newHarness(t, testConfig(t), &drivertest.FakeDriver{Caps: caps}, WithApprovalRequester(ap))
	_, err := h.sb.Execute(WithSession(context.Background(), "u"), Command{Program: "echo",
		Capabilities: driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}})
	wantDenied(t, err, ReasonUnenforceable)
	if len(ap.Requests()) != 0 {
		t.Fatal("asked to approve an unenforceable request")
	}
	if h.sb.PolicyDigest("u") != h.sb.PolicyDigest("fresh") {
		t.Fatal("a grant was cached for an unenforceable request")
	}
}

func TestLedgerLoggerName(t *testing.T) {
	var buf bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Name: "host", Output: &buf, JSONFormat: true, Level: hclog.Info})
	h := newHarness(t, testConfig(t), nil, WithLogger(logger))
	_, err := h.sb.Execute(WithSession(context.Background(), "l"), Command{Program: "env", Env: map[string]string{"TOKEN": "env-value-xyz"}})
	if err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if line["@module"] != "capability_ledger" || line["decision"] != "allow" || line["program"] != "env" {
		t.Fatalf("ledger line %v", line)
	}
	if strings.Contains(buf.String(), "env-value-xyz") {
		t.Fatal("env value logged")
	}
}

func TestApprovalChangesPolicyDigest(t *testing.T) {
	ap := &drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved}
	h := newHarness(t, testConfig(t), nil, WithApprovalRequester(ap))
	d0 := h.sb.PolicyDigest("pd")
	ctx := WithSession(context.Background(), "pd")
	for _, c := range []driverapi.Capabilities{{SpawnSubprocess: true}, {FSRead: []string{"/opt"}}} {
		if _, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: c}); err != nil {
			t.Fatal(err)
		}
	}
	d1 := h.sb.PolicyDigest("pd")
	if d1 == d0 {
		t.Fatal("approved grants left the digest unchanged")
	}
	// Same grants in the other order give the same digest.
	h2 := newHarness(t, testConfig(t), nil, WithApprovalRequester(ap))
	for _, c := range []driverapi.Capabilities{{FSRead: []string{"/opt"}}, {SpawnSubprocess: true}} {
		if _, err := h2.sb.Execute(ctx, Command{Program: "echo", Capabilities: c}); err != nil {
			t.Fatal(err)
		}
	}
	if h2.sb.PolicyDigest("pd") != d1 {
		t.Fatal("digest depends on grant order")
	}
}

func TestHookStdinScanTarget(t *testing.T) {
	a := allow("a")
	h := newHarness(t, testConfig(t), nil, WithHooks(a))
	ctx := WithSession(context.Background(), "in")
	// Bytes that are not UTF-8 become spaces; the text around them stays
	// visible (a script with one stray byte is still scanned).
	for _, tc := range []struct{ in, want string }{
		{"rm -rf /\n\xff\n", "rm -rf /\n \n"},
		{"\xff\xfex", " x"},
		{"echo é ok\n", "echo é ok\n"},
	} {
		if _, err := h.sb.Execute(ctx, Command{Program: "sh", Args: []string{"-s"}, Stdin: []byte(tc.in)}); err != nil {
			t.Fatal(err)
		}
		if string(a.last.Stdin) != tc.want {
			t.Fatalf("stdin %q shown to hooks as %q, want %q", tc.in, a.last.Stdin, tc.want)
		}
	}
	big := append(bytes.Repeat([]byte("a"), driverapi.MaxHookStdinBytes-1), []byte("é tail")...)
	out, err := h.sb.Execute(ctx, Command{Program: "cat", Stdin: big})
	if err != nil || len(out.Stdout) != len(big) {
		t.Fatalf("%v", err)
	}
	if n := len(a.last.Stdin); n != driverapi.MaxHookStdinBytes-1 {
		t.Fatalf("hook stdin %d bytes, want the UTF-8-safe prefix of %d", n, driverapi.MaxHookStdinBytes-1)
	}
}

// mutatingHook tries to change the command it is shown.
type mutatingHook struct{}

func (mutatingHook) Describe(context.Context) (driverapi.HookInfo, error) {
	return driverapi.HookInfo{Name: "mutator"}, nil
}

func (mutatingHook) Before(_ context.Context, req driverapi.HookRequest) (driverapi.Verdict, error) {
	if len(req.Args) > 0 {
		req.Args[0] = "changed"
	}
	if len(req.Stdin) > 0 {
		req.Stdin[0] = 'X'
	}
	req.Capabilities.FSRead = append(req.Capabilities.FSRead[:0], "/etc")
	return driverapi.Verdict{Action: driverapi.ActionAllow}, nil
}

func TestHookCannotChangeTheCommand(t *testing.T) {
	h := newHarness(t, testConfig(t), nil, WithHooks(mutatingHook{}))
	ctx := WithSession(context.Background(), "m")
	out, err := h.sb.Execute(ctx, Command{Program: "echo", Args: []string{"original"}})
	if err != nil || string(out.Stdout) != "original\n" {
		t.Fatalf("%v %q", err, out.Stdout)
	}
	out, err = h.sb.Execute(ctx, Command{Program: "cat", Stdin: []byte("abc")})
	if err != nil || string(out.Stdout) != "abc" {
		t.Fatalf("%v %q", err, out.Stdout)
	}
	ap := &drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved}
	h = newHarness(t, testConfig(t), nil, WithHooks(mutatingHook{}), WithApprovalRequester(ap))
	if _, err := h.sb.Execute(ctx, Command{Program: "echo", Args: []string{"x"}, Capabilities: driverapi.Capabilities{FSRead: []string{"/opt"}}}); err != nil {
		t.Fatal(err)
	}
	if got := h.fake.LastProfileRequest().Capabilities.FSRead; len(got) != 1 || got[0] != "/opt" {
		t.Fatalf("capabilities changed by a hook: %v", got)
	}
}

func TestForgetSessionDropsGrants(t *testing.T) {
	ap := &drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved}
	h := newHarness(t, testConfig(t), nil, WithApprovalRequester(ap))
	ctx := WithSession(context.Background(), "f")
	spawn := Command{Program: "echo", Capabilities: driverapi.Capabilities{SpawnSubprocess: true}}
	for i := 0; i < 2; i++ {
		if _, err := h.sb.Execute(ctx, spawn); err != nil {
			t.Fatal(err)
		}
	}
	ws := h.fake.LastProfileRequest().Workspace
	if len(ap.Requests()) != 1 {
		t.Fatalf("%d requests", len(ap.Requests()))
	}
	h.sb.ForgetSession("f")
	if _, err := h.sb.Execute(ctx, spawn); err != nil {
		t.Fatal(err)
	}
	if len(ap.Requests()) != 2 {
		t.Fatal("grant survived ForgetSession")
	}
	if h.fake.LastProfileRequest().Workspace != ws {
		t.Fatal("workspace directory changed")
	}
}

// A granted path that does not exist is refused before anyone is asked,
// naming the field, and nothing is kept as a grant; an existing one is
// asked about and granted (the control).
func TestMissingGrantPathRefusedBeforeApproval(t *testing.T) {
	ap := &drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved}
	h := newHarness(t, testConfig(t), nil, WithApprovalRequester(ap))
	ctx := WithSession(context.Background(), "m")
	dir := t.TempDir()
	for _, caps := range []driverapi.Capabilities{
		{FSRead: []string{filepath.Join(dir, "nope")}},
		{FSWrite: []string{dir, filepath.Join(dir, "nope")}},
	} {
		_, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: caps})
		var ie *InvalidCommandError
		if !errors.As(err, &ie) || !strings.HasPrefix(ie.Field, "capabilities.fs_") || !strings.Contains(ie.Reason, "no such file") {
			t.Fatalf("%+v: %v, want an InvalidCommandError naming the path", caps, err)
		}
	}
	if n := len(ap.Requests()); n != 0 {
		t.Fatalf("%d approval requests for paths that do not exist", n)
	}
	if _, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: driverapi.Capabilities{FSRead: []string{dir}}}); err != nil {
		t.Fatalf("the control: %v", err)
	}
	if n := len(ap.Requests()); n != 1 {
		t.Fatalf("the control: %d approval requests, want 1", n)
	}
}

// specRefuser refuses every profile as a driver refuses a bad workspace.
type specRefuser struct {
	*drivertest.FakeDriver
	field string
}

func (d specRefuser) ProfileFor(context.Context, driverapi.ProfileRequest) (driverapi.Profile, error) {
	return driverapi.Profile{}, &driverapi.InvalidSpecError{Field: d.field, Reason: "contains system directories"}
}

// A driver's refusal of a field the caller gave is bad input named by the
// command's field (the CLI turns it into the flag), not a driver failure;
// one of the driver's own making stays a DriverError.
func TestDriverRefusalIsInvalidCommand(t *testing.T) {
	for _, c := range []struct{ spec, field string }{
		{"workspace", "workspace"}, {"fs_read", "capabilities.fs_read"}, {"program", "program"}, {"protected", ""},
	} {
		h := newHarness(t, testConfig(t), nil)
		sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(specRefuser{FakeDriver: h.fake, field: c.spec}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = sb.Execute(WithSession(context.Background(), "r"), Command{Program: "echo"})
		sb.Close()
		var ie *InvalidCommandError
		var de *DriverError
		var ise *driverapi.InvalidSpecError
		switch {
		case !errors.As(err, &ise):
			t.Errorf("%s: %v does not keep the driver's InvalidSpecError", c.spec, err)
		case c.field == "" && !errors.As(err, &de):
			t.Errorf("%s: %v, want a DriverError", c.spec, err)
		case c.field != "" && (!errors.As(err, &ie) || ie.Field != c.field || !strings.Contains(ie.Reason, "system directories")):
			t.Errorf("%s: %v, want an InvalidCommandError naming %s", c.spec, err, c.field)
		}
	}
}
