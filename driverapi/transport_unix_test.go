//go:build linux || darwin

package driverapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/aleph-sandbox/aleph-sandbox/driverapi/proto/alephv1"
)

// launchSelf starts this test binary as a plugin (TestMain in
// driverapi_test.go serves a fake driver in mode kind).
func launchSelf(t *testing.T, kind string, mutualTLS bool) *Process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	proc, err := LaunchDriver(context.Background(), LaunchConfig{
		Path: exe, Env: []string{"ALEPH_DRIVERAPI_TEST_PLUGIN=" + kind}, MutualTLS: mutualTLS,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Kill)
	// Positive control: the host's own connection works.
	if _, err := proc.Driver().Capabilities(context.Background()); err != nil {
		t.Fatalf("Capabilities over the host's connection: %v", err)
	}
	return proc
}

// capabilitiesWith dials the plugin's socket with creds and makes one call.
func capabilitiesWith(t *testing.T, proc *Process, creds credentials.TransportCredentials) error {
	t.Helper()
	addr := proc.client.ReattachConfig().Addr
	conn, err := grpc.NewClient("passthrough:///plugin",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, addr.Network(), addr.String())
		}),
		grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pb.NewOsSandboxDriverClient(conn).Capabilities(ctx, &pb.CapabilitiesRequest{})
	return err
}

func TestPluginTransportIsKeyedOnPrivateUnixSocket(t *testing.T) {
	proc := launchSelf(t, "driver", false)
	if got := proc.Transport(); got != TransportUnixKey {
		t.Fatalf("transport %q, want %q on a private unix socket", got, TransportUnixKey)
	}
	addr := proc.client.ReattachConfig().Addr
	if filepath.Base(filepath.Dir(addr.String())) != keySocketSubdir || !privateDir(filepath.Dir(addr.String())) {
		t.Fatalf("socket %s is not in a private %q directory", addr, keySocketSubdir)
	}
	// A client of this uid that can reach the socket but does not hold
	// the launch's key is refused: in plain text, with another key, and
	// speaking TLS.
	if err := capabilitiesWith(t, proc, insecure.NewCredentials()); err == nil {
		t.Error("a plain-text client without the key was served")
	}
	// A client that goes through the handshake's motions without the
	// key (it ignores the plugin's proof and sends a guess of its own).
	if err := capabilitiesWith(t, proc, &guessingCreds{}); err == nil {
		t.Error("a client that does not hold the key was served")
	}
	keyDir := filepath.Dir(addr.String())
	// Positive control for the two refusals: the same dial with the
	// launch's key is served.
	if err := capabilitiesWith(t, proc, &hostCreds{key: proc.handover.key, keyDir: keyDir, used: &atomic.Value{}}); err != nil {
		t.Errorf("a client with the launch's key was refused: %v", err)
	}
}

func TestPluginTransportMutualTLSWhenAsked(t *testing.T) {
	proc := launchSelf(t, "driver", true)
	if got := proc.Transport(); got != TransportMutualTLS {
		t.Fatalf("transport %q with MutualTLS set", got)
	}
	if proc.handover.key != nil {
		t.Error("a transport key was made with MutualTLS set")
	}
	if err := capabilitiesWith(t, proc, insecure.NewCredentials()); err == nil {
		t.Error("a plain-text client was served under mutual TLS")
	}
	// The host's own TLS config is accepted (control: the refusal above is
	// TLS's, not a broken socket).
	if err := capabilitiesWith(t, proc, credentials.NewTLS(proc.handover.tlsConfig)); err != nil {
		t.Errorf("the host's TLS config was refused: %v", err)
	}
}

// An older plugin ignores the offer (and the key's PEM block): the host
// then speaks mutual TLS with it; the oldest speaks go-plugin's AutoMTLS.
func TestPluginTransportOlderPluginsKeepMutualTLS(t *testing.T) {
	for _, kind := range []string{"driver-ignores-offer", "driver-automtls"} {
		t.Run(kind, func(t *testing.T) {
			proc := launchSelf(t, kind, false)
			if got := proc.Transport(); got != TransportMutualTLS {
				t.Fatalf("transport %q with a plugin that does not take the offer", got)
			}
			if err := capabilitiesWith(t, proc, insecure.NewCredentials()); err == nil {
				t.Error("a plain-text client was served by a TLS plugin")
			}
		})
	}
}

func TestTakeKeyedTransportNeedsAPrivateDirectory(t *testing.T) {
	key := make([]byte, transportKeySize)
	for _, c := range []struct {
		name  string
		mode  os.FileMode
		offer string
		key   []byte
		want  bool
	}{
		{"private, offered", 0o700, transportKeyed, key, true},
		{"shared directory", 0o755, transportKeyed, key, false},
		{"not offered", 0o700, "", key, false},
		{"no key", 0o700, transportKeyed, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "sock")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, c.mode); err != nil {
				t.Fatal(err)
			}
			t.Setenv(socketDirEnv, dir)
			t.Setenv(transportEnv, c.offer)
			got := takeKeyedTransport(c.key)
			if got != c.want {
				t.Fatalf("takeKeyedTransport = %v, want %v", got, c.want)
			}
			if _, still := os.LookupEnv(transportEnv); still {
				t.Error("the offer's variable was left in the environment")
			}
			wantDir := dir
			if c.want {
				wantDir = filepath.Join(dir, keySocketSubdir)
			}
			if os.Getenv(socketDirEnv) != wantDir {
				t.Errorf("socket directory %q, want %q", os.Getenv(socketDirEnv), wantDir)
			}
		})
	}
}

// guessingCreds play the host's side of the key handshake without the key.
type guessingCreds struct{ hostCreds }

func (*guessingCreds) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	guess := make([]byte, transportKeySize)
	_, _ = rand.Read(guess)
	if _, err := conn.Write(guess); err != nil { // the nonce
		return nil, nil, err
	}
	if _, err := conn.Read(make([]byte, 2*transportKeySize)); err != nil {
		return nil, nil, err
	}
	if _, err := conn.Write(guess); err != nil { // the "proof"
		return nil, nil, err
	}
	return conn, keyAuthInfo{}, nil
}

// keyPeerScript plays one side of the key handshake in Python, so that it
// can run as another uid: "host" connects to argv[2] and proves the key,
// "plugin" listens there and answers.
const keyPeerScript = `
import hmac, hashlib, os, socket, sys
role, path, key = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
P = b"aleph-sandbox plugin transport: plugin\x00"
H = b"aleph-sandbox plugin transport: host\x00"
def mac(label, a, b): return hmac.new(key, label + a + b, hashlib.sha256).digest()
def recv(c, n):
    b = b""
    while len(b) < n:
        d = c.recv(n - len(b))
        if not d: sys.exit(0)
        b += d
    return b
if role == "host":
    c = socket.socket(socket.AF_UNIX); c.connect(path)
    nh = os.urandom(32); c.sendall(nh)
    r = recv(c, 64); c.sendall(mac(H, nh, r[32:]))
    c.recv(1)
else:
    s = socket.socket(socket.AF_UNIX); s.bind(path); s.listen(1)
    print("listening", flush=True)
    c, _ = s.accept()
    nh = recv(c, 32); np = os.urandom(32); c.sendall(mac(P, nh, np) + np)
    recv(c, 32)
`

// pythonAs starts keyPeerScript as uid (or as this process when uid < 0).
func pythonAs(t *testing.T, uid int, role, path string, key []byte) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(systemPython, "-c", keyPeerScript, role, path, hex.EncodeToString(key))
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	return cmd
}

// A peer of another uid that holds the key all the same is refused by
// both ends, from the uid the kernel reports; the same peer as this uid is
// accepted (the positive control).
func TestKeyedTransportRefusesAnotherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a peer as another uid (the main pass, as root, runs it)")
	}
	if _, err := os.Stat(systemPython); err != nil {
		t.Skip(systemPython + " plays the other uid's peer: not installed")
	}
	const nobody = 65534
	// A directory every uid can reach: the check under test is the uid,
	// not the directory's mode.
	dir, err := os.MkdirTemp("", "keyed-uid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, transportKeySize)
	_, _ = rand.Read(key)

	t.Run("plugin side", func(t *testing.T) {
		for _, c := range []struct {
			uid    int
			refuse bool
		}{{-1, false}, {nobody, true}} {
			path := filepath.Join(dir, "plugin.sock")
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			_ = os.Chmod(path, 0o777)
			peer := pythonAs(t, c.uid, "host", path, key)
			out := &strings.Builder{}
			peer.Stderr = out
			if err := peer.Start(); err != nil {
				t.Fatal(err)
			}
			conn, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			_, _, herr := (&pluginKeyCreds{key: key}).ServerHandshake(conn)
			conn.Close()
			_ = peer.Wait()
			ln.Close()
			var ke *KeyAuthError
			switch {
			case c.refuse && (!errors.As(herr, &ke) || !strings.Contains(herr.Error(), "peer uid 65534")):
				t.Errorf("a peer of uid %d holding the key: %v (stderr %q)", c.uid, herr, out)
			case !c.refuse && herr != nil:
				t.Errorf("a peer of this uid holding the key was refused: %v (stderr %q)", herr, out)
			}
		}
	})
	t.Run("host side", func(t *testing.T) {
		for _, c := range []struct {
			uid    int
			refuse bool
		}{{-1, false}, {nobody, true}} {
			path := filepath.Join(dir, "fake-plugin.sock")
			_ = os.Remove(path)
			peer := pythonAs(t, c.uid, "plugin", path, key)
			stdout, _ := peer.StdoutPipe()
			out := &strings.Builder{}
			peer.Stderr = out
			if err := peer.Start(); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			if n, _ := stdout.Read(buf); !strings.HasPrefix(string(buf[:n]), "listening") {
				_ = peer.Wait()
				t.Fatalf("the peer did not listen: %q", out)
			}
			conn, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			herr := withDeadline(context.Background(), conn, func() error { return hostKeyHandshake(conn, key) })
			conn.Close()
			_ = peer.Wait()
			var ke *KeyAuthError
			switch {
			case c.refuse && (!errors.As(herr, &ke) || !strings.Contains(herr.Error(), "peer uid 65534")):
				t.Errorf("a plugin of uid %d holding the key: %v (stderr %q)", c.uid, herr, out)
			case !c.refuse && herr != nil:
				t.Errorf("a plugin of this uid holding the key was refused: %v (stderr %q)", herr, out)
			}
		}
	})
}

// systemPython is an interpreter any uid may run (one under root's home,
// as a version manager installs it, is not).
const systemPython = "/usr/bin/python3"

func (c *guessingCreds) Clone() credentials.TransportCredentials { return c }
