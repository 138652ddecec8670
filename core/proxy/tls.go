package proxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Opt-in TLS interception, only for CONNECT targets that a secret
// injection rule names: the proxy terminates the child's TLS with a
// certificate from a per-proxy CA, verifies the real server itself, and
// injects the header into each request inside. Every other CONNECT stays
// an opaque tunnel. The CA's private key lives only in this process's
// memory; the CA is name-constrained to the injection hosts, so it cannot
// vouch for any other name even to the child that trusts it.

// Files written next to the socket when interception is on. CAFileName
// holds the session CA alone; CABundleFileName the system roots plus the
// session CA (the child's trust store: tunnelled hosts still present
// their real certificates).
const (
	CAFileName       = "ca.pem"
	CABundleFileName = "ca-bundle.pem"
)

// systemBundles are the usual CA bundle locations, as Go's crypto/x509
// searches them on Linux and the BSDs.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// interceptor mints leaf certificates from the session CA.
type interceptor struct {
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
	roots  *x509.CertPool // upstream verification; nil = system roots

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

func newInterceptor(inj []compiledInjection, roots *x509.CertPool) (*interceptor, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randSerial(),
		Subject:               pkix.Name{CommonName: "aleph-sandbox session CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(48 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		// Name constraints keep the CA to the hosts it exists for.
		PermittedDNSDomainsCritical: true,
	}
	for _, in := range inj {
		switch in.rule.Kind {
		case RuleExact:
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, in.rule.Name)
		case RuleSuffix:
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, "."+in.rule.Name)
		case RuleIP:
			bits := 32
			if in.rule.IP.Is6() {
				bits = 128
			}
			tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, &net.IPNet{IP: in.rule.IP.AsSlice(), Mask: net.CIDRMask(bits, bits)})
		}
	}
	if len(tmpl.PermittedIPRanges) == 0 {
		// Without an IP range an IP SAN would be unconstrained; permit
		// none.
		tmpl.PermittedIPRanges = []*net.IPNet{{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(32, 32)}}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &interceptor{
		caCert: cert, caKey: key, roots: roots,
		caPEM:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		leaves: map[string]*tls.Certificate{},
	}, nil
}

func randSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// leaf returns (minting once) the certificate for t.
func (in *interceptor) leaf(t Target) (*tls.Certificate, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if c, ok := in.leaves[t.Host]; ok {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: randSerial(),
		Subject:      pkix.Name{CommonName: t.Host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if t.IP.IsValid() {
		tmpl.IPAddresses = []net.IP{t.IP.AsSlice()}
	} else {
		tmpl.DNSNames = []string{t.Host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, in.caCert, &key.PublicKey, in.caKey)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	in.leaves[t.Host] = c
	return c, nil
}

// writeCAFiles writes the CA and the child's trust bundle into dir.
func (in *interceptor) writeCAFiles(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, CAFileName), in.caPEM, 0o644); err != nil {
		return err
	}
	var bundle []byte
	for _, f := range systemBundles {
		if b, err := os.ReadFile(f); err == nil {
			bundle = append(b, '\n')
			break
		}
	}
	bundle = append(bundle, in.caPEM...)
	return os.WriteFile(filepath.Join(dir, CABundleFileName), bundle, 0o644)
}

// CACertPEM is the session CA when TLS interception is on, else nil.
func (p *Proxy) CACertPEM() []byte {
	if p.tls == nil {
		return nil
	}
	return append([]byte(nil), p.tls.caPEM...)
}

// tlsEnv points common TLS stacks at the bundle.
func tlsEnv(dir string) [][2]string {
	bundle := filepath.Join(dir, CABundleFileName)
	return [][2]string{
		{"SSL_CERT_FILE", bundle},
		{"CURL_CA_BUNDLE", bundle},
		{"REQUESTS_CA_BUNDLE", bundle},
		{"GIT_SSL_CAINFO", bundle},
		{"NODE_EXTRA_CA_CERTS", filepath.Join(dir, CAFileName)},
	}
}

// injectionsFor returns the rules that fire for t.
func (p *Proxy) injectionsFor(t Target) []compiledInjection {
	var out []compiledInjection
	for _, in := range p.injections {
		if in.matches(t) {
			out = append(out, in)
		}
	}
	return out
}

// applyInjections sets the injected headers on h, returning audit detail,
// or a denial when a value would be unsafe.
func (p *Proxy) applyInjections(h http.Header, t Target) (string, *denial) {
	var notes []string
	for _, in := range p.injectionsFor(t) {
		v := strings.ReplaceAll(in.format, "{secret}", p.cfg.Secrets[in.secret])
		if !validHeaderValue(v) {
			return "", &denial{code: ReasonInvalidHeaderValue, detail: "injected header " + in.header + " from secret " + in.secret + " would contain control characters"}
		}
		h.Set(in.header, v)
		notes = append(notes, "secret "+in.secret+" injected into "+in.header)
	}
	return strings.Join(notes, ", "), nil
}

// interceptConnect serves a CONNECT to an injection host by terminating
// TLS on both sides. The upstream is vetted, dialled and verified before
// the child is told the tunnel is up, so a failure is still a clean HTTP
// error.
func (p *Proxy) interceptConnect(ctx context.Context, c net.Conn, br *bufio.Reader, t Target) {
	up, d := p.connectUpstream(ctx, t, ProtocolConnect, "TLS terminated for secret injection")
	if d != nil {
		writeHTTPError(c, statusFor(d), d.code, t.hostPort(), d.detail)
		return
	}
	defer up.Close()
	up.SetDeadline(time.Now().Add(p.limits.HandshakeTimeout))
	upTLS := tls.Client(up, &tls.Config{
		ServerName: t.Host,
		RootCAs:    p.tls.roots,
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
	})
	if err := upTLS.HandshakeContext(ctx); err != nil {
		p.record(t, ProtocolConnect, false, ReasonUpstreamFailed, "upstream TLS verification failed")
		writeHTTPError(c, http.StatusBadGateway, ReasonUpstreamFailed, t.hostPort(), "the upstream TLS certificate did not verify")
		return
	}
	up.SetDeadline(time.Time{})
	leaf, err := p.tls.leaf(t)
	if err != nil {
		writeHTTPError(c, http.StatusBadGateway, ReasonUpstreamFailed, t.hostPort(), "could not issue an interception certificate")
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// br may already hold the start of the ClientHello.
	cc := &prefixConn{Conn: c, r: io.MultiReader(drainBuffered(br), c)}
	cc.SetDeadline(time.Now().Add(p.limits.HandshakeTimeout))
	child := tls.Server(cc, &tls.Config{
		Certificates: []tls.Certificate{*leaf},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	})
	if err := child.HandshakeContext(ctx); err != nil {
		return
	}
	cc.SetDeadline(time.Time{})

	act := &activity{}
	act.touch()
	cbr := bufio.NewReaderSize(&idleConn{Conn: child, idle: p.limits.IdleTimeout, act: act}, p.limits.MaxHeaderBytes)
	cw := bufio.NewWriter(&idleConn{Conn: child, idle: p.limits.IdleTimeout, act: act})
	ubr := bufio.NewReader(&idleConn{Conn: upTLS, idle: p.limits.IdleTimeout, act: act})
	uw := bufio.NewWriter(&idleConn{Conn: upTLS, idle: p.limits.IdleTimeout, act: act})
	for {
		if !p.interceptOne(ctx, t, cbr, cw, ubr, uw) {
			return
		}
	}
}

// interceptOne relays one request/response exchange inside an intercepted
// tunnel and reports whether both connections can carry another.
func (p *Proxy) interceptOne(ctx context.Context, t Target, cbr *bufio.Reader, cw *bufio.Writer, ubr *bufio.Reader, uw *bufio.Writer) bool {
	if _, err := peekHead(cbr, p.limits.MaxHeaderBytes); err != nil {
		if errors.Is(err, errHeadTooLarge) {
			writeHTTPError(cw, http.StatusRequestHeaderFieldsTooLarge, ReasonBadRequest, "", "request head too large")
			cw.Flush()
		}
		return false
	}
	req, err := http.ReadRequest(cbr)
	if err != nil {
		writeHTTPError(cw, http.StatusBadRequest, ReasonBadRequest, "", "malformed request")
		cw.Flush()
		return false
	}
	defer req.Body.Close()
	// Inside the tunnel the request must stay on the host the tunnel was
	// opened (and vetted) for.
	if req.URL.IsAbs() || (req.Host != "" && !sameTarget(req.Host, t)) || req.Method == http.MethodConnect {
		p.record(t, ProtocolConnect, false, ReasonHostHeaderMismatch, "request inside the TLS tunnel names another host")
		writeHTTPError(cw, http.StatusBadRequest, ReasonHostHeaderMismatch, t.hostPort(), "request inside the tunnel names another host")
		cw.Flush()
		return false
	}
	if echoMethod(req.Method) {
		p.refuseEchoMethod(cw, t, ProtocolConnect)
		cw.Flush()
		return false
	}
	clientClose := req.Close
	removeHopHeaders(req.Header)
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = nil
	}
	detail, d := p.applyInjections(req.Header, t)
	if d != nil {
		p.record(t, ProtocolConnect, false, d.code, d.detail)
		writeHTTPError(cw, http.StatusForbidden, d.code, t.hostPort(), "secret header value refused")
		cw.Flush()
		return false
	}
	p.record(t, ProtocolConnect, true, ReasonAllowed, "request inside TLS tunnel; "+detail)
	req.Close = clientClose
	req.Host = t.Host
	if t.IP.Is6() {
		req.Host = "[" + t.Host + "]"
	}
	if t.Port != 443 {
		req.Host = t.hostPort()
	}
	werr := make(chan error, 1)
	go func() {
		err := req.Write(uw)
		if err == nil {
			err = uw.Flush()
		}
		werr <- err
	}()
	for {
		resp, err := http.ReadResponse(ubr, req)
		if err != nil {
			<-werr
			writeHTTPError(cw, http.StatusBadGateway, ReasonUpstreamFailed, t.hostPort(), "the upstream response could not be read")
			cw.Flush()
			return false
		}
		removeHopHeaders(resp.Header)
		if resp.StatusCode >= 100 && resp.StatusCode < 200 {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				<-werr
				return false
			}
			resp.Write(cw)
			cw.Flush()
			continue
		}
		upClose := resp.Close
		delimited := resp.ContentLength >= 0 || len(resp.TransferEncoding) > 0 || req.Method == http.MethodHead
		keep := !clientClose && !upClose && delimited && req.ProtoAtLeast(1, 1)
		resp.Close = !keep
		err = resp.Write(cw)
		resp.Body.Close()
		if err == nil {
			err = cw.Flush()
		}
		if e := <-werr; e != nil {
			return false
		}
		return err == nil && keep
	}
}

// sameTarget reports whether a Host value names t (default port 443 for
// an intercepted tunnel, or the tunnel's own port).
func sameTarget(host string, t Target) bool {
	ht, err := hostHeaderTarget(host, t.Port)
	return err == nil && ht == t
}

// drainBuffered takes what br has buffered.
func drainBuffered(br *bufio.Reader) io.Reader {
	n := br.Buffered()
	b, _ := br.Peek(n)
	out := append([]byte(nil), b...)
	br.Discard(n)
	return strings.NewReader(string(out))
}

// prefixConn reads from r (buffered bytes, then the conn) and writes to
// the conn.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(b []byte) (int, error) { return c.r.Read(b) }
