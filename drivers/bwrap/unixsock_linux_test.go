//go:build linux

package bwrap

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The command's own unix sockets work (sandboxinit/unixsock_linux.go,
// unixguard_linux.go) while every socket the host made stays out of reach:
// one program inside does the positive controls and the attacks, and the
// host's listeners count what reached them.

// unixSockScript prints "OK name" or "FAIL name detail" per check.
// argv: workspace, read grant, write grant, abstract name of the host's.
const unixSockScript = `
import array, ctypes, errno, os, socket, sys, threading
ws, rd, wr, ab = sys.argv[1:5]
def res(name, ok, detail=""):
    print(("OK " if ok else "FAIL ") + name + ((" " + detail) if detail else ""), flush=True)
def denied(name, f, want):
    try:
        f()
        res(name, False, "reached")
    except OSError as e:
        res(name, e.errno == want, "errno %d %s" % (e.errno, e))
U = socket.AF_UNIX

# Positive controls: sockets of the command's own.
for d in (ws, "/tmp"):
    p = os.path.join(d, "own.sock")
    s = socket.socket(U); s.bind(p); s.listen(8)
    c = socket.socket(U); c.connect(p); a, _ = s.accept()
    c.sendall(b"ping")
    res("own-stream " + d, a.recv(4) == b"ping" and s.getsockname() == p, repr(s.getsockname()))
os.chdir(ws)
s = socket.socket(U); s.bind("rel.sock"); s.listen(1)
c = socket.socket(U); c.connect("rel.sock"); a, _ = s.accept()
res("own-relative", True)
s = socket.socket(U); s.bind("\0aleph-own-" + ab); s.listen(1)
c = socket.socket(U); c.connect("\0aleph-own-" + ab); a, _ = s.accept()
res("own-abstract", True)
srv = socket.socket(U, socket.SOCK_DGRAM); srv.bind(os.path.join(ws, "own.dgram"))
cl = socket.socket(U, socket.SOCK_DGRAM); cl.sendto(b"dg", os.path.join(ws, "own.dgram"))
cl.sendmsg([b"dm"], [], 0, os.path.join(ws, "own.dgram"))
res("own-dgram-sendto", srv.recv(8) == b"dg" and srv.recv(8) == b"dm")
x, y = socket.socketpair(U, socket.SOCK_DGRAM)
x.send(b"d1"); x.sendmsg([b"d", b"2"])
r, w = os.pipe()
x.sendmsg([b"fd"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [w]))])
ok = y.recv(8) == b"d1" and y.recv(8) == b"d2"
msg, anc, _, _ = y.recvmsg(8, socket.CMSG_SPACE(4))
got = array.array("i"); got.frombytes(anc[0][2][:4])
os.write(got[0], b"z")
res("dgram-pair", ok and msg == b"fd" and os.read(r, 1) == b"z")
x, y = socket.socketpair(U, socket.SOCK_SEQPACKET)
x.send(b"s1"); res("seqpacket-pair", y.recv(8) == b"s1")

# The host's sockets: in the workspace, a read grant, a write grant.
for name, p in (("ws", ws), ("read", rd), ("write", wr)):
    denied("host-stream-" + name, lambda: socket.socket(U).connect(os.path.join(p, "host.sock")), errno.EACCES)
os.symlink(os.path.join(ws, "host.sock"), "/tmp/host.link")
denied("host-stream-symlink", lambda: socket.socket(U).connect("/tmp/host.link"), errno.EACCES)
d = socket.socket(U, socket.SOCK_DGRAM)
denied("host-dgram-sendto", lambda: d.sendto(b"x", os.path.join(ws, "host.dgram")), errno.EACCES)
denied("host-dgram-sendmsg", lambda: d.sendmsg([b"x"], [], 0, os.path.join(ws, "host.dgram")), errno.EACCES)
denied("host-dgram-connect", lambda: d.connect(os.path.join(ws, "host.dgram")), errno.EACCES)
x, y = socket.socketpair(U, socket.SOCK_DGRAM)
denied("host-dgram-pair-sendmsg", lambda: x.sendmsg([b"x"], [], 0, os.path.join(ws, "host.dgram")), errno.EACCES)
denied("host-abstract", lambda: socket.socket(U).connect("\0" + ab), errno.ECONNREFUSED)

# Races between the check and the use.
own = os.path.join(ws, "race-own.sock")
ls = socket.socket(U); ls.bind(own); ls.listen(64)
accepted = [0]
def acceptor():
    while True:
        try:
            a, _ = ls.accept(); a.close(); accepted[0] += 1
        except OSError:
            return
threading.Thread(target=acceptor, daemon=True).start()
stop = [False]
link = os.path.join(ws, "race.link")
def swap_links():
    i = 0
    while not stop[0]:
        t = link + ".tmp"
        os.symlink(own if i % 2 == 0 else os.path.join(ws, "host.sock"), t)
        os.replace(t, link); i += 1
th = threading.Thread(target=swap_links); th.start()
ok = den = other = 0
for i in range(400):
    c = socket.socket(U)
    try:
        c.connect(link); ok += 1
    except OSError as e:
        if e.errno == errno.EACCES: den += 1
        else: other += 1
    c.close()
stop[0] = True; th.join()
res("race-symlink", True, "own=%d denied=%d other=%d" % (ok, den, other))
# The host's socket renamed over the path and back, under the command.
place = os.path.join(ws, "race.place")
hostp = os.path.join(ws, "host.sock")
stop[0] = False
def swap_renames():
    while not stop[0]:
        os.rename(own, place); os.rename(place, own)
        os.rename(hostp, place); os.rename(place, hostp)
th = threading.Thread(target=swap_renames); th.start()
for i in range(400):
    c = socket.socket(U)
    try: c.connect(place)
    except OSError: pass
    c.close()
stop[0] = True; th.join()
res("race-rename", True)
# The address in memory flipped by another thread while connect runs.
libc = ctypes.CDLL(None, use_errno=True)
def sun(path):
    b = ctypes.create_string_buffer(110)
    ctypes.memmove(b, bytes([U & 0xff, U >> 8]) + path.encode() + b"\0", 2 + len(path) + 1)
    return b
buf, a_own, a_host = sun(own), sun(own), sun(hostp)
stop[0] = False
def flip():
    i = 0
    while not stop[0]:
        ctypes.memmove(buf, a_host if i % 2 else a_own, 110); i += 1
th = threading.Thread(target=flip); th.start()
for i in range(400):
    c = socket.socket(U)
    libc.connect(c.fileno(), buf, 110)
    c.close()
stop[0] = True; th.join()
res("race-memory", True)
ls.close()

# allow_hosts: the route still works, through connect and sendmsg made by
# the launcher, and TCP reaches the bridge's ports alone.
if len(sys.argv) > 5 and sys.argv[5] == "route":
    def ask(port, path, use_sendmsg):
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        req = b"GET http://example.com/" + path + b" HTTP/1.0\r\n\r\n"
        if use_sendmsg: c.sendmsg([req[:5], req[5:]])
        else: c.sendall(req)
        got = b""
        while True:
            b = c.recv(4096)
            if not b: break
            got += b
        return b"via-proxy GET http://example.com/" + path in got, got[-60:]
    ok, got = ask(3128, b"u", False); res("route-bridge", ok, repr(got))
    ok, got = ask(1080, b"m", True); res("route-bridge-sendmsg", ok, repr(got))
    denied("route-other-port", lambda: socket.create_connection(("127.0.0.1", 8080), timeout=5), errno.EACCES)
    denied("route-other-port6", lambda: socket.socket(socket.AF_INET6).connect(("::1", 8080)), errno.EACCES)
    denied("route-fastopen", lambda: socket.socket().sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", 8080)), errno.EACCES)
    denied("route-proxy-socket", lambda: socket.socket(U).connect("/run/aleph-sandbox/proxy.sock"), errno.EACCES)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 0))
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"ud", u.getsockname())
    res("route-own-udp", u.recv(8) == b"ud")
print("DONE accepted=%d" % accepted[0], flush=True)
`

// hostListener is a stream listener of the host's at path (or an abstract
// name with a leading '@') counting what reaches it.
func hostListener(t *testing.T, path string) *atomic.Int64 {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return &n
}

// hostDgram is a datagram socket of the host's at path counting what
// reaches it.
func hostDgram(t *testing.T, path string) *atomic.Int64 {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var n atomic.Int64
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := c.ReadFrom(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return &n
}

func realTempDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// An unprivileged driver's command must reach the grants.
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// checkUnixSockets runs the script on d under network none and checks
// every line of it and the host's counters.
func checkUnixSockets(t *testing.T, d *Driver) {
	t.Helper()
	checkUnixSocketsIn(t, d, "")
}

// checkUnixSocketsIn runs the script under network none, or under
// allow_hosts routed to the proxy listening at proxy when it is set.
func checkUnixSocketsIn(t *testing.T, d *Driver, proxy string) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skipf("/usr/bin/python3 is needed for the socket program: %v", err)
	}
	ws, rd, wr := newWorkspace(t), realTempDir(t), realTempDir(t)
	abstract := fmt.Sprintf("aleph-host-%d-%d", os.Getpid(), time.Now().UnixNano())
	reached := map[string]*atomic.Int64{
		"workspace":   hostListener(t, filepath.Join(ws, "host.sock")),
		"read grant":  hostListener(t, filepath.Join(rd, "host.sock")),
		"write grant": hostListener(t, filepath.Join(wr, "host.sock")),
		"abstract":    hostListener(t, "@"+abstract),
		"datagram":    hostDgram(t, filepath.Join(ws, "host.dgram")),
	}
	for _, p := range []string{filepath.Join(ws, "host.sock"), filepath.Join(ws, "host.dgram"), rd, wr, filepath.Join(rd, "host.sock"), filepath.Join(wr, "host.sock")} {
		// An unprivileged command must be allowed to write to them: only
		// the guard may stand in the way.
		_ = os.Chmod(p, 0o777)
	}
	caps := driverapi.Capabilities{FSRead: []string{rd}, FSWrite: []string{wr}}
	var endpoint *driverapi.ProxyEndpoint
	route := ""
	if proxy != "" {
		caps.Network = driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}
		endpoint, route = &driverapi.ProxyEndpoint{UnixSocket: proxy}, "route"
	}
	ctx := context.Background()
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws, Proxy: endpoint})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb lockedBuf
	exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/usr/bin/python3", Args: []string{"-c", unixSockScript, ws, rd, wr, abstract, route},
		Env: pathEnv(), Cwd: ws, Profile: prof, Timeout: 60 * time.Second, MaxOutputBytes: 1 << 20, CommandID: t.Name()},
		driverapi.Streams{Stdout: &out, Stderr: &errb})
	r := drvResult{exit: exit, err: err, stdout: out.String(), stderr: errb.String()}
	if r.err != nil {
		t.Fatalf("driver error %v", r.err)
	}
	t.Logf("stdout:\n%s", r.stdout)
	want := []string{"own-stream " + ws, "own-stream /tmp", "own-relative", "own-abstract", "own-dgram-sendto",
		"dgram-pair", "seqpacket-pair", "host-stream-ws", "host-stream-read", "host-stream-write",
		"host-stream-symlink", "host-dgram-sendto", "host-dgram-sendmsg", "host-dgram-connect",
		"host-dgram-pair-sendmsg", "host-abstract", "race-symlink", "race-rename", "race-memory"}
	if proxy != "" {
		want = append(want, "route-bridge", "route-bridge-sendmsg", "route-other-port", "route-other-port6",
			"route-fastopen", "route-proxy-socket", "route-own-udp")
	}
	lines := map[string]string{}
	for _, l := range strings.Split(r.stdout, "\n") {
		f := strings.SplitN(l, " ", 2)
		if len(f) == 2 && (f[0] == "OK" || f[0] == "FAIL") {
			name := f[1]
			for _, w := range want {
				if name == w || strings.HasPrefix(name, w+" ") {
					lines[w] = l
				}
			}
		}
	}
	for _, w := range want {
		l, ok := lines[w]
		switch {
		case !ok:
			t.Errorf("%s: no result (exit %d, stderr %q)", w, r.exit.ExitCode, r.stderr)
		case !strings.HasPrefix(l, "OK "):
			t.Errorf("%s", l)
		}
	}
	if r.exit.ExitCode != 0 || !strings.Contains(r.stdout, "DONE accepted=") {
		t.Errorf("the program did not finish: exit %d, stderr %q", r.exit.ExitCode, r.stderr)
	}
	// Each race reached the command's own listener at least once: the
	// checks really ran while the path and the memory swung (the
	// race-symlink line says how often each way).
	if i := strings.Index(r.stdout, "DONE accepted="); i >= 0 {
		n, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(r.stdout[i+len("DONE accepted="):], "\n", 2)[0]))
		if n < 1 {
			t.Errorf("the races never reached the command's own socket (accepted=%d)", n)
		}
	}
	for name, n := range reached {
		if got := n.Load(); got != 0 {
			t.Errorf("the host's %s socket was reached %d times", name, got)
		}
	}
}

func TestUnixSocketsOwnHostUnreachable(t *testing.T) {
	checkUnixSockets(t, testDriver(t, options{Prepared: preparedOff}))
}

// Under allow_hosts the command has unix sockets of its own as under
// network none, the host's stay out of reach (the proxy's own socket,
// bound inside the sandbox, too), the route to the proxy still works and
// TCP reaches the bridge's ports alone: the launcher makes the command's
// connects and holds the pin Landlock holds for the command's own calls.
func TestUnixSocketsAllowHosts(t *testing.T) {
	d := testDriver(t, options{})
	caps, err := d.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !caps.Has(driverapi.FeatureNetworkViaProxy) {
		if !hasUnavailable(caps, driverapi.FeatureNetworkViaProxy) {
			t.Fatalf("network_via_proxy neither claimed nor explained: %+v", caps)
		}
		t.Skip("allow_hosts is refused on this host (TestAllowHostsThroughBridge asserts the refusal)")
	}
	checkUnixSocketsIn(t, d, fakeProxy(t))
}

// The launcher's rule for inet addresses: under allow_hosts a stream
// socket reaches the bridge's ports alone, whatever the family or
// address; under network none anything.
func TestUnixGuardInetRule(t *testing.T) {
	in4 := func(port uint16) []byte {
		b := make([]byte, 16)
		binary.NativeEndian.PutUint16(b, unix.AF_INET)
		binary.BigEndian.PutUint16(b[2:], port)
		copy(b[4:], []byte{10, 0, 0, 1})
		return b
	}
	in6 := func(port uint16) []byte {
		b := make([]byte, 28)
		binary.NativeEndian.PutUint16(b, unix.AF_INET6)
		binary.BigEndian.PutUint16(b[2:], port)
		b[23] = 1
		return b
	}
	unspec := make([]byte, 16)
	routed := inetRuleFor(socketProxyRouted, bridgePorts())
	for _, c := range []struct {
		name string
		rule inetRule
		typ  int
		addr []byte
		want unix.Errno
	}{
		{"routed bridge http", routed, unix.SOCK_STREAM, in4(bridgeHTTPPort), 0},
		{"routed bridge socks v6", routed, unix.SOCK_STREAM, in6(bridgeSOCKSPort), 0},
		{"routed other port", routed, unix.SOCK_STREAM, in4(8080), unix.EACCES},
		{"routed other port v6", routed, unix.SOCK_STREAM, in6(443), unix.EACCES},
		{"routed raw", routed, unix.SOCK_RAW, in4(22), unix.EACCES},
		{"routed short", routed, unix.SOCK_STREAM, in4(8080)[:3], unix.EINVAL},
		{"routed disconnect", routed, unix.SOCK_STREAM, unspec, 0},
		{"routed datagram", routed, unix.SOCK_DGRAM, in4(53), 0},
		{"none any port", inetRuleFor(socketLoopback, nil), unix.SOCK_STREAM, in4(8080), 0},
		{"unix_only closed", inetRuleFor(socketUnixOnly, nil), unix.SOCK_STREAM, in4(bridgeHTTPPort), unix.EACCES},
	} {
		if got := c.rule.allows(c.typ, c.addr); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestUnixSocketsPrepared(t *testing.T) {
	needPreparable(t)
	d := testDriver(t, options{Prepared: preparedAlways})
	checkUnixSockets(t, d)
	r := drvRun(t, context.Background(), d, newWorkspace(t), driverapi.Capabilities{}, nil, "/bin/true")
	if r.exit.Details["prepared"] != "1" {
		t.Fatalf("prepared=%q: want a prepared sandbox", r.exit.Details["prepared"])
	}
}

// Python's multiprocessing.Manager: a server process listening on a unix
// socket in a temporary directory, its clients connecting to it.
func TestUnixSocketsPythonManager(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skipf("/usr/bin/python3 is needed: %v", err)
	}
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	const prog = `
import multiprocessing as mp, sys, tempfile
if __name__ == "__main__":
    tempfile.tempdir = sys.argv[1]
    with mp.Manager() as m:
        d = m.dict(); d["a"] = 1
        print("manager", dict(d), m.address, flush=True)
`
	for _, dir := range []string{ws, "/tmp"} {
		r := drvRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true}, nil, "/usr/bin/python3", "-c", prog, dir)
		if r.err != nil || r.exit.ExitCode != 0 || !strings.Contains(r.stdout, "manager {'a': 1} "+dir+"/") {
			t.Errorf("Manager in %s: err=%v exit=%d stdout=%q stderr=%q", dir, r.err, r.exit.ExitCode, r.stdout, r.stderr)
		}
	}
	// The same under allow_hosts, where the host list is given.
	ctx := context.Background()
	caps, err := d.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !caps.Has(driverapi.FeatureNetworkViaProxy) {
		t.Logf("allow_hosts is refused on this host: the Manager ran under none only")
		return
	}
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws, Proxy: &driverapi.ProxyEndpoint{UnixSocket: fakeProxy(t)},
		Capabilities: driverapi.Capabilities{SpawnSubprocess: true, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb lockedBuf
	exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/usr/bin/python3", Args: []string{"-c", prog, "/tmp"}, Env: pathEnv(), Cwd: ws, Profile: prof,
		Timeout: 30 * time.Second, MaxOutputBytes: 1 << 16}, driverapi.Streams{Stdout: &out, Stderr: &errb})
	if err != nil || exit.ExitCode != 0 || !strings.Contains(out.String(), "manager {'a': 1} /tmp/") {
		t.Errorf("Manager under allow_hosts: err=%v exit=%d stdout=%q stderr=%q", err, exit.ExitCode, out.String(), errb.String())
	}
}
