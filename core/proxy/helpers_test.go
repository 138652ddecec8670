package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
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

// startProxy starts a proxy with the fake resolver and cleans it up.
func startProxy(t testing.TB, hosts []string, res Resolver, mut ...func(*Config)) (*Proxy, *auditLog) {
	t.Helper()
	log := &auditLog{}
	cfg := Config{SessionID: "s1", CommandID: "c1", Hosts: hosts, Audit: log.add, Resolver: res}
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

// dialProxy connects to the proxy over the unix socket or TCP.
func dialProxy(t testing.TB, p *Proxy, unix bool) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	if unix {
		c, err = net.Dial("unix", p.Endpoint().UnixSocket)
	} else {
		c, err = net.Dial("tcp", p.Endpoint().TCPAddr)
	}
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// connect sends a CONNECT and returns the response status line's code,
// the response and a reader positioned after the head.
func connect(t testing.TB, c net.Conn, target string) (*http.Response, *bufio.Reader) {
	t.Helper()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
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

// rawHTTP writes a raw request and reads one response.
func rawHTTP(t testing.TB, p *Proxy, raw string) (*http.Response, string) {
	t.Helper()
	c := dialProxy(t, p, false)
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
