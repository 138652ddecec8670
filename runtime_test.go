package alephsandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/proxy"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

type memSink struct {
	mu   sync.Mutex
	recs []core.AuditRecord
}

func (m *memSink) Record(_ context.Context, r core.AuditRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, r)
	return nil
}

type approveAll struct{}

func (approveAll) RequestApproval(context.Context, driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error) {
	return driverapi.ApprovalApproved, nil
}

func testConfig(t *testing.T) core.Config {
	// The grant store lives under the data directory: a private one.
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	cfg := core.DefaultConfig()
	cfg.Sandbox.WorkspaceRoot = filepath.Join(t.TempDir(), "ws")
	cfg.Sandbox.AuditLog = filepath.Join(t.TempDir(), "audit.jsonl")
	return cfg
}

func newRuntime(t *testing.T, cfg core.Config, opts ...alephsandbox.Option) (*alephsandbox.Runtime, *drivertest.FakeDriver) {
	t.Helper()
	fake := &drivertest.FakeDriver{}
	rt, err := alephsandbox.New(cfg, append([]alephsandbox.Option{alephsandbox.WithDriver(drivertest.Connect(t, fake))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	return rt, fake
}

// The configured command policy is part of what New builds: an embedder
// gets the same refusal the CLI gives, without wiring hooks by hand.
func TestRuntimeRunsTheConfiguredCommandPolicy(t *testing.T) {
	rt, fake := newRuntime(t, testConfig(t))
	ctx := context.Background()
	_, err := rt.Execute(ctx, core.Command{SessionID: "s", Program: "/bin/sh", Args: []string{"-c", "rm -rf /"},
		Capabilities: driverapi.Capabilities{SpawnSubprocess: true}})
	var de *core.DeniedError
	if !errors.As(err, &de) || de.Code != core.ReasonHookDenied || de.Rule == "" {
		t.Fatalf("want a command-policy denial, got %T %v", err, err)
	}
	if fake.Runs() != 0 {
		t.Fatal("the denied command reached the driver")
	}
	// Positive control.
	out, err := rt.Execute(ctx, core.Command{SessionID: "s", Program: "echo", Args: []string{"hi"}})
	if err != nil || string(out.Stdout) != "hi\n" {
		t.Fatalf("allowed command: %v", err)
	}

	// With the policy off in the configuration the same command runs:
	// the refusal above came from the configuration, not a fixed rule.
	cfg := testConfig(t)
	cfg.Sandbox.CommandPolicy = core.Section{"enforcement": "off"}
	rt2, fake2 := newRuntime(t, cfg, alephsandbox.WithApprover(approveAll{}))
	if _, err := rt2.Execute(ctx, core.Command{SessionID: "s", Program: "rm", Args: []string{"-rf", "/"}}); err != nil {
		t.Fatalf("with enforcement off: %v", err)
	}
	if fake2.Runs() != 1 {
		t.Fatalf("runs = %d", fake2.Runs())
	}
}

// Host sinks are added beside the configured audit file, not instead of it.
func TestRuntimeAuditSinksAddToTheFile(t *testing.T) {
	cfg := testConfig(t)
	sink := &memSink{}
	rt, _ := newRuntime(t, cfg, alephsandbox.WithAuditSink(sink))
	if _, err := rt.Execute(context.Background(), core.Command{SessionID: "s", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	_ = rt.Close()
	data, err := os.ReadFile(cfg.Sandbox.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var rec core.AuditRecord
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &rec) != nil || rec.Program != "echo" {
		t.Fatalf("audit file: %q", data)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.recs) != 1 || sink.recs[0].CommandID != rec.CommandID {
		t.Fatalf("host sink got %+v, file %+v", sink.recs, rec)
	}
}

func TestRuntimeSessionCalls(t *testing.T) {
	rt, _ := newRuntime(t, testConfig(t), alephsandbox.WithApprover(approveAll{}))
	ctx := context.Background()
	var h alephsandbox.Host = rt
	caps := driverapi.Capabilities{SpawnSubprocess: true}
	if _, err := h.Execute(ctx, core.Command{SessionID: "s", Program: "echo", Capabilities: caps}); err != nil {
		t.Fatal(err)
	}
	d0 := h.PolicyDigest("s")
	d1, err := h.ApplyNetworkGrant(ctx, "s", "example.com", 443, d0)
	if err != nil {
		t.Fatal(err)
	}
	g := h.Grants("s")
	if len(g.Grants) != 2 || g.PolicyDigest != d1 {
		t.Fatalf("grants = %+v (digest %s, want %s)", g, g.PolicyDigest, d1)
	}
	var capID string
	for _, x := range g.Grants {
		if x.Capabilities != nil && x.Capabilities.SpawnSubprocess {
			capID = x.ID
		}
	}
	if capID == "" {
		t.Fatalf("the approved spawn grant is not listed: %+v", g.Grants)
	}
	d2, err := h.RevokeGrant(ctx, "s", capID)
	if err != nil || d2 == d1 || len(h.Grants("s").Grants) != 1 {
		t.Fatalf("revoke: %v, digest %s, grants %+v", err, d2, h.Grants("s"))
	}
	var nf *core.GrantNotFoundError
	if _, err := h.RevokeGrant(ctx, "s", capID); !errors.As(err, &nf) {
		t.Fatalf("second revoke: want GrantNotFoundError, got %v", err)
	}
	ws, err := h.WorkspacePath("s")
	if st, serr := os.Stat(ws); err != nil || serr != nil || !st.IsDir() {
		t.Fatalf("workspace path %q: %v %v", ws, err, serr)
	}
	h.ForgetSession("s")
	if len(h.Grants("s").Grants) != 0 {
		t.Fatal("grants survived ForgetSession")
	}
	hc, err := h.Capabilities(ctx)
	if err != nil || hc.Backend != drivertest.FakeBackend {
		t.Fatalf("capabilities %+v %v", hc, err)
	}
}

func TestRuntimeDisabled(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.Enabled = false
	rt, err := alephsandbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	_, err = rt.Execute(context.Background(), core.Command{SessionID: "s", Program: "echo"})
	if !errors.Is(err, alephsandbox.ErrDisabled) {
		t.Fatalf("want ErrDisabled, got %v", err)
	}
	// Its reason code, as the service and exec --json give it.
	if code, _ := core.FailureReason(err); code != core.ReasonDisabled {
		t.Fatalf("reason %q, want %q", code, core.ReasonDisabled)
	}
	// The pipeline a host calls directly refuses as Execute does.
	if _, err := rt.Pipeline().Execute(context.Background(), core.Command{SessionID: "s", Program: "echo"}); !errors.Is(err, alephsandbox.ErrDisabled) {
		t.Fatalf("Pipeline: want ErrDisabled, got %v", err)
	}
}

// The pipeline of an enabled runtime is core's own: a command run through
// it reaches the driver as one run through Execute does.
func TestRuntimePipelineRuns(t *testing.T) {
	rt, fake := newRuntime(t, testConfig(t))
	out, err := rt.Pipeline().Execute(context.Background(), core.Command{SessionID: "s", Program: "echo", Args: []string{"hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Stdout) != "hi\n" || fake.Runs() != 1 {
		t.Fatalf("stdout %q after %d runs, want \"hi\\n\" after 1", out.Stdout, fake.Runs())
	}
}

func TestRuntimeMissingDriverIsTyped(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.Driver = "no-such-driver-xyz"
	_, err := alephsandbox.New(cfg)
	var nf *core.DriverNotFoundError
	if !errors.As(err, &nf) {
		t.Fatalf("want DriverNotFoundError, got %T %v", err, err)
	}
}

// The host's own program may not lie in a workspace or a write grant: a
// command could rewrite it, and the next call would run the rewritten
// program unconfined. Control: a sibling directory works.
func TestRuntimeRefusesWorkspacesHoldingTheHostProgram(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Skipf("this system does not name the running program: %v", err)
	}
	rt, fake := newRuntime(t, testConfig(t))
	ctx := context.Background()
	for _, c := range []core.Command{
		{SessionID: "s", Program: "echo", Workspace: filepath.Dir(exe)},
		{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{filepath.Dir(exe)}}},
	} {
		_, err := rt.Execute(ctx, c)
		var ie *core.InvalidCommandError
		if !errors.As(err, &ie) || !strings.Contains(ie.Reason, exe) {
			t.Fatalf("%+v: want a refusal naming %s, got %T %v", c, exe, err, err)
		}
	}
	if fake.Runs() != 0 {
		t.Fatal("a refused command reached the driver")
	}
	ws := t.TempDir()
	if out, err := rt.Execute(ctx, core.Command{SessionID: "s", Program: "echo", Args: []string{"hi"}, Workspace: ws}); err != nil || string(out.Stdout) != "hi\n" {
		t.Fatalf("control: %v", err)
	}
}

// The configuration's session baseline reaches every front end through
// New (serve and exec build nothing else); a host's WithBaseline replaces
// it.
func TestRuntimeUsesConfiguredBaseline(t *testing.T) {
	spawn := core.Command{SessionID: "s", Program: "sh", Capabilities: driverapi.Capabilities{SpawnSubprocess: true}}
	cfg := testConfig(t)
	rt, _ := newRuntime(t, cfg)
	var de *core.DeniedError
	if _, err := rt.Execute(context.Background(), spawn); !errors.As(err, &de) || de.Code != core.ReasonApprovalDenied {
		t.Fatalf("strict: %v", err)
	}
	cfg.Sandbox.Session.Baseline = "spawn"
	rt, fake := newRuntime(t, cfg)
	if _, err := rt.Execute(context.Background(), spawn); err != nil || fake.Runs() != 1 {
		t.Fatalf("spawn baseline: %v", err)
	}
	if g := rt.Grants("s"); !g.Baseline.SpawnSubprocess {
		t.Fatalf("baseline %+v", g.Baseline)
	}
	rt, _ = newRuntime(t, cfg, alephsandbox.WithBaseline(driverapi.Capabilities{}))
	if _, err := rt.Execute(context.Background(), spawn); !errors.As(err, &de) {
		t.Fatalf("host baseline: %v", err)
	}
}

// The configuration file a runtime was loaded from, wherever it lies (an
// explicit --config FILE, not only the per-user default), is out of every
// command's write reach: rewritten, it would name the next run's driver
// and hook plugins. Control: reading it may be granted.
func TestRuntimeProtectsItsConfigFile(t *testing.T) {
	base := testConfig(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "explicit.toml")
	body := fmt.Sprintf("[sandbox]\nworkspace_root = %q\naudit_log = %q\n", base.Sandbox.WorkspaceRoot, base.Sandbox.AuditLog)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := alephsandbox.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source() != path {
		t.Fatalf("Source() = %q, want %q", cfg.Source(), path)
	}
	rt, fake := newRuntime(t, cfg, alephsandbox.WithApprover(approveAll{}))
	ctx := context.Background()
	for _, c := range []core.Command{
		{SessionID: "s", Program: "echo", Workspace: dir},
		{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{dir}}},
	} {
		_, err := rt.Execute(ctx, c)
		var ie *core.InvalidCommandError
		if !errors.As(err, &ie) || !strings.Contains(ie.Reason, path) {
			t.Fatalf("%+v: want a refusal naming %s, got %T %v", c, path, err, err)
		}
	}
	if fake.Runs() != 0 {
		t.Fatal("a refused command reached the driver")
	}
	if _, err := rt.Execute(ctx, core.Command{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSRead: []string{dir}}}); err != nil {
		t.Fatalf("control (read grant): %v", err)
	}
}

// The per-user configuration file is out of every command's write reach
// whoever builds the runtime (serve and embedders as well as exec), and
// whether or not it exists yet: a command that created it could name the
// next run's driver and hook plugins. Control: a sibling directory may be
// granted.
func TestRuntimeProtectsTheDefaultConfigPath(t *testing.T) {
	cfgHome := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfgHome)
	want := filepath.Join(cfgHome, "aleph-sandbox", "config.toml")
	if got := alephsandbox.DefaultConfigPath(); got != want {
		t.Fatalf("DefaultConfigPath() = %q, want %q", got, want)
	}
	if _, err := os.Stat(want); !os.IsNotExist(err) {
		t.Fatalf("the default file should not exist for this test: %v", err)
	}
	rt, fake := newRuntime(t, testConfig(t), alephsandbox.WithApprover(approveAll{}))
	ctx := context.Background()
	for _, c := range []core.Command{
		{SessionID: "s", Program: "echo", Workspace: cfgHome},
		{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{cfgHome}}},
	} {
		_, err := rt.Execute(ctx, c)
		var ie *core.InvalidCommandError
		if !errors.As(err, &ie) || !strings.Contains(ie.Reason, want) {
			t.Fatalf("%+v: want a refusal naming %s, got %T %v", c, want, err, err)
		}
	}
	if fake.Runs() != 0 {
		t.Fatal("a refused command reached the driver")
	}
	if _, err := rt.Execute(ctx, core.Command{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{t.TempDir()}}}); err != nil {
		t.Fatalf("control (a sibling write grant): %v", err)
	}
	if fake.Runs() != 1 {
		t.Fatalf("runs = %d, want 1", fake.Runs())
	}
}

// A secret-injection rule the proxy would refuse for every command (a
// header it never injects, such as Host) is refused when the configuration
// is loaded, naming the key, and by New for a configuration built in
// code; it used to load and then fail every allow_hosts command. Control:
// the same rule with Authorization loads and builds.
func TestSecretInjectionRuleRefusedAtLoad(t *testing.T) {
	base := testConfig(t)
	for header, refused := range map[string]bool{"Host": true, "content-length": true, "Authorization": false, "X-Api-Key": false} {
		path := filepath.Join(t.TempDir(), "config.toml")
		body := fmt.Sprintf("[sandbox]\nworkspace_root = %q\naudit_log = %q\n[[sandbox.network.secret_injections]]\nhost = \"api.example.com\"\nheader = %q\nsecret = \"API_TOKEN\"\n",
			base.Sandbox.WorkspaceRoot, base.Sandbox.AuditLog, header)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := alephsandbox.LoadConfig(path)
		var ce *core.ConfigError
		switch {
		case refused && (!errors.As(err, &ce) || ce.Key != "sandbox.network.secret_injections[0].header" || !strings.Contains(ce.Reason, "may not be injected")):
			t.Fatalf("header %q: want a ConfigError for the header, got %T %v", header, err, err)
		case !refused && err != nil:
			t.Fatalf("header %q (control): %v", header, err)
		}
		code := base
		code.Sandbox.Network.SecretInjections = []core.SecretInjection{{Host: "api.example.com", Header: header, Secret: "API_TOKEN"}}
		rt, err := alephsandbox.New(code, alephsandbox.WithDriver(drivertest.Connect(t, &drivertest.FakeDriver{})))
		if rt != nil {
			_ = rt.Close()
		}
		switch {
		case refused && (!errors.As(err, &ce) || ce.Key != "sandbox.network.secret_injections[0].header"):
			t.Fatalf("New with header %q: want a ConfigError, got %T %v", header, err, err)
		case !refused && err != nil:
			t.Fatalf("New with header %q (control): %v", header, err)
		}
		_ = cfg
	}
}

// TestSecretInjectionOneCheck: a header name, host pattern or format the
// proxy would not inject with is refused by the proxy's own check
// (proxy.CheckInjection) under its key, at load and by New: core keeps
// no second definition of a header name that could differ from the one
// the proxy injects with. Control: a valid rule loads.
func TestSecretInjectionOneCheck(t *testing.T) {
	base := testConfig(t)
	for _, c := range []struct {
		host, header, format string
		field, reason        string
	}{
		{"api.example.com", "Bad Header", "", "header", "is not a valid header name"},
		{"api.example.com", "X-Key:", "", "header", "is not a valid header name"},
		{"api.example.com", "X-Key", "Bearer", "format", "must contain {secret}"},
		{"api.example.com", "X-Key", "a\nb {secret}", "format", "control characters"},
		{"", "X-Key", "", "host", ""},
		{"api.example.com", "X-Key", "Bearer {secret}", "", ""},
	} {
		rule := []core.SecretInjection{{Host: c.host, Header: c.header, Secret: "API_TOKEN", Format: c.format}}
		path := filepath.Join(t.TempDir(), "config.toml")
		body := fmt.Sprintf("[sandbox]\nworkspace_root = %q\naudit_log = %q\n[[sandbox.network.secret_injections]]\nhost = %q\nheader = %q\nsecret = \"API_TOKEN\"\nformat = %q\n",
			base.Sandbox.WorkspaceRoot, base.Sandbox.AuditLog, c.host, c.header, c.format)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, loadErr := alephsandbox.LoadConfig(path)
		code := base
		code.Sandbox.Network.SecretInjections = rule
		rt, newErr := alephsandbox.New(code, alephsandbox.WithDriver(drivertest.Connect(t, &drivertest.FakeDriver{})))
		if rt != nil {
			_ = rt.Close()
		}
		for how, err := range map[string]error{"load": loadErr, "New": newErr} {
			if c.field == "" {
				if err != nil {
					t.Errorf("%s %+v (control): %v", how, rule[0], err)
				}
				continue
			}
			wantField, wantReason := proxy.CheckInjection(proxy.SecretInjection{Host: c.host, Header: c.header, Secret: "API_TOKEN", Format: c.format})
			var ce *core.ConfigError
			if !errors.As(err, &ce) || ce.Key != "sandbox.network.secret_injections[0]."+c.field || wantField != c.field ||
				wantReason == nil || ce.Reason != wantReason.Error() || !strings.Contains(ce.Reason, c.reason) {
				t.Errorf("%s %+v: got %v, want the proxy's refusal of %s (%v)", how, rule[0], err, c.field, wantReason)
			}
		}
	}
}

// The command policy is built once per runtime: what Policy answers (the
// service's CheckPolicy) is the hook the pipeline runs, custom rules
// included, and a rule that does not compile is reported once.
func TestRuntimePolicyIsThePipelines(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.CommandPolicy = core.Section{"custom_rules": []any{map[string]any{"name": "no-curl", "regex": `\bcurl\b`, "action": "block"}}}
	rt, fake := newRuntime(t, cfg, alephsandbox.WithApprover(approveAll{}))
	ctx := context.Background()
	v, err := rt.Policy().Check(ctx, "curl https://example.com", nil)
	if err != nil || v.Action != driverapi.ActionDeny || v.Rule != "no-curl" {
		t.Fatalf("Policy().Check: %+v %v", v, err)
	}
	_, err = rt.Execute(ctx, core.Command{SessionID: "s", Program: "sh", Args: []string{"-c", "curl https://example.com"},
		Capabilities: driverapi.Capabilities{SpawnSubprocess: true}})
	var de *core.DeniedError
	if !errors.As(err, &de) || de.Rule != "no-curl" || fake.Runs() != 0 {
		t.Fatalf("pipeline: %v (runs %d)", err, fake.Runs())
	}
	// Control: an ordinary command passes both.
	if v, err := rt.Policy().Check(ctx, "ls", nil); err != nil || v.Action != driverapi.ActionAllow {
		t.Fatalf("Policy().Check(ls): %+v %v", v, err)
	}

	var warn strings.Builder
	bad := testConfig(t)
	bad.Sandbox.CommandPolicy = core.Section{"custom_rules": []any{map[string]any{"name": "broken", "regex": "(", "action": "block"}}}
	rt2, _ := newRuntime(t, bad, alephsandbox.WithWarnings(&warn))
	if n := strings.Count(warn.String(), "warning:"); n != 1 || !strings.Contains(warn.String(), "broken") {
		t.Fatalf("warnings for one broken rule: %q", warn.String())
	}
	// The fallback is the curated rules, never weaker.
	if v, err := rt2.Policy().Check(ctx, "rm -rf /", nil); err != nil || v.Action != driverapi.ActionDeny {
		t.Fatalf("fallback: %+v %v", v, err)
	}
}

// The proxy takes its route from what the driver reports, not from the
// host's OS: a driver reporting host_loopback gets a loopback TCP address
// (and proxy variables naming it) wherever the host runs, one reporting
// namespace_bridge gets the unix socket and the bridge addresses.
func TestRuntimeProxyRouteFromTheDriver(t *testing.T) {
	for _, route := range []driverapi.ProxyRoute{driverapi.RouteHostLoopback, driverapi.RouteNamespaceBridge} {
		caps := drivertest.FullCapabilities()
		caps.Details = map[string]string{driverapi.DetailNetworkRoute: string(route)}
		fake := &drivertest.FakeDriver{Caps: caps}
		rt, err := alephsandbox.New(testConfig(t), alephsandbox.WithDriver(drivertest.Connect(t, fake)), alephsandbox.WithApprover(approveAll{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt.Close() })
		_, err = rt.Execute(context.Background(), core.Command{SessionID: "s", Program: "echo",
			Capabilities: driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}}})
		if err != nil {
			t.Fatalf("%s: %v", route, err)
		}
		req := fake.LastProfileRequest()
		if req.Proxy == nil {
			t.Fatalf("%s: no proxy endpoint in the profile request", route)
		}
		var httpProxy string
		for _, e := range fake.LastSpec().Env {
			if e.Name == "HTTP_PROXY" {
				httpProxy = e.Value
			}
		}
		bridge := "http://" + driverapi.BridgeHTTPAddr()
		switch route {
		case driverapi.RouteHostLoopback:
			if req.Proxy.TCPAddr == "" || httpProxy == bridge || !strings.Contains(httpProxy, req.Proxy.TCPAddr) {
				t.Fatalf("host_loopback: endpoint %+v, HTTP_PROXY %q", *req.Proxy, httpProxy)
			}
		case driverapi.RouteNamespaceBridge:
			if req.Proxy.TCPAddr != "" || req.Proxy.UnixSocket == "" || httpProxy != bridge {
				t.Fatalf("namespace_bridge: endpoint %+v, HTTP_PROXY %q", *req.Proxy, httpProxy)
			}
		}
	}
}
