package service

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// TCPConfigError is a TCP listener serve refuses to open: TCP reaches
// beyond this user, so it is served only behind TLS with a client
// certificate or a bearer token, never open.
type TCPConfigError struct {
	Addr   string
	Reason string
}

func (e *TCPConfigError) Error() string {
	return fmt.Sprintf("tcp listener %s refused: %s", e.Addr, e.Reason)
}

// TokenFileError is a tokens file that cannot be used.
type TokenFileError struct {
	Path   string
	Reason string
	Err    error
}

func (e *TokenFileError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("tokens file %s: %s: %v", e.Path, e.Reason, e.Err)
	}
	return fmt.Sprintf("tokens file %s: %s", e.Path, e.Reason)
}

func (e *TokenFileError) Unwrap() error { return e.Err }

// Tokens are the bearer tokens a TCP client may present, kept as SHA-256
// digests: every comparison is between two 32-byte values, so its time
// depends neither on the token's length nor on where it differs.
type Tokens struct{ digests [][sha256.Size]byte }

// LoadTokens reads path: one token a line, blank lines and lines starting
// with # ignored. The file must be a regular file of the server's own user
// that no one else may read or write (mode 0600 or stricter).
func LoadTokens(path string) (*Tokens, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &TokenFileError{Path: path, Reason: "cannot be read", Err: err}
	}
	if !st.Mode().IsRegular() {
		return nil, &TokenFileError{Path: path, Reason: "not a regular file"}
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, &TokenFileError{Path: path, Reason: fmt.Sprintf("mode %04o lets other users read or change it; chmod 600 it", st.Mode().Perm())}
	}
	if uid, ok := fileOwner(st); ok && uid != os.Getuid() {
		return nil, &TokenFileError{Path: path, Reason: fmt.Sprintf("belongs to uid %d, not to this user (%d)", uid, os.Getuid())}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &TokenFileError{Path: path, Reason: "cannot be read", Err: err}
	}
	t := &Tokens{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) < 16 || strings.ContainsAny(line, " \t") {
			return nil, &TokenFileError{Path: path, Reason: fmt.Sprintf("line %d: a token is at least 16 characters, without spaces", n)}
		}
		t.digests = append(t.digests, sha256.Sum256([]byte(line)))
	}
	if len(t.digests) == 0 {
		return nil, &TokenFileError{Path: path, Reason: "holds no token"}
	}
	return t, nil
}

// Valid reports whether token is one of t. Every token is compared, so the
// time taken does not say which one matched either.
func (t *Tokens) Valid(token string) bool {
	d := sha256.Sum256([]byte(token))
	ok := 0
	for i := range t.digests {
		ok |= subtle.ConstantTimeCompare(d[:], t.digests[i][:])
	}
	return ok == 1 && token != ""
}

// RequireToken wraps next: a request without "Authorization: Bearer T"
// naming a valid T is answered Unauthenticated (in the caller's protocol:
// Connect, gRPC or gRPC-Web) before it reaches any handler.
func RequireToken(t *Tokens, next http.Handler) http.Handler {
	ew := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		tok, found := strings.CutPrefix(h, "Bearer ")
		if !found || !t.Valid(strings.TrimSpace(tok)) {
			msg := "a bearer token is required (Authorization: Bearer TOKEN)"
			if found {
				msg = "the bearer token is not valid"
			}
			_ = ew.Write(w, r, connect.NewError(connect.CodeUnauthenticated, errors.New(msg)))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// TCPAuth is how a TCP listener authenticates its clients: the server's
// TLS configuration (a client certificate is required when the config
// names a client CA) and the bearer tokens, if any.
type TCPAuth struct {
	TLS    *tls.Config
	Tokens *Tokens
}

// NewTCPAuth checks that cfg allows TCP at all and loads what it names.
// TLS is required on every TCP listener (a bearer token sent in clear text
// is given to whoever watches the network); on top of it, clients must
// present a certificate signed by client_ca, a token from tokens_file, or
// both when both are set.
func NewTCPAuth(addr string, cfg core.ServeConfig) (*TCPAuth, error) {
	if cfg.TLS.Cert == "" || cfg.TLS.Key == "" {
		return nil, &TCPConfigError{Addr: addr, Reason: "TCP needs [serve.tls] cert and key (and client_ca, or [serve] tokens_file, to authenticate clients)"}
	}
	if cfg.TLS.ClientCA == "" && cfg.TokensFile == "" {
		return nil, &TCPConfigError{Addr: addr, Reason: "no client authentication: set [serve.tls] client_ca (mutual TLS) or [serve] tokens_file (bearer tokens)"}
	}
	tc, err := serverTLS(addr, "serve.tls", cfg.TLS)
	if err != nil {
		return nil, err
	}
	a := &TCPAuth{TLS: tc}
	if cfg.TokensFile != "" {
		if a.Tokens, err = LoadTokens(cfg.TokensFile); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// serverTLS is the TLS configuration of a listener at addr from t (the
// table key names, for the refusal): its certificate, TLS 1.2 at least,
// and with t.ClientCA a client certificate it signed required in the
// handshake, before any request is read.
func serverTLS(addr, key string, t core.ServeTLSConfig) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, &TCPConfigError{Addr: addr, Reason: fmt.Sprintf("loading [%s] cert and key: %v", key, err)}
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientCA != "" {
		pem, err := os.ReadFile(t.ClientCA)
		if err != nil {
			return nil, &TCPConfigError{Addr: addr, Reason: fmt.Sprintf("reading [%s] client_ca: %v", key, err)}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &TCPConfigError{Addr: addr, Reason: fmt.Sprintf("[%s] client_ca %s holds no PEM certificate", key, t.ClientCA)}
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// MetricsTLS is the TLS configuration of the metrics listener at addr
// from [serve.metrics_tls], nil when it names no certificate (plain
// HTTP, the default).
func MetricsTLS(addr string, cfg core.ServeConfig) (*tls.Config, error) {
	if cfg.MetricsTLS.Cert == "" {
		return nil, nil
	}
	return serverTLS(addr, "serve.metrics_tls", cfg.MetricsTLS)
}

// Handler wraps next with the token check when tokens are configured.
func (a *TCPAuth) Handler(next http.Handler) http.Handler {
	if a.Tokens == nil {
		return next
	}
	return RequireToken(a.Tokens, next)
}
