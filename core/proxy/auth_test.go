package proxy

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	xproxy "golang.org/x/net/proxy"
)

// TestListenersByRoute: the bridge route listens on the unix socket only,
// which serves without a credential; host loopback adds one TCP listener
// and then the unix socket, too, serves only clients with the credential.
func TestListenersByRoute(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	cases := []struct {
		name    string
		route   Route
		wantTCP bool
	}{
		{"bridge", RouteBridge, false},
		{"host loopback", RouteHostLoopback, true},
		{"default on " + runtime.GOOS, RouteDefault, runtime.GOOS != "linux"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, log := startProxy(t, []string{echo}, fakeResolver{}, func(cfg *Config) { cfg.Route = c.route })
			ep := p.Endpoint()
			if (ep.TCPAddr != "") != c.wantTCP {
				t.Fatalf("Endpoint().TCPAddr = %q, want a TCP listener: %v", ep.TCPAddr, c.wantTCP)
			}
			var tcp int
			for _, ln := range p.lns {
				switch ln.Addr().Network() {
				case "unix":
				case "tcp":
					tcp++
					if ln.Addr().String() != ep.TCPAddr {
						t.Errorf("TCP listener %s is not the endpoint %s", ln.Addr(), ep.TCPAddr)
					}
				default:
					t.Errorf("unexpected listener %s %s", ln.Addr().Network(), ln.Addr())
				}
			}
			if want := map[bool]int{false: 0, true: 1}[c.wantTCP]; tcp != want || len(p.lns) != 1+want {
				t.Fatalf("%d listeners, %d of them TCP; want the unix socket and %d TCP", len(p.lns), tcp, want)
			}
			if (p.cred != nil) != c.wantTCP {
				t.Errorf("credential present = %v, want %v", p.cred != nil, c.wantTCP)
			}

			// Without a credential the unix socket serves on the bridge
			// route only.
			resp, _ := connect(t, dialProxy(t, p, true), echo)
			want := map[bool]int{false: 200, true: http.StatusProxyAuthRequired}[c.wantTCP]
			if resp.StatusCode != want {
				t.Fatalf("CONNECT over the unix socket without a credential: %s, want %d", resp.Status, want)
			}
			if d := log.last(t); d.Allowed == c.wantTCP {
				t.Errorf("audit = %+v", d)
			}
			if c.wantTCP {
				// Positive control: with the child's credential it serves.
				resp, br := connect(t, dialProxy(t, p, true), echo, authHeader(t, p))
				if resp.StatusCode != 200 || br.Buffered() != 0 {
					t.Fatalf("CONNECT over the unix socket with the credential: %s", resp.Status)
				}
				if d := log.last(t); !d.Allowed {
					t.Errorf("audit = %+v", d)
				}
			}
			got := envOf(p)["HTTP_PROXY"]
			if c.wantTCP {
				if !strings.HasPrefix(got, "http://"+credentialUser+":") || !strings.HasSuffix(got, "@"+ep.TCPAddr) {
					t.Errorf("HTTP_PROXY = %q, want the TCP listener with a credential", got)
				}
			} else if got != "http://127.0.0.1:3128" {
				t.Errorf("HTTP_PROXY = %q, want the bridge", got)
			}
		})
	}
}

// transcript collects what clients got back from refused exchanges, to be
// scanned for the credential along with the audit records.
type transcript struct{ strings.Builder }

func (tr *transcript) add(s ...any) { fmt.Fprintln(&tr.Builder, s...) }

// assertNoCredential fails when any proxy's token, or the Basic encoding
// of its credential, appears in the audit records or in what clients saw.
func assertNoCredential(t *testing.T, seen string, log *auditLog, ps ...*Proxy) {
	t.Helper()
	var all strings.Builder
	all.WriteString(seen)
	for _, d := range log.all() {
		fmt.Fprintf(&all, "%+v %#v\n", d, d)
	}
	for _, p := range ps {
		for _, secret := range []string{p.cred.token, base64.StdEncoding.EncodeToString([]byte(p.cred.user + ":" + p.cred.token))} {
			if strings.Contains(all.String(), secret) {
				t.Fatalf("a proxy credential appears in an audit record or a refusal")
			}
		}
	}
}

// TestHostLoopbackHTTPCredential: on the host-loopback route, CONNECT and
// forward requests need this proxy's credential, over TCP and over the
// unix socket alike (another sandbox that finds the socket must not get
// round the credential); each refusal is a 407 with a Basic challenge and
// an audit record, and never reaches upstream.
func TestHostLoopbackHTTPCredential(t *testing.T) {
	var hits atomic.Int32
	srv := httpServer(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("Proxy-Authorization") != "" {
			// The credential must never travel past the proxy.
			w.WriteHeader(500)
			return
		}
		io.WriteString(w, "ok")
	}))
	_, portStr, _ := net.SplitHostPort(srv)
	port, _ := strconv.Atoi(portStr)
	p, log := startProxy(t, []string{srv}, fakeResolver{}, hostLoopback)
	other, _ := startProxy(t, []string{srv}, fakeResolver{}, hostLoopback)
	user, tok := p.cred.user, p.cred.token
	flipped := []byte(tok)
	flipped[len(flipped)-1] ^= 1
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

	cases := []struct {
		name, auth string
		code       ReasonCode
	}{
		{"own credential", authHeader(t, p), ReasonAllowed},
		{"own credential, lower-case scheme, extra spaces", "Proxy-Authorization: basic   " + b64(user+":"+tok) + "\r\n", ReasonAllowed},
		{"no credential", "", ReasonProxyAuthRequired},
		{"credential in Authorization instead", "Authorization: Basic " + b64(user+":"+tok) + "\r\n", ReasonProxyAuthRequired},
		{"another proxy's credential", authHeader(t, other), ReasonProxyAuthFailed},
		{"token with its last bit flipped", basicAuth(user, string(flipped)), ReasonProxyAuthFailed},
		{"token cut short", basicAuth(user, tok[:len(tok)-1]), ReasonProxyAuthFailed},
		{"token with a byte more", basicAuth(user, tok+"0"), ReasonProxyAuthFailed},
		{"right token, wrong user", basicAuth("root", tok), ReasonProxyAuthFailed},
		{"token without a user", "Proxy-Authorization: Basic " + b64(tok) + "\r\n", ReasonProxyAuthFailed},
		{"empty password", basicAuth(user, ""), ReasonProxyAuthFailed},
		{"Bearer scheme", "Proxy-Authorization: Bearer " + tok + "\r\n", ReasonProxyAuthFailed},
		{"not base64", "Proxy-Authorization: Basic %%%\r\n", ReasonProxyAuthFailed},
		{"own and a wrong credential", authHeader(t, p) + basicAuth(user, "x"), ReasonProxyAuthFailed},
	}
	var seen transcript
	for _, c := range cases {
		for _, tr := range transports {
			for _, method := range []string{"CONNECT", "GET"} {
				t.Run(c.name+"/"+tr.name+"/"+method, func(t *testing.T) {
					before := hits.Load()
					conn := dialProxy(t, p, tr.unix)
					br := bufio.NewReader(conn)
					var resp *http.Response
					var err error
					if method == "CONNECT" {
						fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", srv, srv, c.auth)
						resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
					} else {
						fmt.Fprintf(conn, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s\r\n", srv, srv, c.auth)
						resp, err = http.ReadResponse(br, nil)
					}
					if err != nil {
						t.Fatalf("read response: %v", err)
					}
					proto := map[string]Protocol{"CONNECT": ProtocolConnect, "GET": ProtocolHTTP}[method]
					d := log.last(t)
					if c.code == ReasonAllowed {
						if resp.StatusCode != 200 {
							t.Fatalf("status %s, want 200", resp.Status)
						}
						if method == "CONNECT" {
							fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", srv)
							resp, err = http.ReadResponse(br, nil)
							if err != nil {
								t.Fatalf("request through the tunnel: %v", err)
							}
						}
						if b := body(t, resp); resp.StatusCode != 200 || b != "ok" {
							t.Fatalf("upstream answered %s %q", resp.Status, b)
						}
						if hits.Load() != before+1 {
							t.Errorf("upstream hits %d, want %d", hits.Load(), before+1)
						}
						if !d.Allowed || d.ReasonCode != ReasonAllowed || d.Protocol != proto {
							t.Errorf("audit = %+v", d)
						}
						return
					}
					// Status first: the body of a CONNECT that got through
					// would be the open tunnel.
					if resp.StatusCode != http.StatusProxyAuthRequired {
						t.Fatalf("status %s, want 407", resp.Status)
					}
					b := body(t, resp)
					seen.add(resp.Status, resp.Header, b)
					if got := resp.Header.Get("Proxy-Authenticate"); !strings.HasPrefix(got, "Basic realm=") {
						t.Errorf("Proxy-Authenticate = %q, want a Basic challenge", got)
					}
					if got := resp.Header.Get("X-Aleph-Sandbox-Reason"); got != string(c.code) {
						t.Errorf("reason header = %q, want %s", got, c.code)
					}
					mustContain(t, b, PolicyName, string(c.code))
					if hits.Load() != before {
						t.Error("refused request reached the upstream")
					}
					if d.Allowed || d.ReasonCode != c.code || d.Protocol != proto || d.Host != "127.0.0.1" || int(d.Port) != port {
						t.Errorf("audit = %+v, want a %s denial for %s", d, c.code, srv)
					}
					// The proxy closes the connection after a refusal.
					if n, err := br.Read(make([]byte, 1)); n != 0 || err == nil {
						t.Errorf("connection still open after 407: %d, %v", n, err)
					}
				})
			}
		}
	}
	assertNoCredential(t, seen.String(), log, p, other)
}

// TestCredentialOnEveryRequest: on the host-loopback route a kept-alive
// connection, over TCP or the unix socket, does not stay authenticated;
// each request needs the credential. The same exchange on the bridge
// route's unix socket needs none.
func TestCredentialOnEveryRequest(t *testing.T) {
	srv := httpServer(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	loop, loopLog := startProxy(t, []string{srv}, fakeResolver{}, hostLoopback)
	bridge, bridgeLog := startProxy(t, []string{srv}, fakeResolver{})
	get := "GET http://" + srv + "/ HTTP/1.1\r\nHost: " + srv + "\r\n"
	cases := []struct {
		name string
		p    *Proxy
		log  *auditLog
		unix bool
		want int // status of the second request, sent without a credential
	}{
		{"host loopback/tcp", loop, loopLog, false, http.StatusProxyAuthRequired},
		{"host loopback/unix", loop, loopLog, true, http.StatusProxyAuthRequired},
		{"bridge/unix", bridge, bridgeLog, true, 200},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn := dialProxy(t, c.p, c.unix)
			br := bufio.NewReader(conn)
			fmt.Fprint(conn, get+strings.Join(childAuth(t, c.p), "")+"\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 || body(t, resp) != "ok" {
				t.Fatalf("first request: %v %v", resp, err)
			}
			fmt.Fprint(conn, get+"\r\n")
			resp, err = http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body(t, resp)
			if resp.StatusCode != c.want {
				t.Fatalf("second request without a credential: %s, want %d", resp.Status, c.want)
			}
			if d := c.log.last(t); d.Allowed != (c.want == 200) {
				t.Errorf("audit = %+v", d)
			}
		})
	}
}

// socksUserPass is an RFC 1929 username/password request.
func socksUserPass(user, pass string) []byte {
	b := []byte{1, byte(len(user))}
	b = append(b, user...)
	b = append(b, byte(len(pass)))
	return append(b, pass...)
}

// TestHostLoopbackSOCKSCredential: on the host-loopback route SOCKS5
// needs the username/password method with this proxy's credential, over
// TCP and over the unix socket alike. A client offering only "no
// authentication" gets method FF; a wrong credential gets status 1 and the
// connection closed, before any request is read.
func TestHostLoopbackSOCKSCredential(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	_, portStr, _ := net.SplitHostPort(echo)
	port, _ := strconv.Atoi(portStr)
	p, log := startProxy(t, []string{echo}, fakeResolver{}, hostLoopback)
	other, _ := startProxy(t, []string{echo}, fakeResolver{}, hostLoopback)
	user, tok := p.cred.user, p.cred.token
	connectReq := []byte{5, 1, 0, 1, 127, 0, 0, 1, byte(port >> 8), byte(port)}

	cases := []struct {
		name  string
		greet []byte
		auth  []byte // nil: none sent
		want  []byte // the replies before the request (or before the close)
		code  ReasonCode
	}{
		{"own credential", []byte{5, 1, 2}, socksUserPass(user, tok), []byte{5, 2, 1, 0}, ReasonAllowed},
		{"own credential, both methods offered", []byte{5, 2, 0, 2}, socksUserPass(user, tok), []byte{5, 2, 1, 0}, ReasonAllowed},
		{"only no authentication offered", []byte{5, 1, 0}, nil, []byte{5, 0xff}, ReasonProxyAuthRequired},
		{"only GSSAPI offered", []byte{5, 1, 1}, nil, []byte{5, 0xff}, ReasonProxyAuthRequired},
		{"another proxy's credential", []byte{5, 1, 2}, socksUserPass(other.cred.user, other.cred.token), []byte{5, 2, 1, 1}, ReasonProxyAuthFailed},
		{"wrong token", []byte{5, 1, 2}, socksUserPass(user, strings.Repeat("0", len(tok))), []byte{5, 2, 1, 1}, ReasonProxyAuthFailed},
		{"right token, wrong user", []byte{5, 1, 2}, socksUserPass("root", tok), []byte{5, 2, 1, 1}, ReasonProxyAuthFailed},
		{"empty user and password", []byte{5, 1, 2}, socksUserPass("", ""), []byte{5, 2, 1, 1}, ReasonProxyAuthFailed},
		// Two bytes only, all the proxy reads before refusing: unread
		// bytes would turn its close into a reset that can eat the reply.
		{"wrong sub-negotiation version", []byte{5, 1, 2}, []byte{5, 0}, []byte{5, 2, 1, 1}, ReasonProxyAuthFailed},
	}
	var seen transcript
	for _, c := range cases {
		for _, tr := range transports {
			t.Run(c.name+"/"+tr.name, func(t *testing.T) {
				conn := dialProxy(t, p, tr.unix)
				conn.Write(c.greet)
				if c.auth != nil {
					conn.Write(c.auth)
				}
				got := make([]byte, len(c.want))
				if _, err := io.ReadFull(conn, got); err != nil || string(got) != string(c.want) {
					t.Fatalf("replies % x (%v), want % x", got, err, c.want)
				}
				if c.code != ReasonAllowed {
					d := log.last(t)
					seen.add(got)
					// Closed: nothing more comes, whatever the client sends.
					if n, err := conn.Read(make([]byte, 1)); n != 0 || err == nil {
						t.Errorf("connection still open after the refusal: %d, %v", n, err)
					}
					if d.Allowed || d.ReasonCode != c.code || d.Protocol != ProtocolSOCKS5 {
						t.Errorf("audit = %+v, want a %s denial", d, c.code)
					}
					return
				}
				conn.Write(connectReq)
				rep := make([]byte, 10)
				if _, err := io.ReadFull(conn, rep); err != nil || rep[1] != socksRepSucceeded {
					t.Fatalf("CONNECT reply % x, %v", rep, err)
				}
				fmt.Fprint(conn, "ping")
				conn.(interface{ CloseWrite() error }).CloseWrite()
				if b, _ := io.ReadAll(conn); string(b) != "ping" {
					t.Fatalf("echo = %q", b)
				}
				if d := log.last(t); !d.Allowed || d.Protocol != ProtocolSOCKS5 || int(d.Port) != port {
					t.Errorf("audit = %+v", d)
				}
			})
		}
	}
	assertNoCredential(t, seen.String(), log, p, other)
}

// TestCredentialsDoNotCross: two proxies on the host-loopback route, both
// allowing the same server: each admits its own credential only, over
// HTTP and SOCKS5, and each records the other's refused attempts as its
// own denials.
func TestCredentialsDoNotCross(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	ps := map[string]*Proxy{}
	logs := map[string]*auditLog{}
	for _, id := range []string{"a", "b"} {
		ps[id], logs[id] = startProxy(t, []string{echo}, fakeResolver{}, hostLoopback, func(c *Config) { c.CommandID = id })
	}
	if ps["a"].cred.token == ps["b"].cred.token {
		t.Fatal("two proxies share a token")
	}
	for id, p := range ps {
		if bits := len(p.cred.token) * 4; bits < 128 {
			t.Errorf("proxy %s: token has %d bits, want at least 128", id, bits)
		}
	}
	var seen transcript
	for _, at := range []string{"a", "b"} {
		for _, from := range []string{"a", "b"} {
			for _, tr := range transports {
				p, log, q := ps[at], logs[at], ps[from]
				own := at == from
				t.Run(fmt.Sprintf("%s's credential on %s/%s/HTTP", from, at, tr.name), func(t *testing.T) {
					resp, _ := connect(t, dialProxy(t, p, tr.unix), echo, authHeader(t, q))
					seen.add(resp.Status, resp.Header)
					want := map[bool]int{true: 200, false: 407}[own]
					if resp.StatusCode != want {
						t.Fatalf("CONNECT: %s, want %d", resp.Status, want)
					}
					if d := log.last(t); d.Allowed != own || d.CommandID != at {
						t.Errorf("audit = %+v", d)
					}
				})
				t.Run(fmt.Sprintf("%s's credential on %s/%s/SOCKS5", from, at, tr.name), func(t *testing.T) {
					network, addr := listenerOf(p, tr.unix)
					d, err := xproxy.SOCKS5(network, addr, socksAuth(t, q), xproxy.Direct)
					if err != nil {
						t.Fatal(err)
					}
					c, err := d.Dial("tcp", echo)
					if own != (err == nil) {
						t.Fatalf("SOCKS5 dial: %v", err)
					}
					if err == nil {
						c.Close()
					} else {
						seen.add(err)
					}
					if d := log.last(t); d.Allowed != own || d.CommandID != at {
						t.Errorf("audit = %+v", d)
					}
				})
			}
		}
	}
	// Without any credential, SOCKS5 is refused on both listeners too.
	for _, tr := range transports {
		network, addr := listenerOf(ps["a"], tr.unix)
		d, _ := xproxy.SOCKS5(network, addr, nil, xproxy.Direct)
		if _, err := d.Dial("tcp", echo); err == nil {
			t.Errorf("%s: SOCKS5 without a credential succeeded", tr.name)
		} else {
			seen.add(err)
		}
		if dd := logs["a"].last(t); dd.ReasonCode != ReasonProxyAuthRequired {
			t.Errorf("%s: audit = %+v", tr.name, dd)
		}
	}
	assertNoCredential(t, seen.String(), logs["a"], ps["a"], ps["b"])
	assertNoCredential(t, seen.String(), logs["b"], ps["a"], ps["b"])
}

// TestCredentialRedacted: formatting the credential under any verb, or
// the proxy that holds it under the verbs a log line would use, does not
// print the token.
func TestCredentialRedacted(t *testing.T) {
	p, _ := startProxy(t, nil, fakeResolver{}, hostLoopback)
	tok := p.cred.token
	shows := func(s string) bool { return strings.Contains(s, tok) || strings.Contains(s, fmt.Sprintf("%x", tok)) }
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%d", "%x", "%q"} {
		for _, v := range []any{p.cred, *p.cred} {
			if shows(fmt.Sprintf(verb, v)) {
				t.Errorf("Sprintf(%q, %T) shows the token", verb, v)
			}
		}
	}
	for _, verb := range []string{"%v", "%+v", "%#v"} {
		if shows(fmt.Sprintf(verb, p)) {
			t.Errorf("Sprintf(%q, *Proxy) shows the token", verb)
		}
	}
	// Positive control: the token is where the child needs it.
	if !strings.Contains(envOf(p)["HTTP_PROXY"], tok) {
		t.Error("HTTP_PROXY lacks the token")
	}
}
