package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTLSInterceptInjectsIntoHTTPS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer "+secretValue {
			io.WriteString(w, "authorized")
			return
		}
		io.WriteString(w, "no-credential")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	upstreamRoots := x509.NewCertPool()
	upstreamRoots.AddCert(srv.Certificate())

	// httptest's certificate is valid for example.com and 127.0.0.1.
	res := fakeResolver{"example.com": addrs("127.0.0.1")}
	hosts := []string{"example.com", "127.0.0.1:" + port}
	rule := SecretInjection{Host: "example.com", Header: "Authorization", Secret: "API_TOKEN", Format: "Bearer {secret}"}

	// Over TCP with the child's proxy URL (credential included): the
	// interception path behind the host-loopback listener.
	get := func(p *Proxy, roots *x509.CertPool, u string) (string, error) {
		client := proxyClient(t, p, false, &tls.Config{RootCAs: roots})
		defer client.CloseIdleConnections()
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Authorization", "Bearer "+Placeholder("API_TOKEN"))
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		b := body(t, resp)
		return resp.Status + " " + b, nil
	}

	// Off (the default): HTTPS is an opaque tunnel, nothing is injected.
	pOff, _ := startProxy(t, hosts, res, hostLoopback, func(c *Config) {
		c.Secrets = map[string]string{"API_TOKEN": secretValue}
		c.Injections = []SecretInjection{rule}
	})
	if got, err := get(pOff, upstreamRoots, "https://example.com:"+port+"/"); err != nil || !strings.Contains(got, "no-credential") {
		t.Fatalf("without interception: %q %v", got, err)
	}
	if pOff.CACertPEM() != nil {
		t.Error("CA exists without interception")
	}

	p, log := startProxy(t, hosts, res, hostLoopback, func(c *Config) {
		c.Secrets = map[string]string{"API_TOKEN": secretValue}
		c.Injections = []SecretInjection{rule}
		c.TLSIntercept = true
		c.UpstreamRoots = upstreamRoots
	})
	sessionRoots := x509.NewCertPool()
	if !sessionRoots.AppendCertsFromPEM(p.CACertPEM()) {
		t.Fatal("CA PEM does not parse")
	}
	var captured strings.Builder
	for i := 0; i < 2; i++ {
		got, err := get(p, sessionRoots, "https://example.com:"+port+"/")
		if err != nil || !strings.Contains(got, "authorized") {
			t.Fatalf("intercepted HTTPS: %q %v", got, err)
		}
		captured.WriteString(got)
	}
	// A host without an injection rule is tunnelled untouched: the child
	// sees the real certificate (which the session CA did not sign).
	if _, err := get(p, sessionRoots, "https://127.0.0.1:"+port+"/"); err == nil {
		t.Fatal("non-injection host was intercepted")
	}
	if got, err := get(p, upstreamRoots, "https://127.0.0.1:"+port+"/"); err != nil || !strings.Contains(got, "no-credential") {
		t.Fatalf("tunnel to non-injection host: %q %v", got, err)
	}

	// The CA is name-constrained to the injection hosts.
	blk, _ := pem.Decode(p.CACertPEM())
	ca, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(ca.PermittedDNSDomains) != 1 || ca.PermittedDNSDomains[0] != "example.com" || !ca.PermittedDNSDomainsCritical {
		t.Errorf("CA name constraints = %v (critical %v)", ca.PermittedDNSDomains, ca.PermittedDNSDomainsCritical)
	}
	// The child's trust files exist next to the socket and the env names
	// them.
	env := map[string]string{}
	for _, e := range p.Env() {
		env[e.Name] = e.Value
		captured.WriteString(e.Name + "=" + e.Value + "\n")
	}
	bundle := env["SSL_CERT_FILE"]
	if filepath.Dir(bundle) != filepath.Dir(p.Endpoint().UnixSocket) {
		t.Errorf("SSL_CERT_FILE = %q, want beside the socket", bundle)
	}
	b, err := os.ReadFile(bundle)
	if err != nil || !strings.Contains(string(b), string(p.CACertPEM())) {
		t.Errorf("bundle %s lacks the session CA: %v", bundle, err)
	}
	for _, d := range log.all() {
		captured.WriteString(d.Detail + string(d.ReasonCode) + d.Host)
	}
	if strings.Contains(captured.String(), secretValue) {
		t.Fatal("secret value reached the client, env or audit")
	}
	if _, ok := log.find(ReasonAllowed); !ok {
		t.Error("no allow record")
	}
}

func TestTLSInterceptRefusesOtherHostInsideTunnel(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("request for another host reached the upstream")
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	p, log := startProxy(t, []string{"example.com", "127.0.0.1:" + port}, fakeResolver{"example.com": addrs("127.0.0.1")}, func(c *Config) {
		c.Secrets = map[string]string{"T": secretValue}
		c.Injections = []SecretInjection{{Host: "example.com", Header: "X-Key", Secret: "T"}}
		c.TLSIntercept = true
		c.UpstreamRoots = roots
	})
	c := dialProxy(t, p, true)
	resp, br := connect(t, c, "example.com:"+port)
	if resp.StatusCode != 200 || br.Buffered() != 0 {
		t.Fatal(resp.Status)
	}
	sroots := x509.NewCertPool()
	sroots.AppendCertsFromPEM(p.CACertPEM())
	tc := tls.Client(c, &tls.Config{ServerName: "example.com", RootCAs: sroots})
	io.WriteString(tc, "GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n")
	out, _ := io.ReadAll(tc)
	if !strings.Contains(string(out), "400") || !strings.Contains(string(out), string(ReasonHostHeaderMismatch)) {
		t.Fatalf("got %q", out)
	}
	if d := log.last(t); d.ReasonCode != ReasonHostHeaderMismatch || d.Allowed {
		t.Errorf("audit = %+v", d)
	}
}
