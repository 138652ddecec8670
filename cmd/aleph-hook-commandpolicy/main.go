// Command aleph-hook-commandpolicy serves the command-policy hook as a
// plugin process (the same hook the core links in by default).
//
// Configuration is the [sandbox.command_policy] section as JSON, from the
// -config-json flag or the ALEPH_HOOK_CONFIG environment variable, for
// example {"enforcement": "warn", "custom_rules": [...]}; missing keys keep
// their defaults, unknown keys are refused. Nothing is ever written to
// stdout: it carries the plugin handshake.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/commandpolicy"
)

func main() {
	fs := flag.NewFlagSet("aleph-hook-commandpolicy", flag.ContinueOnError)
	fs.SetOutput(os.Stderr)
	raw := fs.String("config-json", os.Getenv("ALEPH_HOOK_CONFIG"), "the [sandbox.command_policy] section as JSON (default: $ALEPH_HOOK_CONFIG)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	cfg, err := parseConfig(*raw)
	if err != nil {
		fmt.Fprintln(os.Stderr, "aleph-hook-commandpolicy:", err)
		os.Exit(2)
	}
	logger := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true, Level: hclog.Info})
	h, errs := commandpolicy.New(cfg, logger)
	for _, e := range errs {
		// New has already logged each problem by rule name and fallen
		// back to a safe rule set; keep serving.
		logger.Warn("configuration problem", "error", e)
	}
	driverapi.ServeHook(h)
}

func parseConfig(raw string) (commandpolicy.Config, error) {
	cfg, err := commandpolicy.ParseConfig([]byte(raw))
	if err != nil {
		return cfg, fmt.Errorf("configuration JSON: %w", err)
	}
	return cfg, nil
}
