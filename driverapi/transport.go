package driverapi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// The plugin connection without TLS, and why it is safe where it is used.
//
// Host and plugin speak gRPC over go-plugin's unix socket. Mutual TLS with
// certificates made for each launch (tls.go) defends two things: nobody but
// this host can drive the plugin (run a command with any profile it likes:
// an escape), and nobody but this plugin can answer the host (and see its
// commands, or fake their results). On a unix socket the same two things
// hold without TLS, for less: the handshake's key exchange, signatures and
// record encryption were about 10 % of a one-shot command's CPU.
//
//   - Who can reach the socket. The socket is made in a directory the host
//     created for this launch, 0700 and owned by its uid, so the kernel lets
//     only that uid (and root) connect to it or put something in its place.
//     Both ends also read the peer's uid from the kernel (SO_PEERCRED,
//     LOCAL_PEERCRED) and refuse any other uid, whatever path it came by.
//   - Who of that uid. A process of the same uid outside any sandbox owns
//     the host already: it can ptrace both ends (or read their memory, or
//     replace the driver binary, or use `serve`'s socket, which admits every
//     peer of the uid) and so gets around TLS too. But a sandboxed command
//     runs as the same uid and can do none of that (no ptrace, its own PID
//     namespace, seccomp); if a grant or the workspace happens to cover the
//     socket's directory it could connect. TLS kept it out because it had
//     no key; here it is kept out by the same thing: a 32-byte secret made
//     for this launch, handed to the plugin through the inherited pipe the
//     certificates travel on (never the environment or a file), proven by
//     HMAC challenge and response in both directions before any gRPC byte
//     (transportKeyHandshake). The plugin proves first, so a socket put in
//     the plugin's place learns nothing from the host.
//   - What TLS gave beyond that: confidentiality of the traffic against a
//     relay that both ends accepted. A relay needs a process of this uid
//     that can write the host's private directory and bind a socket there
//     before the host connects, which is before any command of this driver
//     runs; a command's processes end with its sandbox. That is not worth
//     a handshake per launch.
//
// Where these do not hold, mutual TLS stays: on Windows (go-plugin uses
// loopback TCP, reachable by every local user), where the peer's uid cannot
// be read, when the socket directory is not private, and with a plugin or a
// host that predates this (see negotiation below). LaunchConfig.MutualTLS
// forces it.
//
// Negotiation. The host offers the keyed transport (transportEnv) and still
// hands over the certificates. A plugin that takes the offer makes its
// socket in the subdirectory keySocketSubdir of the socket directory and
// serves without TLS; the host sees that in the socket's address at connect
// time and runs the key handshake, or TLS otherwise. An older plugin ignores
// the variable and the extra PEM block and serves mutual TLS as before; an
// older host offers nothing and gets mutual TLS from a newer plugin.

// transportEnv offers the keyed transport to the plugin.
const transportEnv = "ALEPH_PLUGIN_TRANSPORT"

// transportKeyed is transportEnv's value for the keyed unix transport.
const transportKeyed = "unix-key"

// keySocketSubdir is where a plugin that took the offer makes its socket,
// inside the host's socket directory: the host tells the transport from it.
const keySocketSubdir = "k"

// keyPEMType is the PEM block of the transport key in the handover pipe;
// older plugins skip blocks of types they do not know.
const keyPEMType = "ALEPH PLUGIN TRANSPORT KEY"

// transportKeySize is the size of the secret and of each nonce.
const transportKeySize = 32

// keyHandshakeTimeout bounds the key handshake when the caller gives no
// deadline (the plugin's side), so a peer that connects and says nothing
// holds nothing for long.
const keyHandshakeTimeout = 10 * time.Second

// Transport names, as (*Process).Transport reports them.
const (
	TransportMutualTLS = "mtls"
	TransportUnixKey   = "unix-key"
)

// Labels of the two proofs, so one side's answer is never the other's.
var (
	keyProofPlugin = []byte("aleph-sandbox plugin transport: plugin\x00")
	keyProofHost   = []byte("aleph-sandbox plugin transport: host\x00")
)

func keyProof(key, label, nHost, nPlugin []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(label)
	m.Write(nHost)
	m.Write(nPlugin)
	return m.Sum(nil)
}

// KeyAuthError is a peer refused by the keyed transport.
type KeyAuthError struct{ Reason string }

func (e *KeyAuthError) Error() string { return "plugin transport: peer refused: " + e.Reason }

// checkPeerUID refuses a peer whose uid, as the kernel recorded it at
// connect (or listen), is not this process's effective uid.
func checkPeerUID(conn net.Conn) error {
	uid, err := peerUID(conn)
	if err != nil {
		return &KeyAuthError{Reason: fmt.Sprintf("cannot read the peer's uid: %v", err)}
	}
	if uid != os.Geteuid() {
		return &KeyAuthError{Reason: fmt.Sprintf("peer uid %d is not this process's uid %d", uid, os.Geteuid())}
	}
	return nil
}

// hostKeyHandshake is the host's side: it sends its nonce, checks the
// plugin's proof, then proves itself.
func hostKeyHandshake(conn net.Conn, key []byte) error {
	if err := checkPeerUID(conn); err != nil {
		return err
	}
	nHost := make([]byte, transportKeySize)
	if _, err := rand.Read(nHost); err != nil {
		return err
	}
	if _, err := conn.Write(nHost); err != nil {
		return fmt.Errorf("plugin transport: %w", err)
	}
	buf := make([]byte, 2*transportKeySize)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return &KeyAuthError{Reason: fmt.Sprintf("no proof from the plugin: %v", err)}
	}
	proof, nPlugin := buf[:transportKeySize], buf[transportKeySize:]
	if !hmac.Equal(proof, keyProof(key, keyProofPlugin, nHost, nPlugin)) {
		return &KeyAuthError{Reason: "the plugin does not hold this launch's key"}
	}
	if _, err := conn.Write(keyProof(key, keyProofHost, nHost, nPlugin)); err != nil {
		return fmt.Errorf("plugin transport: %w", err)
	}
	return nil
}

// pluginKeyHandshake is the plugin's side.
func pluginKeyHandshake(conn net.Conn, key []byte) error {
	if err := checkPeerUID(conn); err != nil {
		return err
	}
	nHost := make([]byte, transportKeySize)
	if _, err := io.ReadFull(conn, nHost); err != nil {
		return &KeyAuthError{Reason: fmt.Sprintf("no nonce from the host: %v", err)}
	}
	nPlugin := make([]byte, transportKeySize)
	if _, err := rand.Read(nPlugin); err != nil {
		return err
	}
	if _, err := conn.Write(append(keyProof(key, keyProofPlugin, nHost, nPlugin), nPlugin...)); err != nil {
		return fmt.Errorf("plugin transport: %w", err)
	}
	got := make([]byte, transportKeySize)
	if _, err := io.ReadFull(conn, got); err != nil {
		return &KeyAuthError{Reason: fmt.Sprintf("no proof from the host: %v", err)}
	}
	if subtle.ConstantTimeCompare(got, keyProof(key, keyProofHost, nHost, nPlugin)) != 1 {
		return &KeyAuthError{Reason: "the host does not hold this launch's key"}
	}
	return nil
}

// keyAuthInfo is the AuthInfo of a connection of the keyed transport.
type keyAuthInfo struct{ credentials.CommonAuthInfo }

func (keyAuthInfo) AuthType() string { return TransportUnixKey }

// withDeadline runs f with conn's deadline set to the context's (or the
// default bound), and clears it after.
func withDeadline(ctx context.Context, conn net.Conn, f func() error) error {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(keyHandshakeTimeout)
	}
	_ = conn.SetDeadline(dl)
	err := f()
	_ = conn.SetDeadline(time.Time{})
	return err
}

// pluginKeyCreds are the plugin's gRPC server credentials on the keyed
// transport.
type pluginKeyCreds struct{ key []byte }

func (c *pluginKeyCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("plugin transport: server credentials used to dial")
}

func (c *pluginKeyCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	err := withDeadline(context.Background(), conn, func() error { return pluginKeyHandshake(conn, c.key) })
	if err != nil {
		return nil, nil, err
	}
	return conn, keyAuthInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (c *pluginKeyCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: TransportUnixKey}
}
func (c *pluginKeyCreds) Clone() credentials.TransportCredentials { return &pluginKeyCreds{key: c.key} }
func (c *pluginKeyCreds) OverrideServerName(string) error         { return nil }

// hostCreds are the host's gRPC credentials: the key handshake when the
// plugin made its socket where a plugin that took the offer does, mutual
// TLS otherwise. tlsConfig is the one go-plugin holds (it adds an older
// plugin's AutoMTLS certificate to it before dialling).
type hostCreds struct {
	tlsConfig *tls.Config
	key       []byte
	keyDir    string // the socket directory of the keyed transport; "" when not offered
	used      *atomic.Value
}

func (c *hostCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if c.keyDir != "" && conn.RemoteAddr() != nil && conn.RemoteAddr().Network() == "unix" &&
		filepath.Dir(conn.RemoteAddr().String()) == c.keyDir {
		err := withDeadline(ctx, conn, func() error { return hostKeyHandshake(conn, c.key) })
		if err != nil {
			return nil, nil, err
		}
		c.used.Store(TransportUnixKey)
		return conn, keyAuthInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
	}
	if c.tlsConfig == nil {
		return nil, nil, errors.New("plugin transport: the plugin did not take the keyed transport and no TLS is configured")
	}
	out, info, err := credentials.NewTLS(c.tlsConfig).ClientHandshake(ctx, authority, conn)
	if err == nil {
		c.used.Store(TransportMutualTLS)
	}
	return out, info, err
}

func (c *hostCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("plugin transport: host credentials used to serve")
}

func (c *hostCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", ServerName: "localhost"}
}
func (c *hostCreds) Clone() credentials.TransportCredentials { cc := *c; return &cc }
func (c *hostCreds) OverrideServerName(string) error         { return nil }
