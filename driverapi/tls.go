package driverapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"strconv"
	"time"
)

// Mutual TLS between host and plugin, with per-launch ephemeral ECDSA P-256
// certificates.
//
// go-plugin's AutoMTLS gives the same guarantee (each side trusts exactly
// one self-signed certificate made for this launch) but makes both keys on
// P-521, whose first use in a process builds tables for about 10 ms of CPU:
// once in the host and once more in the plugin, both on the path of every
// cold start. Here the host makes both key pairs on P-256 (well under a
// millisecond) and hands the plugin its certificate and key through an
// inherited pipe, never the environment or a file; the plugin serves with
// them and accepts only the host's certificate, which it gets as under
// AutoMTLS (PLUGIN_CLIENT_CERT).
//
// Either side may be older. A plugin that does not know tlsFDEnv ignores
// the pipe and answers AutoMTLS-style with a certificate of its own in the
// handshake line; go-plugin then trusts that certificate alone, so the key
// the host made for it is never trusted by anyone. A host that does not set
// tlsFDEnv gets plain AutoMTLS from this plugin.

// tlsFDEnv names the descriptor from which a plugin reads its certificate
// and key (PEM).
const tlsFDEnv = "ALEPH_PLUGIN_TLS_FD"

// clientCertEnv is go-plugin's variable for the host's certificate.
const clientCertEnv = "PLUGIN_CLIENT_CERT"

// maxTLSMaterial bounds what the plugin reads from the pipe.
const maxTLSMaterial = 64 << 10

// ephemeralCert makes a self-signed P-256 certificate for "localhost",
// usable for both ends, as go-plugin's AutoMTLS does with P-521.
func ephemeralCert() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "localhost", Organization: []string{"aleph-sandbox"}},
		DNSNames:              []string{"localhost"},
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		SerialNumber:          sn,
		// The connection lives as long as the plugin; the certificate is
		// only checked at the handshake and never reused by another launch.
		NotBefore: time.Now().Add(-30 * time.Second),
		NotAfter:  time.Now().Add(100 * 365 * 24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// hostTLS is the host's half of one launch: its TLS config, the variables
// for the plugin, and the pipe carrying the plugin's certificate and key.
type hostTLS struct {
	config *tls.Config
	env    []string
	pipe   *os.File // read end, for the plugin's ExtraFiles
}

// newHostTLS makes both key pairs of a launch. fd is the descriptor number
// the pipe will have in the plugin. The caller closes pipe once the plugin
// has started (or failed to). A non-nil transportKey travels in the same
// pipe, as a PEM block older plugins skip (transport.go).
func newHostTLS(fd int, transportKey []byte) (*hostTLS, error) {
	clientCert, clientKey, err := ephemeralCert()
	if err != nil {
		return nil, err
	}
	serverCert, serverKey, err := ephemeralCert()
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(clientCert, clientKey)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(serverCert) {
		return nil, errors.New("parse the plugin's certificate")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// Two PEM blocks of well under a kilobyte each: the pipe buffer holds
	// them, so the write never waits for the plugin.
	material := append(serverCert, serverKey...)
	if transportKey != nil {
		material = append(material, pem.EncodeToMemory(&pem.Block{Type: keyPEMType, Bytes: transportKey})...)
	}
	_, werr := w.Write(material)
	cerr := w.Close()
	if werr != nil || cerr != nil {
		r.Close()
		return nil, fmt.Errorf("hand over the plugin's certificate: %w", errors.Join(werr, cerr))
	}
	return &hostTLS{
		config: &tls.Config{
			Certificates: []tls.Certificate{cert},
			RootCAs:      roots,
			ServerName:   "localhost",
			MinVersion:   tls.VersionTLS12,
		},
		env:  []string{clientCertEnv + "=" + string(clientCert), tlsFDEnv + "=" + strconv.Itoa(fd)},
		pipe: r,
	}, nil
}

// pluginTLS is the plugin's half: when the host handed over a certificate
// through tlsFDEnv, the TLS config to serve with (nil otherwise: go-plugin's
// AutoMTLS then applies), and the transport key if the host sent one. It
// reads and closes the descriptor and removes the variable either way, so
// neither reaches anything the plugin starts.
func pluginTLS() (*tls.Config, []byte, error) {
	v, ok := os.LookupEnv(tlsFDEnv)
	if !ok {
		return nil, nil, nil
	}
	os.Unsetenv(tlsFDEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, nil, fmt.Errorf("%s=%q is not a descriptor", tlsFDEnv, v)
	}
	f := os.NewFile(uintptr(fd), "plugin-tls")
	if f == nil {
		return nil, nil, fmt.Errorf("%s=%d is not open", tlsFDEnv, fd)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxTLSMaterial))
	f.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("read the certificate from descriptor %d: %w", fd, err)
	}
	var certPEM, keyPEM, transportKey []byte
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		switch b.Type {
		case "CERTIFICATE":
			certPEM = pem.EncodeToMemory(b)
		case "EC PRIVATE KEY":
			keyPEM = pem.EncodeToMemory(b)
		case keyPEMType:
			if len(b.Bytes) == transportKeySize {
				transportKey = b.Bytes
			}
		}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate from descriptor %d: %w", fd, err)
	}
	clients := x509.NewCertPool()
	if !clients.AppendCertsFromPEM([]byte(os.Getenv(clientCertEnv))) {
		return nil, nil, fmt.Errorf("%s holds no certificate", clientCertEnv)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clients,
		MinVersion:   tls.VersionTLS12,
	}, transportKey, nil
}
