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

const serveUsage = "aleph-sandbox serve [--config FILE] [--listen unix:PATH|tcp:HOST:PORT]... [--metrics tcp:HOST:PORT] [--driver NAME|PATH] [--yes]"

// runServe is `aleph-sandbox serve`: one warm pipeline behind the
// aleph.host.v1 service on a unix socket (docs/serve.md).
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
	if err := cfg.Serve.Validate(); err != nil {
		return fail(std.Err, "serve: %s", oneLine(err.Error()))
	}
	procCfg, err := core.ProcessConfigOf(cfg)
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
	var sockets, tcpAddrs []string
	for _, a := range addrs {
		switch {
		case strings.HasPrefix(a, "unix:") && len(a) > len("unix:"):
			p, err := filepath.Abs(strings.TrimPrefix(a, "unix:"))
			if err != nil {
				return fail(std.Err, "serve: --listen %q: %v", a, err)
			}
			sockets = append(sockets, p)
		case strings.HasPrefix(a, "tcp:") && len(a) > len("tcp:"):
			tcpAddrs = append(tcpAddrs, strings.TrimPrefix(a, "tcp:"))
		default:
			return fail(std.Err, "serve: --listen %q: want unix:PATH or tcp:HOST:PORT", a)
		}
	}
	// TCP is authenticated by TLS client certificates or bearer tokens;
	// without either it is refused here, before anything listens.
	var tcpAuth *service.TCPAuth
	if len(tcpAddrs) > 0 {
		if tcpAuth, err = service.NewTCPAuth("tcp:"+tcpAddrs[0], cfg.Serve); err != nil {
			return fail(std.Err, "serve: %v", err)
		}
	}
	metricsAddr := *metrics
	if metricsAddr == "" {
		metricsAddr = cfg.Serve.MetricsListen
	}
	if metricsAddr != "" && (!strings.HasPrefix(metricsAddr, "tcp:") || len(metricsAddr) == len("tcp:")) {
		return fail(std.Err, "serve: --metrics %q: want tcp:HOST:PORT", metricsAddr)
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
	// The bearer tokens and the TLS key authenticate to the service as
	// the socket does: a grant covering them is refused like one covering
	// the socket's directory.
	for _, secret := range []string{cfg.Serve.TokensFile, cfg.Serve.TLS.Key} {
		if secret != "" && len(tcpAddrs) > 0 {
			protected = append(protected, secret)
		}
	}
	if root := cfg.Sandbox.WorkspaceRoot; root != "" {
		for _, s := range sockets {
			if err := socketInWorkspaceRoot(s, root); err != nil {
				return fail(std.Err, "serve: %v", err)
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
		// Who listens here, for a second serve started on this socket to
		// name (its refusal says which server the clients already reach).
		if err := l.WriteOwner(serveOwner()); err != nil {
			log.Warn("could not record this server in the socket's lock file", "error", err)
		}
		listeners = append(listeners, l)
		protected = append(protected, filepath.Dir(s))
	}
	var tcpListeners []net.Listener
	closeTCP := func() {
		for _, l := range tcpListeners {
			_ = l.Close()
		}
	}
	for _, a := range tcpAddrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			closeListeners()
			closeTCP()
			return fail(std.Err, "serve: --listen tcp:%s: %v", a, err)
		}
		tcpListeners = append(tcpListeners, l)
	}
	var metricsListener net.Listener
	if metricsAddr != "" {
		if metricsListener, err = net.Listen("tcp", strings.TrimPrefix(metricsAddr, "tcp:")); err != nil {
			closeListeners()
			closeTCP()
			return fail(std.Err, "serve: --metrics %s: %v", metricsAddr, err)
		}
	}
	closeAll := func() {
		closeListeners()
		closeTCP()
		if metricsListener != nil {
			_ = metricsListener.Close()
		}
	}

	broker := service.NewBroker(*yes, nil)
	rt, err := alephsandbox.New(cfg,
		alephsandbox.WithLogger(log.Named("runtime")),
		alephsandbox.WithApprover(broker),
		alephsandbox.WithWarnings(std.Err))
	if err != nil {
		closeAll()
		return fail(std.Err, "serve: %s", oneLine(err.Error()))
	}
	broker.SetDigest(rt.PolicyDigest)
	var launches func() int64
	if d := rt.Driver(); d != nil {
		launches = d.Launches
	}
	srv, err := service.New(service.Options{Host: rt, Broker: broker, Logger: log.Named("service"),
		Protected: protected, Policy: rt.Policy(), DriverLaunches: launches,
		Processes: procCfg.Limits(), Limits: cfg.Serve.Limits(cfg.Sandbox.MaxOutputBytes)})
	if err != nil {
		closeAll()
		_ = rt.Close()
		return fail(std.Err, "serve: %v", err)
	}

	// Requests derive from base: cancelling it after the grace period
	// kills what is still running.
	base, cancelAll := context.WithCancelCause(context.Background())
	killAll := func() { cancelAll(service.ErrStopping) }
	defer killAll()
	// Stalled clients are cut off: a connection that does not finish its
	// headers, or its request, in time, or idles between requests, is
	// closed ([serve] read_header_timeout_seconds, read_timeout_seconds,
	// idle_timeout_seconds). The timeouts bound the reading of a request
	// only: a command streaming its output for hours is not cut.
	lim := srv.Limits()
	newServer := func(h http.Handler) *http.Server {
		return &http.Server{
			Handler:           h,
			BaseContext:       func(net.Listener) context.Context { return base },
			ReadHeaderTimeout: lim.ReadHeaderTimeout,
			ReadTimeout:       lim.ReadTimeout,
			IdleTimeout:       lim.IdleTimeout,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		}
	}
	hs := newServer(srv.Handler())
	// gRPC needs HTTP/2; over a unix socket it is spoken in cleartext
	// (h2c), beside HTTP/1.1 for the Connect protocol.
	hs.Protocols = new(http.Protocols)
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	servers := []*http.Server{hs}
	var wg sync.WaitGroup
	serveErr := make(chan error, len(listeners)+len(tcpListeners)+1)
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		}()
	}
	// Every listener counts its connections against [serve]
	// max_connections and max_connections_per_peer.
	for _, l := range listeners {
		ll := srv.LimitListener(l)
		run(func() error { return hs.Serve(ll) })
		log.Info("listening", "socket", l.Path())
	}
	if len(tcpListeners) > 0 {
		// Over TCP: TLS always (HTTP/2 by ALPN for gRPC, HTTP/1.1 for the
		// Connect protocol); the handshake refuses a client without a
		// valid certificate when client_ca is set, and the token check
		// runs before any handler.
		ts := newServer(tcpAuth.Handler(srv.Handler()))
		ts.TLSConfig = tcpAuth.TLS
		servers = append(servers, ts)
		for _, l := range tcpListeners {
			ll := srv.LimitListener(l)
			run(func() error { return ts.ServeTLS(ll, "", "") })
			log.Info("listening", "tcp", l.Addr().String(), "mtls", tcpAuth.TLS.ClientCAs != nil, "tokens", tcpAuth.Tokens != nil)
		}
	}
	if metricsListener != nil {
		ms := newServer(srv.MetricsHandler())
		servers = append(servers, ms)
		run(func() error { return ms.Serve(metricsListener) })
		log.Info("listening", "metrics", metricsListener.Addr().String())
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
	var swg sync.WaitGroup
	var over sync.Once
	termGrace := 5 * time.Second
	if cfg.Serve.TermGraceSeconds > 0 {
		termGrace = time.Duration(cfg.Serve.TermGraceSeconds) * time.Second
	}
	for _, h := range servers {
		swg.Add(1)
		go func() {
			defer swg.Done()
			if err := h.Shutdown(sctx); err != nil && h == hs {
				// The grace is over: the commands still running are
				// warned (SIGTERM, their handlers run) and killed
				// term_grace_seconds later, or at a second signal.
				over.Do(func() {
					log.Warn("grace period over: SIGTERM to the commands still running", "kill_after", termGrace)
					srv.Terminate()
					tctx, tcancel := context.WithTimeout(context.Background(), termGrace)
					defer tcancel()
					go func() {
						select {
						case <-sigs:
							tcancel()
						case <-tctx.Done():
						}
					}()
					if err := h.Shutdown(tctx); err != nil {
						log.Warn("killing the commands still running")
					}
				})
			}
		}()
	}
	swg.Wait()
	cancel()
	killAll()
	srv.Close()
	// The cancelled commands are killed by the pipeline; wait for that
	// before the driver is stopped, so none outlives the server.
	if !srv.Wait(30 * time.Second) {
		log.Warn("commands still ending after they were killed; stopping the driver")
	}
	for _, h := range servers {
		_ = h.Close()
	}
	wg.Wait()
	closeAll()
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

// serveOwner is how this server names itself to a second one refused on
// its socket: enough to tell another checkout's or another terminal's
// server from this one's.
func serveOwner() string {
	return fmt.Sprintf("pid %d, version %s, data dir %s", os.Getpid(), cliVersion, core.DataDir())
}

// socketInWorkspaceRoot refuses a socket whose directory lies in the
// workspace root, where sandboxes run and could reach it. Both paths are
// compared by name and by where they resolve (service.Within), so neither
// a link to the root nor a root named through a link slips by; a socket
// beside the root or above it stays allowed, since a workspace lies below
// the root and reaches neither.
func socketInWorkspaceRoot(socket, root string) error {
	absSock, err := filepath.Abs(socket)
	if err != nil {
		return fmt.Errorf("socket %s: %w", socket, err)
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return fmt.Errorf("workspace root %s: %w", root, err)
	}
	if service.Within(filepath.Dir(absSock), absRoot) {
		return fmt.Errorf("the socket %s is inside the workspace root %s, where sandboxes run (listen elsewhere, or move sandbox.workspace_root)", socket, root)
	}
	return nil
}
