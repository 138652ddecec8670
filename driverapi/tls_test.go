package driverapi

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pluginSide runs pluginTLS as the plugin would, with the host's variables
// and the pipe at a real descriptor.
func pluginSide(t *testing.T, ht *hostTLS) *tls.Config {
	t.Helper()
	for _, kv := range ht.env {
		k, v, _ := strings.Cut(kv, "=")
		if k == tlsFDEnv {
			v = strconv.Itoa(int(ht.pipe.Fd()))
		}
		t.Setenv(k, v)
	}
	cfg, _, err := pluginTLS()
	// pluginTLS closed the descriptor: closing it again through the
	// host's handle must fail (and keeps that handle from closing the
	// number later, when something else may hold it).
	if cerr := ht.pipe.Close(); cerr == nil {
		t.Error("the certificate descriptor is still open after pluginTLS")
	}
	if err != nil || cfg == nil {
		t.Fatalf("pluginTLS: %v, %v", cfg, err)
	}
	if _, still := os.LookupEnv(tlsFDEnv); still {
		t.Errorf("%s left in the plugin's environment", tlsFDEnv)
	}
	return cfg
}

// handshake runs one TLS handshake over loopback TCP (buffered both ways,
// so an alert from either side never blocks the other) and returns the
// client's and the server's errors.
func handshake(t *testing.T, client, server *tls.Config) (cerr, serr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		s := tls.Server(conn, server)
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(10 * time.Second))
		err = s.Handshake()
		if err == nil {
			// Under TLS 1.3 the server checks the client's certificate
			// after the client is done: read the first byte to know.
			_, err = s.Read(make([]byte, 1))
		}
		done <- err
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(conn, client)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	cerr = c.Handshake()
	if cerr == nil {
		_, cerr = c.Write([]byte{1})
	}
	serr = <-done
	c.Close()
	return cerr, serr
}

func TestPluginTLSIsMutualAndPerLaunch(t *testing.T) {
	ht, err := newHostTLS(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	server := pluginSide(t, ht)
	// Positive control: this launch's host and plugin agree.
	if cerr, serr := handshake(t, ht.config, server); cerr != nil || serr != nil {
		t.Fatalf("host and its plugin: client %v, server %v", cerr, serr)
	}
	if got := ht.config.Certificates[0].Leaf; got != nil && got.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("host key algorithm %v", got.PublicKeyAlgorithm)
	}
	// Another launch's host is refused by this plugin, and this host
	// refuses another launch's plugin.
	other, err := newHostTLS(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	otherServer := pluginSide(t, other)
	if _, serr := handshake(t, other.config, server); serr == nil {
		t.Error("plugin accepted another launch's host certificate")
	}
	if cerr, _ := handshake(t, ht.config, otherServer); cerr == nil {
		t.Error("host accepted another launch's plugin certificate")
	}
	// A client without any certificate is refused.
	anon := ht.config.Clone()
	anon.Certificates = nil
	if _, serr := handshake(t, anon, server); serr == nil {
		t.Error("plugin accepted a client without a certificate")
	}
}

func TestPluginTLSWithoutHandoverIsAutoMTLS(t *testing.T) {
	os.Unsetenv(tlsFDEnv)
	if cfg, _, err := pluginTLS(); cfg != nil || err != nil {
		t.Fatalf("without %s: %v, %v (want go-plugin's AutoMTLS: nil, nil)", tlsFDEnv, cfg, err)
	}
	for _, bad := range []string{"x", "1", "-4", "999"} {
		t.Setenv(tlsFDEnv, bad)
		if _, _, err := pluginTLS(); err == nil {
			t.Errorf("%s=%s accepted", tlsFDEnv, bad)
		}
	}
}
