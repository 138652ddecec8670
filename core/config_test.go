package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func writeTOML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
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
		!s.CommandPolicy.Enabled || s.CommandPolicy.Enforcement != "block" || !s.CommandPolicy.UseDefaultRules ||
		!s.RateLimit.Enabled || s.RateLimit.RatePerSecond != 10 || s.RateLimit.Burst != 20 || s.RateLimit.MaxConcurrentPerSession != 4 ||
		s.RateLimit.MaxConcurrentGlobal != 16 || s.RateLimit.IdleForgetSeconds != 600 || s.Network.TLSIntercept ||
		s.Linux.MaxPids != 200 || s.Linux.CPUQuotaPercent != 0 || s.Linux.Cgroup != "auto" {
		t.Fatalf("defaults %+v", s)
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
	cfg, err := loadConfig(p, env)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Sandbox
	if s.WorkspaceRoot != "/srv/ws" || s.DefaultTimeoutSeconds != 15 || s.Driver != "bwrap" || s.Enabled ||
		s.CommandPolicy.Enforcement != "warn" || len(s.CommandPolicy.CustomRules) != 1 || s.CommandPolicy.CustomRules[0].Name != "no-curl" ||
		s.RateLimit.RatePerSecond != 2.5 || s.RateLimit.Burst != 9 || s.RateLimit.MaxConcurrentGlobal != 16 ||
		len(s.Network.SecretInjections) != 1 || s.Network.SecretInjections[0].Format != "Bearer {secret}" ||
		s.Linux.MaxPids != 50 || s.Linux.Cgroup != "v1" || strings.Join(s.HookPlugins, ",") != "/x/a,/x/b" {
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
		{"[[sandbox.command_policy.custom_rules]]\nname = \"a\"\nregex = \"b\"\naction = \"block\"\nseverity = 3\n", nil, "sandbox.command_policy.custom_rules[0].severity", "unknown key"},
		{"[sandbox.rate_limit]\nburst = 0\n", nil, "sandbox.rate_limit.burst", "must be > 0"},
		{"[sandbox.rate_limit]\nburst = \"ten\"\n", nil, "sandbox.rate_limit.burst", "must be an integer"},
		{"[sandbox]\nenabled = \"yes\"\n", nil, "sandbox.enabled", "must be a boolean"},
		{"[sandbox]\ndefault_timeout_seconds = -5\n", nil, "sandbox.default_timeout_seconds", "must be > 0"},
		{"[sandbox]\ndefault_timeout_seconds = 9223372036854775807\n", nil, "sandbox.default_timeout_seconds", "must be <="},
		{"[sandbox]\nworkspace_root = \"relative/ws\"\n", nil, "sandbox.workspace_root", "absolute"},
		{"[sandbox]\ndriver_sha256 = \"abc\"\n", nil, "sandbox.driver_sha256", "64 hex"},
		{"[sandbox.command_policy]\nenforcement = \"maybe\"\n", nil, "sandbox.command_policy.enforcement", "must be"},
		{"[[sandbox.command_policy.custom_rules]]\nname = \"a\"\nregex = \"b\"\naction = \"kill\"\n", nil, "sandbox.command_policy.custom_rules[0].action", "must be"},
		{"[sandbox.linux]\ncgroup = \"v3\"\n", nil, "sandbox.linux.cgroup", "must be"},
		{"[sandbox.linux]\nmax_pids = -1\n", nil, "sandbox.linux.max_pids", ">= 0"},
		{"[sandbox.linux]\ntmpfs_max_mb = -1\n", nil, "sandbox.linux.tmpfs_max_mb", "between 0"},
		{"[[sandbox.network.secret_injections]]\nhost = \"a\"\nheader = \"Bad Header\"\nsecret = \"K\"\n", nil, "sandbox.network.secret_injections[0].header", "header"},
		{"", []string{"ALEPH_SANDBOX_SANDBOX__NOPE=1"}, "sandbox.nope", "unknown key"},
		{"", []string{"ALEPH_SANDBOX_SANDBOX__RATE_LIMIT__BURST=x"}, "sandbox.rate_limit.burst", "must be an integer"},
		{"", []string{"ALEPH_SANDBOX_SANDBOX__RATE_LIMIT__BURST=-3"}, "sandbox.rate_limit.burst", "must be > 0"},
		{"", []string{"ALEPH_SANDBOX_SANDBOX__COMMAND_POLICY__CUSTOM_RULES=x"}, "sandbox.command_policy.custom_rules", "config file"},
		// A mistyped override is refused, not ignored.
		{"", []string{"ALEPH_SANDBOX_DEFAULT_TIMEOUT_SECONDS=5"}, "ALEPH_SANDBOX_DEFAULT_TIMEOUT_SECONDS", "unknown variable"},
		{"", []string{"ALEPH_SANDBOX_SANDBOX_DEFAULT_TIMEOUT_SECONDS=5"}, "ALEPH_SANDBOX_SANDBOX_DEFAULT_TIMEOUT_SECONDS", "unknown variable"},
	}
	for _, c := range cases {
		p := ""
		if c.toml != "" {
			p = writeTOML(t, c.toml)
		}
		_, err := loadConfig(p, c.env)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != c.key || !strings.Contains(err.Error(), c.why) || !strings.Contains(err.Error(), c.key) {
			t.Fatalf("%q %v: got %v, want key %s (%s)", c.toml, c.env, err, c.key, c.why)
		}
	}
	// Controls: the variables that are not overrides are accepted beside a
	// correct override, which applies.
	cfg, err := loadConfig("", []string{"ALEPH_SANDBOX_LOG=debug", "ALEPH_SANDBOX_LOG_FILE=/tmp/x.log",
		"ALEPH_SANDBOX_PLUGIN_DIR=/opt/p", "ALEPH_SANDBOX_SANDBOX__DEFAULT_TIMEOUT_SECONDS=5", "ALEPHX=1"})
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
	_, err = loadConfig(writeTOML(t, "[sandbox.rate_limit]\nburst = 0\n"), nil)
	if !strings.HasSuffix(err.Error(), "sandbox.rate_limit.burst: must be > 0") {
		t.Fatalf("message %q", err)
	}
}

func TestNewRefusesInvalidConfig(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.MaxOutputBytes = 0
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "sandbox.max_output_bytes") {
		t.Fatalf("err %v", err)
	}
}

func TestConfigStringRoundTrips(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Sandbox.WorkspaceRoot = "/srv/ws"
	cfg.Sandbox.RateLimit.Burst = 3
	cfg.Sandbox.CommandPolicy.CustomRules = []CustomRule{{Name: "r", Regex: "x", Action: "warn"}}
	back, err := loadConfig(writeTOML(t, cfg.String()), nil)
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
	if cfg.Sandbox.WorkspaceRoot != "/from/env" || cfg.Sandbox.Linux.CPUQuotaPercent != 50 {
		t.Fatalf("%+v", cfg.Sandbox)
	}
}

func TestPlatformSections(t *testing.T) {
	cfg, err := loadConfig(writeTOML(t, "[sandbox.windows]\nmin_tier = \"appcontainer\"\nmax_processes = 8\n[sandbox.linux]\nbwrap_path = \"/opt/bwrap\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(cfg.DriverOptions("windows")); got != `{"min_tier":"appcontainer","max_processes":8}` {
		t.Fatalf("windows options %s", got)
	}
	if got := string(cfg.DriverOptions("linux")); got != `{"max_pids":200,"cpu_quota_percent":0,"cgroup":"auto","bwrap_path":"/opt/bwrap"}` {
		t.Fatalf("linux options %s", got)
	}
	// Defaults send no Windows keys, so the driver's own defaults apply.
	if got := string(DefaultConfig().DriverOptions("windows")); got != `{}` {
		t.Fatalf("default windows options %s", got)
	}
	for body, key := range map[string]string{
		"[sandbox.windows]\nmin_tier = \"none\"\n":  "sandbox.windows.min_tier",
		"[sandbox.windows]\nmax_processes = -1\n":   "sandbox.windows.max_processes",
		"[sandbox.linux]\nbwrap_path = \"bwrap\"\n": "sandbox.linux.bwrap_path",
	} {
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
	if err := os.WriteFile(big, append([]byte("# "), bytes.Repeat([]byte("x"), MaxConfigFileBytes)...), 0o600); err != nil {
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
