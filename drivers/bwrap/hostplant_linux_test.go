//go:build linux

package bwrap

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// setIDTar is a tar archive holding one setuid executable, "tarred".
func setIDTar(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := []byte("#!/bin/sh\necho tarred\n")
	if err := tw.WriteHeader(&tar.Header{Name: "tarred", Mode: 0o4755, Size: int64(len(body)), Typeflag: tar.TypeReg,
		Uid: os.Getuid(), Gid: os.Getgid(), ModTime: time.Unix(1e9, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// No file with a set-id bit reaches the host from a command, by any of the
// usual routes, while ordinary modes, FIFOs and the set-group-id bit a
// directory inherits keep working.
func TestSetIDFilesNeverReachHost(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	// A setuid file the command can read (cp -p's source) and a setgid
	// directory in the workspace (what new directories inherit).
	src := newWorkspace(t)
	srcFile := filepath.Join(src, "suid")
	if err := os.WriteFile(srcFile, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(srcFile, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(srcFile); err != nil || fi.Mode()&os.ModeSetuid == 0 {
		t.Fatalf("control: host cannot make a setuid file: %v %v", fi, err)
	}
	sg := filepath.Join(ws, "sg")
	if err := os.Mkdir(sg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sg, 0o755|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "t.tar"), setIDTar(t), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
cp /bin/sh r && chmod 755 r && echo ok-chmod-755
chmod +x r && echo ok-chmod-x
chmod 4755 r 2>/dev/null && echo LEAK-chmod-4755
chmod u+s r 2>/dev/null && echo LEAK-chmod-u+s
chmod g+s r 2>/dev/null && echo LEAK-chmod-g+s
chmod 6755 r 2>/dev/null && echo LEAK-chmod-6755
install -m 4755 /bin/sh inst 2>/dev/null && echo LEAK-install
cp -p ` + srcFile + ` cpp 2>/dev/null; test -f cpp && echo ok-cp-p-ran
tar -xpf t.tar 2>/dev/null; test -f tarred && echo ok-tar-ran
python3 -c 'import os; os.close(os.open("pyopen", os.O_CREAT|os.O_WRONLY, 0o4755))' 2>/dev/null && echo LEAK-open
python3 -c 'import os; os.mknod("pyreg", 0o644)' 2>/dev/null && echo LEAK-mknod-regular
mknod dev c 1 3 2>/dev/null && echo LEAK-mknod-char
mkfifo p && test -p p && echo ok-mkfifo
mkdir sg/d && touch sg/f && echo ok-setgid-dir
`
	caps := driverapi.Capabilities{SpawnSubprocess: true, FSRead: []string{src}}
	r := drvRun(t, context.Background(), d, ws, caps, nil, "/bin/sh", "-c", script)
	if r.err != nil {
		t.Fatal(r.err)
	}
	for _, want := range []string{"ok-chmod-755", "ok-chmod-x", "ok-cp-p-ran", "ok-tar-ran", "ok-mkfifo", "ok-setgid-dir"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("positive control %s missing: stdout %q stderr %q", want, r.stdout, r.stderr)
		}
	}
	if strings.Contains(r.stdout, "LEAK") {
		t.Errorf("set-id or device creation succeeded inside: %q", r.stdout)
	}
	// What the host sees: the command ran (r is an executable copy), no
	// non-directory carries a set-id bit, no device node exists.
	if fi, err := os.Stat(filepath.Join(ws, "r")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("r on the host: %v %v (want mode 0755)", fi, err)
	}
	if fi, err := os.Lstat(filepath.Join(ws, "p")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("FIFO on the host: %v %v", fi, err)
	}
	// Inherited set-group-id on a new directory: allowed, and harmless.
	if fi, err := os.Stat(filepath.Join(sg, "d")); err != nil || fi.Mode()&os.ModeSetgid == 0 {
		t.Errorf("inherited setgid directory: %v %v", fi, err)
	}
	err := filepath.WalkDir(ws, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		m := fi.Mode()
		if m&(os.ModeDevice|os.ModeCharDevice) != 0 {
			t.Errorf("device node on the host: %s (%v)", p, m)
		}
		if !m.IsDir() && m&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("set-id file on the host: %s (%v)", p, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hostUnixSockets binds, in a fresh directory, a datagram socket and a
// stream listener as a host daemon would, and counts what reaches them.
type hostUnixSockets struct {
	dir              string
	dgram            *net.UnixConn
	streamConns      atomic.Int32
	dgramPath, sPath string
}

func newHostUnixSockets(t *testing.T) *hostUnixSockets {
	t.Helper()
	h := &hostUnixSockets{dir: newWorkspace(t)}
	h.dgramPath, h.sPath = filepath.Join(h.dir, "dgram.sock"), filepath.Join(h.dir, "stream.sock")
	var err error
	if h.dgram, err = net.ListenUnixgram("unixgram", &net.UnixAddr{Name: h.dgramPath, Net: "unixgram"}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", h.sPath)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.streamConns.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done; h.dgram.Close() })
	return h
}

// received drains the datagram socket: what was sent to it so far.
func (h *hostUnixSockets) received(t *testing.T) []string {
	t.Helper()
	var got []string
	buf := make([]byte, 256)
	for {
		h.dgram.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, _, err := h.dgram.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return got
			}
			t.Fatal(err)
		}
		got = append(got, string(buf[:n]))
	}
}

// unixReachScript tries every way to a host unix socket at DIR (argv[1])
// and checks that socketpair IPC works.
const unixReachScript = `
import socket, sys
d = sys.argv[1]
def attempt(name, f):
    try:
        f()
        print(name, "REACHED")
    except OSError as e:
        print(name, "refused", e.errno)
def dgram_sendto():
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"sendto", d + "/dgram.sock")
def dgram_sendmsg():
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendmsg([b"sendmsg"], [], 0, d + "/dgram.sock")
def pair_sendmsg():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendmsg([b"pair"], [], 0, d + "/dgram.sock")
def stream_connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(d + "/stream.sock")
for n, f in [("dgram_sendto", dgram_sendto), ("dgram_sendmsg", dgram_sendmsg),
             ("pair_sendmsg", pair_sendmsg), ("stream_connect", stream_connect)]:
    attempt(n, f)
a, b = socket.socketpair()
a.sendall(b"ping")
print("pair", b.recv(4).decode())
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
a.send(b"seq")
print("seqpacket", b.recv(3).decode())
`

var unixReachAttempts = []string{"dgram_sendto", "dgram_sendmsg", "pair_sendmsg", "stream_connect"}

// Host unix sockets visible in a read grant are out of reach in network
// none and allow_hosts; socketpair IPC keeps working. Under allow_all
// (no socket gate) the same script reaches them: the sockets are really
// there and reachable, the refusal is the filter's.
func TestHostUnixSocketsUnreachable(t *testing.T) {
	d := testDriver(t, options{})
	ctx := context.Background()
	hostCaps, err := d.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, prof driverapi.Profile, ws, script string, args ...string) drvResult {
		t.Helper()
		var out, errb lockedBuf
		exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/usr/bin/python3", Args: append([]string{"-c", script}, args...), Cwd: ws, Profile: prof,
			Timeout: 30 * time.Second, MaxOutputBytes: 1 << 16, Env: pathEnv()}, driverapi.Streams{Stdout: &out, Stderr: &errb})
		return drvResult{exit: exit, err: err, stdout: out.String(), stderr: errb.String()}
	}
	check := func(t *testing.T, mode driverapi.NetworkMode, proxy *driverapi.ProxyEndpoint, wantReached bool) (driverapi.Profile, string) {
		t.Helper()
		h := newHostUnixSockets(t)
		ws := newWorkspace(t)
		caps := driverapi.Capabilities{FSRead: []string{h.dir}, Network: driverapi.NetworkPolicy{Mode: mode}}
		if mode == driverapi.NetworkAllowHosts {
			caps.SpawnSubprocess = true // curl, for the route's own control
			caps.Network.Hosts = []string{"example.com"}
		}
		prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws, Proxy: proxy})
		if err != nil {
			t.Fatal(err)
		}
		r := run(t, prof, ws, unixReachScript, h.dir)
		expectOK(t, r)
		for _, a := range unixReachAttempts {
			want := a + " refused"
			if wantReached {
				want = a + " REACHED"
			}
			if !strings.Contains(r.stdout, want) {
				t.Errorf("%s: want %q in %q (stderr %q)", mode, want, r.stdout, r.stderr)
			}
		}
		if !strings.Contains(r.stdout, "pair ping") || !strings.Contains(r.stdout, "seqpacket seq") {
			t.Errorf("socketpair IPC broken: %q %q", r.stdout, r.stderr)
		}
		got, conns := h.received(t), h.streamConns.Load()
		if wantReached && (len(got) != 3 || conns != 1) {
			t.Errorf("control %s: host sockets got %q and %d connections, want 3 datagrams and 1", mode, got, conns)
		}
		if !wantReached && (len(got) != 0 || conns != 0) {
			t.Errorf("%s: host sockets got %q and %d connections from inside", mode, got, conns)
		}
		return prof, ws
	}
	t.Run("none", func(t *testing.T) { check(t, driverapi.NetworkNone, nil, false) })
	t.Run("allow_all control", func(t *testing.T) {
		if !hostCaps.Has(driverapi.FeatureNetworkAll) {
			t.Skip("allow_all not offered here")
		}
		check(t, driverapi.NetworkAllowAll, nil, true)
	})
	t.Run("allow_hosts", func(t *testing.T) {
		if !hostCaps.Has(driverapi.FeatureNetworkViaProxy) {
			if !hasUnavailable(hostCaps, driverapi.FeatureNetworkViaProxy) {
				t.Fatalf("network_via_proxy neither claimed nor explained: %+v", hostCaps)
			}
			t.Skip("allow_hosts is refused on this host (TestAllowHostsThroughBridge asserts the refusal)")
		}
		prof, ws := check(t, driverapi.NetworkAllowHosts, &driverapi.ProxyEndpoint{UnixSocket: fakeProxy(t)}, false)
		// The proxy route itself still works in the same profile.
		var out, errb lockedBuf
		exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", "curl -s --max-time 10 -x http://127.0.0.1:3128 http://example.com/u"},
			Cwd: ws, Profile: prof, Timeout: 30 * time.Second, MaxOutputBytes: 1 << 16, Env: pathEnv()}, driverapi.Streams{Stdout: &out, Stderr: &errb})
		if err != nil || exit.ExitCode != 0 || !strings.Contains(out.String(), "via-proxy GET http://example.com/u") {
			t.Fatalf("proxy route: err=%v exit=%+v out=%q err=%q", err, exit, out.String(), errb.String())
		}
	})
}

// The command's tmpfs mounts are bounded: by default /tmp and /dev/shm hold
// 1 GiB together, tmpfs_max_mb changes that, a memory limit lowers it, and
// /dev itself (a tmpfs --size cannot reach) is read-only with its devices
// working.
func TestTmpfsBounded(t *testing.T) {
	ws := newWorkspace(t)
	sizes := `df -B1 --output=size /tmp | tail -1; df -B1 --output=size /dev/shm | tail -1`
	t.Run("default", func(t *testing.T) {
		d := testDriver(t, options{})
		r := drvSh(t, d, ws, sizes+`
fallocate -l 1536M /tmp/big 2>&1 && echo LEAK-tmp-1.5G; rm -f /tmp/big
fallocate -l 512M /dev/shm/big 2>&1 && echo LEAK-shm-512M; rm -f /dev/shm/big
fallocate -l 64M /tmp/ok && rm /tmp/ok && echo ok-tmp-64M
echo x > /dev/shm/ok && echo ok-shm
touch /dev/planted 2>/dev/null && echo LEAK-dev-writable
echo x > /dev/null && echo ok-null
test "$(head -c 4 /dev/zero | od -An -tx1 | tr -d ' ')" = 00000000 && echo ok-zero
test "$(head -c 16 /dev/urandom | wc -c)" = 16 && echo ok-urandom
`)
		expectOK(t, r)
		f := strings.Fields(r.stdout)
		if len(f) < 2 || f[0] != "805306368" || f[1] != "268435456" {
			t.Errorf("tmpfs sizes %v, want /tmp 768 MiB and /dev/shm 256 MiB (stderr %q)", f, r.stderr)
		}
		for _, want := range []string{"No space left on device", "ok-tmp-64M", "ok-shm", "ok-null", "ok-zero", "ok-urandom"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("want %q in %q (stderr %q)", want, r.stdout, r.stderr)
			}
		}
		if strings.Contains(r.stdout, "LEAK") {
			t.Errorf("unbounded: %q", r.stdout)
		}
	})
	t.Run("tmpfs_max_mb", func(t *testing.T) {
		// Real writes, not just fallocate: dd stops at /tmp's 48 MiB.
		d := testDriver(t, options{TmpfsMaxMB: 64})
		r := drvSh(t, d, ws, sizes+`
dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; du -B1 --apparent-size /tmp/fill | cut -f1; rm -f /tmp/fill`)
		expectOK(t, r)
		f := strings.Fields(r.stdout)
		if len(f) < 2 || f[0] != "50331648" || f[1] != "16777216" {
			t.Errorf("tmpfs sizes %v, want 48 MiB and 16 MiB", f)
		}
		if !strings.Contains(r.stdout, "No space left on device") || !strings.Contains(r.stdout, "\n50331648\n") {
			t.Errorf("dd past the bound: %q (stderr %q)", r.stdout, r.stderr)
		}
	})
	t.Run("memory limit", func(t *testing.T) {
		d := testDriver(t, options{})
		caps := driverapi.Capabilities{SpawnSubprocess: true, MaxMemoryMB: 128}
		r := drvRun(t, context.Background(), d, ws, caps, nil, "/bin/sh", "-c", sizes+`
dd if=/dev/zero of=/tmp/fill bs=1M count=128 2>&1; rm -f /tmp/fill; echo survived`)
		var ue *unavailableError
		if errors.As(r.err, &ue) {
			t.Skipf("memory limits are not enforceable here: %v", r.err)
		}
		expectOK(t, r)
		f := strings.Fields(r.stdout)
		if len(f) < 2 || f[0] != "100663296" || f[1] != "33554432" {
			t.Errorf("tmpfs sizes %v under a 128 MiB limit, want 96 MiB and 32 MiB", f)
		}
		// Filling /tmp alone ends in ENOSPC, not in an OOM kill.
		if !strings.Contains(r.stdout, "No space left on device") || !strings.Contains(r.stdout, "survived") {
			t.Errorf("fill under the memory limit: %q (stderr %q)", r.stdout, r.stderr)
		}
	})
}

// The tmpfs budget a plan carries is checked like the rest of it: never
// missing, never above the memory limit, never out of range.
func TestPlanTmpfsBudget(t *testing.T) {
	ws := newWorkspace(t)
	if got := tmpfsBudget(1<<30, 0); got != 1<<30 {
		t.Errorf("budget without a memory limit: %d", got)
	}
	if got := tmpfsBudget(1<<30, 128<<20); got != 128<<20 {
		t.Errorf("budget under 128 MiB: %d", got)
	}
	if tmp, shm := tmpfsSizes(1<<20 + 1); tmp+shm > 1<<20+1 || tmp == 0 || shm == 0 || tmp%4096 != 0 || shm%4096 != 0 {
		t.Errorf("sizes %d + %d", tmp, shm)
	}
	p, err := buildPlan(driverapi.ProfileRequest{Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{MaxMemoryMB: 64}})
	if err != nil {
		t.Fatal(err)
	}
	if p.TmpfsBytes != 64<<20 {
		t.Fatalf("plan budget %d under a 64 MiB limit", p.TmpfsBytes)
	}
	for _, c := range []struct {
		bytes uint64
		ok    bool
	}{{64 << 20, true}, {1 << 20, true}, {64<<20 + 1, false}, {0, false}, {1<<20 - 1, false}} {
		q := p
		q.TmpfsBytes = c.bytes
		data, err := q.Encode()
		if err != nil {
			t.Fatal(err)
		}
		_, err = decodePlan(data)
		var pe *driverapi.ProfileError
		if c.ok != (err == nil) || (err != nil && !errors.As(err, &pe)) {
			t.Errorf("tmpfs_bytes %d: %v", c.bytes, err)
		}
	}
}
