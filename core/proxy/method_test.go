package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// echoingUpstream answers every request with its method and headers, as a
// server honouring TRACE does, and counts the requests per method. It
// stands for the worst upstream: whatever header reaches it comes back.
type echoingUpstream struct {
	mu   sync.Mutex
	seen map[string]int
}

func (e *echoingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	if e.seen == nil {
		e.seen = map[string]int{}
	}
	e.seen[strings.ToUpper(r.Method)]++
	e.mu.Unlock()
	if r.Header.Get("Authorization") == "Bearer "+secretValue {
		io.WriteString(w, "authorized\n")
	}
	if m := strings.ToUpper(r.Method); m == "TRACE" || m == "TRACK" {
		fmt.Fprintf(w, "%s %s\n", r.Method, r.URL)
		r.Header.Write(w)
	}
}

func (e *echoingUpstream) count(method string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[method]
}

// TRACE and TRACK through the forwarding proxy are refused with 405 and a
// denial record, and never reach the upstream, while other methods to the
// same target still get the secret injected.
func TestEchoMethodsRefusedPlainHTTP(t *testing.T) {
	up := &echoingUpstream{}
	api := httpServer(t, "127.0.0.1:0", up)
	_, port, _ := net.SplitHostPort(api)
	res := fakeResolver{"api.example.com": addrs("127.0.0.1")}
	p, log := startProxy(t, []string{"api.example.com", "127.0.0.1:" + port}, res, func(c *Config) {
		c.Secrets = map[string]string{"API_TOKEN": secretValue}
		c.Injections = []SecretInjection{{Host: "api.example.com", Header: "Authorization", Secret: "API_TOKEN", Format: "Bearer {secret}"}}
	})
	target := "api.example.com:" + port

	for _, method := range []string{"TRACE", "TRACK", "trace", "Track"} {
		t.Run(method, func(t *testing.T) {
			resp, b := rawHTTP(t, p, fmt.Sprintf("%s http://%s/ HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", method, target, target, Placeholder("API_TOKEN")))
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Fatalf("status %s, body %q", resp.Status, b)
			}
			if got := resp.Header.Get("X-Aleph-Sandbox-Reason"); got != string(ReasonMethodNotAllowed) {
				t.Errorf("reason header %q", got)
			}
			mustContain(t, b, PolicyName, target, "TRACE and TRACK are not forwarded")
			if strings.Contains(b, secretValue) {
				t.Fatal("the refusal holds the secret")
			}
			d := log.last(t)
			if d.Allowed || d.ReasonCode != ReasonMethodNotAllowed || d.Protocol != ProtocolHTTP || d.Host != "api.example.com" || d.Port == 0 {
				t.Errorf("audit = %+v", d)
			}
		})
	}
	if n := up.count("TRACE") + up.count("TRACK"); n != 0 {
		t.Fatalf("the upstream received %d TRACE/TRACK requests", n)
	}

	// Positive control: every other method reaches the same upstream
	// through the same proxy, with the secret injected.
	client := proxyClient(t, p, true, nil)
	for _, method := range []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"} {
		req, _ := http.NewRequest(method, "http://"+target+"/", strings.NewReader(""))
		req.Header.Set("Authorization", "Bearer "+Placeholder("API_TOKEN"))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		b := body(t, resp)
		if resp.StatusCode != http.StatusOK || (method != "HEAD" && b != "authorized\n") {
			t.Errorf("%s: %s %q", method, resp.Status, b)
		}
		if up.count(method) != 1 {
			t.Errorf("%s: upstream saw it %d times", method, up.count(method))
		}
		if d := log.last(t); !d.Allowed || !strings.Contains(d.Detail, "API_TOKEN") {
			t.Errorf("%s: audit = %+v", method, d)
		}
	}
}

// Inside an intercepted TLS tunnel, where the secret is injected into
// HTTPS requests, TRACE and TRACK are refused the same way.
func TestEchoMethodsRefusedInsideTLSTunnel(t *testing.T) {
	up := &echoingUpstream{}
	srv := httptest.NewTLSServer(up)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	p, log := startProxy(t, []string{"example.com", "127.0.0.1:" + port}, fakeResolver{"example.com": addrs("127.0.0.1")}, func(c *Config) {
		c.Secrets = map[string]string{"API_TOKEN": secretValue}
		c.Injections = []SecretInjection{{Host: "example.com", Header: "Authorization", Secret: "API_TOKEN", Format: "Bearer {secret}"}}
		c.TLSIntercept = true
		c.UpstreamRoots = roots
	})
	sroots := x509.NewCertPool()
	sroots.AppendCertsFromPEM(p.CACertPEM())
	exchange := func(method string) string {
		t.Helper()
		c := dialProxy(t, p, true)
		resp, _ := connect(t, c, "example.com:"+port)
		if resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "example.com", RootCAs: sroots})
		fmt.Fprintf(tc, "%s / HTTP/1.1\r\nHost: example.com:%s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", method, port, Placeholder("API_TOKEN"))
		out, _ := io.ReadAll(tc)
		return string(out)
	}
	for _, method := range []string{"TRACE", "TRACK"} {
		out := exchange(method)
		if !strings.HasPrefix(out, "HTTP/1.1 405 ") || !strings.Contains(out, string(ReasonMethodNotAllowed)) {
			t.Fatalf("%s inside the tunnel: %q", method, out)
		}
		if strings.Contains(out, secretValue) {
			t.Fatalf("%s: the secret came back", method)
		}
		if d := log.last(t); d.Allowed || d.ReasonCode != ReasonMethodNotAllowed || d.Protocol != ProtocolConnect {
			t.Errorf("%s: audit = %+v", method, d)
		}
	}
	if n := up.count("TRACE") + up.count("TRACK"); n != 0 {
		t.Fatalf("the upstream received %d TRACE/TRACK requests", n)
	}
	// Positive control: GET through the same interception is injected.
	if out := exchange("GET"); !strings.HasPrefix(out, "HTTP/1.1 200 ") || !strings.Contains(out, "authorized") {
		t.Fatalf("GET inside the tunnel: %q", out)
	}
	if up.count("GET") != 1 {
		t.Errorf("upstream saw GET %d times", up.count("GET"))
	}
}
