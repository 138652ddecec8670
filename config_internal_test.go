package alephsandbox

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/commandpolicy"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/ratelimit"
)

// hookConfigOf is the ALEPH_HOOK_CONFIG the assembly starts the
// aleph-hook-ratelimit plugin with, read the way that binary reads it.
func hookConfigOf(t *testing.T, cfg core.Config) ratelimit.Config {
	t.Helper()
	env, err := hookPluginEnv(cfg, "/opt/hooks/aleph-hook-ratelimit")
	if err != nil || len(env) != 1 || !strings.HasPrefix(env[0], "ALEPH_HOOK_CONFIG=") {
		t.Fatalf("plugin env %q %v", env, err)
	}
	rl, err := ratelimit.ParseConfig([]byte(strings.TrimPrefix(env[0], "ALEPH_HOOK_CONFIG=")))
	if err != nil {
		t.Fatal(err)
	}
	return rl
}

// TestRateLimitDefaultsAgree: the defaults of [sandbox.rate_limit] are the
// same whichever way they are reached — the hook package, the loaded
// configuration (from the schema), a configuration never loaded
// (core.DefaultConfig), the plugin's ALEPH_HOOK_CONFIG, and the table in
// docs/configuration.md. A default changed in one place only fails here.
func TestRateLimitDefaultsAgree(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	want := ratelimit.DefaultConfig()
	loaded, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]core.Config{"loaded": loaded, "core.DefaultConfig": core.DefaultConfig()} {
		got, err := RateLimitConfig(cfg)
		if err != nil || got != want {
			t.Errorf("%s: in-process %+v %v, want %+v", name, got, err, want)
		}
		if got := hookConfigOf(t, cfg); got != want {
			t.Errorf("%s: plugin %+v, want %+v", name, got, want)
		}
	}
	// The loaded section shows every key with its default (what `config`
	// prints).
	for _, f := range ratelimit.Schema().Fields {
		if _, ok := loaded.Sandbox.RateLimit[f.Name]; !ok {
			t.Errorf("loaded section lacks %s", f.Name)
		}
	}
	doc, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "## `[sandbox.rate_limit]`")
	table, _, _ = strings.Cut(table, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| `([^`]*)` \\|")
	rows := row.FindAllStringSubmatch(table, -1)
	if len(rows) != len(ratelimit.Schema().Fields) {
		t.Fatalf("docs/configuration.md lists %d rate_limit keys, the schema %d", len(rows), len(ratelimit.Schema().Fields))
	}
	for _, r := range rows {
		f, ok := ratelimit.Schema().Field(r[1])
		if !ok {
			t.Errorf("docs list %s, not a key of the section", r[1])
			continue
		}
		if r[2] != f.DefaultJSON {
			t.Errorf("docs give %s the default %s, the hook %s", r[1], r[2], f.DefaultJSON)
		}
	}
}

// TestCommandPolicyDefaultsAgree: the defaults of [sandbox.command_policy]
// are the same whichever way they are reached — the hook package, the
// loaded configuration (from the schema), a configuration never loaded
// (core.DefaultConfig), the plugin's ALEPH_HOOK_CONFIG, and the table in
// docs/configuration.md.
func TestCommandPolicyDefaultsAgree(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	want := commandpolicy.DefaultConfig()
	same := func(a, b commandpolicy.Config) bool {
		return a.Enabled == b.Enabled && a.Enforcement == b.Enforcement && a.UseDefaultRules == b.UseDefaultRules && len(a.CustomRules) == 0 && len(b.CustomRules) == 0
	}
	loaded, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]core.Config{"loaded": loaded, "core.DefaultConfig": core.DefaultConfig()} {
		got, err := CommandPolicyConfig(cfg)
		if err != nil || !same(got, want) {
			t.Errorf("%s: in-process %+v %v, want %+v", name, got, err, want)
		}
		env, err := hookPluginEnv(cfg, "/opt/hooks/aleph-hook-commandpolicy")
		if err != nil || len(env) != 1 {
			t.Fatalf("plugin env %q %v", env, err)
		}
		plugin, err := commandpolicy.ParseConfig([]byte(strings.TrimPrefix(env[0], "ALEPH_HOOK_CONFIG=")))
		if err != nil || !same(plugin, want) {
			t.Errorf("%s: plugin %+v %v, want %+v", name, plugin, err, want)
		}
	}
	for _, f := range commandpolicy.Schema().Fields {
		if _, ok := loaded.Sandbox.CommandPolicy[f.Name]; !ok {
			t.Errorf("loaded section lacks %s", f.Name)
		}
	}
	doc, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "## `[sandbox.command_policy]`")
	table, _, _ = strings.Cut(table, "\n## ")
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| `([^`]*)` \\|")
	rows := row.FindAllStringSubmatch(table, -1)
	if len(rows) != len(commandpolicy.Schema().Fields) {
		t.Fatalf("docs/configuration.md lists %d command_policy keys, the schema %d", len(rows), len(commandpolicy.Schema().Fields))
	}
	for _, r := range rows {
		f, ok := commandpolicy.Schema().Field(r[1])
		if !ok {
			t.Errorf("docs list %s, not a key of the section", r[1])
			continue
		}
		if r[2] != f.DefaultJSON {
			t.Errorf("docs give %s the default %s, the hook %s", r[1], r[2], f.DefaultJSON)
		}
	}
}

// TestRateLimitSectionOneReading: a configured section reaches the
// in-process hook and the plugin as the same Config, and the loader
// refuses its unknown keys and bad values by their full names.
func TestRateLimitSectionOneReading(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "c.toml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := LoadConfig(write("[sandbox.rate_limit]\nrate_per_second = 2.5\nburst = 0\nmax_concurrent_global = 0\nidle_forget_seconds = 30\n"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := RateLimitConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := ratelimit.DefaultConfig()
	want.RatePerSecond, want.Burst, want.MaxConcurrentGlobal, want.IdleForgetSeconds = 2.5, 0, 0, 30
	if in != want {
		t.Fatalf("in-process %+v, want %+v", in, want)
	}
	if got := hookConfigOf(t, cfg); got != in {
		t.Fatalf("plugin %+v, in-process %+v", got, in)
	}
	for body, key := range map[string]string{
		"[sandbox.rate_limit]\nper_sesion = 2\n":             "sandbox.rate_limit.per_sesion",
		"[sandbox.rate_limit]\nburst = -1\n":                 "sandbox.rate_limit.burst",
		"[sandbox.rate_limit]\nrate_per_second = \"fast\"\n": "sandbox.rate_limit.rate_per_second",
		"[sandbox.rate_limit]\nidle_forget_seconds = -5\n":   "sandbox.rate_limit.idle_forget_seconds",
	} {
		_, err := LoadConfig(write(body))
		var ce *core.ConfigError
		if !errors.As(err, &ce) || ce.Key != key || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: %v, want a ConfigError on %s", body, err, key)
		}
	}
	// New refuses a bad section built in Go (no loader involved), naming
	// the key.
	bad := core.DefaultConfig()
	bad.Sandbox.WorkspaceRoot = t.TempDir()
	bad.Sandbox.RateLimit = core.Section{"max_concurrent_per_session": int64(-1)}
	_, err = New(bad, WithDriver(nopDriver{}))
	var ce *driverapi.ConfigError
	if !errors.As(err, &ce) || ce.Key != "max_concurrent_per_session" || !strings.Contains(err.Error(), "sandbox.rate_limit.max_concurrent_per_session") {
		t.Fatalf("New with a bad section: %v", err)
	}
}

// nopDriver is never asked to run anything: New fails before.
type nopDriver struct{ driverapi.Driver }

// TestProcessDefaultsAgree: the defaults of [sandbox.processes] are the
// same in the process table (core), the loaded configuration (from the
// schema), a configuration never loaded, and the table in
// docs/configuration.md; the loader refuses its unknown keys by full name.
func TestProcessDefaultsAgree(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	want := core.DefaultProcessConfig()
	loaded, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]core.Config{"loaded": loaded, "core.DefaultConfig": core.DefaultConfig()} {
		got, err := core.ProcessConfigOf(cfg)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v, want %+v", name, got, err, want)
		}
	}
	if got := core.NewProcessTable(nil, core.ProcessLimits{}).Limits(); got != want.Limits() {
		t.Errorf("the table's own defaults %+v, the section's %+v", got, want.Limits())
	}
	for _, f := range core.ProcessSchema().Fields {
		if _, ok := loaded.Sandbox.Processes[f.Name]; !ok {
			t.Errorf("loaded section lacks %s", f.Name)
		}
	}
	doc, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(doc), "## `[sandbox.processes]`")
	table, _, _ = strings.Cut(table, "\n## ")
	rows := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| `([^`]*)` \\|").FindAllStringSubmatch(table, -1)
	if len(rows) != len(core.ProcessSchema().Fields) {
		t.Fatalf("docs/configuration.md lists %d processes keys, the schema %d", len(rows), len(core.ProcessSchema().Fields))
	}
	for _, r := range rows {
		f, ok := core.ProcessSchema().Field(r[1])
		if !ok {
			t.Errorf("docs list %s, not a key of the section", r[1])
			continue
		}
		if r[2] != f.DefaultJSON {
			t.Errorf("docs give %s the default %s, the code %s", r[1], r[2], f.DefaultJSON)
		}
	}
	p := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(p, []byte("[sandbox.processes]\nmax_per_sesion = 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LoadConfig(p)
	var ce *core.ConfigError
	if !errors.As(err, &ce) || ce.Key != "sandbox.processes.max_per_sesion" {
		t.Errorf("unknown key: %v", err)
	}
}

// The hook plugins New launches are protected by New, which hands core the
// list (core reads no plugin's name from the configuration): an absolute
// plugin path is in it, beside what the host named, and a name that is
// not a path is not made into one (a positive control of the filter).
func TestProtectedPathsHoldTheHookPlugins(t *testing.T) {
	cfg := core.DefaultConfig()
	cfg.Sandbox.HookPlugins = []string{"/opt/hooks/my-hook", "relative-hook"}
	got := protectedPaths(cfg, []string{"/etc/host-named"})
	if !slices.Contains(got, "/opt/hooks/my-hook") || !slices.Contains(got, "/etc/host-named") {
		t.Fatalf("protected %q: want the hook plugin and the host's path", got)
	}
	if slices.Contains(got, "relative-hook") {
		t.Fatalf("protected %q: a relative name is no path to protect", got)
	}
}
