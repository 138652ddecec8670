package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	xproxy "golang.org/x/net/proxy"
)

// fakeResolver answers from a fixed table; unknown names are "not found".
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// auditLog collects decisions.
type auditLog struct {
	mu sync.Mutex
	ds []Decision
}

func (a *auditLog) add(d Decision) {
	a.mu.Lock()
	a.ds = append(a.ds, d)
	a.mu.Unlock()
}

func (a *auditLog) all() []Decision {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]Decision(nil), a.ds...)
}

// last returns the last decision, failing when there is none.
func (a *auditLog) last(t *testing.T) Decision {
	t.Helper()
	ds := a.all()
	if len(ds) == 0 {
		t.Fatal("no audit record")
	}
	return ds[len(ds)-1]
}

func (a *auditLog) find(code ReasonCode) (Decision, bool) {
	for _, d := range a.all() {
		if d.ReasonCode == code {
			return d, true
		}
	}
	return Decision{}, false
}

// startProxy starts a proxy with the fake resolver and cleans it up. It is
// on the bridge route, whose unix socket takes no credential, on every OS,
// unless a mutator picks another route.
func startProxy(t testing.TB, hosts []string, res Resolver, mut ...func(*Config)) (*Proxy, *auditLog) {
	t.Helper()
	log := &auditLog{}
	cfg := Config{SessionID: "s1", CommandID: "c1", Hosts: hosts, Audit: log.add, Resolver: res, Route: RouteBridge}
	for _, m := range mut {
		m(&cfg)
	}
	p, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if _, err := os.Stat(p.dir); !os.IsNotExist(err) {
			t.Errorf("socket directory %s left behind", p.dir)
		}
	})
	return p, log
}

// echoServer accepts on addr and echoes each connection until EOF, then
// half-closes, so tests can see half-close pass through the proxy.
func echoServer(t testing.TB, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return ln.Addr().String()
}

// httpServer serves h on addr (plain HTTP) and returns its address.
func httpServer(t testing.TB, addr string, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

// hostLoopback puts a proxy on RouteHostLoopback, the only route with a
// TCP listener, and the one where every client, on either listener, must
// present the credential.
func hostLoopback(c *Config) { c.Route = RouteHostLoopback }

// dialProxy connects to the proxy over the unix socket or TCP.
func dialProxy(t testing.TB, p *Proxy, unix bool) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	if unix {
		c, err = net.Dial("unix", p.Endpoint().UnixSocket)
	} else {
		if p.Endpoint().TCPAddr == "" {
			t.Fatal("the proxy has no TCP listener (start it with hostLoopback)")
		}
		c, err = net.Dial("tcp", p.Endpoint().TCPAddr)
	}
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// listenerOf is the network and address of one of p's listeners.
func listenerOf(p *Proxy, unix bool) (network, address string) {
	if unix {
		return "unix", p.Endpoint().UnixSocket
	}
	return "tcp", p.Endpoint().TCPAddr
}

// envOf is the proxy's child environment as a map.
func envOf(p *Proxy) map[string]string {
	env := map[string]string{}
	for _, e := range p.Env() {
		env[e.Name] = e.Value
	}
	return env
}

// childProxyURL is the URL the child finds in one of its proxy variables.
func childProxyURL(t testing.TB, p *Proxy, name string) *url.URL {
	t.Helper()
	u, err := url.Parse(envOf(p)[name])
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return u
}

// authHeader is the Proxy-Authorization header line a client builds from
// the child's HTTP_PROXY (host-loopback route only).
func authHeader(t testing.TB, p *Proxy) string {
	t.Helper()
	u := childProxyURL(t, p, "HTTP_PROXY")
	pass, ok := u.User.Password()
	if !ok {
		t.Fatalf("HTTP_PROXY carries no credential")
	}
	return basicAuth(u.User.Username(), pass)
}

// childAuth is what a child's client sends to p in Proxy-Authorization,
// taken from its HTTP_PROXY as such a client would: the credential on the
// host-loopback route, nothing on the bridge route, whose URLs carry none.
// Pass it to connect on either transport.
func childAuth(t testing.TB, p *Proxy) []string {
	t.Helper()
	if childProxyURL(t, p, "HTTP_PROXY").User == nil {
		return nil
	}
	return []string{authHeader(t, p)}
}

func basicAuth(user, pass string) string {
	return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)) + "\r\n"
}

// socksAuth is the SOCKS5 credential a client takes from the child's
// ALL_PROXY (nil on the bridge route, which carries none).
func socksAuth(t testing.TB, p *Proxy) *xproxy.Auth {
	t.Helper()
	u := childProxyURL(t, p, "ALL_PROXY")
	if u.User == nil {
		return nil
	}
	pass, _ := u.User.Password()
	return &xproxy.Auth{User: u.User.Username(), Password: pass}
}

// proxyClient is an HTTP client using the proxy with the child's
// HTTP_PROXY credential, if it carries one: over the unix socket (as the
// Linux bridge relays), or over TCP with the child's HTTP_PROXY URL.
func proxyClient(t testing.TB, p *Proxy, unix bool, tc *tls.Config) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: tc}
	if unix {
		// The Transport turns the URL's user information into
		// Proxy-Authorization, on CONNECT and forwarded requests alike.
		u := &url.URL{Scheme: "http", User: childProxyURL(t, p, "HTTP_PROXY").User, Host: "proxy.sock.invalid"}
		tr.Proxy = http.ProxyURL(u)
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", p.Endpoint().UnixSocket)
		}
	} else {
		tr.Proxy = http.ProxyURL(childProxyURL(t, p, "HTTP_PROXY"))
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// transports names the two ways into a proxy, for table tests.
var transports = []struct {
	name string
	unix bool
}{{"unix", true}, {"tcp", false}}

// connect sends a CONNECT (with any extra header lines, each ending in
// CRLF) and returns the response and a reader positioned after the head.
func connect(t testing.TB, c net.Conn, target string, extra ...string) (*http.Response, *bufio.Reader) {
	t.Helper()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, strings.Join(extra, ""))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("read CONNECT response: %v", err)
	}
	return resp, br
}

func body(t testing.TB, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}

// rawHTTP writes a raw request over the unix socket and reads one
// response.
func rawHTTP(t testing.TB, p *Proxy, raw string) (*http.Response, string) {
	t.Helper()
	c := dialProxy(t, p, true)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	return resp, body(t, resp)
}

func mustContain(t testing.TB, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%q does not contain %q", s, sub)
		}
	}
}
