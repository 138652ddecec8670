package core

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/knadh/koanf/parsers/toml/v2"
	envprov "github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/v2"
	gotoml "github.com/pelletier/go-toml/v2"

	"github.com/aleph-sandbox/aleph-sandbox/core/internal/inputfile"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Config is the whole configuration: the [sandbox] table, and [serve] for
// `aleph-sandbox serve` (ServeConfig).
type Config struct {
	Sandbox SandboxConfig `koanf:"sandbox" json:"sandbox" toml:"sandbox"`
	Serve   ServeConfig   `koanf:"serve" json:"serve" toml:"serve"`

	// source is the file LoadConfig read, if any (Source).
	source string
}

// Source is the absolute path of the file LoadConfig read this
// configuration from, or "" (defaults and environment only, or built in
// code). Hosts keep it out of every command's write reach: a command that
// could rewrite it would choose the next run's driver and hook plugins.
func (c Config) Source() string { return c.source }

// SandboxConfig is the [sandbox] table.
type SandboxConfig struct {
	// WorkspaceRoot holds one directory per session. Always absolute.
	WorkspaceRoot string `koanf:"workspace_root" json:"workspace_root" toml:"workspace_root"`
	// Enabled false makes New return NoopSandbox.
	Enabled               bool  `koanf:"enabled" json:"enabled" toml:"enabled"`
	DefaultTimeoutSeconds int64 `koanf:"default_timeout_seconds" json:"default_timeout_seconds" toml:"default_timeout_seconds"`
	MaxOutputBytes        int64 `koanf:"max_output_bytes" json:"max_output_bytes" toml:"max_output_bytes"`
	// MaxViolations bounds the distinct violations a command's result and
	// audit record carry (Output.Exit.Violations); the refusals past it
	// are counted in violations_dropped. The command chooses what it
	// tries, so the list must not grow with it.
	MaxViolations int `koanf:"max_violations" json:"max_violations" toml:"max_violations"`
	// Driver is a driver name ("bwrap") or a path; empty is the platform default.
	Driver string `koanf:"driver" json:"driver" toml:"driver"`
	// DriverSHA256 pins the driver binary (hex SHA-256); empty means unpinned.
	DriverSHA256           string   `koanf:"driver_sha256" json:"driver_sha256" toml:"driver_sha256"`
	ApprovalTimeoutSeconds int64    `koanf:"approval_timeout_seconds" json:"approval_timeout_seconds" toml:"approval_timeout_seconds"`
	HookPlugins            []string `koanf:"hook_plugins" json:"hook_plugins" toml:"hook_plugins"`
	HookTimeoutMS          int64    `koanf:"hook_timeout_ms" json:"hook_timeout_ms" toml:"hook_timeout_ms"`
	// TimeoutTermGraceMS is how long before its timeout a command is sent
	// SIGTERM, so that it can end cleanly before the driver kills it
	// (SIGKILL) at the timeout: the grace is part of the timeout, never
	// added to it, and is at most half of it. 0: killed at the timeout
	// without warning.
	TimeoutTermGraceMS int64 `koanf:"timeout_term_grace_ms" json:"timeout_term_grace_ms" toml:"timeout_term_grace_ms"`
	// AuditLog is the JSON-lines ledger file; empty disables the file (the
	// capability_ledger log lines remain).
	AuditLog string `koanf:"audit_log" json:"audit_log" toml:"audit_log"`
	// AuditOnFailure is what commands do once an audit record could not
	// be written: "open" (the default) runs them and counts the failure,
	// "closed" refuses them (reason audit_unavailable) until a record can
	// be written again.
	AuditOnFailure string `koanf:"audit_on_failure" json:"audit_on_failure" toml:"audit_on_failure"`
	// SessionSandboxes is "auto" (the default: the commands of a session
	// run in the session's persistent sandbox when the driver lists the
	// session_sandbox call) or "off" (a sandbox per command). Hosts that
	// live for one command (the one-shot CLI) turn it off.
	SessionSandboxes string `koanf:"session_sandboxes" json:"session_sandboxes" toml:"session_sandboxes"`
	// LayerMaxBytes bounds the disk a layered session's layer (its upper
	// directory) may hold: at or over it, the session's next command and
	// the files API's writes are refused (LimitError) until its changes
	// are applied, discarded or removed. 0: no limit.
	LayerMaxBytes int64 `koanf:"layer_max_bytes" json:"layer_max_bytes" toml:"layer_max_bytes"`
	// CommandPolicy is owned by the command-policy hook
	// (hooks/commandpolicy: its type, defaults and validation); core keeps
	// it as a Section, as it does RateLimit.
	CommandPolicy Section `koanf:"command_policy" json:"command_policy" toml:"command_policy"`
	// RateLimit is owned by the rate-limit hook (hooks/ratelimit: its
	// type, defaults and validation); core keeps it as a Section.
	RateLimit Section       `koanf:"rate_limit" json:"rate_limit" toml:"rate_limit"`
	Network   NetworkConfig `koanf:"network" json:"network" toml:"network"`
	// Linux is owned by the Linux driver, which validates it when the host
	// hands it over (driverapi.Configurable.SetConfig, else
	// ALEPH_DRIVER_OPTIONS); core never reads it.
	Linux Section `koanf:"linux" json:"linux" toml:"linux"`
	// Protected changes the set of top-level entries kept read-only and
	// uncreatable in the workspace and in every write grant.
	Protected ProtectedConfig `koanf:"protected" json:"protected" toml:"protected"`
	// Windows is owned by the Windows driver (drivers/appcontainer:
	// ParseOptions), which validates it from ALEPH_DRIVER_OPTIONS at start;
	// core never reads it.
	Windows Section `koanf:"windows" json:"windows" toml:"windows"`
	// Drivers holds the sections of other drivers, [sandbox.drivers.NAME],
	// NAME as the driver's ConfigSchema names its section; each is owned
	// and validated by its driver (DriverSection), core never reads them.
	Drivers map[string]Section `koanf:"drivers" json:"drivers,omitempty" toml:"drivers"`
	// Session is what every session starts with: its baseline and the
	// child's HOME.
	Session SessionConfig `koanf:"session" json:"session" toml:"session"`
	// Processes is owned by the process table (procsconfig.go: its type,
	// defaults and validation), kept as a Section.
	Processes Section `koanf:"processes" json:"processes" toml:"processes"`
}

// SessionConfig is [sandbox.session].
type SessionConfig struct {
	// Baseline names what every session may do without approval: "strict"
	// (nothing beyond the workspace), "spawn" (subprocesses too: shells,
	// make, compilers) or "agent" (the preset for a coding agent's shell
	// tool: spawn, everything else strict). See BaselinePresets.
	Baseline string `koanf:"baseline" json:"baseline" toml:"baseline"`
	// Home is the child's HOME: "session" (a private directory per
	// session, kept outside the workspace, under
	// <workspace_root>/.homes/, removed by ForgetSession) or "workspace"
	// (the workspace itself).
	Home string `koanf:"home" json:"home" toml:"home"`
}

// Values of SessionConfig.Home.
const (
	HomeSession   = "session"
	HomeWorkspace = "workspace"
)

// HomesDirName is the directory under the workspace root that holds the
// sessions' private HOME directories, one per session, named like its
// workspace (SessionDirName). It cannot be a session's workspace: those
// are hex names.
const HomesDirName = ".homes"

// BaselinePresets are the values sandbox.session.baseline accepts and the
// capabilities each gives every session without approval.
//
// "agent" is what an agent's shell tool needs and no more: an agent writes
// shell lines (pipes, &&, make, git, compilers), and each forks, so spawn
// is in it; the network, host paths beyond the workspace and a memory or
// time limit beyond the configured ones stay asked for. What it gives up
// against strict is spawn's: the command may run any program the sandbox
// shows, not only the one named, so the command policy sees the shell
// line's text (and judges it) but not what a script or a build runs
// later. The OS confinement (filesystem, network, no new privileges,
// seccomp) holds for every process of the command alike. It has spawn's
// capabilities, so grants approved under one apply under the other.
func BaselinePresets() map[string]driverapi.Capabilities {
	return map[string]driverapi.Capabilities{
		"strict": {},
		"spawn":  {SpawnSubprocess: true},
		"agent":  {SpawnSubprocess: true},
	}
}

// SessionBaseline is the baseline sandbox.session.baseline names (what
// New uses unless WithBaseline says otherwise).
func (c Config) SessionBaseline() driverapi.Capabilities {
	return BaselinePresets()[c.Sandbox.Session.Baseline]
}

// NetworkConfig is [sandbox.network].
type NetworkConfig struct {
	SecretInjections []SecretInjection `koanf:"secret_injections" json:"secret_injections" toml:"secret_injections"`
	TLSIntercept     bool              `koanf:"tls_intercept" json:"tls_intercept" toml:"tls_intercept"`
}

// SecretInjection tells the mediation to add a header carrying a secret to
// requests for Host. Format is the header value with "{secret}" where the
// secret goes; empty means the bare secret.
type SecretInjection struct {
	Host   string `koanf:"host" json:"host" toml:"host"`
	Header string `koanf:"header" json:"header" toml:"header"`
	Secret string `koanf:"secret" json:"secret" toml:"secret"`
	Format string `koanf:"format" json:"format" toml:"format"`
}

// ProtectedConfig is [sandbox.protected]: the default protected entries
// (driverapi.DefaultProtectedEntries) plus Add, minus Remove. Each entry is
// one path component (".git", ".envrc"); Remove may only name defaults, so
// a typo cannot silently leave a default in force or drop a protection
// nobody meant to drop.
type ProtectedConfig struct {
	Add    []string `koanf:"add" json:"add" toml:"add"`
	Remove []string `koanf:"remove" json:"remove" toml:"remove"`
	// PlantedGit says what the core does, after each command, with git
	// repositories the command created or changed in its workspace
	// (gitquarantine.go): "quarantine" (the default, also when empty)
	// renames them out of git's way; "allow" leaves them, for a host that
	// never runs git in its workspaces and cannot pay the walk's cost on a
	// very large tree. The host's git runs what such a repository's config
	// names: "allow" is only safe where no git runs there.
	PlantedGit string `koanf:"planted_git" json:"planted_git,omitempty" toml:"planted_git"`
}

// Values of [sandbox.protected] planted_git.
const (
	PlantedGitQuarantine = "quarantine"
	PlantedGitAllow      = "allow"
)

// ProtectedEntries is the effective protected set, in a stable order: the
// defaults that were not removed, then the additions.
func (c Config) ProtectedEntries() []string {
	pc := c.Sandbox.Protected
	var out []string
	seen := map[string]bool{}
	for _, d := range driverapi.DefaultProtectedEntries() {
		if !contains(pc.Remove, d) && !seen[d] {
			out = append(out, d)
			seen[d] = true
		}
	}
	for _, a := range pc.Add {
		if !seen[a] {
			out = append(out, a)
			seen[a] = true
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Section is a configuration section owned by a component (a hook, a
// driver): core keeps it as the tree of values the file and the
// environment gave, and hands it to its owner as one JSON object
// (Section.JSON). The owner holds the section's type, defaults and
// validation; a loader given the owner's schema (WithSection) refuses
// unknown keys and values of the wrong type with their full names, fills
// the owner's defaults and runs the owner's check. A section no schema was
// given for is checked by its owner alone.
type Section map[string]any

// JSON is the section as one JSON object ("{}" when empty).
func (s Section) JSON() []byte {
	if len(s) == 0 {
		return []byte("{}")
	}
	b, err := json.Marshal(map[string]any(s))
	if err != nil {
		// Only TOML values reach a section, and each has a JSON form.
		return []byte("{}")
	}
	return b
}

// ConfigError is a configuration key that is unknown or has an invalid value:
// the project's one configuration error type, driverapi.ConfigError (so a
// caller catches core's, a driver's and a hook's refusals with one
// errors.As). Core sets Key to the full dotted name, e.g.
// "sandbox.rate_limit.burst", and Source to the file or environment variable.
type ConfigError = driverapi.ConfigError

// EnvPrefix starts every environment override. The rest of the name is the
// key path with "__" between levels, upper-cased:
// ALEPH_SANDBOX_SANDBOX__DEFAULT_TIMEOUT_SECONDS=30 sets
// sandbox.default_timeout_seconds, ALEPH_SANDBOX_SANDBOX__RATE_LIMIT__BURST=5
// sets sandbox.rate_limit.burst. Lists of strings take comma-separated
// values; lists of tables (custom_rules, secret_injections) are file-only.
// The only other ALEPH_SANDBOX_* variables are those of isOtherEnvVar; any
// else is refused as a mistyped override.
const EnvPrefix = "ALEPH_SANDBOX_SANDBOX__"

// isOtherEnvVar reports the ALEPH_SANDBOX_ variables that are not
// configuration overrides: the CLI's log level and destination, the
// driver lookup directory, the start-up trace (internal/starttrace), and
// the bearer token the Python and TypeScript clients send over TCP (a
// shell that exports it for its clients must still run serve and exec).
func isOtherEnvVar(name string) bool {
	switch name {
	case "ALEPH_SANDBOX_LOG", "ALEPH_SANDBOX_LOG_FILE", "ALEPH_SANDBOX_PLUGIN_DIR", "ALEPH_SANDBOX_HOST", "ALEPH_SANDBOX_LOG_FORMAT",
		"ALEPH_SANDBOX_TRACE", "ALEPH_SANDBOX_TOKEN":
		return true
	}
	return false
}

// checkEnvNames refuses an ALEPH_SANDBOX_ variable that is neither an
// override nor one of isOtherEnvVar's: a mistyped override
// (ALEPH_SANDBOX_DEFAULT_TIMEOUT_SECONDS, one underscore short) would
// otherwise leave the default silently in force.
func checkEnvNames(environ []string) *ConfigError {
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "ALEPH_SANDBOX_") || strings.HasPrefix(name, EnvPrefix) || isOtherEnvVar(name) {
			continue
		}
		return &ConfigError{Source: "environment " + name, Key: name,
			Reason: "unknown variable: configuration overrides are named " + EnvPrefix + "<KEY>, sections joined by __ (e.g. " + EnvPrefix + "DEFAULT_TIMEOUT_SECONDS)"}
	}
	return nil
}

// DataDir is where aleph-sandbox keeps its state: $XDG_DATA_HOME/aleph-sandbox
// or ~/.local/share/aleph-sandbox. Empty when neither can be determined.
func DataDir() string {
	if x := os.Getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "aleph-sandbox")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" || !filepath.IsAbs(home) {
		return ""
	}
	return filepath.Join(home, ".local", "share", "aleph-sandbox")
}

// Values of sandbox.session_sandboxes.
const (
	SessionSandboxesAuto = "auto"
	SessionSandboxesOff  = "off"
)

// defaultTimeoutTermGraceMS is sandbox.timeout_term_grace_ms by default:
// a command is warned (SIGTERM) 2 s before its timeout kills it.
const defaultTimeoutTermGraceMS = 2000

// defaultLayerMaxBytes is sandbox.layer_max_bytes's default: 1 GiB.
const defaultLayerMaxBytes = 1 << 30

// DefaultConfig is the configuration with nothing set.
func DefaultConfig() Config {
	data := DataDir()
	c := Config{Sandbox: SandboxConfig{
		Enabled:                true,
		DefaultTimeoutSeconds:  60,
		MaxOutputBytes:         1 << 20,
		MaxViolations:          driverapi.DefaultMaxViolations,
		ApprovalTimeoutSeconds: 60,
		AuditOnFailure:         AuditFailOpen,
		SessionSandboxes:       SessionSandboxesAuto,
		LayerMaxBytes:          defaultLayerMaxBytes,
		HookPlugins:            []string{},
		HookTimeoutMS:          2000,
		TimeoutTermGraceMS:     defaultTimeoutTermGraceMS,
		// The owners' sections are empty: their defaults are the owners'
		// (LoadConfig fills them from the schemas it is given).
		CommandPolicy: Section{},
		RateLimit:     Section{},
		Network:       NetworkConfig{SecretInjections: []SecretInjection{}},
		Linux:         Section{},
		Protected:     ProtectedConfig{Add: []string{}, Remove: []string{}},
		Session:       SessionConfig{Baseline: "strict", Home: HomeSession},
		Processes:     Section{},
	}}
	if data != "" {
		c.Sandbox.WorkspaceRoot = filepath.Join(data, "workspaces")
		c.Sandbox.AuditLog = filepath.Join(data, "audit.jsonl")
	}
	return c
}

// LoadOption adjusts LoadConfig.
type LoadOption func(*loadOptions)

type loadOptions struct {
	sections []ownedSection
}

type ownedSection struct {
	schema driverapi.ConfigSchema
	check  func(sectionJSON []byte) error
}

// WithSection gives the loader a component's schema for its section,
// [sandbox.<schema.Section>], which must be one of Config's Section fields:
// the loader then refuses the section's unknown keys and values of the
// wrong type with their full names, fills the schema's defaults for keys
// not set, and runs check (when not nil) on the result, naming the key of a
// *driverapi.ConfigError it returns. The assembly (package alephsandbox)
// passes the shipped hooks' schemas; core links none of them.
func WithSection(schema driverapi.ConfigSchema, check func(sectionJSON []byte) error) LoadOption {
	return func(o *loadOptions) { o.sections = append(o.sections, ownedSection{schema: schema, check: check}) }
}

// LoadConfig reads the configuration: defaults, then the TOML file at path
// (skipped when path is empty), then ALEPH_SANDBOX_SANDBOX__* environment
// overrides (see EnvPrefix). Unknown keys, values of the wrong type and
// invalid values are refused with a *ConfigError naming the full key; in a
// component's Section, only when its schema is given (WithSection).
func LoadConfig(path string, opts ...LoadOption) (Config, error) {
	return loadConfig(path, os.Environ(), opts...)
}

func loadConfig(path string, environ []string, opts ...LoadOption) (Config, error) {
	var lo loadOptions
	for _, o := range opts {
		o(&lo)
	}
	cfg := DefaultConfig()
	sections := map[string]driverapi.ConfigSchema{}
	for _, owned := range lo.sections {
		key := "sandbox." + owned.schema.Section
		if cfg.section(owned.schema.Section) == nil {
			return Config{}, &ConfigError{Key: key, Reason: "a schema was given for a section the configuration does not have"}
		}
		sections[key] = owned.schema
	}
	schema := configSchema()
	k := koanf.New(".")
	if path != "" {
		data, err := inputfile.Read(path, maxConfigFileBytes)
		if err != nil {
			return Config{}, &ConfigError{Source: path, Key: "(file)", Reason: configFileReason(err)}
		}
		// The depth is bounded before the parser sees the file: a deep
		// file costs the parser time quadratic in its depth.
		if err := checkConfigNesting(data); err != nil {
			err.Source = path
			return Config{}, err
		}
		fk := koanf.New(".")
		if err := fk.Load(bytesProvider(data), toml.Parser()); err != nil {
			reason := err.Error()
			var de *gotoml.DecodeError
			if errors.As(err, &de) {
				row, col := de.Position()
				reason = fmt.Sprintf("line %d, column %d: %s", row, col, reason)
			}
			return Config{}, &ConfigError{Source: path, Key: "(file)", Reason: reason}
		}
		if err := checkRaw(fk.Raw(), reflect.TypeOf(cfg), "", sections); err != nil {
			err.Source = path
			return Config{}, err
		}
		if err := k.Merge(fk); err != nil {
			return Config{}, err
		}
	}
	if err := checkEnvNames(environ); err != nil {
		return Config{}, err
	}
	var envErr *ConfigError
	ek := koanf.New(".")
	err := ek.Load(envprov.Provider(".", envprov.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, val string) (string, any) {
			key := "sandbox." + strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, EnvPrefix), "__", "."))
			v, err := parseEnvValue(schema, sections, key, val)
			if err != nil && envErr == nil {
				envErr = &ConfigError{Source: "environment " + name, Key: key, Reason: err.Error()}
			}
			if err != nil {
				return "", nil
			}
			return key, v
		},
	}), nil)
	if err != nil {
		return Config{}, err
	}
	if envErr != nil {
		return Config{}, envErr
	}
	if err := k.Merge(ek); err != nil {
		return Config{}, err
	}
	if err := k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{Tag: "koanf"}); err != nil {
		return Config{}, &ConfigError{Source: path, Key: "(decode)", Reason: err.Error()}
	}
	for _, owned := range lo.sections {
		if err := fillSection(&cfg, owned, path); err != nil {
			return Config{}, err
		}
	}
	cfg.Sandbox.WorkspaceRoot = expandHome(cfg.Sandbox.WorkspaceRoot)
	cfg.Sandbox.AuditLog = expandHome(cfg.Sandbox.AuditLog)
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	if path != "" {
		if abs, err := filepath.Abs(path); err == nil {
			cfg.source = abs
		}
	}
	return cfg, nil
}

// maxConfigFileBytes bounds a configuration file (1 MiB: a generous
// configuration is a few kilobytes). The file must also be a regular file:
// /dev/zero, a FIFO or a terminal named as the config would otherwise be
// read without end or block.
const maxConfigFileBytes = 1 << 20

// configFileReason says why a config file was not read, naming the rule
// it broke.
func configFileReason(err error) string {
	var nr *inputfile.NotRegularError
	var tl *inputfile.TooLargeError
	switch {
	case errors.As(err, &nr):
		return fmt.Sprintf("is %s: configuration is read only from a regular file", nr.Kind)
	case errors.As(err, &tl):
		return fmt.Sprintf("is larger than the %d byte (1 MiB) limit for a configuration file", tl.Limit)
	}
	return err.Error()
}

// bytesProvider hands koanf a configuration already read (within bounds).
type bytesProvider []byte

func (b bytesProvider) ReadBytes() ([]byte, error) { return b, nil }
func (b bytesProvider) Read() (map[string]any, error) {
	return nil, errors.New("bytesProvider needs a parser")
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}

// configSchema maps each dotted key to its Go type, from the koanf tags.
func configSchema() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			key := prefix + f.Tag.Get("koanf")
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, key+".")
				continue
			}
			out[key] = f.Type
		}
	}
	walk(reflect.TypeOf(Config{}), "")
	return out
}

// section is the Section field of the [sandbox] table called name, or nil.
func (c *Config) section(name string) *Section {
	v := reflect.ValueOf(&c.Sandbox).Elem()
	for i := 0; i < v.NumField(); i++ {
		if v.Type().Field(i).Tag.Get("koanf") == name && v.Field(i).Type() == reflect.TypeOf(Section{}) {
			return v.Field(i).Addr().Interface().(*Section)
		}
	}
	return nil
}

// fillSection sets the schema's defaults under what the file and the
// environment gave, and runs the owner's check.
func fillSection(cfg *Config, owned ownedSection, path string) error {
	sec := cfg.section(owned.schema.Section)
	merged := Section{}
	for _, f := range owned.schema.Fields {
		if f.DefaultJSON == "" {
			continue
		}
		v, err := defaultValue(f)
		if err != nil {
			return &ConfigError{Key: "sandbox." + owned.schema.Section + "." + f.Name, Reason: "the component's default " + f.DefaultJSON + ": " + err.Error()}
		}
		merged[f.Name] = v
	}
	for k, v := range *sec {
		merged[k] = v
	}
	*sec = merged
	if owned.check == nil {
		return nil
	}
	if err := owned.check(merged.JSON()); err != nil {
		key := "sandbox." + owned.schema.Section
		var ce *driverapi.ConfigError
		if !errors.As(err, &ce) {
			return &ConfigError{Source: path, Key: key, Reason: err.Error()}
		}
		if ce.Key != "" {
			key += "." + ce.Key
		}
		return &ConfigError{Key: key, Reason: ce.Reason}
	}
	return nil
}

// defaultValue decodes a schema default into the value TOML would give
// (int64 for integers), so the printed configuration loads back.
func defaultValue(f driverapi.ConfigField) (any, error) {
	dec := json.NewDecoder(strings.NewReader(f.DefaultJSON))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return tomlValue(v), nil
}

func tomlValue(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = tomlValue(e)
		}
		return out
	}
	return v
}

// checkSectionValue checks one value of a component's section against the
// type its schema gives.
func checkSectionValue(v any, f driverapi.ConfigField, key string) *ConfigError {
	bad := func(what string) *ConfigError {
		return &ConfigError{Key: key, Reason: fmt.Sprintf("must be %s, got %T", what, v)}
	}
	switch f.Type {
	case driverapi.ConfigString:
		s, ok := v.(string)
		if !ok {
			return bad("a string")
		}
		if len(f.Enum) > 0 && !contains(f.Enum, s) {
			return &ConfigError{Key: key, Reason: fmt.Sprintf("must be one of %s, got %q", strings.Join(f.Enum, ", "), s)}
		}
	case driverapi.ConfigBool:
		if _, ok := v.(bool); !ok {
			return bad("a boolean")
		}
	case driverapi.ConfigInt:
		if _, ok := v.(int64); !ok {
			return bad("an integer")
		}
	case driverapi.ConfigUint:
		n, ok := v.(int64)
		if !ok {
			return bad("an integer")
		}
		if n < 0 {
			return &ConfigError{Key: key, Reason: fmt.Sprintf("must be >= 0, got %d", n)}
		}
	case driverapi.ConfigNumber:
		switch v.(type) {
		case int64, float64:
		default:
			return bad("a number")
		}
	case driverapi.ConfigStringList:
		items, ok := v.([]any)
		if !ok {
			return bad("an array of strings")
		}
		for i, it := range items {
			if _, ok := it.(string); !ok {
				return &ConfigError{Key: fmt.Sprintf("%s[%d]", key, i), Reason: fmt.Sprintf("must be a string, got %T", it)}
			}
		}
	case driverapi.ConfigTableList:
		items, ok := v.([]any)
		if !ok {
			return bad("an array of tables")
		}
		for i, it := range items {
			if _, ok := it.(map[string]any); !ok {
				return &ConfigError{Key: fmt.Sprintf("%s[%d]", key, i), Reason: fmt.Sprintf("must be a table, got %T", it)}
			}
		}
	}
	return nil
}

// checkSection refuses a section's unknown keys and mistyped values.
func checkSection(raw map[string]any, sc driverapi.ConfigSchema, prefix string) *ConfigError {
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f, ok := sc.Field(k)
		if !ok {
			names := make([]string, len(sc.Fields))
			for i, f := range sc.Fields {
				names[i] = f.Name
			}
			return &ConfigError{Key: prefix + k, Reason: "unknown key (known: " + strings.Join(names, ", ") + ")"}
		}
		if err := checkSectionValue(raw[k], f, prefix+k); err != nil {
			return err
		}
	}
	return nil
}

// checkRaw walks a parsed file against the Config type and refuses the first
// unknown key or value of the wrong type, naming it in full. A component's
// Section is checked against its schema when sections has one, else only
// that it is a table.
func checkRaw(raw map[string]any, t reflect.Type, prefix string, sections map[string]driverapi.ConfigSchema) *ConfigError {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		fields[t.Field(i).Tag.Get("koanf")] = t.Field(i).Type
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		full := prefix + k
		ft, ok := fields[k]
		if !ok {
			known := make([]string, 0, len(fields))
			for name := range fields {
				if name != "" && name != "-" {
					known = append(known, name)
				}
			}
			sort.Strings(known)
			return &ConfigError{Key: full, Reason: "unknown key (known: " + strings.Join(known, ", ") + ")"}
		}
		if err := checkValue(raw[k], ft, full, sections); err != nil {
			return err
		}
	}
	return nil
}

func checkValue(v any, t reflect.Type, key string, sections map[string]driverapi.ConfigSchema) *ConfigError {
	bad := func() *ConfigError {
		return &ConfigError{Key: key, Reason: fmt.Sprintf("must be %s, got %T", kindName(t), v)}
	}
	switch t.Kind() {
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return &ConfigError{Key: key, Reason: fmt.Sprintf("must be a table, got %T", v)}
		}
		if sc, ok := sections[key]; ok {
			return checkSection(m, sc, key+".")
		}
		if t.Elem().Kind() == reflect.Map {
			// A table of sections ([sandbox.drivers.NAME]): each a table.
			for name, sub := range m {
				if _, ok := sub.(map[string]any); !ok {
					return &ConfigError{Key: key + "." + name, Reason: fmt.Sprintf("must be a table, got %T", sub)}
				}
			}
		}
		return nil
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return &ConfigError{Key: key, Reason: fmt.Sprintf("must be a table, got %T", v)}
		}
		return checkRaw(m, t, key+".", sections)
	case reflect.Slice:
		items, ok := v.([]any)
		if !ok {
			return bad()
		}
		for i, it := range items {
			if err := checkValue(it, t.Elem(), fmt.Sprintf("%s[%d]", key, i), sections); err != nil {
				return err
			}
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return bad()
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return bad()
		}
	case reflect.Int64:
		if _, ok := v.(int64); !ok {
			return bad()
		}
	case reflect.Float64:
		switch v.(type) {
		case int64, float64:
		default:
			return bad()
		}
	}
	return nil
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			return "an array of tables"
		}
		return "an array of " + kindName(t.Elem()) + "s"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Struct:
		return "a table"
	}
	return t.String()
}

// sectionEnvValue reads an override of a key of a component's section: as
// the schema's type says when there is one; in a section without one, as
// an integer when it is one, true or false as a boolean, else a string
// (the owner refuses a value of the wrong type).
func sectionEnvValue(sections map[string]driverapi.ConfigSchema, section, name, key, val string) (any, error) {
	sc, ok := sections[section]
	if !ok {
		if n, err := strconv.ParseInt(val, 10, 64); err == nil {
			return n, nil
		}
		if val == "true" || val == "false" {
			return val == "true", nil
		}
		return val, nil
	}
	f, ok := sc.Field(name)
	if !ok {
		return nil, errors.New("unknown key")
	}
	var v any
	switch f.Type {
	case driverapi.ConfigString:
		v = val
	case driverapi.ConfigBool:
		b, err := strconv.ParseBool(val)
		if err != nil {
			return nil, fmt.Errorf("must be true or false, got %q", val)
		}
		v = b
	case driverapi.ConfigInt, driverapi.ConfigUint:
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("must be an integer, got %q", val)
		}
		v = n
	case driverapi.ConfigNumber:
		if n, err := strconv.ParseInt(val, 10, 64); err == nil {
			v = n
			break
		}
		x, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return nil, fmt.Errorf("must be a number, got %q", val)
		}
		v = x
	case driverapi.ConfigStringList:
		out := []any{}
		for _, p := range strings.Split(val, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		v = out
	case driverapi.ConfigTableList:
		return nil, errors.New("cannot be set from the environment; set it in the config file")
	default:
		v = val
	}
	if err := checkSectionValue(v, f, key); err != nil {
		return nil, errors.New(err.Reason)
	}
	return v, nil
}

func parseEnvValue(schema map[string]reflect.Type, sections map[string]driverapi.ConfigSchema, key, val string) (any, error) {
	for sk, t := range schema {
		if t.Kind() == reflect.Map && strings.HasPrefix(key, sk+".") {
			name := strings.TrimPrefix(key, sk+".")
			if name == "" || strings.Contains(name, ".") {
				return nil, errors.New("unknown key")
			}
			return sectionEnvValue(sections, sk, name, key, val)
		}
	}
	t, ok := schema[key]
	if !ok {
		return nil, errors.New("unknown key")
	}
	switch t.Kind() {
	case reflect.String:
		return val, nil
	case reflect.Bool:
		b, err := strconv.ParseBool(val)
		if err != nil {
			return nil, fmt.Errorf("must be true or false, got %q", val)
		}
		return b, nil
	case reflect.Int64:
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("must be an integer, got %q", val)
		}
		return n, nil
	case reflect.Float64:
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return nil, fmt.Errorf("must be a number, got %q", val)
		}
		return f, nil
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			out := []any{}
			for _, p := range strings.Split(val, ",") {
				if p = strings.TrimSpace(p); p != "" {
					out = append(out, p)
				}
			}
			return out, nil
		}
	}
	return nil, errors.New("cannot be set from the environment; set it in the config file")
}

// maxConfigSeconds bounds configured durations (one year), far from
// time.Duration overflow.
const maxConfigSeconds = 365 * 24 * 3600

// ValidConfig is a configuration that passed Validate, made only by
// Config.Validated. NewPipeline takes one, so a configuration is checked
// once on its way down: the assembly (alephsandbox.New) validates it,
// acts on it (finds the driver, opens the audit file) and hands core the
// same value, which core does not check again. It holds a copy of the
// Config's values (its slices and section maps are shared, as Config's own
// copies share them): treat the Config as read-only once validated.
type ValidConfig struct {
	cfg   Config
	valid bool
}

// Validated checks c (Validate) and returns it as a ValidConfig.
func (c Config) Validated() (ValidConfig, error) {
	if err := c.Validate(); err != nil {
		return ValidConfig{}, err
	}
	return ValidConfig{cfg: c, valid: true}, nil
}

// Config is the validated configuration (a copy).
func (v ValidConfig) Config() Config { return v.cfg }

// Validate checks every value and returns a *ConfigError naming the first
// bad key.
func (c Config) Validate() error {
	s := c.Sandbox
	bad := func(key, reason string) error { return &ConfigError{Key: "sandbox." + key, Reason: reason} }
	switch {
	case s.WorkspaceRoot == "":
		return bad("workspace_root", "must be set (no home directory or XDG_DATA_HOME to default from)")
	case !filepath.IsAbs(s.WorkspaceRoot):
		return bad("workspace_root", fmt.Sprintf("must be an absolute path, got %q", s.WorkspaceRoot))
	case strings.IndexByte(s.WorkspaceRoot, 0) >= 0:
		return bad("workspace_root", "contains a NUL byte")
	case s.DefaultTimeoutSeconds <= 0:
		return bad("default_timeout_seconds", "must be > 0")
	case s.DefaultTimeoutSeconds > maxConfigSeconds:
		return bad("default_timeout_seconds", fmt.Sprintf("must be <= %d (one year)", maxConfigSeconds))
	case s.MaxOutputBytes <= 0:
		return bad("max_output_bytes", "must be > 0")
	case s.MaxViolations < 0 || s.MaxViolations > 1024:
		return bad("max_violations", "must be between 0 and 1024")
	case s.ApprovalTimeoutSeconds <= 0:
		return bad("approval_timeout_seconds", "must be > 0")
	case s.ApprovalTimeoutSeconds > maxConfigSeconds:
		return bad("approval_timeout_seconds", fmt.Sprintf("must be <= %d (one year)", maxConfigSeconds))
	case s.HookTimeoutMS <= 0:
		return bad("hook_timeout_ms", "must be > 0")
	case s.HookTimeoutMS > maxConfigSeconds*1000:
		return bad("hook_timeout_ms", fmt.Sprintf("must be <= %d (one year)", int64(maxConfigSeconds*1000)))
	case s.TimeoutTermGraceMS < 0:
		return bad("timeout_term_grace_ms", "must be >= 0 (0: killed at the timeout without SIGTERM first)")
	case s.TimeoutTermGraceMS > maxConfigSeconds*1000:
		return bad("timeout_term_grace_ms", fmt.Sprintf("must be <= %d (one year)", int64(maxConfigSeconds*1000)))
	case s.AuditLog != "" && !filepath.IsAbs(s.AuditLog):
		return bad("audit_log", fmt.Sprintf("must be an absolute path or empty, got %q", s.AuditLog))
	case s.AuditOnFailure != AuditFailOpen && s.AuditOnFailure != AuditFailClosed:
		return bad("audit_on_failure", fmt.Sprintf("must be %q (commands run, failures counted) or %q (commands refused until the audit can be written), got %q", AuditFailOpen, AuditFailClosed, s.AuditOnFailure))
	case s.LayerMaxBytes < 0:
		return bad("layer_max_bytes", "must be >= 0 (0: no limit)")
	case s.SessionSandboxes != SessionSandboxesAuto && s.SessionSandboxes != SessionSandboxesOff:
		return bad("session_sandboxes", fmt.Sprintf("must be %q (a session's commands share its sandbox where the driver can) or %q (a sandbox per command), got %q", SessionSandboxesAuto, SessionSandboxesOff, s.SessionSandboxes))
	}
	if s.DriverSHA256 != "" {
		if b, err := hex.DecodeString(s.DriverSHA256); err != nil || len(b) != 32 {
			return bad("driver_sha256", "must be 64 hex digits (a SHA-256) or empty")
		}
	}
	for i, p := range s.HookPlugins {
		if !filepath.IsAbs(p) {
			return bad(fmt.Sprintf("hook_plugins[%d]", i), fmt.Sprintf("must be an absolute path, got %q", p))
		}
	}
	// [sandbox.command_policy]'s values are the command-policy hook's to
	// judge (commandpolicy.CheckConfig, run by the assembly on every
	// configuration it loads or is given): a second reading here refused
	// "Block", which the hook reads as "block", and "deny", which it reads
	// as a block rule.
	// A secret injection's host pattern, header name and format are the
	// proxy's to judge (proxy.CheckInjection, which the assembly runs on
	// every configuration it loads or is given: alephsandbox.LoadConfig
	// and New), so there is one definition of a valid header name, the
	// one the proxy injects with. Core checks only what names the secret.
	for i, si := range s.Network.SecretInjections {
		if si.Secret == "" || driverapi.ValidateEnvName(si.Secret) != nil {
			return bad(fmt.Sprintf("network.secret_injections[%d].secret", i), fmt.Sprintf("must name a secret, got %q", si.Secret))
		}
	}
	defaults := driverapi.DefaultProtectedEntries()
	for i, n := range s.Protected.Add {
		if r := driverapi.ProtectedNameProblem(n); r != "" {
			return bad(fmt.Sprintf("protected.add[%d]", i), r)
		}
	}
	for i, n := range s.Protected.Remove {
		if !contains(defaults, n) {
			return bad(fmt.Sprintf("protected.remove[%d]", i), fmt.Sprintf("%q is not a default protected entry (defaults: %s)", n, strings.Join(defaults, ", ")))
		}
		if contains(s.Protected.Add, n) {
			return bad(fmt.Sprintf("protected.remove[%d]", i), fmt.Sprintf("%q is also in protected.add", n))
		}
	}
	switch s.Protected.PlantedGit {
	case "", PlantedGitQuarantine, PlantedGitAllow:
	default:
		return bad("protected.planted_git", fmt.Sprintf("must be %q or %q, got %q", PlantedGitQuarantine, PlantedGitAllow, s.Protected.PlantedGit))
	}
	if len(c.ProtectedEntries()) == 0 {
		return bad("protected.remove", "removes every protected entry; at least one must stay (drivers read an empty set as the defaults)")
	}
	if _, ok := BaselinePresets()[s.Session.Baseline]; !ok {
		names := make([]string, 0, 2)
		for n := range BaselinePresets() {
			names = append(names, fmt.Sprintf("%q", n))
		}
		sort.Strings(names)
		return bad("session.baseline", fmt.Sprintf("must be one of %s, got %q", strings.Join(names, ", "), s.Session.Baseline))
	}
	switch s.Session.Home {
	case HomeSession, HomeWorkspace:
	default:
		return bad("session.home", fmt.Sprintf("must be %q or %q, got %q", HomeSession, HomeWorkspace, s.Session.Home))
	}
	return nil
}

// String renders the configuration as TOML, defaults included (what
// "aleph-sandbox config" prints).
func (c Config) String() string {
	var buf bytes.Buffer
	enc := gotoml.NewEncoder(&buf)
	enc.SetIndentTables(true)
	if err := enc.Encode(c); err != nil {
		return "# cannot render configuration: " + err.Error()
	}
	return buf.String()
}

// Effective returns the configuration as flat "sandbox.x.y" keys and values,
// for JSON output.
func (c Config) Effective() map[string]any {
	b, _ := json.Marshal(c)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	out := map[string]any{}
	var flat func(prefix string, v any)
	flat = func(prefix string, v any) {
		if mm, ok := v.(map[string]any); ok {
			for k, vv := range mm {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				flat(p, vv)
			}
			return
		}
		out[prefix] = v
	}
	flat("", m)
	return out
}

// DriverOptions is the JSON handed to a driver plugin in ALEPH_DRIVER_OPTIONS:
// the platform section of the configuration for goos ("linux" gives
// [sandbox.linux], "windows" [sandbox.windows]; platforms without a section
// get "{}"). Drivers refuse keys they do not know, so only keys of the
// section are ever sent.
//
// A driver with the config call is handed, instead, the section its
// ConfigSchema names (DriverSection, through DriverHostConfig.Section).
func (c Config) DriverOptions(goos string) []byte {
	switch goos {
	case "linux":
		return c.Sandbox.Linux.JSON()
	case "windows":
		return c.Sandbox.Windows.JSON()
	}
	return []byte("{}")
}

// DriverOptionsFor is the JSON for the driver binary at path, routed by its
// name (DriverName): the platform section (DriverOptions) for this
// project's drivers, [sandbox.drivers.NAME] for any other, which must not
// be handed another driver's keys. DriverHost does the same when given
// Config.DriverSection.
func (c Config) DriverOptionsFor(path, goos string) []byte {
	if name := DriverName(path); !ShippedBackend(name) {
		return c.DriverSection(name)
	}
	return c.DriverOptions(goos)
}

// DriverSection is the section called name as JSON ("{}" when absent):
// "linux" is [sandbox.linux], "windows" [sandbox.windows], any other
// name [sandbox.drivers.NAME]. It is what a driver whose ConfigSchema
// names that section is handed.
func (c Config) DriverSection(name string) []byte {
	switch name {
	case "linux":
		return c.Sandbox.Linux.JSON()
	case "windows":
		return c.Sandbox.Windows.JSON()
	}
	return c.Sandbox.Drivers[name].JSON()
}
