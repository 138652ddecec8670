package proxy

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Limits bound what one client can make the proxy hold. Zero fields take
// the defaults below.
type Limits struct {
	// MaxConns caps concurrent client connections (default 256).
	MaxConns int
	// HandshakeTimeout bounds reading a request head or SOCKS handshake
	// (default 10s).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection with no traffic in either direction
	// for this long (default 5m).
	IdleTimeout time.Duration
	// DialTimeout bounds connecting upstream (default 15s).
	DialTimeout time.Duration
	// MaxHeaderBytes bounds an HTTP request head (default 32 KiB).
	MaxHeaderBytes int
	// AuditPerTarget is how many times one distinct decision (host,
	// port, protocol, verdict, reason) is recorded one by one (default
	// 32); AuditMax bounds the records one proxy makes one by one in all
	// (default 1024). Past them decisions are counted and reported as
	// summary records (Decision.Suppressed) when the proxy closes, so a
	// child looping on connects cannot flood the audit log.
	AuditPerTarget int
	AuditMax       int
}

func (l Limits) withDefaults() Limits {
	if l.MaxConns <= 0 {
		l.MaxConns = 256
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = 10 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 5 * time.Minute
	}
	if l.DialTimeout <= 0 {
		l.DialTimeout = 15 * time.Second
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 32 << 10
	}
	if l.AuditPerTarget <= 0 {
		l.AuditPerTarget = 32
	}
	if l.AuditMax <= 0 {
		l.AuditMax = 1024
	}
	return l
}

// DialFunc connects to an exact vetted address ("ip:port").
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Config describes one proxy.
type Config struct {
	SessionID string
	CommandID string
	// Hosts is the allowlist (see ParseRule).
	Hosts []string
	// Secrets are the command's secret values by name; only Injections
	// ever send them anywhere.
	Secrets    map[string]string
	Injections []SecretInjection
	// Audit receives the decisions (within Limits.AuditPerTarget and
	// AuditMax one by one, the rest as summaries at Close); nil discards
	// them. It is called from connection goroutines, one call at a time
	// per proxy.
	Audit func(Decision)
	// Resolver defaults to net.DefaultResolver.
	Resolver Resolver
	// Dial defaults to a net.Dialer with Limits.DialTimeout.
	Dial DialFunc
	// TLSIntercept terminates TLS for CONNECT targets that an injection
	// rule names, so the secret can be injected into HTTPS requests too.
	// Off by default; see tls.go.
	TLSIntercept bool
	// UpstreamRoots verifies upstream servers when intercepting; nil
	// means the system roots.
	UpstreamRoots *x509.CertPool
	// Route says how the child reaches the proxy, which decides both
	// what its proxy variables name and whether the proxy listens on
	// host loopback at all (only RouteHostLoopback does, and then serves
	// only clients presenting the proxy's credential, on the unix socket
	// too).
	Route  Route
	Limits Limits
	// TempDir is where the private socket directory is made (default
	// os.TempDir()). Keep it short: unix socket paths are limited to
	// about 100 bytes.
	TempDir string
}

// Proxy is one running proxy. Close stops it and removes its socket.
type Proxy struct {
	cfg        Config
	limits     Limits
	allow      *Allowlist
	injections []compiledInjection
	audit      *auditLimiter
	tls        *interceptor

	route    Route // resolved: RouteBridge or RouteHostLoopback
	dir      string
	unixPath string
	tcpAddr  string      // empty unless route is RouteHostLoopback
	cred     *credential // nil unless route is RouteHostLoopback
	lns      []net.Listener

	sem    chan struct{}
	busy   chan struct{}
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	done   chan struct{}
	once   sync.Once
	active atomic.Int64
}

// New validates cfg, starts listening on a unix socket in a fresh 0700
// directory and, for RouteHostLoopback only, on 127.0.0.1:0, both then
// behind a fresh credential, and serves until Close or until ctx ends.
func New(ctx context.Context, cfg Config) (*Proxy, error) {
	allow, err := ParseAllowlist(cfg.Hosts)
	if err != nil {
		return nil, err
	}
	inj, err := compileInjections(cfg.Injections, cfg.Secrets)
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:        cfg,
		route:      cfg.Route.resolve(),
		limits:     cfg.Limits.withDefaults(),
		allow:      allow,
		injections: inj,
		conns:      map[net.Conn]struct{}{},
		done:       make(chan struct{}),
	}
	sink := cfg.Audit
	if sink == nil {
		sink = func(Decision) {}
	}
	p.audit = newAuditLimiter(sink, p.limits.AuditPerTarget, p.limits.AuditMax, cfg.SessionID, cfg.CommandID)
	if p.cfg.Resolver == nil {
		p.cfg.Resolver = net.DefaultResolver
	}
	if p.cfg.Dial == nil {
		d := &net.Dialer{Timeout: p.limits.DialTimeout}
		p.cfg.Dial = d.DialContext
	}
	p.sem = make(chan struct{}, p.limits.MaxConns)
	p.busy = make(chan struct{}, 16)

	// MkdirTemp creates the directory 0700, so only this user can reach
	// the socket even before the sandbox mounts it.
	p.dir, err = os.MkdirTemp(cfg.TempDir, "aleph-proxy-")
	if err != nil {
		return nil, fmt.Errorf("proxy: socket directory: %w", err)
	}
	if cfg.TLSIntercept && len(inj) > 0 {
		if p.tls, err = newInterceptor(inj, cfg.UpstreamRoots); err == nil {
			err = p.tls.writeCAFiles(p.dir)
		}
		if err != nil {
			os.RemoveAll(p.dir)
			return nil, fmt.Errorf("proxy: TLS interception CA: %w", err)
		}
	}
	p.unixPath = filepath.Join(p.dir, "proxy.sock")
	uln, err := net.Listen("unix", p.unixPath)
	if err != nil {
		os.RemoveAll(p.dir)
		return nil, fmt.Errorf("proxy: listen on unix socket: %w", err)
	}
	uln.(*net.UnixListener).SetUnlinkOnClose(true)
	p.lns = []net.Listener{uln}
	// On the bridge route the child reaches the proxy only through the
	// unix socket, so a loopback listener would serve nobody but other
	// processes on the host: there is none.
	if p.route == RouteHostLoopback {
		tln, err := p.listenLoopback()
		if err != nil {
			uln.Close()
			os.RemoveAll(p.dir)
			return nil, err
		}
		p.lns = append(p.lns, tln)
	}
	for _, ln := range p.lns {
		p.wg.Add(1)
		// On the host-loopback route every client must present the
		// credential, on the unix socket too: the child does not use the
		// socket there, and where its directory is reachable from other
		// sandboxes (macOS lets them read /private/tmp) it must not be a
		// way around the credential. On the bridge route the socket is
		// the only listener and the child's only way out: no credential.
		go p.acceptLoop(ln, p.route == RouteHostLoopback)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		select {
		case <-ctx.Done():
			go p.Close()
		case <-p.done:
		}
	}()
	return p, nil
}

// listenLoopback makes the proxy's credential and its host-loopback
// listener.
func (p *Proxy) listenLoopback() (net.Listener, error) {
	cred, err := newCredential()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: listen on loopback: %w", err)
	}
	p.cred, p.tcpAddr = cred, ln.Addr().String()
	return ln, nil
}

// Endpoint says where the proxy listens. TCPAddr is empty unless the route
// is RouteHostLoopback; on that route a client of either listener must
// present the credential that Env's proxy URLs carry.
func (p *Proxy) Endpoint() driverapi.ProxyEndpoint {
	return driverapi.ProxyEndpoint{UnixSocket: p.unixPath, TCPAddr: p.tcpAddr}
}

// Env returns the child's proxy variables for the configured route plus a
// placeholder variable for each secret. On RouteHostLoopback the proxy
// URLs carry the proxy's credential as user information; the environment
// is the one place, besides the proxy, that holds it.
func (p *Proxy) Env() []driverapi.EnvVar {
	var env []driverapi.EnvVar
	if p.route == RouteHostLoopback {
		h := url.URL{Scheme: "http", User: p.cred.userinfo(), Host: p.tcpAddr}
		s := url.URL{Scheme: "socks5h", User: p.cred.userinfo(), Host: p.tcpAddr}
		env = proxyEnvURLs(h.String(), s.String())
	} else {
		a := BridgeListenAddrs()
		env = ProxyEnv(a[0], a[1])
	}
	if p.tls != nil {
		for _, kv := range tlsEnv(p.dir) {
			env = append(env, driverapi.EnvVar{Name: kv[0], Value: kv[1]})
		}
	}
	for _, kv := range placeholderEnv(p.cfg.Secrets) {
		env = append(env, driverapi.EnvVar{Name: kv[0], Value: kv[1]})
	}
	return env
}

// ActiveConns is the number of client connections being served.
func (p *Proxy) ActiveConns() int { return int(p.active.Load()) }

// Close stops the listeners, ends every connection, waits for all
// goroutines and removes the socket directory. It is idempotent.
func (p *Proxy) Close() error {
	var err error
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		for _, ln := range p.lns {
			ln.Close()
		}
		close(p.done)
		p.wg.Wait()
		p.audit.flush()
		err = os.RemoveAll(p.dir)
	})
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// acceptLoop serves one listener; authed says its clients must present
// the proxy's credential.
func (p *Proxy) acceptLoop(ln net.Listener, authed bool) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			// Closed: stop. Anything else (EMFILE under a connection
			// flood, say) is transient: back off instead of giving up
			// serving for the rest of the command.
			select {
			case <-p.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-p.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if !p.track(c) {
			c.Close()
			return
		}
		// Two selects: a single one would pick at random between a free
		// serving slot and the refusal pool.
		select {
		case p.sem <- struct{}{}:
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer func() { <-p.sem }()
				p.active.Add(1)
				defer p.active.Add(-1)
				defer p.untrack(c)
				defer c.Close()
				p.serveConn(c, authed)
			}()
			continue
		default:
		}
		select {
		case p.busy <- struct{}{}:
			// Over the cap: answer in the client's protocol so it does
			// not hang, using a small separate pool.
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer func() { <-p.busy }()
				defer p.untrack(c)
				defer c.Close()
				p.refuseBusy(c)
			}()
		default:
			p.untrack(c)
			c.Close()
			p.record(Target{}, "", false, ReasonConnectionLimit, "connection dropped: proxy at its connection limit")
		}
	}
}

func (p *Proxy) record(t Target, proto Protocol, allowed bool, code ReasonCode, detail string) {
	p.audit.record(Decision{
		SessionID: p.cfg.SessionID, CommandID: p.cfg.CommandID,
		Host: t.Host, Port: t.Port, Protocol: proto,
		Allowed: allowed, ReasonCode: code, Detail: detail,
	})
}

func (p *Proxy) refuseBusy(c net.Conn) {
	c.SetDeadline(time.Now().Add(time.Second))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return
	}
	if b[0] == socksVersion {
		p.record(Target{}, ProtocolSOCKS5, false, ReasonConnectionLimit, "proxy at its connection limit")
		// A method-selection reply of "no acceptable methods" ends the
		// handshake cleanly.
		c.Write([]byte{socksVersion, 0xff})
		return
	}
	p.record(Target{}, ProtocolHTTP, false, ReasonConnectionLimit, "proxy at its connection limit")
	writeHTTPError(c, 503, ReasonConnectionLimit, "", "the proxy is serving its maximum number of connections")
}

// serveConn tells SOCKS5 from HTTP by the first byte: a SOCKS5 greeting
// starts with 0x05, an HTTP request with a method letter. authed: the
// client must present the credential before anything is vetted or dialled.
func (p *Proxy) serveConn(c net.Conn, authed bool) {
	c.SetReadDeadline(time.Now().Add(p.limits.HandshakeTimeout))
	// The buffer holds a whole request head: the head is peeked in full
	// before it is parsed, which is also what bounds its size.
	br := bufio.NewReaderSize(c, p.limits.MaxHeaderBytes)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == socksVersion {
		p.serveSOCKS(c, br, authed)
		return
	}
	p.serveHTTP(c, br, authed)
}

// dialVetted tries each vetted address in turn. It never resolves again.
func (p *Proxy) dialVetted(ctx context.Context, addrs []net.Addr) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.limits.DialTimeout)
	defer cancel()
	var firstErr error
	for _, a := range addrs {
		c, err := p.cfg.Dial(ctx, "tcp", a.String())
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	return nil, firstErr
}

// decide parses nothing: it vets t and records the outcome, returning the
// addresses to dial or the denial.
func (p *Proxy) decide(ctx context.Context, t Target, proto Protocol) ([]net.Addr, *denial) {
	ctx, cancel := context.WithTimeout(ctx, p.limits.DialTimeout)
	defer cancel()
	vetted, err := p.allow.Vet(ctx, p.cfg.Resolver, t)
	if err != nil {
		var d *denial
		if !errors.As(err, &d) {
			d = &denial{code: ReasonResolveFailed, detail: "lookup failed"}
		}
		p.record(t, proto, false, d.code, d.detail)
		return nil, d
	}
	out := make([]net.Addr, len(vetted))
	for i, ap := range vetted {
		out[i] = net.TCPAddrFromAddrPort(ap)
	}
	return out, nil
}

// connectUpstream vets, dials and records the final decision.
func (p *Proxy) connectUpstream(ctx context.Context, t Target, proto Protocol, detail string) (net.Conn, *denial) {
	addrs, d := p.decide(ctx, t, proto)
	if d != nil {
		return nil, d
	}
	raw, err := p.dialVetted(ctx, addrs)
	if err != nil {
		d := &denial{code: ReasonUpstreamFailed, detail: dialErrorDetail(err)}
		p.record(t, proto, false, d.code, d.detail)
		return nil, d
	}
	// Upstream connections are tracked like client ones so Close can end
	// an exchange blocked on a silent server.
	if !p.track(raw) {
		raw.Close()
		return nil, &denial{code: ReasonUpstreamFailed, detail: "proxy closing"}
	}
	up := &trackedConn{Conn: raw, p: p}
	msg := "connected to " + up.RemoteAddr().String()
	if detail != "" {
		msg += "; " + detail
	}
	p.record(t, proto, true, ReasonAllowed, msg)
	return up, nil
}

// trackedConn leaves the proxy's connection set when closed.
type trackedConn struct {
	net.Conn
	p    *Proxy
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.p.untrack(c.Conn) })
	return c.Conn.Close()
}

// CloseWrite keeps half-close working through the wrapper.
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func dialErrorDetail(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "connect timed out"
	case isConnRefused(err):
		return "connection refused"
	}
	return "connect failed"
}

var errHeadTooLarge = errors.New("request head too large")
