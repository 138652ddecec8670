package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// DefaultGrace is how long running commands may take to finish once the
// service stops, when [serve] grace_seconds is not set.
const DefaultGrace = 10 * time.Second

// DefaultTermGrace is how long a command warned with SIGTERM after the
// grace period may take to end before it is killed, when [serve]
// term_grace_seconds is not set.
const DefaultTermGrace = 5 * time.Second

// Config is what Run serves: `aleph-sandbox serve` fills it from its flags
// and the configuration file.
type Config struct {
	// Sandbox is the configuration the runtime is assembled from
	// (alephsandbox.New), its [serve] section included; loaded and
	// validated by the caller.
	Sandbox core.Config
	// Sockets are the unix sockets to listen on (absolute paths), TCP the
	// host:port addresses (TLS and client authentication from [serve]),
	// Metrics the host:port of /metrics ("" for none). At least one of
	// Sockets and TCP.
	Sockets []string
	TCP     []string
	Metrics string
	// AutoApprove approves every elevation no connected client answers
	// (serve --yes).
	AutoApprove bool
	// Logger is the service's log (nil: none). Warnings receives the
	// runtime's one-line warnings (nil: discarded).
	Logger   hclog.Logger
	Warnings io.Writer
	// Owner is how this server names itself in each socket's lock file,
	// for a second server refused on that socket to say which one holds
	// it.
	Owner string
	// Signals: the first value starts the graceful stop (as ctx ending
	// does), a second one ends the grace period at once.
	Signals <-chan os.Signal
	// Ready, when set, is called once every listener is up.
	Ready func()
	// RuntimeOptions are added to the runtime's (after the service's
	// logger, approver and warnings): a host's own driver or audit sink.
	RuntimeOptions []alephsandbox.Option
}

// ServingError is a listener failing once the service was serving: the
// service stopped (gracefully) because of it.
type ServingError struct{ Err error }

func (e *ServingError) Error() string { return "serving failed: " + e.Err.Error() }
func (e *ServingError) Unwrap() error { return e.Err }

// Run assembles the runtime from cfg.Sandbox, serves the service on
// cfg's listeners until ctx ends or a signal arrives, then stops: no new
// connection, approvals denied, running commands given [serve]
// grace_seconds to finish, then SIGTERM and term_grace_seconds, then
// killed; every command is gone before the driver stops. An error before
// serving names what was wrong (a listener already in use is
// *InUseError); a listener failing while serving is *ServingError.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if cfg.Warnings == nil {
		cfg.Warnings = io.Discard
	}
	sc := cfg.Sandbox.Serve
	if err := sc.Validate(); err != nil {
		return err
	}
	if len(cfg.Sockets) == 0 && len(cfg.TCP) == 0 {
		return errors.New("no listener: give a unix socket or a TCP address")
	}
	// TCP is authenticated by TLS client certificates or bearer tokens;
	// without either it is refused here, before anything listens.
	var tcpAuth *TCPAuth
	var err error
	if len(cfg.TCP) > 0 {
		if tcpAuth, err = NewTCPAuth("tcp:"+cfg.TCP[0], sc); err != nil {
			return err
		}
	}
	// The metrics listener speaks TLS when [serve.metrics_tls] names a
	// certificate (and, with client_ca, serves only clients it signed);
	// plain HTTP otherwise. A certificate for no listener is a mistake
	// said now rather than a listener silently in clear text.
	var metricsTLS *tls.Config
	if sc.MetricsTLS.Cert != "" {
		if cfg.Metrics == "" {
			return &TCPConfigError{Addr: "metrics", Reason: "[serve.metrics_tls] is set but there is no metrics listener ([serve] metrics_listen or --metrics)"}
		}
		if metricsTLS, err = MetricsTLS("tcp:"+cfg.Metrics, sc); err != nil {
			return err
		}
	}
	var allowed []uint32
	for _, u := range sc.AllowedUIDs {
		allowed = append(allowed, uint32(u))
	}
	grace := DefaultGrace
	if sc.GraceSeconds > 0 {
		grace = time.Duration(sc.GraceSeconds) * time.Second
	}
	termGrace := DefaultTermGrace
	if sc.TermGraceSeconds > 0 {
		termGrace = time.Duration(sc.TermGraceSeconds) * time.Second
	}

	// The data directory holds the workspaces, the audit log and the grant
	// store; the socket directories are added below.
	protected := []string{core.DataDir()}
	// The bearer tokens and the TLS key authenticate to the service as
	// the socket does: a grant covering them is refused like one covering
	// the socket's directory.
	for _, secret := range []string{sc.TokensFile, sc.TLS.Key} {
		if secret != "" && len(cfg.TCP) > 0 {
			protected = append(protected, secret)
		}
	}
	// The metrics key too: a sandbox that read it could pose as this
	// server's metrics and health to a scraper or a router that trusts
	// the certificate.
	if metricsTLS != nil {
		protected = append(protected, sc.MetricsTLS.Key)
	}
	if root := cfg.Sandbox.Sandbox.WorkspaceRoot; root != "" {
		for _, s := range cfg.Sockets {
			if err := socketInWorkspaceRoot(s, root); err != nil {
				return err
			}
		}
	}
	var closers []io.Closer
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			_ = closers[i].Close()
		}
	}
	var unixListeners []*UnixListener
	for _, s := range cfg.Sockets {
		l, err := ListenUnix(s, allowed, log.Named("listener"))
		if err != nil {
			closeAll()
			return err
		}
		// Who listens here, for a second serve started on this socket to
		// name (its refusal says which server the clients already reach).
		if cfg.Owner != "" {
			if err := l.WriteOwner(cfg.Owner); err != nil {
				log.Warn("could not record this server in the socket's lock file", "error", err)
			}
		}
		unixListeners = append(unixListeners, l)
		closers = append(closers, l)
		protected = append(protected, filepath.Dir(s))
	}
	var tcpListeners []net.Listener
	for _, a := range cfg.TCP {
		l, err := net.Listen("tcp", a)
		if err != nil {
			closeAll()
			return fmt.Errorf("--listen tcp:%s: %w", a, err)
		}
		tcpListeners = append(tcpListeners, l)
		closers = append(closers, l)
	}
	var metricsListener net.Listener
	if cfg.Metrics != "" {
		if metricsListener, err = net.Listen("tcp", cfg.Metrics); err != nil {
			closeAll()
			return fmt.Errorf("--metrics tcp:%s: %w", cfg.Metrics, err)
		}
		closers = append(closers, metricsListener)
	}

	broker := NewBroker(cfg.AutoApprove, nil)
	rt, err := alephsandbox.New(cfg.Sandbox, append([]alephsandbox.Option{
		alephsandbox.WithLogger(log.Named("runtime")),
		alephsandbox.WithApprover(broker),
		alephsandbox.WithWarnings(cfg.Warnings)}, cfg.RuntimeOptions...)...)
	if err != nil {
		closeAll()
		return err
	}
	broker.SetDigest(rt.PolicyDigest)
	var launches func() int64
	if d := rt.Driver(); d != nil {
		launches = d.Launches
	}
	var driverCheck func(context.Context) error
	if d := rt.Driver(); d != nil {
		driverCheck = d.Start
	}
	srv, err := New(Options{Host: rt, Broker: broker, Logger: log.Named("service"),
		Protected: protected, Policy: rt.Policy(), DriverLaunches: launches, DriverCheck: driverCheck,
		Processes: rt.ProcessLimits(), Limits: serveLimits(sc, cfg.Sandbox), NodeID: sc.NodeID})
	if err != nil {
		closeAll()
		_ = rt.Close()
		return err
	}

	// Idle sessions are deleted until serve starts draining
	// (serve.session_idle_ttl).
	stopIdle := srv.StartIdleExpiry()
	defer stopIdle()

	// Requests derive from base: cancelling it after the grace period
	// kills what is still running.
	base, cancelAll := context.WithCancelCause(context.Background())
	killAll := func() { cancelAll(ErrStopping) }
	defer killAll()
	// Stalled clients are cut off: a connection that does not finish its
	// headers, or its request, in time, or idles between requests, is
	// closed ([serve] read_header_timeout_seconds, read_timeout_seconds,
	// idle_timeout_seconds). The timeouts bound the reading of a request
	// only: a command streaming its output for hours is not cut.
	lim := srv.Limits()
	newServer := func(h http.Handler) *http.Server {
		return &http.Server{
			Handler:     h,
			BaseContext: func(net.Listener) context.Context { return base },
			// A unix-socket peer's uid reaches the handlers: Drain is the
			// socket owner's alone.
			ConnContext:       WithPeerUID,
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
	serveErr := make(chan error, len(unixListeners)+len(tcpListeners)+1)
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
	for _, l := range unixListeners {
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
		if metricsTLS != nil {
			ms.TLSConfig = metricsTLS
			run(func() error { return ms.ServeTLS(metricsListener, "", "") })
		} else {
			run(func() error { return ms.Serve(metricsListener) })
		}
		log.Info("listening", "metrics", metricsListener.Addr().String(), "tls", metricsTLS != nil, "mtls", metricsTLS != nil && metricsTLS.ClientCAs != nil)
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	var result error
	select {
	case <-ctx.Done():
	case s := <-cfg.Signals:
		log.Info("signal received", "signal", s.String())
	case err := <-serveErr:
		log.Error("serving failed", "error", err)
		result = &ServingError{Err: err}
	}
	// Drain first: ready goes off at once (a scheduler stops placing
	// sessions here), new sessions are refused with ReasonDraining, and
	// the listeners stay open for the sessions held, whose commands may
	// go on until none runs or the grace period ends. Then the listeners
	// close and what still runs gets the rest of the grace period.
	srv.BeginDrain()
	stopIdle()
	log.Info("stopping: draining, then waiting for running commands", "grace", grace)
	broker.Close()
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	second := make(chan struct{})
	go func() {
		select {
		case <-cfg.Signals:
			log.Warn("second signal: ending the grace period")
			close(second)
			cancel()
		case <-sctx.Done():
		}
	}()
	if result == nil {
		srv.DrainWait(sctx, second)
	}
	var swg sync.WaitGroup
	var over sync.Once
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
						case <-cfg.Signals:
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
	return result
}

// socketInWorkspaceRoot refuses a socket whose directory lies in the
// workspace root, where sandboxes run and could reach it. Both paths are
// compared by name and by where they resolve (Within), so neither a link
// to the root nor a root named through a link slips by; a socket beside
// the root or above it stays allowed, since a workspace lies below the
// root and reaches neither.
func socketInWorkspaceRoot(socket, root string) error {
	absSock, err := filepath.Abs(socket)
	if err != nil {
		return fmt.Errorf("socket %s: %w", socket, err)
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		return fmt.Errorf("workspace root %s: %w", root, err)
	}
	if Within(filepath.Dir(absSock), absRoot) {
		return fmt.Errorf("the socket %s is inside the workspace root %s, where sandboxes run (listen elsewhere, or move sandbox.workspace_root)", socket, root)
	}
	return nil
}
