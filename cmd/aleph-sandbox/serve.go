package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/service"
)

const serveUsage = "aleph-sandbox serve [--config FILE] [--listen unix:PATH|tcp:HOST:PORT]... [--metrics tcp:HOST:PORT] [--driver NAME|PATH] [--yes]"

// runServe is `aleph-sandbox serve`: one warm pipeline behind the
// aleph.host.v1 service on a unix socket (docs/serve.md). It reads the
// flags and the configuration; service.Run assembles and serves.
func runServe(ctx context.Context, args []string, std stdio) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "TOML config `FILE` (default: $XDG_CONFIG_HOME/aleph-sandbox/config.toml if present)")
	var listen listFlag
	fs.Var(&listen, "listen", "`ADDR` to listen on: unix:PATH or tcp:HOST:PORT (TCP needs [serve.tls] and client authentication; repeatable; default: "+defaultSocketHint+")")
	driver := fs.String("driver", "", "driver `NAME|PATH` (default: the platform's)")
	yes := fs.Bool("yes", false, "approve every elevation no connected client answers")
	metrics := fs.String("metrics", "", "serve /metrics (Prometheus text format) on `tcp:HOST:PORT` (default: [serve] metrics_listen; neither: off)")
	if done, code := parseFlags(fs, args, std, serveUsage); done {
		return code
	}
	if fs.NArg() > 0 {
		return fail(std.Err, "serve: unexpected argument %q (usage: %s)", fs.Arg(0), serveUsage)
	}
	cfg, err := loadConfig(*cfgPath, "", *driver)
	if err != nil {
		return fail(std.Err, "serve: %s", oneLine(err.Error()))
	}
	addrs := []string(listen)
	if len(addrs) == 0 {
		addrs = cfg.Serve.Listen
	}
	if len(addrs) == 0 {
		p, err := defaultSocketPath()
		if err != nil {
			return fail(std.Err, "serve: %v", err)
		}
		addrs = []string{"unix:" + p}
	}
	rc := service.Config{Sandbox: cfg, AutoApprove: *yes, Logger: serveLogger(std), Warnings: std.Err, Owner: serveOwner()}
	for _, a := range addrs {
		switch {
		case strings.HasPrefix(a, "unix:") && len(a) > len("unix:"):
			p, err := filepath.Abs(strings.TrimPrefix(a, "unix:"))
			if err != nil {
				return fail(std.Err, "serve: --listen %q: %v", a, err)
			}
			rc.Sockets = append(rc.Sockets, p)
		case strings.HasPrefix(a, "tcp:") && len(a) > len("tcp:"):
			rc.TCP = append(rc.TCP, strings.TrimPrefix(a, "tcp:"))
		default:
			return fail(std.Err, "serve: --listen %q: want unix:PATH or tcp:HOST:PORT", a)
		}
	}
	metricsAddr := *metrics
	if metricsAddr == "" {
		metricsAddr = cfg.Serve.MetricsListen
	}
	if metricsAddr != "" && (!strings.HasPrefix(metricsAddr, "tcp:") || len(metricsAddr) == len("tcp:")) {
		return fail(std.Err, "serve: --metrics %q: want tcp:HOST:PORT", metricsAddr)
	}
	rc.Metrics = strings.TrimPrefix(metricsAddr, "tcp:")
	// SIGINT, SIGTERM and SIGHUP come to the service: the first starts
	// the graceful stop, a second one ends the grace period at once.
	sigs := make(chan os.Signal, 4)
	if std.forwardSignals != nil {
		restore := std.forwardSignals(sigs)
		defer restore()
	}
	rc.Signals = sigs
	err = service.Run(ctx, rc)
	var inUse *service.InUseError
	var serving *service.ServingError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &serving):
		// Logged by the service as it stopped.
		return exitSandboxError
	case errors.As(err, &inUse):
		return fail(std.Err, "serve: %v (stop it first, or --listen elsewhere)", err)
	}
	return fail(std.Err, "serve: %s", oneLine(err.Error()))
}

const defaultSocketHint = "$XDG_RUNTIME_DIR/aleph-sandbox/aleph.sock, else ~/.local/state/aleph-sandbox/aleph.sock"

// defaultSocketPath is where serve listens and clients connect by default.
func defaultSocketPath() (string, error) {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "aleph-sandbox", "aleph.sock"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no $XDG_RUNTIME_DIR and no home directory for the default socket: %w", err)
	}
	return filepath.Join(home, ".local", "state", "aleph-sandbox", "aleph.sock"), nil
}

// serveLogger is the service's structured log on stderr, at
// ALEPH_SANDBOX_LOG (default info); ALEPH_SANDBOX_LOG_FORMAT=json for JSON.
func serveLogger(std stdio) hclog.Logger {
	level := hclog.LevelFromString(os.Getenv("ALEPH_SANDBOX_LOG"))
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	return hclog.New(&hclog.LoggerOptions{Name: "aleph-sandbox", Output: std.Err, Level: level,
		JSONFormat: os.Getenv("ALEPH_SANDBOX_LOG_FORMAT") == "json"})
}

// serveOwner is how this server names itself to a second one refused on
// its socket: enough to tell another checkout's or another terminal's
// server from this one's.
func serveOwner() string {
	return fmt.Sprintf("pid %d, version %s, data dir %s", os.Getpid(), cliVersion, core.DataDir())
}
