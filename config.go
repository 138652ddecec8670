package alephsandbox

import (
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/ratelimit"
)

// ConfigSections are the loader options that give core the schemas of the
// sections the runtime's in-process components own ([sandbox.rate_limit],
// the rate-limit hook's; [sandbox.processes], the process table's). With them core.LoadConfig refuses those
// sections' unknown keys and bad values by their full names and fills
// their owners' defaults. A driver's section ([sandbox.linux]) is not
// among them: the driver validates it when the runtime hands it over.
func ConfigSections() []core.LoadOption {
	return []core.LoadOption{
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
	return core.LoadConfig(path, append(ConfigSections(), opts...)...)
}

// RateLimitConfig is the rate-limit hook's configuration as cfg gives it
// ([sandbox.rate_limit], read by the hook package's own parser, the one the
// aleph-hook-ratelimit plugin reads its ALEPH_HOOK_CONFIG with). Keys the
// section does not set have the hook's defaults; a refused key is a
// *driverapi.ConfigError naming it.
func RateLimitConfig(cfg core.Config) (ratelimit.Config, error) {
	return ratelimit.ParseConfig(cfg.Sandbox.RateLimit.JSON())
}
