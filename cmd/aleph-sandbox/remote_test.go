package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
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
