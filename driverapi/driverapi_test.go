package driverapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// TestMain doubles as a plugin binary: with ALEPH_DRIVERAPI_TEST_PLUGIN set,
// the test executable serves a fake driver or hook instead of running tests,
// so launch tests exercise a real separate process.
func TestMain(m *testing.M) {
	switch os.Getenv("ALEPH_DRIVERAPI_TEST_PLUGIN") {
	case "driver":
		driverapi.Serve(&drivertest.FakeDriver{Stdout: []byte("from plugin")})
		return
	case "driver-ignores-offer":
		// A plugin built before the keyed transport: it never looks at
		// the offer (nor at the key's PEM block) and serves mutual TLS.
		os.Unsetenv("ALEPH_PLUGIN_TRANSPORT")
		driverapi.Serve(&drivertest.FakeDriver{Stdout: []byte("from plugin")})
		return
	case "driver-automtls":
		// Older still: it knows neither the certificate pipe nor the
		// offer, and go-plugin's AutoMTLS answers with a certificate of
		// its own in the handshake line.
		os.Unsetenv("ALEPH_PLUGIN_TRANSPORT")
		os.Unsetenv("ALEPH_PLUGIN_TLS_FD")
		driverapi.Serve(&drivertest.FakeDriver{Stdout: []byte("from plugin")})
		return
	case "hook":
		driverapi.ServeHook(denyHook{})
		return
	case "host":
		hostMain()
		return
	case "panic-at-start":
		panic("boom at start")
	case "stdout-first":
		fmt.Println("hello from the driver")
		driverapi.Serve(&drivertest.FakeDriver{})
		return
	case "foreign":
		// A go-plugin plugin of another program: its cookie is not ours.
		plugin.Serve(&plugin.ServeConfig{HandshakeConfig: plugin.HandshakeConfig{
			ProtocolVersion: 1, MagicCookieKey: "OTHER_PROGRAM_PLUGIN", MagicCookieValue: "other"}})
		return
	case "dying":
		driverapi.Serve(&dyingDriver{})
		return
	}
	os.Exit(m.Run())
}

// dyingDriver dies during Run, after writing command output: program
// "panic" panics, "exit" says why on its stderr and exits (log.Fatal).
type dyingDriver struct{ drivertest.FakeDriver }

// commandSecret is command output: it must never reach an error.
const commandSecret = "COMMAND-OUTPUT-SECRET"

func (d *dyingDriver) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	_, _ = streams.Stderr.Write([]byte(commandSecret + "\n"))
	_, _ = streams.Stdout.Write([]byte(commandSecret + "\n"))
	switch spec.Program {
	case "panic":
		panic("boom in Run")
	case "exit":
		log.Fatal("dying-driver: lost its backend")
	}
	return d.FakeDriver.Run(ctx, spec, streams)
}

type denyHook struct{}

func (denyHook) Describe(context.Context) (driverapi.HookInfo, error) {
	return driverapi.HookInfo{Name: "deny-rm", Version: "1"}, nil
}

func (denyHook) Before(_ context.Context, r driverapi.HookRequest) (driverapi.Verdict, error) {
	if r.Program == "rm" {
		return driverapi.Verdict{Action: driverapi.ActionDeny, Rule: "no-rm", Reason: "rm is not allowed", RetryAfter: 1500 * time.Millisecond}, nil
	}
	return driverapi.Verdict{Action: driverapi.ActionAllow}, nil
}

func profileFor(t *testing.T, d driverapi.Driver) driverapi.Profile {
	t.Helper()
	p, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: "/ws", Cwd: "/ws"})
	if err != nil {
		t.Fatalf("ProfileFor: %v", err)
	}
	return p
}

func spec(p driverapi.Profile, program string, args ...string) driverapi.RunSpec {
	return driverapi.RunSpec{Program: program, Args: args, Cwd: "/ws", Profile: p, Timeout: 5 * time.Second, MaxOutputBytes: 1 << 20}
}

func TestRoundTripOverGRPC(t *testing.T) {
	d := drivertest.Connect(t, &drivertest.FakeDriver{})
	ctx := context.Background()

	caps, err := d.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if caps.Backend != drivertest.FakeBackend || caps.ProtocolVersion != driverapi.ProtocolVersion || !caps.Has(driverapi.FeatureNetworkNone) {
		t.Fatalf("capabilities did not survive the wire: %+v", caps)
	}

	p := profileFor(t, d)
	if p.Digest != driverapi.Digest(p.Data) || p.Backend != drivertest.FakeBackend {
		t.Fatalf("profile not intact: %+v", p)
	}

	var out, errOut bytes.Buffer
	s := spec(p, "echo", "héllo", "", "a b")
	s.Env = []driverapi.EnvVar{{Name: "A", Value: "1"}}
	exit, err := d.Run(ctx, s, driverapi.Streams{Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "héllo  a b\n" {
		t.Fatalf("stdout = %q", got)
	}
	if exit.ExitCode != 0 || exit.StdoutBytes != int64(out.Len()) {
		t.Fatalf("exit = %+v", exit)
	}

	exit, err = d.Run(ctx, spec(p, "signal", "9"), driverapi.Streams{Stdout: io.Discard, Stderr: io.Discard})
	if err != nil || exit.Signal != 9 || exit.ExitCode != 137 {
		t.Fatalf("signal exit = %+v, %v", exit, err)
	}
}

func TestRunStreamsLargeOutputInChunksAndTruncates(t *testing.T) {
	d := drivertest.Connect(t, &drivertest.FakeDriver{})
	p := profileFor(t, d)
	var out bytes.Buffer
	s := spec(p, "flood", "300000")
	s.MaxOutputBytes = 200000 // stdout keeps 100000
	exit, err := d.Run(context.Background(), s, driverapi.Streams{Stdout: &out, Stderr: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if out.Len() != 100000 || !exit.Truncated || exit.StdoutBytes != 300000 {
		t.Fatalf("kept %d bytes, exit %+v", out.Len(), exit)
	}
}

func TestGarbledProfileRefusedAcrossTheWire(t *testing.T) {
	d := drivertest.Connect(t, &drivertest.FakeDriver{})
	good := profileFor(t, d)

	cases := map[string]driverapi.Profile{
		"flipped byte":  {Backend: good.Backend, Data: append([]byte{good.Data[0] ^ 1}, good.Data[1:]...), Digest: good.Digest},
		"wrong backend": driverapi.NewProfile("other", good.Data),
		"empty":         {},
	}
	for name, p := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := d.Run(context.Background(), spec(p, "echo"), driverapi.Streams{})
			var pe *driverapi.ProfileError
			if !errors.As(err, &pe) {
				t.Fatalf("want ProfileError, got %T %v", err, err)
			}
		})
	}
	// Positive control: the untouched profile runs.
	if _, err := d.Run(context.Background(), spec(good, "echo"), driverapi.Streams{Stdout: io.Discard}); err != nil {
		t.Fatalf("good profile refused: %v", err)
	}
}

func TestInvalidSpecIsTypedAcrossTheWire(t *testing.T) {
	d := drivertest.Connect(t, &drivertest.FakeDriver{})
	p := profileFor(t, d)
	bad := []struct {
		name  string
		mod   func(*driverapi.RunSpec)
		field string
	}{
		{"nul in arg", func(s *driverapi.RunSpec) { s.Args = []string{"a\x00b"} }, "args[0]"},
		{"relative cwd", func(s *driverapi.RunSpec) { s.Cwd = "ws" }, "cwd"},
		{"zero timeout", func(s *driverapi.RunSpec) { s.Timeout = 0 }, "timeout"},
		{"env with =", func(s *driverapi.RunSpec) { s.Env = []driverapi.EnvVar{{Name: "A=B"}} }, `env "A=B"`},
		{"huge stdin", func(s *driverapi.RunSpec) { s.Stdin = make([]byte, driverapi.MaxStdinBytes+1) }, "stdin"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			s := spec(p, "echo")
			c.mod(&s)
			_, err := d.Run(context.Background(), s, driverapi.Streams{})
			var ie *driverapi.InvalidSpecError
			if !errors.As(err, &ie) || ie.Field != c.field {
				t.Fatalf("want InvalidSpecError on %q, got %T %v", c.field, err, err)
			}
		})
	}
}

func TestHookOverGRPC(t *testing.T) {
	h := drivertest.ConnectHook(t, denyHook{})
	v, err := h.Before(context.Background(), driverapi.HookRequest{Program: "rm"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Action != driverapi.ActionDeny || v.Rule != "no-rm" || v.RetryAfter != 1500*time.Millisecond {
		t.Fatalf("verdict = %+v", v)
	}
	v, err = h.Before(context.Background(), driverapi.HookRequest{Program: "ls"})
	if err != nil || v.Action != driverapi.ActionAllow {
		t.Fatalf("positive control: %+v %v", v, err)
	}
}

type garbageHook struct{ denyHook }

func (garbageHook) Before(context.Context, driverapi.HookRequest) (driverapi.Verdict, error) {
	return driverapi.Verdict{Action: driverapi.Action(42)}, nil
}

func TestHookGarbageVerdictIsAnError(t *testing.T) {
	h := drivertest.ConnectHook(t, garbageHook{})
	if _, err := h.Before(context.Background(), driverapi.HookRequest{Program: "ls"}); err == nil {
		t.Fatal("an unknown action must be an error, never a pass")
	}
}

func selfPlugin(t *testing.T, kind string) driverapi.LaunchConfig {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return driverapi.LaunchConfig{Path: exe, Env: []string{"ALEPH_DRIVERAPI_TEST_PLUGIN=" + kind}}
}

func TestLaunchRealPluginProcess(t *testing.T) {
	ctx := context.Background()
	proc, err := driverapi.LaunchDriver(ctx, selfPlugin(t, "driver"))
	if err != nil {
		t.Fatal(err)
	}
	d := proc.Driver()
	p := profileFor(t, d)
	var out bytes.Buffer
	if _, err := d.Run(ctx, spec(p, "other"), driverapi.Streams{Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "from plugin" {
		t.Fatalf("stdout = %q", out.String())
	}
	pid := proc.Pid()
	if !alive(pid) {
		t.Fatalf("plugin pid %d not alive while in use", pid)
	}
	proc.Kill()
	if !proc.Exited() {
		t.Fatal("Exited() false after Kill")
	}
	// Kill waits for the process; a zombie would still answer kill(0), but
	// go-plugin reaps it.
	if alive(pid) {
		t.Fatalf("plugin pid %d still alive after Kill", pid)
	}
}

func TestPluginCrashIsReportedAsDied(t *testing.T) {
	ctx := context.Background()
	proc, err := driverapi.LaunchDriver(ctx, selfPlugin(t, "driver"))
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill()
	p := profileFor(t, proc.Driver())
	_, err = proc.Driver().Run(ctx, spec(p, "crash"), driverapi.Streams{})
	if !errors.Is(err, driverapi.ErrPluginDied) {
		t.Fatalf("want ErrPluginDied, got %T %v", err, err)
	}
	if !strings.Contains(err.Error(), proc.Path()) {
		t.Fatalf("error does not name the plugin: %v", err)
	}
}

func TestLaunchHookPlugin(t *testing.T) {
	proc, err := driverapi.LaunchHook(context.Background(), selfPlugin(t, "hook"))
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Kill()
	if proc.Driver() != nil {
		t.Fatal("a hook process must not look like a driver")
	}
	info, err := proc.Hook().Describe(context.Background())
	if err != nil || info.Name != "deny-rm" {
		t.Fatalf("describe = %+v, %v", info, err)
	}
}

func TestProtocolMismatchNamesBothVersions(t *testing.T) {
	cfg := selfPlugin(t, "driver")
	cfg.HostProtocolVersion = driverapi.ProtocolVersion + 1
	_, err := driverapi.LaunchDriver(context.Background(), cfg)
	var pm *driverapi.ProtocolMismatchError
	if !errors.As(err, &pm) {
		t.Fatalf("want ProtocolMismatchError, got %T %v", err, err)
	}
	if pm.PluginVer != driverapi.ProtocolVersion || pm.HostVer != driverapi.ProtocolVersion+1 {
		t.Fatalf("versions = plugin %d host %d", pm.PluginVer, pm.HostVer)
	}
	msg := err.Error()
	if !strings.Contains(msg, "version 1") || !strings.Contains(msg, "version 2") {
		t.Fatalf("message does not name both versions: %s", msg)
	}
}

func TestChecksumPin(t *testing.T) {
	cfg := selfPlugin(t, "driver")
	data, err := os.ReadFile(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)

	bad := cfg
	bad.SHA256 = strings.Repeat("00", 32)
	_, err = driverapi.LaunchDriver(context.Background(), bad)
	var pe *driverapi.PluginError
	if !errors.As(err, &pe) || pe.Op != "checksum" {
		t.Fatalf("want checksum PluginError, got %T %v", err, err)
	}
	// Both hashes are named: a stale pin and a replaced binary look alike
	// otherwise.
	var ce *driverapi.ChecksumError
	actual := hex.EncodeToString(sum[:])
	if !errors.As(err, &ce) || ce.Pinned != bad.SHA256 || ce.Actual != actual ||
		!strings.Contains(err.Error(), bad.SHA256) || !strings.Contains(err.Error(), actual) {
		t.Fatalf("checksum error does not name both hashes: %T %v", err, err)
	}

	malformed := cfg
	malformed.SHA256 = "xyz"
	if _, err := driverapi.LaunchDriver(context.Background(), malformed); !errors.As(err, &pe) || pe.Op != "checksum" {
		t.Fatalf("malformed pin: %v", err)
	}

	good := cfg
	good.SHA256 = hex.EncodeToString(sum[:])
	proc, err := driverapi.LaunchDriver(context.Background(), good)
	if err != nil {
		t.Fatalf("matching pin refused: %v", err)
	}
	proc.Kill()
}

func TestLaunchBadBinaries(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "plain")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notPlugin := filepath.Join(dir, "true")
	if err := os.WriteFile(notPlugin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path, op, want string
	}{
		{filepath.Join(dir, "missing"), "find", "no such file"},
		{notExec, "find", "not executable"},
		{dir, "find", "not a regular file"},
		{notPlugin, "start", ""},
	}
	for _, c := range cases {
		_, err := driverapi.LaunchDriver(context.Background(), driverapi.LaunchConfig{Path: c.path, StartTimeout: 5 * time.Second})
		var pe *driverapi.PluginError
		if !errors.As(err, &pe) || pe.Op != c.op || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: got %T %v", c.path, err, err)
		}
	}
}

func TestIsWithin(t *testing.T) {
	base := driverapi.Capabilities{FSRead: []string{"/usr/share"}, FSWrite: []string{"/ws/out"}, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com", "api.example.org"}}}
	cases := []struct {
		name string
		c    driverapi.Capabilities
		want bool
	}{
		{"zero", driverapi.Capabilities{}, true},
		{"read under read", driverapi.Capabilities{FSRead: []string{"/usr/share/doc"}}, true},
		{"read under write", driverapi.Capabilities{FSRead: []string{"/ws/out/x"}}, true},
		{"read sibling prefix", driverapi.Capabilities{FSRead: []string{"/usr/sharex"}}, false},
		{"read dotdot escape", driverapi.Capabilities{FSRead: []string{"/usr/share/../../etc"}}, false},
		{"write under read only", driverapi.Capabilities{FSWrite: []string{"/usr/share"}}, false},
		{"write under write", driverapi.Capabilities{FSWrite: []string{"/ws/out/a"}}, true},
		{"hosts subset", driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"EXAMPLE.com."}}}, true},
		{"hosts extra", driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"evil.com"}}}, false},
		{"all beyond hosts", driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}, false},
		{"spawn", driverapi.Capabilities{SpawnSubprocess: true}, false},
	}
	for _, c := range cases {
		if got := c.c.IsWithin(base); got != c.want {
			t.Errorf("%s: IsWithin = %v, want %v", c.name, got, c.want)
		}
	}
	limited := driverapi.Capabilities{MaxMemoryMB: 512, TimeoutSecs: 30}
	for _, c := range []struct {
		name string
		c    driverapi.Capabilities
		want bool
	}{
		{"tighter memory and timeout", driverapi.Capabilities{MaxMemoryMB: 256, TimeoutSecs: 10}, true},
		{"unlimited memory", driverapi.Capabilities{TimeoutSecs: 10}, false},
		{"looser timeout", driverapi.Capabilities{MaxMemoryMB: 256, TimeoutSecs: 31}, false},
	} {
		if got := c.c.IsWithin(limited); got != c.want {
			t.Errorf("%s: IsWithin = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestBudgetWriter(t *testing.T) {
	var buf bytes.Buffer
	w := driverapi.NewBudgetWriter(&buf, 5)
	for _, s := range []string{"abc", "def", "ghi"} {
		if n, err := w.Write([]byte(s)); n != 3 || err != nil {
			t.Fatalf("Write = %d, %v: over-budget writes must still succeed", n, err)
		}
	}
	if buf.String() != "abcde" || w.Total() != 9 || !w.Truncated() {
		t.Fatalf("kept %q total %d truncated %v", buf.String(), w.Total(), w.Truncated())
	}
	exact := driverapi.NewBudgetWriter(io.Discard, 3)
	_, _ = exact.Write([]byte("abc"))
	if exact.Truncated() {
		t.Fatal("exactly the budget is not truncated")
	}
}

func TestStreamBudgets(t *testing.T) {
	if o, e := driverapi.StreamBudgets(0); o+e != driverapi.DefaultMaxOutputBytes || o != e {
		t.Fatalf("default split = %d/%d", o, e)
	}
	if o, e := driverapi.StreamBudgets(11); o != 5 || e != 6 {
		t.Fatalf("odd split = %d/%d", o, e)
	}
}

// The launch environment overrides the host's own: a variable set in the
// host process must not win over LaunchConfig.Env (go-plugin appends the
// host's environment last unless told not to).
func TestLaunchEnvOverridesHostEnv(t *testing.T) {
	t.Setenv("ALEPH_DRIVERAPI_TEST_PLUGIN", "not-a-plugin-mode")
	proc, err := driverapi.LaunchDriver(context.Background(), selfPlugin(t, "driver"))
	if err != nil {
		t.Fatalf("LaunchConfig.Env lost to the host environment: %v", err)
	}
	proc.Kill()
}

// A plugin that panics before its handshake is explained by its panic line
// and the frame it panicked in, not by the last line of the stack trace.
func TestLaunchPanicShowsPanicLine(t *testing.T) {
	_, err := driverapi.LaunchDriver(context.Background(), selfPlugin(t, "panic-at-start"))
	var he *driverapi.HandshakeError
	if !errors.As(err, &he) {
		t.Fatalf("want a HandshakeError, got %T %v", err, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "it wrote: panic: boom at start (in ") || !strings.Contains(msg, "TestMain at ") ||
		!strings.Contains(msg, "driverapi_test.go:") || strings.Contains(msg, "+0x") {
		t.Fatalf("panic at start explained as: %s", msg)
	}
}

// A plugin that writes to stdout before its handshake is told so, not
// given go-plugin's guesses about architectures and libraries.
func TestLaunchStdoutWriterIsToldSo(t *testing.T) {
	_, err := driverapi.LaunchDriver(context.Background(), selfPlugin(t, "stdout-first"))
	var he *driverapi.HandshakeError
	if !errors.As(err, &he) || !he.WroteStdout || he.Stdout != "hello from the driver" {
		t.Fatalf("want a HandshakeError for stdout, got %T %v", err, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "the driver wrote to stdout before its handshake (stdout is the plugin protocol's channel; log to stderr): first line: \"hello from the driver\"") ||
		strings.Contains(msg, "Unrecognized") || strings.Contains(msg, "architecture") {
		t.Fatalf("stdout writer explained as: %s", msg)
	}
}

// A go-plugin plugin of another program prints go-plugin's notice for a
// missing cookie; the host names what it is instead of quoting the
// notice's last line.
func TestLaunchForeignPluginIsNamed(t *testing.T) {
	_, err := driverapi.LaunchDriver(context.Background(), selfPlugin(t, "foreign"))
	var he *driverapi.HandshakeError
	if !errors.As(err, &he) || !he.ForeignPlugin {
		t.Fatalf("want a HandshakeError for a foreign plugin, got %T %v", err, err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "not an aleph-sandbox driver plugin") || strings.Contains(msg, "load any plugins automatically") {
		t.Fatalf("foreign plugin explained as: %s", msg)
	}
}

// A plugin that dies during Run leaves its own words in the call's error
// (its panic line, or what it wrote before exiting), and only its own:
// the command's output, which it had sent, is not among them.
func TestPluginDeathDuringRunKeepsItsWords(t *testing.T) {
	ctx := context.Background()
	for program, want := range map[string]string{
		"panic": "plugin process died; it wrote: panic: boom in Run (in ",
		"exit":  "dying-driver: lost its backend",
	} {
		t.Run(program, func(t *testing.T) {
			proc, err := driverapi.LaunchDriver(ctx, selfPlugin(t, "dying"))
			if err != nil {
				t.Fatal(err)
			}
			defer proc.Kill()
			p := profileFor(t, proc.Driver())
			// Control: the driver writes the secret as command output,
			// which reaches the command's streams.
			var errOut bytes.Buffer
			if _, err := proc.Driver().Run(ctx, spec(p, "other"), driverapi.Streams{Stdout: io.Discard, Stderr: &errOut}); err != nil || !strings.Contains(errOut.String(), commandSecret) {
				t.Fatalf("control run: %v, stderr %q", err, errOut.String())
			}
			_, err = proc.Driver().Run(ctx, spec(p, program), driverapi.Streams{Stdout: io.Discard, Stderr: io.Discard})
			var de *driverapi.PluginDiedError
			if !errors.Is(err, driverapi.ErrPluginDied) || !errors.As(err, &de) {
				t.Fatalf("want a PluginDiedError, got %T %v", err, err)
			}
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), proc.Path()) {
				t.Fatalf("error %q, want %q and the plugin's path", err, want)
			}
			if strings.Contains(err.Error(), commandSecret) || strings.Contains(de.LastWords, commandSecret) {
				t.Fatalf("command output in the error: %v", err)
			}
			// The host's own view of the death says the same.
			if derr := proc.DiedError(); !errors.Is(derr, driverapi.ErrPluginDied) || !strings.Contains(derr.Error(), want) {
				t.Fatalf("DiedError = %v", derr)
			}
		})
	}
}
