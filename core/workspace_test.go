package core

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

func TestExecuteEchoOverGRPC(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	out, err := h.sb.Execute(context.Background(), Command{SessionID: "s1", Program: "echo", Args: []string{"hello", "world"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Stdout) != "hello world\n" || out.Backend != drivertest.FakeBackend || out.Exit.ExitCode != 0 {
		t.Fatalf("unexpected output %+v", out)
	}
	if !strings.HasPrefix(out.CommandID, "cmd-") || out.ProfileDigest == "" {
		t.Fatalf("missing ids: %+v", out)
	}
	rec := h.sink.last(t)
	if rec.Decision != DecisionAllow || rec.Reason != ReasonAllowed || rec.Program != "echo" || rec.ArgCount != 2 ||
		rec.Backend != "fake" || rec.ProfileDigest != out.ProfileDigest || rec.CommandID != out.CommandID || rec.SessionID != "s1" {
		t.Fatalf("audit record %+v", rec)
	}
}

func TestExitSignalAndStderr(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	ctx := WithSession(context.Background(), "s")
	out, err := h.sb.Execute(ctx, Command{Program: "exit", Args: []string{"7"}})
	if err != nil || out.Exit.ExitCode != 7 {
		t.Fatalf("exit: %v %+v", err, out)
	}
	if r := h.sink.last(t); r.ExitCode != 7 {
		t.Fatalf("audit exit code %d", r.ExitCode)
	}
	out, err = h.sb.Execute(ctx, Command{Program: "signal", Args: []string{"9"}})
	if err != nil || out.Exit.Signal != 9 {
		t.Fatalf("signal: %v %+v", err, out)
	}
	if r := h.sink.last(t); r.Signal != 9 {
		t.Fatalf("audit signal %d", r.Signal)
	}
	out, err = h.sb.Execute(ctx, Command{Program: "stderr", Args: []string{"oops"}})
	if err != nil || string(out.Stderr) != "oops\n" || len(out.Stdout) != 0 {
		t.Fatalf("stderr: %v %+v", err, out)
	}
}

func TestSessionDirNamingAndLazyCreation(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, nil)
	j := []byte(`"sess/../with \"odd\" chars"`)
	sum := sha256.Sum256(j)
	want := hex.EncodeToString(sum[:16])
	if got := SessionDirName(`sess/../with "odd" chars`); got != want || len(got) != 32 {
		t.Fatalf("SessionDirName = %s, want %s", got, want)
	}
	dir := filepath.Join(cfg.Sandbox.WorkspaceRoot, want)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("workspace exists before first command: %v", err)
	}
	ctx := WithSession(context.Background(), `sess/../with "odd" chars`)
	if _, err := h.sb.Execute(ctx, Command{Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Fatalf("session dir: %v %v", st, err)
	}
	pr := h.fake.LastProfileRequest()
	canon, _ := filepath.EvalSymlinks(dir)
	if pr.Workspace != canon || pr.Cwd != canon || h.fake.LastSpec().Cwd != canon {
		t.Fatalf("workspace %q cwd %q, want %q", pr.Workspace, pr.Cwd, canon)
	}
	// A second session gets its own directory; the first is reused.
	if _, err := h.sb.Execute(context.Background(), Command{SessionID: "other", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	if h.fake.LastProfileRequest().Workspace == canon {
		t.Fatal("two sessions share a workspace")
	}
	entries, _ := os.ReadDir(cfg.Sandbox.WorkspaceRoot)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	// Two workspaces, the directory of the sessions' private HOMEs and
	// that of their records.
	if len(entries) != 4 || !slices.Contains(names, HomesDirName) || !slices.Contains(names, SessionsDirName) {
		t.Fatalf("want 2 session dirs, %s and %s, got %v", HomesDirName, SessionsDirName, names)
	}
	if homes, _ := os.ReadDir(filepath.Join(cfg.Sandbox.WorkspaceRoot, HomesDirName)); len(homes) != 2 || homes[0].Name() == homes[1].Name() {
		t.Fatalf("want 2 private HOMEs, got %v", homes)
	}
}

func TestSessionRequired(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	_, err := h.sb.Execute(context.Background(), Command{Program: "echo"})
	wantInvalid(t, err, "session_id")
	if h.fake.Runs() != 0 {
		t.Fatal("driver ran a command without a session")
	}
	if id, ok := SessionFrom(WithSession(context.Background(), "x")); !ok || id != "x" {
		t.Fatal("SessionFrom lost the id")
	}
	if _, ok := SessionFrom(context.Background()); ok {
		t.Fatal("SessionFrom invented an id")
	}
}

func TestCwdConfinement(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, nil)
	ctx := WithSession(context.Background(), "cwd")
	// Positive control: a subdirectory, relative and absolute.
	if _, err := h.sb.Execute(ctx, Command{Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	ws := h.fake.LastProfileRequest().Workspace
	if err := os.Mkdir(filepath.Join(ws, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, cwd := range []string{"sub", filepath.Join(ws, "sub")} {
		if _, err := h.sb.Execute(ctx, Command{Program: "echo", Cwd: cwd}); err != nil {
			t.Fatalf("cwd %s: %v", cwd, err)
		}
		if got := h.fake.LastSpec().Cwd; got != filepath.Join(ws, "sub") {
			t.Fatalf("cwd %s ran in %s", cwd, got)
		}
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ws, "escape")); err != nil {
		t.Fatal(err)
	}
	runs := h.fake.Runs()
	for _, cwd := range []string{"escape", filepath.Join(ws, "escape"), outside, "..", "../..", "/"} {
		_, err := h.sb.Execute(ctx, Command{Program: "echo", Cwd: cwd})
		wantDenied(t, err, ReasonCwdOutsideWorkspace)
		if r := h.sink.last(t); r.Decision != DecisionDeny || r.Reason != ReasonCwdOutsideWorkspace {
			t.Fatalf("audit %+v", r)
		}
	}
	_, err := h.sb.Execute(ctx, Command{Program: "echo", Cwd: "missing"})
	wantInvalid(t, err, "cwd")
	if h.fake.Runs() != runs {
		t.Fatal("a denied command reached the driver")
	}
}

func TestWorkspaceOverride(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	ctx := WithSession(context.Background(), "w")
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	// A workspace named through a link is refused (a sandboxed command could
	// have planted the link); the real directory works.
	_, err := h.sb.Execute(ctx, Command{Program: "echo", Workspace: link})
	wantInvalid(t, err, "workspace")
	canon, _ := filepath.EvalSymlinks(dir)
	if _, err := h.sb.Execute(ctx, Command{Program: "echo", Workspace: canon}); err != nil {
		t.Fatal(err)
	}
	if got := h.fake.LastProfileRequest().Workspace; got != canon {
		t.Fatalf("workspace %s, want %s", got, canon)
	}
	file := filepath.Join(dir, "f")
	_ = os.WriteFile(file, nil, 0o600)
	for _, ws := range []string{"relative/dir", filepath.Join(dir, "missing"), file} {
		_, err := h.sb.Execute(ctx, Command{Program: "echo", Workspace: ws})
		wantInvalid(t, err, "workspace")
	}
	// cwd confinement applies to the override too.
	_, err = h.sb.Execute(ctx, Command{Program: "echo", Workspace: canon, Cwd: t.TempDir()})
	wantDenied(t, err, ReasonCwdOutsideWorkspace)
}

func TestInvalidInput(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	ctx := WithSession(context.Background(), "bad")
	cases := []struct {
		field string
		cmd   Command
	}{
		{"program", Command{}},
		{"program", Command{Program: "ec\x00ho"}},
		{"args[1]", Command{Program: "echo", Args: []string{"a", "b\x00"}}},
		{"args[0]", Command{Program: "echo", Args: []string{"\xff"}}},
		{"program", Command{Program: "\xffecho"}},
		{"env A", Command{Program: "env", Env: map[string]string{"A": "\xff"}}},
		{"cwd", Command{Program: "echo", Cwd: "\xff"}},
		{"timeout", Command{Program: "echo", Timeout: -time.Second}},
		{"max_output_bytes", Command{Program: "echo", MaxOutputBytes: -1}},
		{"timeout", Command{Program: "echo", Timeout: MaxTimeout + 1}},
		{"capabilities.timeout_secs", Command{Program: "echo", Capabilities: driverapi.Capabilities{TimeoutSecs: 1 << 62}}},
		{"stdin", Command{Program: "cat", Stdin: make([]byte, driverapi.MaxStdinBytes+1)}},
		{`env "A=B"`, Command{Program: "env", Env: map[string]string{"A=B": "x"}}},
		{"env A", Command{Program: "env", Env: map[string]string{"A": "x\x00y"}}},
		{"session_id", Command{SessionID: "a\x00b", Program: "echo"}},
		{"session_id", Command{SessionID: "\xff\xfe", Program: "echo"}},
		{"session_id", Command{SessionID: strings.Repeat("x", maxSessionIDLen+1), Program: "echo"}},
		{"capabilities.fs_read[0]", Command{Program: "echo", Capabilities: driverapi.Capabilities{FSRead: []string{"rel"}}}},
		{"capabilities.fs_write[0]", Command{Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{"rel"}}}},
		{"capabilities.network.hosts", Command{Program: "echo", Capabilities: driverapi.Capabilities{Network: driverapi.NetworkPolicy{Hosts: []string{"x"}}}}},
		{"capabilities.network.hosts", Command{Program: "echo", Capabilities: driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts}}}},
		{"capabilities.network.mode", Command{Program: "echo", Capabilities: driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: 9}}}},
		{"secret TOKEN", Command{Program: "echo", Env: map[string]string{"TOKEN": "a"}, Secrets: map[string]string{"TOKEN": "b"}}},
		{"secret HOME", Command{Program: "echo", Secrets: map[string]string{"HOME": "b"}}},
		{"secret T", Command{Program: "echo", Secrets: map[string]string{"T": "a\nb"}}},
	}
	for _, c := range cases {
		_, err := h.sb.Execute(ctx, c.cmd)
		wantInvalid(t, err, c.field)
		if r := h.sink.last(t); r.Reason != ReasonInvalidCommand || r.Decision != DecisionError {
			t.Fatalf("%s: audit %+v", c.field, r)
		}
	}
	if h.fake.Runs() != 0 {
		t.Fatal("invalid input reached the driver")
	}
	// Positive control: stdin at exactly the limit runs.
	out, err := h.sb.Execute(ctx, Command{Program: "cat", Stdin: bytes.Repeat([]byte("a"), 100)})
	if err != nil || string(out.Stdout) != strings.Repeat("a", 100) {
		t.Fatalf("cat: %v", err)
	}
}

func TestChildEnvironment(t *testing.T) {
	t.Setenv("ALEPH_TEST_HOST_ONLY", "host-value-must-not-leak")
	h := newHarness(t, testConfig(t), nil)
	out, err := h.sb.Execute(context.Background(), Command{SessionID: "env", Program: "env", Env: map[string]string{"FOO": "bar", "LANG": "de_DE.UTF-8"}})
	if err != nil {
		t.Fatal(err)
	}
	ws := h.fake.LastProfileRequest().Workspace
	home, err := h.sb.HomePath("env")
	if err != nil || home == ws || driverapi.PathWithin(ws, home) || driverapi.PathWithin(home, ws) {
		t.Fatalf("HOME %q (%v) must be apart from the workspace %q", home, err, ws)
	}
	// Writable the way a write grant is, through the profile request only.
	if fw := h.fake.LastProfileRequest().Capabilities.FSWrite; !slices.Contains(fw, home) {
		t.Fatalf("profile request fs_write %v lacks the HOME %q", fw, home)
	}
	want := "FOO=bar\nHOME=" + home + "\nLANG=de_DE.UTF-8\nPATH=" + DefaultPath + "\nTERM=dumb\nTZ=UTC\n"
	if string(out.Stdout) != want {
		t.Fatalf("env:\n%s\nwant:\n%s", out.Stdout, want)
	}
	if bytes.Contains(out.Stdout, []byte("host-value")) {
		t.Fatal("host env leaked")
	}
}

func TestTimeoutPrecedence(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.DefaultTimeoutSeconds = 42
	h := newHarness(t, cfg, nil)
	ctx := WithSession(context.Background(), "t")
	cases := []struct {
		cmd  Command
		want time.Duration
	}{
		{Command{Program: "echo"}, 42 * time.Second},
		{Command{Program: "echo", Capabilities: driverapi.Capabilities{TimeoutSecs: 7}}, 7 * time.Second},
		{Command{Program: "echo", Capabilities: driverapi.Capabilities{TimeoutSecs: 7}, Timeout: 1500 * time.Millisecond}, 1500 * time.Millisecond},
		{Command{Program: "echo", Timeout: 3 * time.Second}, 3 * time.Second},
	}
	for _, c := range cases {
		if _, err := h.sb.Execute(ctx, c.cmd); err != nil {
			t.Fatal(err)
		}
		if got := h.fake.LastSpec().Timeout; got != c.want {
			t.Fatalf("timeout %v, want %v", got, c.want)
		}
	}
	out, err := h.sb.Execute(ctx, Command{Program: "sleep", Args: []string{"10s"}, Timeout: time.Millisecond})
	if err != nil || !out.Exit.TimedOut {
		t.Fatalf("sleep: %v %+v", err, out)
	}
	if r := h.sink.last(t); r.Reason != ReasonTimeout || !r.TimedOut || r.Decision != DecisionAllow {
		t.Fatalf("audit %+v", r)
	}
}

func TestOutputBudget(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.MaxOutputBytes = 4096
	h := newHarness(t, cfg, nil)
	ctx := WithSession(context.Background(), "o")
	// Configured budget: half per stream.
	out, err := h.sb.Execute(ctx, Command{Program: "flood", Args: []string{"100000", "err"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Stdout) != 2048 || len(out.Stderr) != 2048 || !out.Exit.Truncated || out.Exit.StdoutBytes != 100000 {
		t.Fatalf("stdout %d stderr %d exit %+v", len(out.Stdout), len(out.Stderr), out.Exit)
	}
	if h.fake.LastSpec().MaxOutputBytes != 4096 {
		t.Fatalf("budget sent %d", h.fake.LastSpec().MaxOutputBytes)
	}
	if r := h.sink.last(t); !r.Truncated {
		t.Fatal("audit misses truncation")
	}
	// Command budget wins and live streams see the same bounded bytes.
	var live, liveErr bytes.Buffer
	out, err = h.sb.Execute(ctx, Command{Program: "flood", Args: []string{"100000"}, MaxOutputBytes: 1000, Stdout: &live, Stderr: &liveErr})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Stdout) != 500 || live.Len() != 500 || !bytes.Equal(live.Bytes(), out.Stdout) {
		t.Fatalf("stdout %d live %d", len(out.Stdout), live.Len())
	}
	// Positive control: output within budget is whole and not truncated.
	out, err = h.sb.Execute(ctx, Command{Program: "flood", Args: []string{"100"}})
	if err != nil || len(out.Stdout) != 100 || out.Exit.Truncated {
		t.Fatalf("small flood: %v %d %v", err, len(out.Stdout), out.Exit.Truncated)
	}
}

func TestDefaultOutputBudgetIsOneMiB(t *testing.T) {
	if DefaultConfig().Sandbox.MaxOutputBytes != 1<<20 {
		t.Fatal("default budget is not 1 MiB")
	}
	h := newHarness(t, testConfig(t), nil)
	out, err := h.sb.Execute(context.Background(), Command{SessionID: "o", Program: "flood", Args: []string{"3000000"}})
	if err != nil || len(out.Stdout) != 1<<19 || !out.Exit.Truncated {
		t.Fatalf("%v %d", err, len(out.Stdout))
	}
}

// Core launches nothing and opens no file: a pipeline without a driver,
// or with an audit log configured but no sink to write it, is refused
// naming the key, never run unaudited or driverless. Control: with both
// parts the same configuration runs.
func TestPipelineNeedsItsParts(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.AuditLog = filepath.Join(t.TempDir(), "audit.jsonl")
	var ce *ConfigError
	if _, err := NewWorkspaceSandbox(cfg, WithAuditSink(&memSink{})); !errors.As(err, &ce) || ce.Key != "sandbox.driver" {
		t.Fatalf("without a driver: %v", err)
	}
	fake := &drivertest.FakeDriver{}
	if _, err := NewWorkspaceSandbox(cfg, WithDriver(drivertest.Connect(t, fake))); !errors.As(err, &ce) || ce.Key != "sandbox.audit_log" {
		t.Fatalf("without an audit sink: %v", err)
	}
	if _, err := os.Stat(cfg.Sandbox.AuditLog); !os.IsNotExist(err) {
		t.Fatalf("core created the audit file: %v", err)
	}
	sink := &memSink{}
	sb, err := NewWorkspaceSandbox(cfg, WithDriver(drivertest.Connect(t, fake)), WithAuditSink(sink))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if _, err := sb.Execute(WithSession(context.Background(), "x"), Command{Program: "echo"}); err != nil || fake.Runs() != 1 || len(sink.all()) != 1 {
		t.Fatalf("control: %v, runs %d, records %d", err, fake.Runs(), len(sink.all()))
	}
}

func TestEnforceability(t *testing.T) {
	missing := func(feature, reason string) *drivertest.FakeDriver {
		caps := drivertest.FullCapabilities()
		caps.Features = nil
		for _, f := range driverapi.KnownFeatures() {
			if f != feature {
				caps.Features = append(caps.Features, f)
			}
		}
		caps.Unavailable = []driverapi.Unavailable{{Feature: feature, Reason: reason, Fix: "install it"}}
		return &drivertest.FakeDriver{Caps: caps}
	}
	yes := &drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved}
	cases := []struct {
		feature string
		caps    driverapi.Capabilities
		ok      driverapi.Capabilities // a request that does not need feature
	}{
		{driverapi.FeatureNetworkNone, driverapi.Capabilities{}, driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}},
		{driverapi.FeatureNetworkAll, driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}, driverapi.Capabilities{}},
		{driverapi.FeatureSubprocessControl, driverapi.Capabilities{}, driverapi.Capabilities{SpawnSubprocess: true}},
		{driverapi.FeatureMemoryLimit, driverapi.Capabilities{MaxMemoryMB: 64}, driverapi.Capabilities{}},
		{driverapi.FeatureFSReadIsolation, driverapi.Capabilities{}, driverapi.Capabilities{}},
		// A driver that passes its own environment through would leak the
		// host's: every command needs it too.
		{driverapi.FeatureEnvIsolation, driverapi.Capabilities{}, driverapi.Capabilities{}},
	}
	for _, c := range cases {
		h := newHarness(t, testConfig(t), missing(c.feature, "kernel too old"), WithApprovalRequester(yes))
		ctx := WithSession(context.Background(), "e")
		_, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: c.caps})
		de := wantDenied(t, err, ReasonUnenforceable)
		if !strings.Contains(de.Reason, c.feature) || !strings.Contains(de.Reason, "kernel too old") || !strings.Contains(de.Reason, "fake") {
			t.Fatalf("reason %q does not name feature, cause and driver", de.Reason)
		}
		if h.fake.Runs() != 0 {
			t.Fatal("unenforceable command ran")
		}
		if c.feature == driverapi.FeatureFSReadIsolation || c.feature == driverapi.FeatureEnvIsolation {
			continue // every command needs it: no positive control possible
		}
		if _, err := h.sb.Execute(ctx, Command{Program: "echo", Capabilities: c.ok}); err != nil {
			t.Fatalf("%s missing, request %+v: %v", c.feature, c.ok, err)
		}
	}
	// AllowHosts needs the proxy feature and a mediator.
	h := newHarness(t, testConfig(t), nil, WithApprovalRequester(yes))
	_, err := h.sb.Execute(WithSession(context.Background(), "e"), Command{Program: "echo",
		Capabilities: driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}}})
	de := wantDenied(t, err, ReasonUnenforceable)
	if !strings.Contains(de.Reason, "mediator") {
		t.Fatalf("reason %q", de.Reason)
	}
	h = newHarness(t, testConfig(t), missing(driverapi.FeatureNetworkViaProxy, "no proxy support"), WithApprovalRequester(yes), WithNetworkMediator(&fakeMediator{}))
	_, err = h.sb.Execute(WithSession(context.Background(), "e"), Command{Program: "echo",
		Capabilities: driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}}})
	de = wantDenied(t, err, ReasonUnenforceable)
	if !strings.Contains(de.Reason, driverapi.FeatureNetworkViaProxy) {
		t.Fatalf("reason %q", de.Reason)
	}
}

// failingDriver fails ProfileFor; everything else is the fake's.
type failingDriver struct{ *drivertest.FakeDriver }

func (failingDriver) ProfileFor(context.Context, driverapi.ProfileRequest) (driverapi.Profile, error) {
	return driverapi.Profile{}, errors.New("cannot build profile")
}

func TestDriverFailureIsTypedAndAudited(t *testing.T) {
	fake := &drivertest.FakeDriver{}
	sink := &memSink{}
	sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(drivertest.Connect(t, failingDriver{fake})), WithAuditSink(sink))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	_, err = sb.Execute(WithSession(context.Background(), "d"), Command{Program: "echo"})
	var de *DriverError
	if !errors.As(err, &de) || de.Op != "ProfileFor" || !strings.Contains(err.Error(), "cannot build profile") || de.Driver != "fake" {
		t.Fatalf("err %T %v", err, err)
	}
	if r := sink.last(t); r.Reason != ReasonDriverFailed || r.Decision != DecisionError {
		t.Fatalf("audit %+v", r)
	}
}

func TestCancelledContext(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	ctx, cancel := context.WithCancel(WithSession(context.Background(), "c"))
	go func() {
		for h.fake.Runs() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err := h.sb.Execute(ctx, Command{Program: "sleep", Args: []string{"1m"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if r := h.sink.last(t); r.Reason != ReasonCanceled {
		t.Fatalf("audit %+v", r)
	}
}

func TestConcurrentSessions(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sid := []string{"a", "b", "c"}[i%3]
			out, err := h.sb.Execute(context.Background(), Command{SessionID: sid, Program: "echo", Args: []string{sid}})
			if err == nil && string(out.Stdout) != sid+"\n" {
				err = errors.New("wrong output " + string(out.Stdout))
			}
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	h.sb.mu.RLock()
	n := len(h.sb.sessions)
	h.sb.mu.RUnlock()
	if n != 3 {
		t.Fatalf("%d sessions, want 3", n)
	}
}

func TestClosedSandboxRefuses(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	_ = h.sb.Close()
	if _, err := h.sb.Execute(WithSession(context.Background(), "x"), Command{Program: "echo"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed sandbox: %v", err)
	}
	if r := h.sink.last(t); r.Reason != ReasonClosed {
		t.Fatalf("audit %+v", r)
	}
}

// countingDriver counts ProfileFor calls and can fail Run once.
type countingDriver struct {
	*drivertest.FakeDriver
	mu       sync.Mutex
	profiles int
	failRun  bool
}

func (c *countingDriver) ProfileFor(ctx context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	c.mu.Lock()
	c.profiles++
	c.mu.Unlock()
	return c.FakeDriver.ProfileFor(ctx, req)
}

func (c *countingDriver) Run(ctx context.Context, spec driverapi.RunSpec, st driverapi.Streams) (driverapi.Exit, error) {
	c.mu.Lock()
	fail := c.failRun
	c.failRun = false
	c.mu.Unlock()
	if fail {
		return driverapi.Exit{}, errors.New("boom")
	}
	return c.FakeDriver.Run(ctx, spec, st)
}

func (c *countingDriver) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.profiles }

func TestProfileCache(t *testing.T) {
	cd := &countingDriver{FakeDriver: &drivertest.FakeDriver{}}
	sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(drivertest.Connect(t, cd)), WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ctx := WithSession(context.Background(), "p")
	for i := 0; i < 3; i++ {
		if _, err := sb.Execute(ctx, Command{Program: "echo"}); err != nil {
			t.Fatal(err)
		}
	}
	if cd.count() != 1 {
		t.Fatalf("ProfileFor called %d times for equal requests", cd.count())
	}
	// A different request gets its own profile.
	if _, err := sb.Execute(ctx, Command{Program: "echo", Capabilities: driverapi.Capabilities{TimeoutSecs: 5}}); err != nil {
		t.Fatal(err)
	}
	if cd.count() != 2 {
		t.Fatalf("count %d", cd.count())
	}
	// A driver failure empties the cache.
	cd.mu.Lock()
	cd.failRun = true
	cd.mu.Unlock()
	if _, err := sb.Execute(ctx, Command{Program: "echo"}); err == nil {
		t.Fatal("want driver error")
	}
	if _, err := sb.Execute(ctx, Command{Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	if cd.count() != 3 {
		t.Fatalf("cache survived a driver error: count %d", cd.count())
	}
}

func TestPlantedSessionSymlinkRefused(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, nil)
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(cfg.Sandbox.WorkspaceRoot, SessionDirName("planted"))); err != nil {
		t.Fatal(err)
	}
	_, err := h.sb.Execute(context.Background(), Command{SessionID: "planted", Program: "echo"})
	var we *WorkspaceError
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "symlinks are refused") {
		t.Fatalf("err %v", err)
	}
	if r := h.sink.last(t); r.Reason != ReasonWorkspaceFailed {
		t.Fatalf("audit %+v", r)
	}
	if h.fake.Runs() != 0 {
		t.Fatal("ran in a planted workspace")
	}
	// Positive control: a normal session in the same root works.
	if _, err := h.sb.Execute(context.Background(), Command{SessionID: "normal", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
}

// stuckDriver ignores the timeout in RunSpec and waits for cancellation.
type stuckDriver struct{ *drivertest.FakeDriver }

func (stuckDriver) Run(ctx context.Context, _ driverapi.RunSpec, _ driverapi.Streams) (driverapi.Exit, error) {
	<-ctx.Done()
	return driverapi.Exit{}, ctx.Err()
}

func TestDriverIgnoringTimeoutIsCutOff(t *testing.T) {
	sink := &memSink{}
	sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(stuckDriver{&drivertest.FakeDriver{}}), WithAuditSink(sink))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	sb.runGrace = 10 * time.Millisecond
	_, err = sb.Execute(WithSession(context.Background(), "s"), Command{Program: "sleep", Timeout: 10 * time.Millisecond})
	var de *DriverError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "did not end the command") {
		t.Fatalf("err %v", err)
	}
	if r := sink.last(t); r.Reason != ReasonDriverFailed {
		t.Fatalf("audit %+v", r)
	}
}

// capsFailDriver fails Capabilities.
type capsFailDriver struct{ *drivertest.FakeDriver }

func (capsFailDriver) Capabilities(context.Context) (driverapi.HostCapabilities, error) {
	return driverapi.HostCapabilities{}, errors.New("probe failed")
}

func TestDriverCapabilitiesFailure(t *testing.T) {
	sink := &memSink{}
	sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(drivertest.Connect(t, capsFailDriver{&drivertest.FakeDriver{}})), WithAuditSink(sink))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	for i := 0; i < 2; i++ { // not cached: each command asks again
		_, err = sb.Execute(WithSession(context.Background(), "c"), Command{Program: "echo"})
		var de *DriverError
		if !errors.As(err, &de) || de.Op != "Capabilities" || !strings.Contains(err.Error(), "probe failed") {
			t.Fatalf("err %v", err)
		}
	}
	if r := sink.last(t); r.Reason != ReasonDriverFailed {
		t.Fatalf("audit %+v", r)
	}
}

// A driver's impossible signal number fails the command naming the
// driver, instead of becoming an exit status that wraps (128+999); a real
// one is reported (the control).
func TestImpossibleExitRefused(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	ctx := WithSession(context.Background(), "x")
	_, err := h.sb.Execute(ctx, Command{Program: "signal", Args: []string{"999"}})
	var de *DriverError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "signal 999") {
		t.Fatalf("signal 999: %v, want a DriverError naming it", err)
	}
	out, err := h.sb.Execute(ctx, Command{Program: "signal", Args: []string{"15"}})
	if err != nil || out.Exit.Signal != 15 || out.Exit.ExitCode != 143 {
		t.Fatalf("signal 15: %+v, %v", out, err)
	}
}

func TestSaneExit(t *testing.T) {
	const elapsed = 2 * time.Second
	for _, c := range []struct {
		name      string
		in, want  driverapi.Exit
		out, errb int64
		refuse    bool
	}{
		{name: "as reported", in: driverapi.Exit{ExitCode: 3, Duration: time.Second, StdoutBytes: 10, StderrBytes: 4}, out: 10, errb: 4,
			want: driverapi.Exit{ExitCode: 3, Duration: time.Second, StdoutBytes: 10, StderrBytes: 4}},
		{name: "more written than delivered (past the budget)", in: driverapi.Exit{StdoutBytes: 1 << 20}, out: 100,
			want: driverapi.Exit{StdoutBytes: 1 << 20}},
		{name: "fewer than delivered", in: driverapi.Exit{StdoutBytes: 0, StderrBytes: -1}, out: 5 << 20, errb: 3,
			want: driverapi.Exit{StdoutBytes: 5 << 20, StderrBytes: 3}},
		{name: "negative duration", in: driverapi.Exit{Duration: -time.Hour}, want: driverapi.Exit{Duration: elapsed}},
		{name: "longer than the host waited", in: driverapi.Exit{Duration: time.Hour}, want: driverapi.Exit{Duration: elapsed}},
		{name: "negative exit code (Windows)", in: driverapi.Exit{ExitCode: -1073741819}, want: driverapi.Exit{ExitCode: -1073741819}},
		{name: "signal 999", in: driverapi.Exit{ExitCode: 1127, Signal: 999}, refuse: true},
		{name: "negative signal", in: driverapi.Exit{Signal: -5}, refuse: true},
	} {
		e := c.in
		err := saneExit(&e, elapsed, c.out, c.errb)
		if (err != nil) != c.refuse {
			t.Errorf("%s: err %v, refuse %v", c.name, err, c.refuse)
			continue
		}
		if !c.refuse && !reflect.DeepEqual(e, c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, e, c.want)
		}
	}
}
