//go:build linux

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
)

// testPKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate it signed (also in files, for the CLI), plus a client
// certificate of another CA.
type testPKI struct {
	dir                           string
	caFile, certFile, keyFile     string
	clientCertFile, clientKeyFile string
	pool                          *x509.CertPool
	client, rogue                 tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{dir: t.TempDir()}
	ca, caKey := selfSigned(t, "test CA")
	other, otherKey := selfSigned(t, "other CA")
	p.caFile = writePEM(t, p.dir, "ca.pem", "CERTIFICATE", ca.Raw)
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)
	srvDER, srvKey := issue(t, ca, caKey, "server", x509.ExtKeyUsageServerAuth)
	p.certFile = writePEM(t, p.dir, "server.pem", "CERTIFICATE", srvDER)
	kb, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	p.keyFile = writePEM(t, p.dir, "server.key", "EC PRIVATE KEY", kb)
	cDER, cKey := issue(t, ca, caKey, "client", x509.ExtKeyUsageClientAuth)
	p.client = tls.Certificate{Certificate: [][]byte{cDER}, PrivateKey: cKey}
	p.clientCertFile = writePEM(t, p.dir, "client.pem", "CERTIFICATE", cDER)
	ckb, err := x509.MarshalECPrivateKey(cKey)
	if err != nil {
		t.Fatal(err)
	}
	p.clientKeyFile = writePEM(t, p.dir, "client.key", "EC PRIVATE KEY", ckb)
	rDER, rKey := issue(t, other, otherKey, "rogue", x509.ExtKeyUsageClientAuth)
	p.rogue = tls.Certificate{Certificate: [][]byte{rDER}, PrivateKey: rKey}
	return p
}

func selfSigned(t *testing.T, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// tcpAddrOf waits for the server's log line naming the TCP address it
// bound (it listens on port 0).
func tcpAddrOf(t *testing.T, p *serveProc, key string) string {
	t.Helper()
	re := regexp.MustCompile(key + `=(127\.0\.0\.1:[0-9]+)`)
	var addr string
	waitFor(t, "the "+key+" listener", func() bool {
		if m := re.FindStringSubmatch(p.stderr.String()); m != nil {
			addr = m[1]
			return true
		}
		return false
	})
	return addr
}

// tlsClient speaks Connect (HTTP/1.1) or, with grpc, gRPC over HTTP/2 to
// addr over TLS, trusting pki's CA; cert, when set, is the client's.
func tlsClient(pki *testPKI, addr string, cert *tls.Certificate, token string, grpc bool) hostv1connect.ServiceClient {
	tc := &tls.Config{RootCAs: pki.pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: grpc}
	opts := []connect.ClientOption{connect.WithProtoJSON()}
	if grpc {
		opts = []connect.ClientOption{connect.WithGRPC()}
	}
	if token != "" {
		opts = append(opts, connect.WithInterceptors(bearerToken(token)))
	}
	return hostv1connect.NewServiceClient(&http.Client{Transport: tr}, "https://"+addr, opts...)
}

// TestServeTCPRefusedWithoutAuth: a TCP listener without TLS and client
// authentication is refused at start (exit 125, saying what is missing),
// and so is a tokens file other users could read.
func TestServeTCPRefusedWithoutAuth(t *testing.T) {
	h := newServeHarness(t)
	pki := newTestPKI(t)
	loose := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(loose, []byte("0123456789abcdef0123\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tlsOnly := "[serve.tls]\ncert = '" + pki.certFile + "'\nkey = '" + pki.keyFile + "'\n"
	for _, c := range []struct{ name, config, want string }{
		{"no TLS, no tokens", "", "TCP needs [serve.tls] cert and key"},
		{"TLS without client authentication", tlsOnly, "no client authentication"},
		{"tokens file readable by others", "[serve]\ntokens_file = '" + loose + "'\n" + tlsOnly, "mode 0644"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
			p := h.startNoWait(t, sock, c.config, "--listen", "tcp:127.0.0.1:0")
			select {
			case <-p.done:
			case <-time.After(20 * time.Second):
				t.Fatal("serve did not exit")
			}
			var ee *exec.ExitError
			if !errors.As(p.err, &ee) || ee.ExitCode() != 125 || !strings.Contains(p.stderr.String(), c.want) {
				t.Errorf("serve: %v, stderr %q; want exit 125 saying %q", p.err, p.stderr, c.want)
			}
			if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused start left its socket: %v", err)
			}
		})
	}
}

// TestServeTCPTokens: over TLS on 127.0.0.1, a request without a token or
// with a wrong one is refused before any RPC runs (the command's file is
// not written); the right token runs it, over Connect and over gRPC.
func TestServeTCPTokens(t *testing.T) {
	h := newServeHarness(t)
	pki := newTestPKI(t)
	const token = "tok-7f3a9c1e5b2d4068a1f0"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# one a line\n"+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := "[serve]\ntokens_file = '" + tokens + "'\n[serve.tls]\ncert = '" + pki.certFile + "'\nkey = '" + pki.keyFile + "'\n"
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	p := h.start(t, sock, cfg, "--listen", "tcp:127.0.0.1:0")
	addr := tcpAddrOf(t, p, "tcp")
	ctx := context.Background()
	ws := t.TempDir()
	touch := func(name string) *hostv1.ExecuteRequest {
		return &hostv1.ExecuteRequest{Session: "s-tcp", Workspace: ws, Argv: []string{"/bin/sh", "-c", ": > " + name + "; echo ran"}}
	}
	for name, tok := range map[string]string{"none": "", "wrong": "tok-7f3a9c1e5b2d4068a1f1", "prefix": token[:len(token)-1]} {
		o := execute(ctx, tlsClient(pki, addr, nil, tok, false), touch("by-"+name), nil)
		if connect.CodeOf(o.err) != connect.CodeUnauthenticated {
			t.Errorf("token %s: want Unauthenticated, got %v %+v", name, o.err, o.result)
		}
		if _, err := os.Stat(filepath.Join(ws, "by-"+name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("token %s: the command ran anyway (%v)", name, err)
		}
	}
	for name, grpc := range map[string]bool{"connect": false, "grpc": true} {
		o := execute(ctx, tlsClient(pki, addr, nil, token, grpc), touch("by-"+name), nil)
		if o.err != nil || o.result == nil || string(o.result.GetStdout()) != "ran\n" {
			t.Fatalf("%s with the right token: %v %+v\n%s", name, o.err, o.result, p.stderr)
		}
		if _, err := os.Stat(filepath.Join(ws, "by-"+name)); err != nil {
			t.Errorf("%s: the command's file: %v", name, err)
		}
	}
	// A grant over the tokens file (or its directory) is refused like one
	// over the socket: a sandbox that read a token could approve its own
	// elevations over TCP. Positive control: another file of the same
	// kind elsewhere is granted and read.
	good := tlsClient(pki, addr, nil, token, false)
	for _, p := range []string{tokens, filepath.Dir(tokens)} {
		o := execute(ctx, good, &hostv1.ExecuteRequest{Session: "s-tcp", Argv: []string{"/bin/cat", tokens}, Read: []string{p}, AnswerApprovals: true}, nil)
		if connect.CodeOf(o.err) != connect.CodePermissionDenied || errDetail(t, o.err).GetReasonCode() != "protected_path" {
			t.Errorf("read %s: want PermissionDenied protected_path, got %v %+v", p, o.err, o.result)
		}
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := os.WriteFile(other, []byte("not-a-token"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := execute(ctx, good, &hostv1.ExecuteRequest{Session: "s-tcp2", Argv: []string{"/bin/cat", other}, Read: []string{filepath.Dir(other)}, AnswerApprovals: true},
		func(a *hostv1.ApprovalRequest) {
			_, _ = good.Approve(ctx, connect.NewRequest(&hostv1.ApproveRequest{Id: a.GetId(), Approved: true}))
		})
	if o.err != nil || o.result == nil || string(o.result.GetStdout()) != "not-a-token" {
		t.Errorf("control: %v %+v", o.err, o.result)
	}
	// Plain HTTP on the TLS port gets no answer from the service.
	resp, err := http.Post("http://"+addr+"/aleph.host.v1.Service/CheckPolicy", "application/json", strings.NewReader(`{"command":"true"}`))
	if err == nil {
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("cleartext HTTP on the TCP listener was served: %d", resp.StatusCode)
		}
	}
}

// TestServeTCPMutualTLS: with client_ca, a client certificate signed by it
// is served; none, or one of another CA, fails the handshake.
func TestServeTCPMutualTLS(t *testing.T) {
	h := newServeHarness(t)
	pki := newTestPKI(t)
	cfg := "[serve.tls]\ncert = '" + pki.certFile + "'\nkey = '" + pki.keyFile + "'\nclient_ca = '" + pki.caFile + "'\n"
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	p := h.start(t, sock, cfg, "--listen", "tcp:127.0.0.1:0")
	addr := tcpAddrOf(t, p, "tcp")
	ctx := context.Background()
	ws := t.TempDir()
	req := func(name string) *hostv1.ExecuteRequest {
		return &hostv1.ExecuteRequest{Session: "s-mtls", Workspace: ws, Argv: []string{"/bin/sh", "-c", ": > " + name + "; echo ran"}}
	}
	for name, cert := range map[string]*tls.Certificate{"no-cert": nil, "rogue": &pki.rogue} {
		o := execute(ctx, tlsClient(pki, addr, cert, "", false), req(name), nil)
		if o.err == nil || o.result != nil {
			t.Errorf("%s: served: %+v", name, o.result)
		}
		if _, err := os.Stat(filepath.Join(ws, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the command ran anyway (%v)", name, err)
		}
	}
	for name, grpc := range map[string]bool{"connect": false, "grpc": true} {
		o := execute(ctx, tlsClient(pki, addr, &pki.client, "", grpc), req(name), nil)
		if o.err != nil || o.result == nil || string(o.result.GetStdout()) != "ran\n" {
			t.Fatalf("%s with the client certificate: %v %+v\n%s", name, o.err, o.result, p.stderr)
		}
	}
}
