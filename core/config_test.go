package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func writeTOML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// testSection stands for a component's section (the assembly passes the
// real ones, tested there): its schema and a check that refuses, by key, a
// negative burst.
func testSection() LoadOption {
	sc := driverapi.ConfigSchema{Section: "rate_limit", Fields: []driverapi.ConfigField{
		{Name: "enabled", Type: driverapi.ConfigBool, DefaultJSON: "true"},
		{Name: "rate_per_second", Type: driverapi.ConfigNumber, DefaultJSON: "10"},
		{Name: "burst", Type: driverapi.ConfigInt, DefaultJSON: "20"},
		{Name: "max_concurrent_global", Type: driverapi.ConfigUint, DefaultJSON: "16"},
		{Name: "mode", Type: driverapi.ConfigString, DefaultJSON: `"a"`, Enum: []string{"a", "b"}},
		{Name: "tags", Type: driverapi.ConfigStringList, DefaultJSON: `[]`},
	}}
	return WithSection(sc, func(b []byte) error {
		var v struct{ Burst int64 }
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		if v.Burst < 0 {
			return &driverapi.ConfigError{Section: "rate_limit", Key: "burst", Reason: "must be >= 0"}
		}
		return nil
	})
}

func TestConfigDefaults(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", "/var/lib/xdg")
	cfg, err := loadConfig("", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Sandbox
	if s.WorkspaceRoot != "/var/lib/xdg/aleph-sandbox/workspaces" || s.AuditLog != "/var/lib/xdg/aleph-sandbox/audit.jsonl" ||
		!s.Enabled || s.DefaultTimeoutSeconds != 60 || s.MaxOutputBytes != 1<<20 || s.ApprovalTimeoutSeconds != 60 ||
		s.HookTimeoutMS != 2000 || s.Driver != "" || s.DriverSHA256 != "" ||
		len(s.CommandPolicy) != 0 || len(s.RateLimit) != 0 || s.Network.TLSIntercept || len(s.Linux) != 0 {
		t.Fatalf("defaults %+v", s)
	}
	// The owners' sections hold what their schemas say, typed as TOML
	// would give them (so the printed configuration loads back).
	cfg, err = loadConfig("", nil, testSection())
	if err != nil {
		t.Fatal(err)
	}
	rl := cfg.Sandbox.RateLimit
	if rl["enabled"] != true || rl["rate_per_second"] != int64(10) || rl["burst"] != int64(20) || rl["mode"] != "a" || len(rl) != 6 {
		t.Fatalf("section defaults %#v", rl)
	}
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("HOME", "/home/u")
	if got := DefaultConfig().Sandbox.WorkspaceRoot; got != "/home/u/.local/share/aleph-sandbox/workspaces" {
		t.Fatalf("home default %s", got)
	}
}

func TestConfigTOMLAndEnv(t *testing.T) {
	p := writeTOML(t, `
[sandbox]
workspace_root = "/srv/ws"
default_timeout_seconds = 30
driver = "bwrap"
hook_plugins = ["/opt/hooks/a"]

[sandbox.command_policy]
enforcement = "warn"
[[sandbox.command_policy.custom_rules]]
name = "no-curl"
regex = "curl"
action = "warn"
description = "curl is noisy"

[sandbox.rate_limit]
rate_per_second = 2.5
burst = 3

[[sandbox.network.secret_injections]]
host = "api.example.com"
header = "Authorization"
secret = "API_KEY"
format = "Bearer {secret}"

[sandbox.linux]
max_pids = 50
cgroup = "v1"
tmpfs_max_mb = 256
`)
	env := []string{
		"ALEPH_SANDBOX_SANDBOX__DEFAULT_TIMEOUT_SECONDS=15",
		"ALEPH_SANDBOX_SANDBOX__RATE_LIMIT__BURST=9",
		"ALEPH_SANDBOX_SANDBOX__ENABLED=false",
		"ALEPH_SANDBOX_SANDBOX__HOOK_PLUGINS=/x/a, /x/b",
		"ALEPH_SANDBOX_PLUGIN_DIR=/not/config", // not a config key: ignored
		"OTHER=1",
	}
	cfg, err := loadConfig(p, env, testSection())
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Sandbox
	if s.WorkspaceRoot != "/srv/ws" || s.DefaultTimeoutSeconds != 15 || s.Driver != "bwrap" || s.Enabled ||
		s.CommandPolicy["enforcement"] != "warn" || customRuleName(s.CommandPolicy, 0) != "no-curl" ||
		s.RateLimit["rate_per_second"] != 2.5 || s.RateLimit["burst"] != int64(9) || s.RateLimit["max_concurrent_global"] != int64(16) ||
		len(s.Network.SecretInjections) != 1 || s.Network.SecretInjections[0].Format != "Bearer {secret}" ||
		s.Linux["max_pids"] != int64(50) || s.Linux["cgroup"] != "v1" || strings.Join(s.HookPlugins, ",") != "/x/a,/x/b" {
		t.Fatalf("loaded %+v", s)
	}
	var lx map[string]any
	if err := json.Unmarshal(cfg.DriverOptions("linux"), &lx); err != nil || lx["max_pids"] != float64(50) || lx["cgroup"] != "v1" || lx["tmpfs_max_mb"] != float64(256) {
		t.Fatalf("driver options %s", cfg.DriverOptions("linux"))
	}
	if string(cfg.DriverOptions("darwin")) != "{}" {
		t.Fatal("darwin options")
	}
	str := cfg.String()
	for _, want := range []string{"[sandbox]", "default_timeout_seconds = 15", "[sandbox.rate_limit]", "no-curl", "[sandbox.linux]"} {
		if !strings.Contains(str, want) {
			t.Fatalf("String() lacks %q:\n%s", want, str)
		}
	}
	eff := cfg.Effective()
	if eff["sandbox.rate_limit.burst"] != float64(9) || eff["sandbox.linux.cgroup"] != "v1" {
		t.Fatalf("effective %v", eff)
	}
}

func TestConfigRefusals(t *testing.T) {
	cases := []struct {
		toml string
		env  []string
		key  string
		why  string
	}{
		{"[sandbox]\nbogus = 1\n", nil, "sandbox.bogus", "unknown key"},
		{"[sandbox.rate_limit]\nburts = 1\n", nil, "sandbox.rate_limit.burts", "unknown key"},
		{"[other]\nx = 1\n", nil, "other", "unknown key"},
		{"[sandbox.rate_limit]\nper_sesion = 1\n", nil, "sandbox.rate_limit.per_sesion", "unknown key (known: enabled, rate_per_second"},
		{"[sandbox.rate_limit]\nburst = -1\n", nil, "sandbox.rate_limit.burst", "must be >= 0"},
		{"[sandbox.rate_limit]\nburst = \"ten\"\n", nil, "sandbox.rate_limit.burst", "must be an integer"},
		{"[sandbox.rate_limit]\nmax_concurrent_global = -2\n", nil, "sandbox.rate_limit.max_concurrent_global", "must be >= 0"},
		{"[sandbox.rate_limit]\nrate_per_second = true\n", nil, "sandbox.rate_limit.rate_per_second", "must be a number"},
		{"[sandbox.rate_limit]\nmode = \"c\"\n", nil, "sandbox.rate_limit.mode", "must be one of a, b"},
		{"[sandbox.rate_limit]\ntags = [1]\n", nil, "sandbox.rate_limit.tags[0]", "must be a string"},
		{"[sandbox]\nrate_limit = 3\n", nil, "sandbox.rate_limit", "must be a table"},
		{"[sandbox]\nlinux = 3\n", nil, "sandbox.linux", "must be a table"},
		{"[sandbox]\nenabled = \"yes\"\n", nil, "sandbox.enabled", "must be a boolean"},
		{"[sandbox]\ndefault_timeout_seconds = -5\n", nil, "sandbox.default_timeout_seconds", "must be > 0"},
		{"[sandbox]\ndefault_timeout_seconds = 9223372036854775807\n", nil, "sandbox.default_timeout_seconds", "must be <="},
		{"[sandbox]\ntimeout_term_grace_ms = -1\n", nil, "sandbox.timeout_term_grace_ms", "must be >= 0"},
		{"[sandbox]\ntimeout_term_grace_ms = 9223372036854775807\n", nil, "sandbox.timeout_term_grace_ms", "must be <="},
		{"", []string{"ALEPH_SANDBOX_SANDBOX__TIMEOUT_TERM_GRACE_MS=-5"}, "sandbox.timeout_term_grace_ms", "must be >= 0"},
		{"[sandbox]\nworkspace_root = \"relative/ws\"\n", nil, "sandbox.workspace_root", "absolute"},
		{"[sandbox]\ndriver_sha256 = \"abc\"\n", nil, "sandbox.driver_sha256", "64 hex"},
		{"[sandbox.protected]\nplanted_git = \"off\"\n", nil, "sandbox.protected.planted_git", "must be \"quarantine\" or \"allow\""},
		{"[[sandbox.network.secret_injections]]\nhost = \"a\"\nheader = \"X\"\nsecret = \"A=B\"\n", nil, "sandbox.network.secret_injections[0].secret", "must name a secret"},
		{"", []string{"ALEPH_SANDBOX_SANDBOX__NOPE=1"}, "sandbox.nope", "unknown key"},
		{"", []string{"ALEPH_SANDBOX_SANDBOX__RATE_LIMIT__BURST=x"}, "sandbox.rate_limit.burst", "must be an integer"},
		{"", []string{"ALEPH_SANDBOX_SANDBOX__RATE_LIMIT__BURST=-3"}, "sandbox.rate_limit.burst", "must be >= 0"},
		{"", []string{"ALEPH_SANDBOX_SANDBOX__RATE_LIMIT__PER_SESION=3"}, "sandbox.rate_limit.per_sesion", "unknown key"},
		{"", []string{"ALEPH_SANDBOX_SANDBOX__RATE_LIMIT__MAX_CONCURRENT_GLOBAL=-3"}, "sandbox.rate_limit.max_concurrent_global", "must be >= 0"},
		{"", []string{"ALEPH_SANDBOX_SANDBOX__LINUX__MAX_PIDS__X=3"}, "sandbox.linux.max_pids.x", "unknown key"},
		// A mistyped override is refused, not ignored.
		{"", []string{"ALEPH_SANDBOX_DEFAULT_TIMEOUT_SECONDS=5"}, "ALEPH_SANDBOX_DEFAULT_TIMEOUT_SECONDS", "unknown variable"},
		{"", []string{"ALEPH_SANDBOX_SANDBOX_DEFAULT_TIMEOUT_SECONDS=5"}, "ALEPH_SANDBOX_SANDBOX_DEFAULT_TIMEOUT_SECONDS", "unknown variable"},
	}
	for _, c := range cases {
		p := ""
		if c.toml != "" {
			p = writeTOML(t, c.toml)
		}
		_, err := loadConfig(p, c.env, testSection())
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != c.key || !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), c.key) {
			t.Fatalf("%q %v: got %v, want key %s (%s)", c.toml, c.env, err, c.key, c.why)
		}
	}
	// Controls: the variables that are not overrides are accepted beside a
	// correct override, which applies.
	cfg, err := loadConfig("", []string{"ALEPH_SANDBOX_LOG=debug", "ALEPH_SANDBOX_LOG_FILE=/tmp/x.log",
		"ALEPH_SANDBOX_PLUGIN_DIR=/opt/p", "ALEPH_SANDBOX_TOKEN=0123456789abcdef", "ALEPH_SANDBOX_SANDBOX__DEFAULT_TIMEOUT_SECONDS=5", "ALEPHX=1"})
	if err != nil || cfg.Sandbox.DefaultTimeoutSeconds != 5 {
		t.Fatalf("known variables: %v, timeout %d", err, cfg.Sandbox.DefaultTimeoutSeconds)
	}
	if _, err := loadConfig(filepath.Join(t.TempDir(), "missing.toml"), nil); err == nil {
		t.Fatal("missing file accepted")
	}
	if _, err := loadConfig(writeTOML(t, "[sandbox\n"), nil); err == nil {
		t.Fatal("malformed TOML accepted")
	}
	// The exact message for the documented example.
	_, err = loadConfig(writeTOML(t, "[sandbox.rate_limit]\nper_sesion = 2\n"), nil, testSection())
	if !strings.Contains(err.Error(), "sandbox.rate_limit.per_sesion: unknown key") {
		t.Fatalf("message %q", err)
	}
	// Without the owner's schema the section is the owner's alone to
	// check: the loader keeps it as given.
	cfg, err = loadConfig(writeTOML(t, "[sandbox.rate_limit]\nper_sesion = 2\n"), nil)
	if err != nil || cfg.Sandbox.RateLimit["per_sesion"] != int64(2) {
		t.Fatalf("opaque section: %v %v", err, cfg.Sandbox.RateLimit)
	}
	// A schema for a section the configuration does not have is a mistake
	// of the assembly, refused by name.
	_, err = loadConfig("", nil, WithSection(driverapi.ConfigSchema{Section: "network"}, nil))
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "sandbox.network" {
		t.Fatalf("schema for a non-section: %v", err)
	}
}

func TestNewRefusesInvalidConfig(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.MaxOutputBytes = 0
	if _, err := NewWorkspaceSandbox(cfg, WithDriver(&drivertest.FakeDriver{})); err == nil || !strings.Contains(err.Error(), "sandbox.max_output_bytes") {
		t.Fatalf("err %v", err)
	}
}

// NewPipeline builds only from a configuration that Validated made: the
// zero ValidConfig is refused, a bad configuration never becomes one, and
// a ValidConfig keeps the copy it checked (a change to the Config after it
// does not reach the pipeline).
func TestNewPipelineTakesOnlyValidated(t *testing.T) {
	var ce *ConfigError
	if _, err := NewPipeline(ValidConfig{}, WithDriver(&drivertest.FakeDriver{})); !errors.As(err, &ce) || ce.Key != "sandbox" {
		t.Fatalf("zero ValidConfig: %v", err)
	}
	bad := testConfig(t)
	bad.Sandbox.MaxOutputBytes = 0
	if _, err := bad.Validated(); !errors.As(err, &ce) || ce.Key != "sandbox.max_output_bytes" {
		t.Fatalf("bad config validated: %v", err)
	}
	cfg := testConfig(t)
	v, err := cfg.Validated()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sandbox.MaxOutputBytes = 0
	if v.Config().Sandbox.MaxOutputBytes == 0 {
		t.Fatal("the ValidConfig shares the Config it was made from")
	}
	sb, err := NewPipeline(v, WithDriver(&drivertest.FakeDriver{}))
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	defer sb.Close()
	if sb.cfg.Sandbox.MaxOutputBytes != testConfig(t).Sandbox.MaxOutputBytes {
		t.Fatalf("pipeline built from %d, not the validated value", sb.cfg.Sandbox.MaxOutputBytes)
	}
}

func TestConfigStringRoundTrips(t *testing.T) {
	cfg, err := loadConfig("", nil, testSection())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sandbox.WorkspaceRoot = "/srv/ws"
	cfg.Sandbox.RateLimit["burst"] = int64(3)
	cfg.Sandbox.RateLimit["rate_per_second"] = 2.5
	cfg.Sandbox.Linux["max_pids"] = int64(7)
	cfg.Sandbox.CommandPolicy = Section{"custom_rules": []any{map[string]any{"name": "r", "regex": "x", "action": "warn"}}}
	back, err := loadConfig(writeTOML(t, cfg.String()), nil, testSection())
	if err != nil {
		t.Fatalf("%v\n%s", err, cfg.String())
	}
	if back.String() != cfg.String() {
		t.Fatalf("round trip differs:\n%s\n---\n%s", cfg.String(), back.String())
	}
}

func TestLoadConfigReadsProcessEnv(t *testing.T) {
	t.Setenv("ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT", "/from/env")
	t.Setenv("ALEPH_SANDBOX_SANDBOX__LINUX__CPU_QUOTA_PERCENT", "50")
	cfg, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Sandbox.WorkspaceRoot != "/from/env" || cfg.Sandbox.Linux["cpu_quota_percent"] != int64(50) {
		t.Fatalf("%+v", cfg.Sandbox)
	}
}

func TestPlatformSections(t *testing.T) {
	cfg, err := loadConfig(writeTOML(t, "[sandbox.windows]\nmin_tier = \"appcontainer\"\nmax_processes = 8\n[sandbox.linux]\nbwrap_path = \"/opt/bwrap\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(cfg.DriverOptions("windows")); got != `{"max_processes":8,"min_tier":"appcontainer"}` {
		t.Fatalf("windows options %s", got)
	}
	// The Linux section goes to the driver as given: its defaults are the
	// driver's.
	if got := string(cfg.DriverOptions("linux")); got != `{"bwrap_path":"/opt/bwrap"}` {
		t.Fatalf("linux options %s", got)
	}
	if got := string(DefaultConfig().DriverOptions("linux")); got != `{}` {
		t.Fatalf("default linux options %s", got)
	}
	// Defaults send no Windows keys, so the driver's own defaults apply.
	if got := string(DefaultConfig().DriverOptions("windows")); got != `{}` {
		t.Fatalf("default windows options %s", got)
	}
	for body, key := range map[string]string{} {
		_, err := loadConfig(writeTOML(t, body), nil)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != key {
			t.Fatalf("%q: %v", body, err)
		}
	}
}

// A config path that names a device, a FIFO or a huge file is refused at
// once with the rule it broke; before, /dev/zero was read without end.
func TestConfigFileBounds(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, append([]byte("# "), bytes.Repeat([]byte("x"), maxConfigFileBytes)...), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		big: "1048576 byte (1 MiB) limit",
		dir: "is a directory",
	}
	if runtime.GOOS != "windows" {
		cases["/dev/zero"] = "is a character device: configuration is read only from a regular file"
	}
	for path, want := range cases {
		done := make(chan error, 1)
		go func() { _, err := loadConfig(path, nil); done <- err }()
		var err error
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("loadConfig(%s) did not return", path)
		}
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Source != path || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a ConfigError saying %q", path, err, want)
		}
	}
	// Control: a config of ordinary size is read.
	ok := writeTOML(t, "[sandbox]\ndefault_timeout_seconds = 7\n"+strings.Repeat("# padding\n", 50_000))
	cfg, err := loadConfig(ok, nil)
	if err != nil || cfg.Sandbox.DefaultTimeoutSeconds != 7 {
		t.Fatalf("ordinary config: %v, %+v", err, cfg.Sandbox)
	}
}

// [sandbox.drivers.NAME] holds a third-party driver's section, handed over
// as JSON by name; the platform sections keep their names; a value of
// [sandbox.drivers] that is not a table is refused.
func TestDriverSections(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(path, []byte("[sandbox.linux]\nmax_pids = 9\n\n[sandbox.drivers.naive]\nlevel = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"naive": `{"level":3}`, "linux": `{"max_pids":9}`, "other": `{}`, "windows": `{}`} {
		if got := string(cfg.DriverSection(name)); got != want {
			t.Errorf("DriverSection(%q) = %s, want %s", name, got, want)
		}
	}
	if err := os.WriteFile(path, []byte("[sandbox.drivers]\nnaive = 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var ce *ConfigError
	if _, err := loadConfig(path, nil); !errors.As(err, &ce) || ce.Key != "sandbox.drivers.naive" {
		t.Fatalf("a driver section that is not a table: %v", err)
	}
}

// A file's syntax error says where; an unknown key lists the keys of its
// table.
func TestConfigErrorsSayWhere(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(path, []byte("[sandbox]\nmax_output_bytes = 10\ndefault_timeout_seconds = 1x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var ce *ConfigError
	if _, err := loadConfig(path, nil); !errors.As(err, &ce) || !strings.Contains(ce.Reason, "line 3, column") {
		t.Fatalf("syntax error: %v, want its line", err)
	}
	if err := os.WriteFile(path, []byte("[sandbox]\ndefault_timeout_secnds = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig(path, nil); !errors.As(err, &ce) || ce.Key != "sandbox.default_timeout_secnds" ||
		!strings.Contains(ce.Reason, "default_timeout_seconds") || !strings.Contains(ce.Reason, "max_output_bytes") {
		t.Fatalf("unknown key: %v, want the table's keys listed", err)
	}
}

// customRuleName is the name of the i-th [[sandbox.command_policy.custom_rules]]
// table as the loader keeps it (the section is the hook's to decode), or "".
func customRuleName(sec Section, i int) string {
	rules, _ := sec["custom_rules"].([]any)
	if i >= len(rules) {
		return ""
	}
	rule, _ := rules[i].(map[string]any)
	name, _ := rule["name"].(string)
	return name
}
