package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/conformance"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// TestMain doubles as a fake driver plugin: with ALEPH_CLI_TEST_DRIVER set,
// the test binary serves drivertest.FakeDriver, so CLI tests go through the
// real plugin mechanism (launch, handshake, gRPC) without a real sandbox.
//
// With ALEPH_CLI_TEST_MAIN set it is the CLI itself (main), for tests that
// need the real process: its own standard streams, signals, a terminal.
func TestMain(m *testing.M) {
	// runConformance is given no probe: this binary is the probe, as the
	// aleph-sandbox binary is in real use (main).
	conformance.ServeProbe(os.Args)
	if os.Getenv("ALEPH_CLI_TEST_MAIN") == "1" {
		// The driver plugin this CLI launches must not be a CLI again.
		_ = os.Unsetenv("ALEPH_CLI_TEST_MAIN")
		main()
		return
	}
	if p := os.Getenv("ALEPH_CLI_TEST_FAKE_SERVICE"); p != "" {
		fakeService(p)
		return
	}
	if os.Getenv("ALEPH_CLI_TEST_DRIVER") == "1" {
		driverapi.Serve(&drivertest.FakeDriver{Stdout: []byte("default out")})
		return
	}
	if os.Getenv("ALEPH_CLI_TEST_DRIVER") == "options" {
		// A third-party driver without the config call: it reads its
		// settings from ALEPH_DRIVER_OPTIONS alone (TestDriverSectionRouting).
		serveOptionsDriver(false)
		return
	}
	if os.Getenv("ALEPH_CLI_TEST_DRIVER") == "options-config" {
		// The same driver with the config call.
		serveOptionsDriver(true)
		return
	}
	if os.Getenv("ALEPH_CLI_TEST_DRIVER") == "hints" {
		// Says what the host told it at launch (TestExecTellsTheDriverOneCommand).
		driverapi.Serve(&drivertest.FakeDriver{Stdout: []byte("one-command=" + os.Getenv(driverapi.OneCommandEnv) + "\n")})
		return
	}
	code := m.Run()
	removeBuiltBinaries()
	os.Exit(code)
}

// cliEnv points the CLI at a private workspace root and config, and at the
// test binary as the driver. Returns the --driver value.
func cliEnv(t *testing.T) string {
	t.Helper()
	t.Setenv("ALEPH_CLI_TEST_DRIVER", "1") // inherited by the plugin process only matters there
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	t.Setenv("ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT", filepath.Join(t.TempDir(), "ws"))
	t.Setenv("ALEPH_SANDBOX_SANDBOX__AUDIT_LOG", "")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

type run struct {
	code           int
	stdout, stderr string
}

func cli(t *testing.T, stdin string, terminal bool, args ...string) run {
	t.Helper()
	var out, errOut bytes.Buffer
	code := dispatch(context.Background(), args, stdio{In: strings.NewReader(stdin), Out: &out, Err: &errOut, InIsTerminal: terminal})
	return run{code, out.String(), errOut.String()}
}

func TestExecExitStatuses(t *testing.T) {
	drv := cliEnv(t)
	cases := []struct {
		name       string
		args       []string
		code       int
		stdout     string
		stderrPart string
	}{
		{"child output and status 0", []string{"echo", "hi", "there"}, 0, "hi there\n", ""},
		{"child exit code", []string{"exit", "7"}, 7, "", ""},
		{"signal is 128+N", []string{"signal", "9"}, 137, "", ""},
		{"timeout is 124", []string{"--timeout", "50ms", "sleep", "5s"}, 124, "", "timed out"},
		{"stderr kept apart", []string{"stderr", "oops"}, 0, "", "oops\n"},
		{"approval without terminal denies", []string{"--net", "all", "echo", "x"}, 125, "", "aleph-sandbox: "},
		{"no program", []string{}, 125, "", "no program given"},
		{"bad --net", []string{"--net", "exa mple.com", "echo"}, 125, "", "aleph-sandbox: "},
		{"bad --env", []string{"--env", "NOEQUALS", "echo"}, 125, "", "want NAME=VALUE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"exec", "--driver", drv}, c.args...)
			if i := indexProgram(args); i > 0 {
				args = append(args[:i:i], append([]string{"--"}, args[i:]...)...)
			}
			r := cli(t, "", false, args...)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d (stdout %q stderr %q)", r.code, c.code, r.stdout, r.stderr)
			}
			if c.stdout != "" && r.stdout != c.stdout {
				t.Fatalf("stdout %q, want %q", r.stdout, c.stdout)
			}
			if c.stderrPart != "" && !strings.Contains(r.stderr, c.stderrPart) {
				t.Fatalf("stderr %q lacks %q", r.stderr, c.stderrPart)
			}
			if c.code == 125 && strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 && !strings.Contains(r.stderr, "usage") {
				t.Fatalf("refusal must be one line, got %q", r.stderr)
			}
		})
	}
}

// indexProgram finds where the pseudo-program starts in a test's args (the
// first arg that is not a flag or a flag's value).
func indexProgram(args []string) int {
	for i := 3; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "--") {
			switch a {
			case "--spawn", "--yes", "--json", "--stdin":
			default:
				i++ // skip the flag's value
			}
			continue
		}
		return i
	}
	return -1
}

func TestExecYesApprovesElevation(t *testing.T) {
	drv := cliEnv(t)
	// Without --yes and with no terminal the elevation is refused.
	r := cli(t, "", false, "exec", "--driver", drv, "--session", "s1", "--spawn", "--", "echo", "ok")
	if r.code != 125 || r.stdout != "" {
		t.Fatalf("no --yes, no terminal: %+v", r)
	}
	r = cli(t, "", false, "exec", "--driver", drv, "--session", "s1", "--spawn", "--yes", "--", "echo", "ok")
	if r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("--yes: %+v", r)
	}
	// The approval is the session's: a later invocation (another process
	// in real use) of the same session needs no --yes (docs/cli.md) ...
	r = cli(t, "", false, "exec", "--driver", drv, "--session", "s1", "--spawn", "--", "echo", "again")
	if r.code != 0 || r.stdout != "again\n" {
		t.Fatalf("kept grant: %+v", r)
	}
	// ... another session does ...
	r = cli(t, "", false, "exec", "--driver", drv, "--session", "s2", "--spawn", "--", "echo", "ok")
	if r.code != 125 {
		t.Fatalf("another session: %+v", r)
	}
	// ... and `session forget` clears it.
	if r = cli(t, "", false, "session", "forget", "s1"); r.code != 0 {
		t.Fatalf("session forget: %+v", r)
	}
	r = cli(t, "", false, "exec", "--driver", drv, "--session", "s1", "--spawn", "--", "echo", "ok")
	if r.code != 125 {
		t.Fatalf("after forget: %+v", r)
	}
}

func TestExecJSON(t *testing.T) {
	drv := cliEnv(t)
	var res execResult
	r := cli(t, "", false, "exec", "--driver", drv, "--json", "--", "exit", "3")
	if r.code != 0 {
		t.Fatalf("--json with a failing child exits 0, got %d (%s)", r.code, r.stderr)
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("not one JSON object: %q", r.stdout)
	}
	if res.ExitCode == nil || *res.ExitCode != 3 || res.Signal == nil || *res.Signal != 0 || res.Denied || res.Backend != drivertest.FakeBackend {
		t.Fatalf("json = %s", r.stdout)
	}
	// A command that ran and succeeded: exit_code 0, a number.
	r = cli(t, "", false, "exec", "--driver", drv, "--json", "--", "echo", "x")
	if r.code != 0 || !strings.Contains(r.stdout, `"exit_code":0,"signal":0,`) {
		t.Fatalf("successful json: code %d %q", r.code, r.stdout)
	}

	// No process ran: exit_code and signal are null, not a 0 that reads as
	// success.
	r = cli(t, "", false, "exec", "--driver", drv, "--json", "--net", "all", "--", "echo", "x")
	res = execResult{}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 0 || !res.Denied || res.Reason == "" {
		t.Fatalf("denied json: code %d %q", r.code, r.stdout)
	}
	if !strings.Contains(r.stdout, `"exit_code":null,"signal":null,`) {
		t.Errorf("denied json reports a status: %s", r.stdout)
	}

	r = cli(t, "", false, "exec", "--driver", filepath.Join(t.TempDir(), "aleph-driver-missing"), "--json", "--", "echo")
	res = execResult{}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 125 || res.Error == "" {
		t.Fatalf("missing driver json: code %d %q", r.code, r.stdout)
	}
	if !strings.Contains(r.stdout, `"exit_code":null,"signal":null,`) {
		t.Errorf("failure json reports a status: %s", r.stdout)
	}
}

func TestExecStdinAndEnv(t *testing.T) {
	drv := cliEnv(t)
	r := cli(t, "piped input", false, "exec", "--driver", drv, "--stdin", "--", "cat")
	if r.code != 0 || r.stdout != "piped input" {
		t.Fatalf("stdin: %+v", r)
	}
	t.Setenv("HOST_SECRET_CANARY", "leak")
	r = cli(t, "", false, "exec", "--driver", drv, "--env", "FOO=bar", "--", "env")
	if r.code != 0 || !strings.Contains(r.stdout, "FOO=bar\n") {
		t.Fatalf("env: %+v", r)
	}
	if strings.Contains(r.stdout, "HOST_SECRET_CANARY") {
		t.Fatalf("host env reached the child: %q", r.stdout)
	}
}

func TestExecMissingDefaultDriverSaysWhereItLooked(t *testing.T) {
	cliEnv(t)
	t.Setenv("PATH", t.TempDir())
	t.Setenv("ALEPH_SANDBOX_PLUGIN_DIR", t.TempDir())
	r := cli(t, "", false, "exec", "--driver", "nosuchdriver", "--", "echo")
	if r.code != 125 || !strings.Contains(r.stderr, "aleph-driver-nosuchdriver") || !strings.Contains(r.stderr, os.Getenv("ALEPH_SANDBOX_PLUGIN_DIR")) {
		t.Fatalf("missing driver: %+v", r)
	}
}

func TestExecOutputBudget(t *testing.T) {
	drv := cliEnv(t)
	var res execResult
	r := cli(t, "", false, "exec", "--driver", drv, "--json", "--max-output", "1000", "--", "flood", "5000")
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Stdout) != 500 {
		t.Fatalf("budget: truncated %v, kept %d", res.Truncated, len(res.Stdout))
	}
}

func TestConfigCommand(t *testing.T) {
	cliEnv(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	if err := os.WriteFile(good, []byte("[sandbox]\ndefault_timeout_seconds = 17\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "", false, "config", "--config", good)
	if r.code != 0 || !strings.Contains(r.stdout, "17") || !strings.Contains(r.stdout, "max_output_bytes") {
		t.Fatalf("config: %+v", r)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[sandbox]\ndefault_timeout_secondz = 17\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "", false, "config", "--config", bad)
	if r.code != 125 || !strings.Contains(r.stderr, "sandbox.default_timeout_secondz") {
		t.Fatalf("unknown key: %+v", r)
	}
}

func TestDriversCommand(t *testing.T) {
	drv := cliEnv(t)
	dir := t.TempDir()
	link := filepath.Join(dir, "aleph-driver-fake")
	if err := os.Symlink(drv, link); err != nil {
		t.Fatal(err)
	}
	t.Setenv("ALEPH_SANDBOX_PLUGIN_DIR", dir)
	r := cli(t, "", false, "drivers", "--json")
	if r.code != 0 {
		t.Fatalf("drivers: %+v", r)
	}
	var reports []driverReport
	if err := json.Unmarshal([]byte(r.stdout), &reports); err != nil {
		t.Fatalf("drivers --json: %v in %q", err, r.stdout)
	}
	for _, rep := range reports {
		if rep.Name == "fake" {
			if rep.Capabilities == nil || rep.Capabilities.Backend != drivertest.FakeBackend {
				t.Fatalf("fake driver report: %+v", rep)
			}
			return
		}
	}
	t.Fatalf("fake driver not listed: %q", r.stdout)
}

func TestExecHooksFromConfig(t *testing.T) {
	drv := cliEnv(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.toml")
	body := `[sandbox.command_policy]
custom_rules = [
  { name = "broken", regex = "([", action = "block", description = "malformed on purpose" },
]
[sandbox.rate_limit]
rate_per_second = 0.001
burst = 1
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	// The curated rules still block, despite the malformed custom rule.
	r := cli(t, "", false, "exec", "--driver", drv, "--config", cfg, "--", "rm", "-rf", "/")
	if r.code != 125 || !strings.Contains(r.stderr, "broken") || !strings.Contains(r.stderr, "aleph-sandbox: ") {
		t.Fatalf("rm -rf / with a malformed custom rule: %+v", r)
	}
	// Positive control: an ordinary command runs under the same config (the
	// rate limit's burst of 1 lets a fresh process's first command through).
	r = cli(t, "", false, "exec", "--driver", drv, "--config", cfg, "--session", "rl", "--", "echo", "ok")
	if r.code != 0 || r.stdout != "ok\n" {
		t.Fatalf("ordinary command: %+v", r)
	}
}

// A flag error is exactly one "aleph-sandbox:" line on stderr (no usage
// dump), exit 125, for every subcommand; -h is usage and exit 0.
func TestFlagErrorsAreOneLine(t *testing.T) {
	cliEnv(t)
	for _, sc := range []string{"exec", "bench", "doctor", "drivers", "config", "conformance"} {
		r := cli(t, "", false, sc, "--no-such-flag")
		lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
		if r.code != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], "aleph-sandbox: ") {
			t.Errorf("%s: exit %d, stderr %q", sc, r.code, r.stderr)
		}
		if h := cli(t, "", false, sc, "-h"); h.code != 0 || !strings.Contains(h.stdout, "usage: aleph-sandbox "+sc) || h.stderr != "" {
			t.Errorf("%s -h: exit %d, stdout %q, stderr %q", sc, h.code, h.stdout, h.stderr)
		}
	}
}

// TestDriversConfiguredPathAndPin: a driver the configuration names by path
// is listed and launched under the configured sha256 pin (a wrong pin is
// reported, the right one works); a neighbour in its directory is not
// listed, since exec would not find it by name.
func TestDriversConfiguredPathAndPin(t *testing.T) {
	drv := cliEnv(t)
	t.Setenv("ALEPH_SANDBOX_PLUGIN_DIR", t.TempDir()) // nothing else to find
	dir := t.TempDir()
	configured := filepath.Join(dir, "aleph-driver-pinned")
	neighbour := filepath.Join(dir, "aleph-driver-neighbour")
	for _, p := range []string{configured, neighbour} {
		if err := os.Symlink(drv, p); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(drv)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	for _, tc := range []struct {
		pin     string
		wantErr bool
	}{
		{strings.Repeat("0", 64), true},
		{hex.EncodeToString(sum[:]), false},
	} {
		cfg := filepath.Join(t.TempDir(), "c.toml")
		body := "[sandbox]\ndriver = \"" + configured + "\"\ndriver_sha256 = \"" + tc.pin + "\"\n"
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		r := cli(t, "", false, "drivers", "--json", "--config", cfg)
		var reports []driverReport
		if err := json.Unmarshal([]byte(r.stdout), &reports); err != nil {
			t.Fatalf("drivers --json: %v in %q (%s)", err, r.stdout, r.stderr)
		}
		var got *driverReport
		for i, rep := range reports {
			if rep.Name == "neighbour" {
				t.Fatalf("a driver beside the configured one is listed: %+v", rep)
			}
			if rep.Name == "pinned" {
				got = &reports[i]
			}
		}
		if got == nil {
			t.Fatalf("the configured driver is not listed: %q", r.stdout)
		}
		if hasErr := got.Error != "" && strings.Contains(got.Error, "sha256"); hasErr != tc.wantErr || (!tc.wantErr && got.Capabilities == nil) {
			t.Fatalf("pin %s…: report %+v, want pin error %v", tc.pin[:8], got, tc.wantErr)
		}
	}
}

// TestExecJSONDenials: with --json a policy denial is an object with
// denied true, the reason and (for a hook) the rule, and exit 0 (the CLI
// contract: 125 only when the sandbox failed), beside an allowed run's
// object with denied false (control).
func TestExecJSONDenials(t *testing.T) {
	drv := cliEnv(t)
	for _, tc := range []struct {
		name    string
		flags   []string
		program []string
		denied  bool
		reason  string
		rule    string
	}{
		{"hook denial", nil, []string{"rm", "-rf", "/"}, true, "hook_denied", "rm-root"},
		{"approval denial", []string{"--net", "all"}, []string{"echo", "x"}, true, "approval_denied", ""},
		{"allowed", nil, []string{"echo", "fine"}, false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"exec", "--driver", drv, "--json"}, tc.flags...), "--")
			r := cli(t, "", false, append(args, tc.program...)...)
			var o execResult
			if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
				t.Fatalf("not one JSON object: %v %q", err, r.stdout)
			}
			if r.code != 0 || o.Denied != tc.denied || !strings.Contains(o.Reason, tc.reason) || o.Rule != tc.rule || o.Error != "" {
				t.Fatalf("exit %d %+v; want exit 0, denied %v, reason with %q, rule %q", r.code, o, tc.denied, tc.reason, tc.rule)
			}
			if tc.denied && (o.Stdout != "" || o.Backend != "") || !tc.denied && o.Stdout != "fine\n" {
				t.Fatalf("stdout %q backend %q: a denied command must not have run, an allowed one must", o.Stdout, o.Backend)
			}
		})
	}
}

// exec runs one command and ends its driver, and says so at launch
// (driverapi.OneCommandEnv): the driver may leave out what only later
// commands use. A long-lived host (the warm pipeline bench runs) says
// nothing of the kind (control).
func TestExecTellsTheDriverOneCommand(t *testing.T) {
	drv := cliEnv(t)
	t.Setenv("ALEPH_CLI_TEST_DRIVER", "hints")
	r := cli(t, "", false, "exec", "--driver", drv, "--", "anything")
	if r.code != 0 || r.stdout != "one-command=1\n" {
		t.Fatalf("exec: code %d stdout %q stderr %q, want one-command=1", r.code, r.stdout, r.stderr)
	}
	cfg, err := loadConfig("", "", drv)
	if err != nil {
		t.Fatal(err)
	}
	p, err := buildPipeline(cfg, &approver{}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out, err := p.sandbox.Execute(context.Background(), core.Command{SessionID: "s", Program: "anything"})
	if err != nil || string(out.Stdout) != "one-command=\n" {
		t.Fatalf("long-lived pipeline: %v %+v, want no hint", err, out)
	}
}

// TestExecJSONReasonCodes: every --json object carries reason_code (and,
// for a field at fault, field), core's codes as serve gives them, so a
// script branches without parsing reason or error. The allowed runs are
// the controls: a code is not always the same one.
func TestExecJSONReasonCodes(t *testing.T) {
	drv := cliEnv(t)
	badCfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(badCfg, []byte("[sandbox]\nmax_output_bytes = -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  []string
		exit  int
		code  string
		field string
	}{
		{"ran", []string{"--", "echo", "x"}, 0, "allowed", ""},
		{"ran and failed", []string{"--", "exit", "3"}, 0, "allowed", ""},
		{"timed out", []string{"--timeout", "50ms", "--", "sleep", "10s"}, 0, "timeout", ""},
		{"hook denial", []string{"--", "rm", "-rf", "/"}, 0, "hook_denied", ""},
		{"approval denial", []string{"--net", "all", "--", "echo", "x"}, 0, "approval_denied", ""},
		{"cwd outside", []string{"--cwd", "/", "--", "echo", "x"}, 0, "cwd_outside_workspace", ""},
		{"bad flag", []string{"--nope", "--", "echo"}, 125, "invalid_request", ""},
		{"bad session", []string{"--session", strings.Repeat("s", 5000), "--", "echo"}, 125, "invalid_command", "session_id"},
		{"bad config", []string{"--config", badCfg, "--", "echo"}, 125, "config_invalid", "sandbox.max_output_bytes"},
		{"no driver", []string{"--driver", filepath.Join(t.TempDir(), "aleph-driver-missing"), "--", "echo"}, 125, "driver_not_found", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"exec", "--json"}
			if !slices.Contains(tc.args, "--driver") {
				args = append(args, "--driver", drv)
			}
			r := cli(t, "", false, append(args, tc.args...)...)
			var o execResult
			if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
				t.Fatalf("not one JSON object: %v %q (%s)", err, r.stdout, r.stderr)
			}
			if r.code != tc.exit || o.ReasonCode != tc.code || o.Field != tc.field {
				t.Fatalf("exit %d reason_code %q field %q, want %d %q %q: %s", r.code, o.ReasonCode, o.Field, tc.exit, tc.code, tc.field, r.stdout)
			}
			if !strings.Contains(r.stdout, `"reason_code":`) || !strings.Contains(r.stdout, `"field":`) {
				t.Fatalf("reason_code and field are always present: %s", r.stdout)
			}
		})
	}
}

// TestExecTimeoutZeroIsTheDefault: --timeout 0 means what leaving it out
// means (sandbox.default_timeout_seconds), as timeout 0 does on the wire
// and in every client; a negative one is refused naming the flag.
func TestExecTimeoutZeroIsTheDefault(t *testing.T) {
	drv := cliEnv(t)
	for _, v := range []string{"0", "0s"} {
		r := cli(t, "", false, "exec", "--driver", drv, "--timeout", v, "--", "echo", "ok")
		if r.code != 0 || r.stdout != "ok\n" {
			t.Fatalf("--timeout %s: %+v", v, r)
		}
	}
	r := cli(t, "", false, "exec", "--driver", drv, "--timeout", "-1s", "--", "echo", "ok")
	if r.code != 125 || !strings.Contains(r.stderr, "timeout") || !strings.Contains(r.stderr, "negative") || r.stdout != "" {
		t.Fatalf("--timeout -1s: %+v", r)
	}
	var d timeoutDuration
	if err := d.Set("0"); err != nil || d != 0 {
		t.Fatalf("Set(0): %v %v", d, err)
	}
}

// TestSessionDelete: `session delete` clears the kept grants and removes
// the workspace the sandbox made for the session; `session forget` keeps
// the workspace (the control).
func TestSessionDelete(t *testing.T) {
	drv := cliEnv(t)
	root := os.Getenv("ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT")
	for _, s := range []string{"del", "fgt"} {
		if r := cli(t, "", false, "exec", "--driver", drv, "--session", s, "--spawn", "--yes", "--", "echo", "ok"); r.code != 0 {
			t.Fatalf("%s: %+v", s, r)
		}
		if err := os.WriteFile(filepath.Join(root, core.SessionDirName(s), "f"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if r := cli(t, "", false, "session", "delete", "del"); r.code != 0 || !strings.Contains(r.stdout, "workspace removed") {
		t.Fatalf("session delete: %+v", r)
	}
	if _, err := os.Lstat(filepath.Join(root, core.SessionDirName("del"))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the workspace of a deleted session: %v", err)
	}
	if r := cli(t, "", false, "exec", "--driver", drv, "--session", "del", "--spawn", "--", "echo", "ok"); r.code != 125 {
		t.Fatalf("the grant of a deleted session still holds: %+v", r)
	}
	if r := cli(t, "", false, "session", "forget", "fgt"); r.code != 0 {
		t.Fatalf("session forget: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(root, core.SessionDirName("fgt"), "f")); err != nil {
		t.Fatalf("forget removed the workspace: %v", err)
	}
}

// TestSessionList: `session list` names the sessions earlier CLI runs
// left on disk, by their workspace's record and by their kept grants;
// forget and delete unlist them.
func TestSessionList(t *testing.T) {
	drv := cliEnv(t)
	root := os.Getenv("ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT")
	list := func() map[string]keptSession {
		t.Helper()
		r := cli(t, "", false, "session", "list", "--json")
		var out struct{ Sessions []keptSession }
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
			t.Fatalf("session list: %+v", r)
		}
		m := map[string]keptSession{}
		for _, k := range out.Sessions {
			m[k.Session] = k
		}
		return m
	}
	if l := list(); len(l) != 0 {
		t.Fatalf("sessions listed before any ran: %v", l)
	}
	if r := cli(t, "", false, "exec", "--driver", drv, "--session", "plain", "--", "echo", "ok"); r.code != 0 {
		t.Fatalf("plain: %+v", r)
	}
	if r := cli(t, "", false, "exec", "--driver", drv, "--session", "granted one", "--spawn", "--yes", "--", "echo", "ok"); r.code != 0 {
		t.Fatalf("granted: %+v", r)
	}
	l := list()
	want := map[string]keptSession{
		"plain":       {Session: "plain", Workspace: filepath.Join(root, core.SessionDirName("plain"))},
		"granted one": {Session: "granted one", Workspace: filepath.Join(root, core.SessionDirName("granted one")), Grants: true},
	}
	if len(l) != len(want) || l["plain"] != want["plain"] || l["granted one"] != want["granted one"] {
		t.Fatalf("session list: %v, want %v", l, want)
	}
	if r := cli(t, "", false, "session", "list"); r.code != 0 || !strings.Contains(r.stdout, `"granted one"`) || !strings.Contains(r.stdout, "(grants kept)") {
		t.Fatalf("session list (text): %+v", r)
	}
	if r := cli(t, "", false, "session", "forget", "plain"); r.code != 0 {
		t.Fatalf("session forget: %+v", r)
	}
	if r := cli(t, "", false, "session", "delete", "granted one"); r.code != 0 {
		t.Fatalf("session delete: %+v", r)
	}
	if l := list(); len(l) != 0 {
		t.Fatalf("forgotten and deleted sessions are listed: %v", l)
	}
	if _, err := os.Stat(filepath.Join(root, core.SessionDirName("plain"))); err != nil {
		t.Fatalf("forget removed the workspace: %v", err)
	}
}
