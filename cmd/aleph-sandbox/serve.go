package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	hostclient "github.com/aleph-sandbox/aleph-sandbox/service/client"
)

const serveUsage = "aleph-sandbox serve [--config FILE] [--listen unix:PATH|tcp:HOST:PORT]... [--metrics tcp:HOST:PORT [--metrics-cert FILE --metrics-key FILE [--metrics-client-ca FILE]]] [--driver NAME|PATH] [--node-id ID] [--yes]\n       " + serveDrainUsage

// runServe is `aleph-sandbox serve`: one warm pipeline behind the
// aleph.host.v1 service on a unix socket (docs/serve.md). It reads the
// flags and the configuration; service.Run assembles and serves.
func runServe(ctx context.Context, args []string, std stdio) int {
	if len(args) > 0 && args[0] == "drain" {
		return runServeDrain(ctx, args[1:], std)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "TOML config `FILE` (default: $XDG_CONFIG_HOME/aleph-sandbox/config.toml if present)")
	var listen listFlag
	fs.Var(&listen, "listen", "`ADDR` to listen on: unix:PATH or tcp:HOST:PORT (TCP needs [serve.tls] and client authentication; repeatable; default: "+defaultSocketHint+")")
	driver := fs.String("driver", "", "driver `NAME|PATH` (default: the platform's)")
	nodeID := fs.String("node-id", "", "`ID` naming this server in every result and in /metrics, 1-63 of A-Z a-z 0-9 . _ - (default: [serve] node_id, else the hostname)")
	yes := fs.Bool("yes", false, "approve every elevation no connected client answers")
	metrics := fs.String("metrics", "", "serve /metrics (Prometheus text format) on `tcp:HOST:PORT` (default: [serve] metrics_listen; neither: off)")
	var metricsTLS core.ServeTLSConfig
	fs.StringVar(&metricsTLS.Cert, "metrics-cert", "", "serve the metrics listener over TLS with this certificate, PEM `FILE` (with --metrics-key; default: [serve.metrics_tls] cert; neither: plain HTTP)")
	fs.StringVar(&metricsTLS.Key, "metrics-key", "", "the key of --metrics-cert, PEM `FILE`")
	fs.StringVar(&metricsTLS.ClientCA, "metrics-client-ca", "", "with --metrics-cert, serve /metrics, /healthz and /readyz only to clients with a certificate this CA signed, PEM `FILE`")
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
	if *nodeID != "" {
		if err := core.ValidateNodeID("--node-id", *nodeID); err != nil {
			return fail(std.Err, "serve: %v", err)
		}
		cfg.Serve.NodeID = *nodeID
	}
	if metricsTLS != (core.ServeTLSConfig{}) {
		// The flags replace the table whole: a certificate of the flags
		// with a client CA of the file would be neither one's intent.
		cfg.Serve.MetricsTLS = metricsTLS
		if err := cfg.Serve.Validate(); err != nil {
			return fail(std.Err, "serve: --metrics-cert, --metrics-key, --metrics-client-ca: %v", err)
		}
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
	rc := service.Config{Sandbox: cfg, AutoApprove: *yes, Logger: serveLogger(std), Warnings: std.Err, Owner: serveOwner(cfg.Serve.NodeID)}
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
// its socket and to `exec --host --verbose`: enough to tell another
// checkout's or another terminal's server from this one's, and which node
// of a fleet it is (nodeID, else the default the service takes).
func serveOwner(nodeID string) string {
	if nodeID == "" {
		nodeID, _ = service.DefaultNodeID()
	}
	owner := fmt.Sprintf("pid %d, version %s, data dir %s", os.Getpid(), cliVersion, core.DataDir())
	if nodeID != "" {
		owner += ", node " + nodeID
	}
	return owner
}

const serveDrainUsage = "aleph-sandbox serve drain [--host unix:PATH|tcp:HOST:PORT] [--ca-file FILE] [--cert-file FILE --key-file FILE] [--json]"

// runServeDrain is `aleph-sandbox serve drain`: the running server drains
// (as on its first SIGTERM, without stopping): not ready, new sessions
// refused, the sessions it holds still served. A pod's preStop hook runs
// it on the unix socket, so the router moves new sessions away before the
// pod is signalled; an operator reaches a server on TCP with its client
// authentication (TLS, a client certificate or $ALEPH_SANDBOX_TOKEN), which
// the server checks before the call as for any other.
func runServeDrain(ctx context.Context, args []string, std stdio) int {
	fs := flag.NewFlagSet("serve drain", flag.ContinueOnError)
	var host hostOptions
	host.register(fs, "the server at `unix:PATH` or tcp:HOST:PORT (default: $ALEPH_SANDBOX_HOST, else "+defaultSocketHint+")")
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	if done, code := parseFlags(fs, args, std, serveDrainUsage); done {
		return code
	}
	if fs.NArg() > 0 {
		return fail(std.Err, "serve drain: unexpected argument %q (usage: %s)", fs.Arg(0), serveDrainUsage)
	}
	target, remote, err := host.target()
	if err != nil {
		return fail(std.Err, "serve drain: %v", err)
	}
	if !remote {
		p, err := defaultSocketPath()
		if err != nil {
			return fail(std.Err, "serve drain: %v", err)
		}
		target = hostTarget{sock: p}
	}
	c, err := host.client(target)
	if err != nil {
		return fail(std.Err, "serve drain: %v", err)
	}
	resp, err := c.Drain(ctx, connect.NewRequest(&hostv1.DrainRequest{}))
	if err != nil {
		var oe *hostclient.OwnerError
		switch {
		case errors.As(err, &oe):
			return fail(std.Err, "serve drain: %v", oe)
		case hostclient.Unreachable(err):
			return fail(std.Err, "serve drain: no server at %s: %v", target, err)
		}
		return fail(std.Err, "serve drain: %v", remoteError(target, err))
	}
	m := resp.Msg
	if *asJSON {
		b, _ := json.Marshal(map[string]any{"node_id": m.GetNodeId(), "started": m.GetStarted(), "sessions": m.GetSessions(),
			"running_commands": m.GetRunningCommands(), "running_processes": m.GetRunningProcesses()})
		fmt.Fprintln(std.Out, string(b))
		return 0
	}
	how := "draining now"
	if !m.GetStarted() {
		how = "draining already"
	}
	fmt.Fprintf(std.Out, "%s: node %s, %d sessions held, %d commands and %d processes running\n",
		how, m.GetNodeId(), m.GetSessions(), m.GetRunningCommands(), m.GetRunningProcesses())
	return 0
}
