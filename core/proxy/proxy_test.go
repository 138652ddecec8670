package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	xproxy "golang.org/x/net/proxy"
)

func TestConnectAllowedAndDenied(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	p, log := startProxy(t, []string{echo}, fakeResolver{}, hostLoopback)
	for _, tr := range transports {
		c := dialProxy(t, p, tr.unix)
		resp, br := connect(t, c, echo, authHeader(t, p))
		if resp.StatusCode != 200 {
			t.Fatalf("%s: CONNECT to listed IP literal: %s", tr.name, resp.Status)
		}
		fmt.Fprint(c, "hello")
		c.(interface{ CloseWrite() error }).CloseWrite()
		got, err := io.ReadAll(br)
		if err != nil || string(got) != "hello" {
			t.Fatalf("%s: echo through tunnel = %q, %v", tr.name, got, err)
		}
		if d := log.last(t); !d.Allowed || d.ReasonCode != ReasonAllowed || d.Protocol != ProtocolConnect || d.SessionID != "s1" || d.CommandID != "c1" {
			t.Errorf("audit = %+v", d)
		}
	}

	// Same server, other loopback port: not listed, so denied with a 403
	// naming the policy and the reason, not a hang.
	_, port, _ := net.SplitHostPort(echo)
	other := echoServer(t, "127.0.0.1:0")
	c := dialProxy(t, p, false)
	resp, _ := connect(t, c, other, authHeader(t, p))
	b := body(t, resp)
	if resp.StatusCode != 403 {
		t.Fatalf("CONNECT to unlisted port: %s", resp.Status)
	}
	mustContain(t, b, PolicyName, other, string(ReasonIPLiteralNotAllowed))
	if resp.Header.Get("X-Aleph-Sandbox-Reason") != string(ReasonIPLiteralNotAllowed) {
		t.Errorf("reason header = %q", resp.Header.Get("X-Aleph-Sandbox-Reason"))
	}
	if d := log.last(t); d.Allowed || d.ReasonCode != ReasonIPLiteralNotAllowed || d.Host != "127.0.0.1" || fmt.Sprint(d.Port) == port {
		t.Errorf("audit = %+v", d)
	}
}

func TestConnectNameRebindingToLoopbackRefused(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(echo)
	res := fakeResolver{"api.example.com": addrs("127.0.0.1")}

	p, log := startProxy(t, []string{"api.example.com"}, res)
	resp, _ := connect(t, dialProxy(t, p, true), "api.example.com:"+port)
	b := body(t, resp)
	if resp.StatusCode != 403 {
		t.Fatalf("allowed name resolving to loopback: %s", resp.Status)
	}
	mustContain(t, b, string(ReasonRefusedLoopback), "127.0.0.1")
	if d := log.last(t); d.Allowed || d.ReasonCode != ReasonRefusedLoopback || d.Host != "api.example.com" {
		t.Errorf("audit = %+v", d)
	}

	// Positive control: listing the IP literal admits the same name.
	p2, _ := startProxy(t, []string{"api.example.com", "127.0.0.1:" + port}, res)
	resp, _ = connect(t, dialProxy(t, p2, true), "api.example.com:"+port)
	if resp.StatusCode != 200 {
		t.Fatalf("name with listed loopback literal: %s", resp.Status)
	}
}

// recordingDialer dials a fixed address whatever it is asked, recording
// what the proxy asked for: the proxy must ask for the vetted IP, never a
// name (a second resolution would reopen DNS rebinding).
type recordingDialer struct {
	to    string
	asked chan string
}

func (r *recordingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	r.asked <- addr
	var d net.Dialer
	return d.DialContext(ctx, network, r.to)
}

func TestDialsExactVettedAddress(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	rd := &recordingDialer{to: echo, asked: make(chan string, 4)}
	res := fakeResolver{"api.example.com": addrs("10.9.9.9", "203.0.113.7")}
	p, _ := startProxy(t, []string{"api.example.com"}, res, func(c *Config) { c.Dial = rd.dial })
	resp, _ := connect(t, dialProxy(t, p, true), "api.example.com:443")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	if got := <-rd.asked; got != "203.0.113.7:443" {
		t.Fatalf("proxy dialled %q, want the vetted public address 203.0.113.7:443", got)
	}
	select {
	case got := <-rd.asked:
		t.Fatalf("unexpected second dial %q", got)
	default:
	}
}

func TestPlainHTTPForward(t *testing.T) {
	srv := httpServer(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" || r.Header.Get("Proxy-Connection") != "" {
			w.WriteHeader(500)
			return
		}
		fmt.Fprintf(w, "host=%s path=%s", r.Host, r.URL.RequestURI())
	}))
	other := httpServer(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("unlisted server reached") }))
	p, log := startProxy(t, []string{srv}, fakeResolver{}, hostLoopback)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			client := proxyClient(t, p, tr.unix, nil)
			for i := 0; i < 3; i++ { // keep-alive: several requests on one connection
				resp, err := client.Get("http://" + srv + "/a?b=c")
				if err != nil {
					t.Fatal(err)
				}
				if b := body(t, resp); resp.StatusCode != 200 || b != "host="+srv+" path=/a?b=c" {
					t.Fatalf("forwarded GET = %s %q", resp.Status, b)
				}
			}
			if d := log.last(t); !d.Allowed || d.Protocol != ProtocolHTTP {
				t.Errorf("audit = %+v", d)
			}
			// POST body passes through.
			resp, err := client.Post("http://"+srv+"/post", "text/plain", strings.NewReader("payload"))
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("POST: %v %v", resp, err)
			}
			body(t, resp)

			// An absolute-URI request to an unlisted host is refused just
			// like a CONNECT would be: checking CONNECT alone is a known
			// escape.
			resp, err = client.Get("http://" + other + "/")
			if err != nil {
				t.Fatal(err)
			}
			if b := body(t, resp); resp.StatusCode != 403 || !strings.Contains(b, PolicyName) {
				t.Fatalf("GET to unlisted host = %s %q", resp.Status, b)
			}
		})
	}
}

func TestPlainHTTPRequestChecks(t *testing.T) {
	srv := httpServer(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	res := fakeResolver{"api.example.com": addrs("127.0.0.1")}
	p, log := startProxy(t, []string{srv, "api.example.com"}, res)
	cases := []struct {
		name, raw string
		status    int
		code      ReasonCode
	}{
		{"allowed", "GET http://" + srv + "/ HTTP/1.1\r\nHost: " + srv + "\r\n\r\n", 200, ReasonAllowed},
		{"no Host header (HTTP/1.0)", "GET http://" + srv + "/ HTTP/1.0\r\n\r\n", 200, ReasonAllowed},
		{"Host header disagrees", "GET http://" + srv + "/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 400, ReasonHostHeaderMismatch},
		{"Host header without space after the colon", "GET http://" + srv + "/ HTTP/1.1\r\nHost:" + srv + "\r\n\r\n", 200, ReasonAllowed},
		// RFC 9112 5.1: whitespace between a field name and the colon
		// must be rejected; net/http would keep "Host " as a header of
		// its own, out of reach of the Host check, and forward it.
		{"space before the colon of Host", "GET http://" + srv + "/ HTTP/1.1\r\nHost : api.example.com\r\n\r\n", 400, ReasonBadRequest},
		{"space before the colon of an agreeing Host", "GET http://" + srv + "/ HTTP/1.1\r\nHost : " + srv + "\r\n\r\n", 400, ReasonBadRequest},
		{"tab before the colon of Host", "GET http://" + srv + "/ HTTP/1.1\r\nHost\t: api.example.com\r\n\r\n", 400, ReasonBadRequest},
		{"space before the colon beside a good Host", "GET http://" + srv + "/ HTTP/1.1\r\nHost: " + srv + "\r\nHost : api.example.com\r\n\r\n", 400, ReasonBadRequest},
		{"space before the colon of another header", "GET http://" + srv + "/ HTTP/1.1\r\nHost: " + srv + "\r\nX-Other : v\r\n\r\n", 400, ReasonBadRequest},
		{"space before the colon, bare LF", "GET http://" + srv + "/ HTTP/1.1\nHost : api.example.com\n\n", 400, ReasonBadRequest},
		{"CONNECT with space before the colon of Host", "CONNECT " + srv + " HTTP/1.1\r\nHost : api.example.com:443\r\n\r\n", 400, ReasonBadRequest},
		{"Host header other port", "GET http://" + srv + "/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n", 400, ReasonHostHeaderMismatch},
		{"two Host headers", "GET http://" + srv + "/ HTTP/1.1\r\nHost: " + srv + "\r\nHost: " + srv + "\r\n\r\n", 400, ""},
		{"origin-form", "GET / HTTP/1.1\r\nHost: " + srv + "\r\n\r\n", 400, ReasonBadRequest},
		{"https absolute URI", "GET https://" + srv + "/ HTTP/1.1\r\nHost: " + srv + "\r\n\r\n", 400, ReasonBadRequest},
		{"userinfo", "GET http://u:p@" + srv + "/ HTTP/1.1\r\n\r\n", 400, ReasonBadRequest},
		{"allowed name resolving to loopback", "GET http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n", 403, ReasonRefusedLoopback},
		{"CONNECT without port", "CONNECT api.example.com HTTP/1.1\r\n\r\n", 400, ReasonBadRequest},
		{"CONNECT Host mismatch", "CONNECT " + srv + " HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n", 400, ReasonHostHeaderMismatch},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, ""},
	}
	for _, c := range cases {
		resp, b := rawHTTP(t, p, c.raw)
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d (%q)", c.name, resp.StatusCode, c.status, b)
			continue
		}
		if c.code != "" {
			if d := log.last(t); d.ReasonCode != c.code || d.Allowed != (c.code == ReasonAllowed) {
				t.Errorf("%s: audit = %+v, want %s", c.name, d, c.code)
			}
		}
		if c.status != 200 {
			mustContain(t, b, PolicyName)
		}
	}
}

func TestHeadTooLarge(t *testing.T) {
	p, _ := startProxy(t, nil, fakeResolver{}, func(c *Config) { c.Limits.MaxHeaderBytes = 1024 })
	raw := "GET http://example.com/ HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 4096) + "\r\n\r\n"
	resp, b := rawHTTP(t, p, raw)
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d %q", resp.StatusCode, b)
	}
	// Positive control: a head under the limit is parsed (and denied by
	// policy, which proves it got that far).
	resp, _ = rawHTTP(t, p, "GET http://example.com/ HTTP/1.1\r\nX-Small: a\r\n\r\n")
	if resp.StatusCode != 403 {
		t.Fatalf("small head: status %d", resp.StatusCode)
	}
}

// socksDial connects to target through the proxy's SOCKS5 over the unix
// socket or over TCP, with the credential from the child's ALL_PROXY if it
// carries one.
func socksDial(t testing.TB, p *Proxy, unix bool, target string) (net.Conn, error) {
	t.Helper()
	network, addr := listenerOf(p, unix)
	d, err := xproxy.SOCKS5(network, addr, socksAuth(t, p), xproxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	return d.Dial("tcp", target)
}

func TestSOCKS5(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(echo)
	res := fakeResolver{"local.example.com": addrs("127.0.0.1"), "rebind.example.com": addrs("127.0.0.1")}
	p, log := startProxy(t, []string{echo, "local.example.com", "rebind.example.com:1"}, res, hostLoopback)

	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			for _, target := range []string{echo, "local.example.com:" + port} {
				c, err := socksDial(t, p, tr.unix, target)
				if err != nil {
					t.Fatalf("SOCKS5 CONNECT %s: %v", target, err)
				}
				fmt.Fprint(c, "ping")
				c.(interface{ CloseWrite() error }).CloseWrite()
				got, _ := io.ReadAll(c)
				c.Close()
				if string(got) != "ping" {
					t.Fatalf("echo via SOCKS5 %s = %q", target, got)
				}
				if d := log.last(t); !d.Allowed || d.Protocol != ProtocolSOCKS5 {
					t.Errorf("audit = %+v", d)
				}
			}
			if _, err := socksDial(t, p, tr.unix, "rebind.example.com:"+port); err == nil || !strings.Contains(err.Error(), "not allowed") {
				t.Fatalf("SOCKS5 to a port not listed: %v", err)
			}
			if d := log.last(t); d.ReasonCode != ReasonPortNotAllowed {
				t.Errorf("audit = %+v", d)
			}
			if _, err := socksDial(t, p, tr.unix, "127.0.0.2:"+port); err == nil {
				t.Fatal("SOCKS5 to unlisted IP succeeded")
			}
			if d := log.last(t); d.ReasonCode != ReasonIPLiteralNotAllowed {
				t.Errorf("audit = %+v", d)
			}
		})
	}
}

// socksRaw runs a hand-made SOCKS5 exchange and returns all reply bytes.
func socksRaw(t *testing.T, p *Proxy, msgs ...[]byte) []byte {
	t.Helper()
	c := dialProxy(t, p, true)
	for _, m := range msgs {
		c.Write(m)
	}
	c.(*net.UnixConn).CloseWrite()
	got, _ := io.ReadAll(c)
	return got
}

func TestSOCKS5RefusedCommands(t *testing.T) {
	p, log := startProxy(t, []string{"127.0.0.1"}, fakeResolver{})
	greet := []byte{5, 1, 0}
	for cmd, name := range map[byte]string{2: "BIND", 3: "UDP ASSOCIATE", 9: "unknown"} {
		got := socksRaw(t, p, greet, []byte{5, cmd, 0, 1, 127, 0, 0, 1, 0, 80})
		if len(got) < 4 || got[0] != 5 || got[1] != 0 || got[2] != 5 || got[3] != socksRepCommandNotSupported {
			t.Errorf("%s: reply % x, want method 00 then REP 07", name, got)
		}
		if d := log.last(t); d.ReasonCode != ReasonUnsupportedCommand {
			t.Errorf("%s: audit %+v", name, d)
		}
	}
	// Only username/password offered: "no acceptable methods".
	if got := socksRaw(t, p, []byte{5, 1, 2}); len(got) != 2 || got[1] != 0xff {
		t.Errorf("no-auth not offered: reply % x", got)
	}
	// Unknown address type.
	if got := socksRaw(t, p, greet, []byte{5, 1, 0, 9, 0, 0}); len(got) < 4 || got[3] != socksRepAtypNotSupported {
		t.Errorf("bad ATYP: reply % x", got)
	}
	// Positive control on the same proxy: CONNECT to a listed IP with no
	// server gets past policy (connection refused, REP 05).
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	got := socksRaw(t, p, greet, []byte{5, 1, 0, 1, 127, 0, 0, 1, byte(port >> 8), byte(port)})
	if len(got) < 4 || got[3] != socksRepConnectionRefused {
		t.Errorf("CONNECT to listed closed port: reply % x", got)
	}
}

func TestConnectionLimit(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	p, log := startProxy(t, []string{echo}, fakeResolver{}, func(c *Config) { c.Limits.MaxConns = 1 })
	c := dialProxy(t, p, true)
	resp, _ := connect(t, c, echo) // holds the only slot
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	resp2, b := rawHTTP(t, p, "CONNECT "+echo+" HTTP/1.1\r\n\r\n")
	if resp2.StatusCode != 503 || !strings.Contains(b, string(ReasonConnectionLimit)) {
		t.Fatalf("over the cap: %s %q", resp2.Status, b)
	}
	if _, ok := log.find(ReasonConnectionLimit); !ok {
		t.Error("no connection_limit audit record")
	}
	// Freeing the slot lets the next client in.
	c.Close()
	waitFor(t, func() bool { return p.ActiveConns() == 0 })
	resp3, _ := connect(t, dialProxy(t, p, true), echo)
	if resp3.StatusCode != 200 {
		t.Fatalf("after the slot was freed: %s", resp3.Status)
	}
}

func TestHandshakeTimeout(t *testing.T) {
	p, log := startProxy(t, nil, fakeResolver{}, func(c *Config) { c.Limits.HandshakeTimeout = 100 * time.Millisecond })
	c := dialProxy(t, p, true)
	io.WriteString(c, "GET http://exam") // never finishes the head
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("proxy did not close a stalled client: %v", err)
	}
	if d := log.last(t); d.ReasonCode != ReasonBadRequest {
		t.Errorf("audit = %+v", d)
	}
}

func TestCloseEndsTunnelsAndCleansUp(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	p, err := New(context.Background(), Config{Hosts: []string{echo}, Resolver: fakeResolver{}, Route: RouteHostLoopback})
	if err != nil {
		t.Fatal(err)
	}
	c := dialProxy(t, p, true)
	resp, br := connect(t, c, echo, authHeader(t, p))
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("tunnel not ended by Close: %v", err)
	}
	if _, err := os.Stat(p.Endpoint().UnixSocket); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
	if _, err := net.Dial("tcp", p.Endpoint().TCPAddr); err == nil {
		t.Error("TCP listener still accepting")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestContextCancelStopsProxy(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p, err := New(ctx, Config{Hosts: nil, Resolver: fakeResolver{}})
	if err != nil {
		t.Fatal(err)
	}
	dir := p.dir
	cancel()
	waitFor(t, func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) })
	p.Close()
}

func TestSocketDirPrivate(t *testing.T) {
	p, _ := startProxy(t, nil, fakeResolver{})
	st, err := os.Stat(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("socket dir mode %v, want 0700", st.Mode().Perm())
	}
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var _ = bufio.NewReader

func TestCloseEndsForwardBlockedOnSilentUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c // never answers
		}
	}()
	p, err := New(context.Background(), Config{Hosts: []string{ln.Addr().String()}, Resolver: fakeResolver{}, Route: RouteBridge})
	if err != nil {
		t.Fatal(err)
	}
	c := dialProxy(t, p, true)
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", ln.Addr(), ln.Addr())
	up := <-accepted
	defer up.Close()
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close blocked behind a silent upstream")
	}
	// The upstream side sees its connection end.
	up.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(up); err != nil {
		t.Fatalf("upstream connection not closed: %v", err)
	}
}

func TestIPv6Literal(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skip("no IPv6 loopback on this host")
	}
	ln.Close()
	echo := echoServer(t, "[::1]:0")
	_, port, _ := net.SplitHostPort(echo)
	p, log := startProxy(t, []string{"[::1]:" + port}, fakeResolver{"v6.example.com": addrs("::1")})
	resp, _ := connect(t, dialProxy(t, p, true), "[::1]:"+port)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT to listed IPv6 literal: %s", resp.Status)
	}
	if d := log.last(t); !d.Allowed || d.Host != "::1" {
		t.Errorf("audit = %+v", d)
	}
	// Unlisted port on the same address, and the address behind a name
	// that is not in the allowlist.
	resp, _ = connect(t, dialProxy(t, p, true), "[::1]:1")
	if resp.StatusCode != 403 {
		t.Fatalf("unlisted IPv6 port: %s", resp.Status)
	}
	resp, _ = connect(t, dialProxy(t, p, true), "v6.example.com:"+port)
	if resp.StatusCode != 403 || log.last(t).ReasonCode != ReasonHostNotAllowed {
		t.Fatalf("unlisted name: %s %+v", resp.Status, log.last(t))
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	before := runtime.NumGoroutine()
	p, err := New(context.Background(), Config{Hosts: []string{echo}, Resolver: fakeResolver{}, Route: RouteHostLoopback})
	if err != nil {
		t.Fatal(err)
	}
	auth := authHeader(t, p)
	var conns []net.Conn
	for _, unix := range []bool{true, false, true} {
		network, addr := listenerOf(p, unix)
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		resp, _ := connect(t, c, echo, auth)
		if resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		conns = append(conns, c)
	}
	if p.ActiveConns() != 3 {
		t.Fatalf("active = %d, want 3", p.ActiveConns())
	}
	p.Close()
	for _, c := range conns {
		c.Close()
	}
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before })
}
