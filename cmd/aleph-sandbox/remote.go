package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
	hostclient "github.com/aleph-sandbox/aleph-sandbox/service/client"
)

// tokenEnv is the bearer token a client sends to a serve over TCP. It
// comes from the environment and never from a flag: a command line is
// readable by every user of the machine (ps), an environment by its
// owner alone. The Python and TypeScript clients read the same variable.
const tokenEnv = "ALEPH_SANDBOX_TOKEN"

// remoteFlags are the options of a call to a serve listening on TCP, named
// as the Python client names them (ca_file, cert_file, key_file) and
// with its token variable: TLS always (serve refuses TCP without it), the
// server checked against --ca-file (else the system's CAs) and the name
// dialed, a client certificate for a server with client_ca, and the
// token of $ALEPH_SANDBOX_TOKEN for a server with tokens_file.
type remoteFlags struct {
	caFile, certFile, keyFile string
}

func (r *remoteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.caFile, "ca-file", "", "with --host tcp:, the PEM `FILE` of the CA the server's certificate must chain to (default: the system's CAs)")
	fs.StringVar(&r.certFile, "cert-file", "", "with --host tcp:, this client's certificate, PEM `FILE` (a server with [serve.tls] client_ca wants one; with --key-file)")
	fs.StringVar(&r.keyFile, "key-file", "", "with --host tcp:, the key of --cert-file, PEM `FILE`")
}

// args are the flags as given, for a command line shown to the user
// that must reach the same server.
func (r *remoteFlags) args() []string {
	var a []string
	for _, f := range []struct{ name, v string }{{"--ca-file", r.caFile}, {"--cert-file", r.certFile}, {"--key-file", r.keyFile}} {
		if f.v != "" {
			// Absolute: the line may be run from another directory.
			v, err := filepath.Abs(f.v)
			if err != nil {
				v = f.v
			}
			a = append(a, f.name, v)
		}
	}
	return a
}

func (r *remoteFlags) any() bool { return r.caFile != "" || r.certFile != "" || r.keyFile != "" }

// hostOptions are a command's --host and the options of a call to a serve
// on TCP, registered together once per command: every --host of the CLI
// takes unix:PATH and tcp:HOST:PORT alike, with the same TLS options, the
// same $ALEPH_SANDBOX_TOKEN and the same refusals.
type hostOptions struct {
	addr string
	remoteFlags
}

// register adds --host (described by usage, whose backquoted word is the
// value's name) and the TLS options to fs.
func (h *hostOptions) register(fs *flag.FlagSet, usage string) {
	fs.StringVar(&h.addr, "host", "", usage)
	h.remoteFlags.register(fs)
}

// target is --host, else $ALEPH_SANDBOX_HOST (ok false: neither, the
// command works here). The TLS options without a server to send them to
// are refused: silently ignored, they would seem to secure a call that
// never left this machine.
func (h *hostOptions) target() (t hostTarget, ok bool, err error) {
	addr := hostAddress(h.addr)
	if addr == "" {
		if h.any() {
			return hostTarget{}, false, &usageError{"--ca-file, --cert-file and --key-file apply with --host tcp:HOST:PORT (or $" + hostEnv + ") only"}
		}
		return hostTarget{}, false, nil
	}
	t, err = parseHostTarget(addr)
	return t, err == nil, err
}

// pipeline is the service at t in core's terms, tracking its sessions'
// incarnations and sending the session header (for a router in front of
// several servers) as hostclient.NewPipeline does on a unix socket.
func (r *remoteFlags) pipeline(t hostTarget) (*hostclient.Pipeline, error) {
	tr := hostclient.NewTracker()
	c, err := r.client(t, hostclient.WithTracker(tr))
	if err != nil {
		return nil, err
	}
	return &hostclient.Pipeline{C: c, Socket: t.String(), Sessions: tr}, nil
}

// hostTarget is where a call goes: a unix socket (sock) or a TCP address
// (tcp, HOST:PORT).
type hostTarget struct {
	sock, tcp string
	// tls is the TLS set-up of the client made for a TCP target (client
	// sets it), for remoteError's look at why a connection failed.
	tls *tlsSetup
}

// tlsSetup holds the TLS configuration a TCP target's client dials with.
type tlsSetup struct {
	mu     sync.Mutex
	config *tls.Config
}

func (s *tlsSetup) set(c *tls.Config) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.config = c
}

func (s *tlsSetup) get() *tls.Config {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.config
}

func (t hostTarget) String() string {
	if t.tcp != "" {
		return "tcp:" + t.tcp
	}
	return t.sock
}

// parseHostTarget reads unix:PATH (or a bare absolute path) or
// tcp:HOST:PORT.
func parseHostTarget(addr string) (hostTarget, error) {
	if rest, ok := strings.CutPrefix(addr, "tcp:"); ok {
		host, port, err := net.SplitHostPort(rest)
		if err != nil || host == "" || port == "" {
			return hostTarget{}, &usageError{fmt.Sprintf("--host %q: want tcp:HOST:PORT (tcp:[::1]:7443 for IPv6)", addr)}
		}
		return hostTarget{tcp: rest, tls: &tlsSetup{}}, nil
	}
	sock, err := socketPath(addr)
	if err != nil {
		return hostTarget{}, &usageError{fmt.Sprintf("--host %q: want unix:PATH or tcp:HOST:PORT", addr)}
	}
	return hostTarget{sock: sock}, nil
}

// client is the service at t. On a unix socket the server's uid is
// checked (hostclient.Unix) and the TLS flags are refused: the socket's
// peer check is its authentication, and a flag that seemed to secure it
// would not. Over TCP: TLS 1.2 or later with the flags' files and the
// environment's token.
func (r *remoteFlags) client(t hostTarget, opts ...connect.ClientOption) (hostv1connect.ServiceClient, error) {
	if t.tcp == "" {
		if r.any() {
			return nil, &usageError{"--ca-file, --cert-file and --key-file apply to --host tcp:HOST:PORT only (a unix socket's server checks its peer's uid instead)"}
		}
		return hostclient.Unix(t.sock, opts...), nil
	}
	if (r.certFile == "") != (r.keyFile == "") {
		return nil, &usageError{"--cert-file and --key-file go together: give both or neither"}
	}
	host, _, _ := net.SplitHostPort(t.tcp)
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	if r.caFile != "" {
		pem, err := os.ReadFile(r.caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &usageError{fmt.Sprintf("--ca-file %s holds no PEM certificate", r.caFile)}
		}
		tc.RootCAs = pool
	}
	if r.certFile != "" {
		cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--cert-file and --key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if tok := os.Getenv(tokenEnv); tok != "" {
		// A line break or a control character in the token would write
		// headers of its own; refused as the other clients refuse it.
		for i := 0; i < len(tok); i++ {
			if tok[i] <= ' ' || tok[i] > '~' {
				return nil, &usageError{"$" + tokenEnv + " must be printable ASCII without spaces"}
			}
		}
		opts = append(opts, connect.WithInterceptors(bearerToken(tok)))
	}
	t.tls.set(tc)
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}
	return hostv1connect.NewServiceClient(&http.Client{Transport: tr}, "https://"+t.tcp, opts...), nil
}

// remoteError says what a failed call to t needs: a CA or a client
// certificate for a TLS failure, a token for an unauthenticated one. The
// service's code stays in the message (connect's "unauthenticated: ...").
func remoteError(t hostTarget, err error) error {
	if t.tcp == "" {
		return err
	}
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var op *net.OpError
	switch {
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname):
		return fmt.Errorf("tls: the server's certificate did not verify (pass the CA that signed it with --ca-file; it must name the host dialed): %w", err)
	case errors.As(err, &op) && op.Op == "remote error":
		// crypto/tls reports the server's alert (a client certificate
		// missing or of another CA) as a net.OpError "remote error".
		return fmt.Errorf("tls: the server refused the handshake (a server with [serve.tls] client_ca wants a client certificate it signed: --cert-file, --key-file): %w", err)
	case errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET):
		// With TLS 1.3 the client's side of the handshake ends before
		// the server has judged its certificate: a server that wants one
		// sends its alert and closes, and the request written meanwhile
		// can meet the closed connection before the alert is read.
		return fmt.Errorf("tls: the server closed the connection right after the handshake, as a server with [serve.tls] client_ca does when it refused the handshake for want of a client certificate it signed (--cert-file, --key-file): %w", err)
	case connect.CodeOf(err) == connect.CodeUnauthenticated:
		return fmt.Errorf("%w (the token is $%s, one of the server's [serve] tokens_file)", err, tokenEnv)
	case connect.CodeOf(err) == connect.CodeUnavailable:
		// The connection ended before the server answered, and the cause
		// did not reach this error (HTTP/2 reports only that its
		// connection "could not be established" when the server's alert
		// ended its reads first). Without a client certificate, one more
		// handshake tells whether the server refuses it.
		if c := t.tls.get(); c != nil && len(c.Certificates) == 0 {
			if alert := handshakeAlert(t.tcp, c, alertWait); alert != nil {
				return fmt.Errorf("tls: the server refused the handshake (a server with [serve.tls] client_ca wants a client certificate it signed: --cert-file, --key-file): %w (%v)", err, alert)
			}
		}
	}
	return err
}

// alertWait bounds handshakeAlert's wait for the server's verdict.
const alertWait = 2 * time.Second

// handshakeAlert dials addr with c and returns the server's TLS alert if
// it sends one within wait after the handshake (with TLS 1.3 a server
// judges the client's certificate after the client's side of the
// handshake ended, so its refusal comes as the first read), or nil.
func handshakeAlert(addr string, c *tls.Config, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cfg := c.Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	var op *net.OpError
	if err != nil {
		if errors.As(err, &op) && op.Op == "remote error" {
			return err
		}
		return nil
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetReadDeadline(deadline)
	_, err = conn.Read(make([]byte, 1))
	if errors.As(err, &op) && op.Op == "remote error" {
		return err
	}
	return nil
}

// bearerToken sends "Authorization: Bearer T" with every call.
type bearerToken string

func (b bearerToken) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
		r.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, r)
	}
}

func (b bearerToken) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, s connect.Spec) connect.StreamingClientConn {
		c := next(ctx, s)
		c.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return c
	}
}

func (b bearerToken) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
