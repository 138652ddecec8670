package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/service"
)

// defaultServeGrace is how long running commands may take to finish after
// SIGTERM or SIGINT when [serve] grace_seconds is not set.
const defaultServeGrace = 10 * time.Second

const serveUsage = "aleph-sandbox serve [--config FILE] [--listen unix:PATH]... [--driver NAME|PATH] [--yes]"

// runServe is `aleph-sandbox serve`: one warm pipeline behind the
// aleph.host.v1 service on a unix socket (docs/serve.md).
func runServe(ctx context.Context, args []string, std stdio) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "TOML config `FILE` (default: $XDG_CONFIG_HOME/aleph-sandbox/config.toml if present)")
	var listen listFlag
	fs.Var(&listen, "listen", "`ADDR` to listen on: unix:PATH (repeatable; default: "+defaultSocketHint+")")
	driver := fs.String("driver", "", "driver `NAME|PATH` (default: the platform's)")
	yes := fs.Bool("yes", false, "approve every elevation no connected client answers")
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
	if err := cfg.Serve.Validate(); err != nil {
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
	var sockets []string
	for _, a := range addrs {
		switch {
		case strings.HasPrefix(a, "unix:") && len(a) > len("unix:"):
			p, err := filepath.Abs(strings.TrimPrefix(a, "unix:"))
			if err != nil {
				return fail(std.Err, "serve: --listen %q: %v", a, err)
			}
			sockets = append(sockets, p)
		case strings.HasPrefix(a, "tcp:"):
			// TCP needs mutual TLS or bearer tokens, which this version does
			// not implement: refused rather than served unauthenticated.
			return fail(std.Err, "serve: --listen %q: TCP listening needs TLS or tokens, which this version does not implement; use a unix socket", a)
		default:
			return fail(std.Err, "serve: --listen %q: want unix:PATH", a)
		}
	}
	var allowed []uint32
	for _, u := range cfg.Serve.AllowedUIDs {
		allowed = append(allowed, uint32(u))
	}
	grace := defaultServeGrace
	if cfg.Serve.GraceSeconds > 0 {
		grace = time.Duration(cfg.Serve.GraceSeconds) * time.Second
	}
	log := serveLogger(std)

	// The data directory holds the workspaces, the audit log and the grant
	// store; the socket directories are added below.
	protected := []string{core.DataDir()}
	if root := cfg.Sandbox.WorkspaceRoot; root != "" {
		for _, s := range sockets {
			if abs, err := filepath.Abs(root); err == nil && strings.HasPrefix(filepath.Dir(s)+string(filepath.Separator), abs+string(filepath.Separator)) {
				return fail(std.Err, "serve: the socket %s is inside the workspace root %s, where sandboxes run", s, root)
			}
		}
	}
	var listeners []*service.UnixListener
	closeListeners := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	for _, s := range sockets {
		l, err := service.ListenUnix(s, allowed, log.Named("listener"))
		if err != nil {
			closeListeners()
			var inUse *service.InUseError
			if errors.As(err, &inUse) {
				return fail(std.Err, "serve: %v (stop it first, or --listen elsewhere)", err)
			}
			return fail(std.Err, "serve: %v", err)
		}
		listeners = append(listeners, l)
		protected = append(protected, filepath.Dir(s))
	}

	broker := service.NewBroker(*yes, nil)
	rt, err := alephsandbox.New(cfg,
		alephsandbox.WithLogger(log.Named("runtime")),
		alephsandbox.WithApprover(broker),
		alephsandbox.WithWarnings(std.Err))
	if err != nil {
		closeListeners()
		return fail(std.Err, "serve: %s", oneLine(err.Error()))
	}
	broker.SetDigest(rt.PolicyDigest)
	srv, err := service.New(service.Options{Host: rt, Broker: broker, Logger: log.Named("service"),
		Protected: protected, CommandPolicy: cfg.Sandbox.CommandPolicy})
	if err != nil {
		closeListeners()
		_ = rt.Close()
		return fail(std.Err, "serve: %v", err)
	}

	// Requests derive from base: cancelling it after the grace period
	// kills what is still running.
	base, killAll := context.WithCancel(context.Background())
	defer killAll()
	hs := &http.Server{
		Handler:           srv.Handler(),
		BaseContext:       func(net.Listener) context.Context { return base },
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	// gRPC needs HTTP/2; over a unix socket it is spoken in cleartext
	// (h2c), beside HTTP/1.1 for the Connect protocol.
	hs.Protocols = new(http.Protocols)
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	var wg sync.WaitGroup
	serveErr := make(chan error, len(listeners))
	for _, l := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
		log.Info("listening", "socket", l.Path())
	}
	// SIGINT, SIGTERM and SIGHUP come here: the first starts the graceful
	// stop, a second one ends the grace period at once.
	sigs := make(chan os.Signal, 4)
	if std.forwardSignals != nil {
		restore := std.forwardSignals(sigs)
		defer restore()
	}
	code := 0
	select {
	case <-ctx.Done():
	case s := <-sigs:
		log.Info("signal received", "signal", s.String())
	case err := <-serveErr:
		log.Error("serving failed", "error", err)
		code = exitSandboxError
	}
	log.Info("stopping: waiting for running commands", "grace", grace)
	broker.Close()
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	go func() {
		select {
		case <-sigs:
			log.Warn("second signal: ending the grace period")
			cancel()
		case <-sctx.Done():
		}
	}()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("grace period over: killing the commands still running")
	}
	cancel()
	killAll()
	// The cancelled commands are killed by the pipeline; wait for that
	// before the driver is stopped, so none outlives the server.
	if !srv.Wait(30 * time.Second) {
		log.Warn("commands still ending after they were killed; stopping the driver")
	}
	_ = hs.Close()
	wg.Wait()
	closeListeners()
	_ = rt.Close()
	log.Info("stopped")
	return code
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
