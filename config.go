package alephsandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/proxy"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/commandpolicy"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/ratelimit"
)

// ConfigSections are the loader options that give core the schemas of the
// sections the runtime's in-process components own ([sandbox.command_policy],
// the command-policy hook's; [sandbox.rate_limit], the rate-limit hook's;
// [sandbox.processes], the process table's). With them core.LoadConfig refuses those
// sections' unknown keys and bad values by their full names and fills
// their owners' defaults. A driver's section ([sandbox.linux]) is not
// among them: the driver validates it when the runtime hands it over.
func ConfigSections() []core.LoadOption {
	return []core.LoadOption{
		core.WithSection(commandpolicy.Schema(), func(b []byte) error {
			_, err := commandpolicy.ParseConfig(b)
			return err
		}),
		core.WithSection(ratelimit.Schema(), func(b []byte) error {
			_, err := ratelimit.ParseConfig(b)
			return err
		}),
		core.WithSection(core.ProcessSchema(), func(b []byte) error {
			_, err := core.ParseProcessConfig(b)
			return err
		}),
	}
}

// LoadConfig is core.LoadConfig with ConfigSections: what the CLI, serve
// and mcp read a configuration file with.
func LoadConfig(path string, opts ...core.LoadOption) (core.Config, error) {
	cfg, err := core.LoadConfig(path, append(ConfigSections(), opts...)...)
	if err != nil {
		return cfg, err
	}
	if err := checkComponents(cfg); err != nil {
		var ce *core.ConfigError
		if errors.As(err, &ce) && ce.Source == "" {
			ce.Source = cfg.Source()
		}
		return core.Config{}, err
	}
	return cfg, nil
}

// checkComponents is what the runtime's components refuse in cfg beyond
// core's own validation, checked by each component's own rules: the
// command-policy hook's for [sandbox.command_policy] and the proxy's for
// [[sandbox.network.secret_injections]] (core checks only that each names a
// secret). LoadConfig and New both run it, so a rule that would fail every
// command is refused once, naming its key.
func checkComponents(cfg core.Config) error {
	// The command-policy hook's own check, which reads the values exactly
	// as the hook does; its key is made the full dotted name the loader
	// uses for every other key.
	if _, err := CommandPolicyConfig(cfg); err != nil {
		var ce *core.ConfigError
		if errors.As(err, &ce) {
			return &core.ConfigError{Key: ce.FullKey(), Reason: ce.Reason}
		}
		return err
	}
	for i, si := range cfg.Sandbox.Network.SecretInjections {
		field, err := proxy.CheckInjection(proxy.SecretInjection{Host: si.Host, Header: si.Header, Secret: si.Secret, Format: si.Format})
		if err != nil {
			return &core.ConfigError{Key: fmt.Sprintf("sandbox.network.secret_injections[%d].%s", i, field), Reason: err.Error()}
		}
	}
	return nil
}

// CommandPolicyConfig is the command-policy hook's configuration as cfg
// gives it ([sandbox.command_policy], read by the hook package's own
// parser, the one the aleph-hook-commandpolicy plugin reads its
// ALEPH_HOOK_CONFIG with). Keys the section does not set have the hook's
// defaults; a refused key is a *driverapi.ConfigError naming it.
func CommandPolicyConfig(cfg core.Config) (commandpolicy.Config, error) {
	return commandpolicy.ParseConfig(cfg.Sandbox.CommandPolicy.JSON())
}

// RateLimitConfig is the rate-limit hook's configuration as cfg gives it
// ([sandbox.rate_limit], read by the hook package's own parser, the one the
// aleph-hook-ratelimit plugin reads its ALEPH_HOOK_CONFIG with). Keys the
// section does not set have the hook's defaults; a refused key is a
// *driverapi.ConfigError naming it.
func RateLimitConfig(cfg core.Config) (ratelimit.Config, error) {
	return ratelimit.ParseConfig(cfg.Sandbox.RateLimit.JSON())
}

// DefaultConfigPath is the per-user configuration file the CLI, serve and
// mcp read when no --config is given: $XDG_CONFIG_HOME/aleph-sandbox/config.toml,
// or ~/.config/aleph-sandbox/config.toml; "" when there is no home. New
// protects it from every command's writes whether or not it exists.
func DefaultConfigPath() string {
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "aleph-sandbox", "config.toml")
}
