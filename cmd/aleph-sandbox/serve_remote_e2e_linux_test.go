//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// runCLI runs the built CLI with args and the environment's
// ALEPH_SANDBOX_TOKEN replaced by env's (none when env has none).
func runCLI(h *serveHarness, env []string, args ...string) (code int, stdout, stderr string) {
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), args...)
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, tokenEnv+"=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		code = -1
	}
	return code, o.String(), e.String()
}

// TestServeDrainOverTCP: `serve drain --host tcp:` against a real serve on
// TCP with TLS and a token. Without the token, with a wrong one, or
// without the CA the server's certificate chains to, the drain is refused
// (exit 125, saying why: the service's unauthenticated, or the TLS
// check) and the server still takes new sessions; the Drain call from
// the same options without the token is refused typed (Unauthenticated).
// With the right token from $ALEPH_SANDBOX_TOKEN it drains: new sessions
// are refused draining, the held one is served. A second server that
// also wants a client certificate (client_ca) is drained with
// --cert-file and --key-file and refused without them.
func TestServeDrainOverTCP(t *testing.T) {
	h := newServeHarness(t)
	pki := newTestPKI(t)
	const token = "tok-3c9e1a7f5b2d4068a1f0"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsTable := "[serve.tls]\ncert = '" + pki.certFile + "'\nkey = '" + pki.keyFile + "'\n"
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	p := h.start(t, sock, "[serve]\nnode_id = 'tcp-node'\ntokens_file = '"+tokens+"'\n"+tlsTable, "--listen", "tcp:127.0.0.1:0")
	addr := tcpAddrOf(t, p, "tcp")
	local := client(sock)
	ctx := context.Background()
	if o := execute(ctx, local, &hostv1.ExecuteRequest{Session: "held", Argv: []string{"/bin/true"}}, nil); o.err != nil {
		t.Fatalf("a command of the held session: %v", o.err)
	}
	host := "tcp:" + addr
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no token", nil, []string{"--ca-file", pki.caFile}, "unauthenticated: a bearer token is required"},
		{"wrong token", []string{tokenEnv + "=" + token + "x"}, []string{"--ca-file", pki.caFile}, "unauthenticated: the bearer token is not valid"},
		{"no CA", []string{tokenEnv + "=" + token}, nil, "the server's certificate did not verify"},
		{"TLS flags on a unix socket", []string{tokenEnv + "=" + token}, []string{"--host", "unix:" + sock, "--ca-file", pki.caFile}, "apply to --host tcp:HOST:PORT only"},
	} {
		args := append([]string{"serve", "drain", "--host", host}, c.args...)
		code, out, errOut := runCLI(h, c.env, args...)
		if code != exitSandboxError || !strings.Contains(errOut, c.want) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 125 saying %q", c.name, code, out, errOut, c.want)
		}
		// Not drained: a new session is still taken.
		if o := execute(ctx, local, &hostv1.ExecuteRequest{Session: "after-" + strings.ReplaceAll(c.name, " ", "-"), Argv: []string{"/bin/true"}}, nil); o.err != nil {
			t.Fatalf("%s: the server drained anyway: %v", c.name, o.err)
		}
	}
	// The call itself, from the CLI's options without a token: the
	// service's typed refusal.
	target, err := parseHostTarget(host)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(tokenEnv, "")
	c, err := (&remoteFlags{caFile: pki.caFile}).client(target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Drain(ctx, connect.NewRequest(&hostv1.DrainRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Drain over TCP without a token: %v, want Unauthenticated", err)
	}

	code, out, errOut := runCLI(h, []string{tokenEnv + "=" + token}, "serve", "drain", "--host", host, "--ca-file", pki.caFile, "--json")
	var got struct {
		NodeID   string `json:"node_id"`
		Started  bool   `json:"started"`
		Sessions int64  `json:"sessions"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.NodeID != "tcp-node" || !got.Started || got.Sessions < 1 {
		t.Fatalf("serve drain with the token: exit %d, %q, %q", code, out, errOut)
	}
	o := execute(ctx, local, &hostv1.ExecuteRequest{Session: "new", Argv: []string{"/bin/true"}}, nil)
	if reasonOf(o.err) != service.ReasonDraining {
		t.Fatalf("a new session after the drain: %v", o.err)
	}
	if o := execute(ctx, local, &hostv1.ExecuteRequest{Session: "held", Argv: []string{"/bin/true"}}, nil); o.err != nil {
		t.Fatalf("the held session after the drain: %v", o.err)
	}
	// ALEPH_SANDBOX_HOST names a TCP server as --host does.
	code, out, errOut = runCLI(h, []string{tokenEnv + "=" + token, hostEnv + "=" + host}, "serve", "drain", "--ca-file", pki.caFile)
	if code != 0 || !strings.Contains(out, "draining already: node tcp-node") {
		t.Fatalf("serve drain by $%s: exit %d, %q, %q", hostEnv, code, out, errOut)
	}

	// Mutual TLS and a token: the client certificate is needed as well.
	sock2 := filepath.Join(t.TempDir(), "run", "aleph.sock")
	p2 := h.start(t, sock2, "[serve]\nnode_id = 'mtls-node'\ntokens_file = '"+tokens+"'\n"+tlsTable+"client_ca = '"+pki.caFile+"'\n", "--listen", "tcp:127.0.0.1:0")
	host2 := "tcp:" + tcpAddrOf(t, p2, "tcp")
	withToken := []string{tokenEnv + "=" + token}
	code, out, errOut = runCLI(h, withToken, "serve", "drain", "--host", host2, "--ca-file", pki.caFile)
	if code != exitSandboxError || !strings.Contains(errOut, "refused the handshake") {
		t.Errorf("mTLS server without a client certificate: exit %d, %q, %q", code, out, errOut)
	}
	code, out, errOut = runCLI(h, withToken, "serve", "drain", "--host", host2, "--ca-file", pki.caFile, "--cert-file", pki.clientCertFile)
	if code != exitSandboxError || !strings.Contains(errOut, "--cert-file and --key-file go together") {
		t.Errorf("--cert-file alone: exit %d, %q, %q", code, out, errOut)
	}
	if o := execute(ctx, client(sock2), &hostv1.ExecuteRequest{Session: "s2", Argv: []string{"/bin/true"}}, nil); o.err != nil {
		t.Fatalf("mTLS server: drained by a refused call: %v", o.err)
	}
	code, out, errOut = runCLI(h, withToken, "serve", "drain", "--host", host2, "--ca-file", pki.caFile, "--cert-file", pki.clientCertFile, "--key-file", pki.clientKeyFile)
	if code != 0 || !strings.Contains(out, "draining now: node mtls-node") {
		t.Fatalf("mTLS server with the client certificate: exit %d, %q, %q", code, out, errOut)
	}
}

// httpsGet fetches url trusting pki's CA, with cert as the client's
// certificate when set; it returns the status, the body and the
// certificate the server presented.
func httpsGet(pki *testPKI, url string, cert *tls.Certificate) (int, string, []byte, error) {
	tc := &tls.Config{RootCAs: pki.pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var peer []byte
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		peer = resp.TLS.PeerCertificates[0].Raw
	}
	return resp.StatusCode, string(b), peer, nil
}

// plainGet fetches url over cleartext HTTP.
func plainGet(url string) (int, string, error) {
	c := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestServeMetricsTLS: with [serve.metrics_tls] (here with client_ca) or
// the --metrics-cert and --metrics-key flags, /readyz and /metrics answer
// over HTTPS with the configured certificate, and cleartext HTTP on that
// port gets none of them; with client_ca, a client without a certificate
// of that CA is refused in the handshake. The control: the default
// metrics listener still answers in cleartext. A grant over the metrics
// key is refused as one over the TLS key is, and the table with no
// metrics listener is refused at start.
func TestServeMetricsTLS(t *testing.T) {
	h := newServeHarness(t)
	pki := newTestPKI(t)
	pemBytes, err := os.ReadFile(pki.certFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(pemBytes)
	configured := blk.Bytes

	checkTLS := func(t *testing.T, addr string, cert *tls.Certificate) {
		t.Helper()
		code, body, peer, err := httpsGet(pki, "https://"+addr+"/readyz", cert)
		if err != nil || code != 200 || body != "ready\n" {
			t.Fatalf("HTTPS /readyz: %d %q %v", code, body, err)
		}
		if !bytes.Equal(peer, configured) {
			t.Fatal("HTTPS /readyz: the server presented another certificate than the one configured")
		}
		code, body, peer, err = httpsGet(pki, "https://"+addr+"/metrics", cert)
		if err != nil || code != 200 || !strings.Contains(body, "aleph_sandbox_ready 1\n") || !bytes.Equal(peer, configured) {
			t.Fatalf("HTTPS /metrics: %d %v (same certificate: %v)\n%s", code, err, bytes.Equal(peer, configured), body)
		}
		// Cleartext on the TLS port: Go's TLS server answers a plain
		// request 400 and nothing of the service.
		for _, path := range []string{"/readyz", "/metrics", "/healthz"} {
			code, body, err := plainGet("http://" + addr + path)
			if err == nil && (code == 200 || strings.Contains(body, "ready") || strings.Contains(body, "aleph_sandbox")) {
				t.Errorf("cleartext HTTP %s on the TLS port was served: %d %q", path, code, body)
			}
		}
	}

	t.Run("table with client_ca", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
		p := h.start(t, sock, "[serve.metrics_tls]\ncert = '"+pki.certFile+"'\nkey = '"+pki.keyFile+"'\nclient_ca = '"+pki.caFile+"'\n",
			"--metrics", "tcp:127.0.0.1:0")
		addr := tcpAddrOf(t, p, "metrics")
		checkTLS(t, addr, &pki.client)
		for name, cert := range map[string]*tls.Certificate{"no client certificate": nil, "another CA's": &pki.rogue} {
			if code, body, _, err := httpsGet(pki, "https://"+addr+"/readyz", cert); err == nil {
				t.Errorf("%s: served %d %q", name, code, body)
			}
		}
	})

	t.Run("flags", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
		p := h.start(t, sock, "", "--metrics", "tcp:127.0.0.1:0", "--metrics-cert", pki.certFile, "--metrics-key", pki.keyFile)
		checkTLS(t, tcpAddrOf(t, p, "metrics"), nil)
		// The metrics key is protected like the TCP listener's: a grant
		// over it or its directory is refused before anything runs.
		ctx := context.Background()
		for _, path := range []string{pki.keyFile, filepath.Dir(pki.keyFile)} {
			o := execute(ctx, client(sock), &hostv1.ExecuteRequest{Session: "s", Argv: []string{"/bin/cat", pki.keyFile}, Read: []string{path}, AnswerApprovals: true}, nil)
			if connect.CodeOf(o.err) != connect.CodePermissionDenied || errDetail(t, o.err).GetReasonCode() != "protected_path" {
				t.Errorf("read %s: want PermissionDenied protected_path, got %v %+v", path, o.err, o.result)
			}
		}
		// The control: the CA file beside it is granted (approved) and read.
		c := client(sock)
		o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "s2", Argv: []string{"/bin/cat", pki.caFile}, Read: []string{pki.caFile}, AnswerApprovals: true},
			func(a *hostv1.ApprovalRequest) {
				_, _ = c.Approve(ctx, connect.NewRequest(&hostv1.ApproveRequest{Id: a.GetId(), Approved: true}))
			})
		if ca, _ := os.ReadFile(pki.caFile); o.err != nil || o.result == nil || string(o.result.GetStdout()) != string(ca) {
			t.Errorf("control: the CA file beside the key: %v %+v", o.err, o.result)
		}
	})

	t.Run("control: cleartext by default", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
		p := h.start(t, sock, "", "--metrics", "tcp:127.0.0.1:0")
		addr := tcpAddrOf(t, p, "metrics")
		if code, body, err := plainGet("http://" + addr + "/readyz"); err != nil || code != 200 || body != "ready\n" {
			t.Fatalf("cleartext /readyz: %d %q %v", code, body, err)
		}
		if code, body, err := plainGet("http://" + addr + "/metrics"); err != nil || code != 200 || !strings.Contains(body, "aleph_sandbox_ready 1\n") {
			t.Fatalf("cleartext /metrics: %d %v", code, err)
		}
		if _, _, _, err := httpsGet(pki, "https://"+addr+"/readyz", nil); err == nil {
			t.Error("a cleartext metrics listener answered TLS")
		}
	})

	t.Run("table without a metrics listener", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
		p := h.startNoWait(t, sock, "[serve.metrics_tls]\ncert = '"+pki.certFile+"'\nkey = '"+pki.keyFile+"'\n")
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			t.Fatal("serve did not exit")
		}
		var ee *exec.ExitError
		if !errors.As(p.err, &ee) || ee.ExitCode() != exitSandboxError || !strings.Contains(p.stderr.String(), "no metrics listener") {
			t.Errorf("serve: %v, stderr %q; want exit 125 saying there is no metrics listener", p.err, p.stderr)
		}
	})
}
