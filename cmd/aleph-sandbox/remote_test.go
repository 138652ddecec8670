package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"
)

// TestRemoteErrorHints: a failed call to a TCP server says what it needs.
// A server that wants a client certificate refuses the handshake with an
// alert; with TLS 1.3 the request written meanwhile may meet the closed
// connection first (a broken pipe, a reset), which must get the same
// hint. Over a socket, or for an error of another kind, nothing is added.
func TestRemoteErrorHints(t *testing.T) {
	tcp, sock := hostTarget{tcp: "127.0.0.1:7443"}, hostTarget{sock: "/run/s.sock"}
	alert := &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}
	for _, tc := range []struct {
		name   string
		target hostTarget
		err    error
		want   string
	}{
		{"alert", tcp, fmt.Errorf("post: %w", alert), "refused the handshake"},
		{"broken pipe", tcp, fmt.Errorf("post: write: %w", &net.OpError{Op: "write", Err: syscall.EPIPE}), "refused the handshake"},
		{"reset", tcp, fmt.Errorf("post: read: %w", &net.OpError{Op: "read", Err: syscall.ECONNRESET}), "refused the handshake"},
		{"over a socket", sock, fmt.Errorf("post: write: %w", syscall.EPIPE), ""},
		{"another error", tcp, errors.New("no route"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := remoteError(tc.target, tc.err).Error()
			if tc.want == "" {
				if got != tc.err.Error() {
					t.Fatalf("%q, want the error as it was", got)
				}
				return
			}
			if !strings.Contains(got, tc.want) || !strings.Contains(got, "--cert-file") || !strings.Contains(got, tc.err.Error()) {
				t.Fatalf("%q, want %q, the flags to pass and the cause", got, tc.want)
			}
		})
	}
}

// TestRemoteErrorHintFromAHandshake: an HTTP/2 connection that a server
// wanting a client certificate ends before it answered is reported by the
// transport only as a connection that "could not be established" (the
// alert's text is lost); one more handshake finds the server's alert and
// the hint is given. Control: a server that wants no client certificate
// gets no hint for the same error.
func TestRemoteErrorHintFromAHandshake(t *testing.T) {
	lost := connect.NewError(connect.CodeUnavailable, errors.New("http2: client conn could not be established"))
	for _, tc := range []struct {
		name       string
		clientAuth tls.ClientAuthType
		hint       bool
	}{
		{"server wants a client certificate", tls.RequireAndVerifyClientCert, true},
		{"server wants none", tls.NoClientCert, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			srv.EnableHTTP2 = true
			srv.TLS = &tls.Config{ClientAuth: tc.clientAuth, ClientCAs: x509.NewCertPool()}
			srv.StartTLS()
			defer srv.Close()
			setup := &tlsSetup{}
			setup.set(srv.Client().Transport.(*http.Transport).TLSClientConfig)
			target := hostTarget{tcp: srv.Listener.Addr().String(), tls: setup}
			got := remoteError(target, lost)
			if hinted := strings.Contains(got.Error(), "refused the handshake") && strings.Contains(got.Error(), "--cert-file"); hinted != tc.hint {
				t.Fatalf("%q: hint %v, want %v", got, hinted, tc.hint)
			}
			if connect.CodeOf(got) != connect.CodeUnavailable {
				t.Fatalf("%q: the code is lost", got)
			}
		})
	}
}
