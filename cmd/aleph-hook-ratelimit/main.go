// Command aleph-hook-ratelimit serves the rate-limit hook as a plugin
// process.
//
// Configuration is the [sandbox.rate_limit] section as JSON, from the
// -config-json flag or the ALEPH_HOOK_CONFIG environment variable:
// {"rate_per_second": 10, "burst": 20, "max_concurrent_per_session": 8,
// "max_concurrent_global": 64, "idle_forget_seconds": 600}; missing keys
// keep their defaults, unknown keys are refused ("enabled" is accepted and
// ignored: a disabled limiter is simply not launched). Nothing is ever
// written to stdout: it carries the plugin handshake.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/ratelimit"
)

// section mirrors [sandbox.rate_limit].
type section struct {
	Enabled                 *bool    `json:"enabled"`
	RatePerSecond           *float64 `json:"rate_per_second"`
	Burst                   *int     `json:"burst"`
	MaxConcurrentPerSession *int     `json:"max_concurrent_per_session"`
	MaxConcurrentGlobal     *int     `json:"max_concurrent_global"`
	IdleForgetSeconds       *int64   `json:"idle_forget_seconds"`
}

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
	logger := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true, Level: hclog.Info})
	h, err := ratelimit.New(cfg, ratelimit.WithLogger(logger))
	if err != nil {
		fmt.Fprintln(os.Stderr, "aleph-hook-ratelimit:", err)
		os.Exit(2)
	}
	driverapi.ServeHook(h)
}

func parseConfig(raw string) (ratelimit.Config, error) {
	cfg := ratelimit.DefaultConfig()
	if raw == "" {
		return cfg, nil
	}
	var s section
	dec := json.NewDecoder(bytes.NewReader([]byte(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return cfg, fmt.Errorf("configuration JSON: %w", err)
	}
	if s.RatePerSecond != nil {
		cfg.RatePerSecond = *s.RatePerSecond
	}
	if s.Burst != nil {
		cfg.Burst = *s.Burst
	}
	if s.MaxConcurrentPerSession != nil {
		cfg.MaxConcurrentPerSession = *s.MaxConcurrentPerSession
	}
	if s.MaxConcurrentGlobal != nil {
		cfg.MaxConcurrentGlobal = *s.MaxConcurrentGlobal
	}
	if s.IdleForgetSeconds != nil {
		if *s.IdleForgetSeconds < 0 {
			return cfg, fmt.Errorf("idle_forget_seconds must not be negative")
		}
		cfg.IdleForget = time.Duration(*s.IdleForgetSeconds) * time.Second
	}
	return cfg, nil
}
