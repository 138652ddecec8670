// Command aleph-hook-ratelimit serves the rate-limit hook as a plugin
// process.
//
// Configuration is the [sandbox.rate_limit] section as JSON, from the
// -config-json flag or the ALEPH_HOOK_CONFIG environment variable:
// {"rate_per_second": 10, "burst": 20, "max_concurrent_per_session": 4,
// "max_concurrent_global": 16, "idle_forget_seconds": 600}, read by
// ratelimit.ParseConfig (the type, defaults and validation are the hook
// package's, the same as in-process); missing keys keep their defaults,
// unknown keys are refused ("enabled" is accepted and ignored: a disabled
// limiter is simply not launched). Nothing is ever written to stdout: it
// carries the plugin handshake.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/ratelimit"
)

func main() {
	fs := flag.NewFlagSet("aleph-hook-ratelimit", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	raw := fs.String("config-json", os.Getenv("ALEPH_HOOK_CONFIG"), "the [sandbox.rate_limit] section as JSON (default: $ALEPH_HOOK_CONFIG)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	cfg, err := parseConfig(*raw)
	if err != nil {
		fmt.Fprintln(os.Stderr, "aleph-hook-ratelimit:", err)
		os.Exit(2)
	}
	// No queue here: the host bounds every call to a hook plugin by
	// sandbox.hook_timeout_ms, so a command waiting its turn would fail as
	// a hook that does not answer. As a plugin the hook denies at once,
	// with the time to retry; the in-process hook queues.
	cfg.QueueWaitSeconds = 0
	logger := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true, Level: hclog.Info})
	h, err := ratelimit.New(cfg, ratelimit.WithLogger(logger))
	if err != nil {
		fmt.Fprintln(os.Stderr, "aleph-hook-ratelimit:", err)
		os.Exit(2)
	}
	driverapi.ServeHook(h)
}

// parseConfig reads the section with the hook package's own parser, the
// one the in-process hook and the configuration loader use.
func parseConfig(raw string) (ratelimit.Config, error) {
	cfg, err := ratelimit.ParseConfig([]byte(raw))
	if err != nil {
		return cfg, fmt.Errorf("configuration JSON: %w", err)
	}
	return cfg, nil
}
