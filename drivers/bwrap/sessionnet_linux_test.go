//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// pyServe serves one TCP connection on 127.0.0.1:PORT: it prints its
// network namespace and "listening", answers the first client with REPLY
// and exits (after 30 s without a client, with status 3).
const pyServe = `
import os, socket, sys
port, reply = int(sys.argv[1]), sys.argv[2]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen(4); s.settimeout(30)
print(os.readlink("/proc/self/ns/net")); print("listening", flush=True)
try:
    c, _ = s.accept()
except socket.timeout:
    sys.exit(3)
c.sendall(reply.encode()); c.close()
`

// pyConnect connects to 127.0.0.1:PORT and prints what it reads, or
// "refused"; first it proves its own loopback works (bind, connect, echo)
// with "own-loopback-ok".
const pyConnect = `
import os, socket, sys
port = int(sys.argv[1])
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(1)
c = socket.create_connection(l.getsockname(), timeout=5); a, _ = l.accept()
c.sendall(b"x"); assert a.recv(1) == b"x"
print("own-loopback-ok", os.readlink("/proc/self/ns/net"))
try:
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    print("got:" + c.recv(100).decode())
except ConnectionRefusedError:
    print("refused")
`

// sessionNetDriver is a bwrap-tier driver whose sessions share a network
// namespace; it skips only where no sandbox can be built at all.
func sessionNetDriver(t *testing.T) *Driver {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 for the loopback programs")
	}
	d := testDriver(t, options{})
	h := d.probe()
	if h.sandboxErr != nil {
		t.Skipf("no sandbox here: %v", h.sandboxErr)
	}
	if h.tier != tierBwrap {
		t.Skipf("tier %s has no network namespaces", h.tier)
	}
	if h.sessionNet == "" {
		// Root and an unprivileged user with nsenter, unshare and the
		// user+PID guard (this host, CI) must have it.
		t.Fatalf("no shared session namespace: %s", h.sessionNetWhy)
	}
	return d
}

// freeHostPort returns a TCP port nothing on the host's loopback listens on.
func freeHostPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// lineWriter collects output and signals when a line matching re appears.
type lineWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	re   *regexp.Regexp
	seen chan struct{}
	once sync.Once
}

func newLineWriter(re string) *lineWriter {
	return &lineWriter{re: regexp.MustCompile(re), seen: make(chan struct{})}
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.re.Match(w.buf.Bytes()) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func sessionRun(ctx context.Context, d *Driver, prof driverapi.Profile, ws, session string, stdout, stderr *lineWriter, args ...string) (driverapi.Exit, error) {
	return d.Run(ctx, driverapi.RunSpec{
		Program: "/usr/bin/python3", Args: args, Env: []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}},
		Cwd: ws, Profile: prof, Timeout: 60 * time.Second, MaxOutputBytes: 1 << 20,
		SessionID: session, CommandID: fmt.Sprintf("%s-%d", session, time.Now().UnixNano()),
	}, driverapi.Streams{Stdout: stdout, Stderr: stderr})
}

// netnsHolders lists the processes of the host in, or holding a descriptor
// of, the network namespace with inode ino.
func netnsHolders(ino uint64) []string {
	want := fmt.Sprintf("net:[%d]", ino)
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		dir := "/proc/" + p.Name()
		if l, _ := os.Readlink(dir + "/ns/net"); l == want {
			cl, _ := os.ReadFile(dir + "/cmdline")
			out = append(out, p.Name()+" (in it: "+strings.ReplaceAll(string(cl), "\x00", " ")+")")
		}
		fds, _ := os.ReadDir(dir + "/fd")
		for _, fd := range fds {
			if l, _ := os.Readlink(dir + "/fd/" + fd.Name()); l == want {
				out = append(out, p.Name()+" (fd "+fd.Name()+")")
			}
		}
	}
	return out
}

var nsInodeRE = regexp.MustCompile(`net:\[(\d+)\]`)

func nsInode(t *testing.T, s string) uint64 {
	t.Helper()
	m := nsInodeRE.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("no network namespace in %q", s)
	}
	n, _ := strconv.ParseUint(m[1], 10, 64)
	return n
}

// TestSessionNetworkShared: under network none, a listener one command of
// session A opens answers a concurrent command of session A; a command of
// session B, the host, and a command without a session cannot reach it,
// though each has a working loopback of its own (positive controls). The
// namespace is released when the session is forgotten.
func TestSessionNetworkShared(t *testing.T) {
	d := sessionNetDriver(t)
	ws := newWorkspace(t)
	ctx := context.Background()
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(freeHostPort(t))

	srvOut, srvErr := newLineWriter(`listening\n`), newLineWriter(`^$`)
	type res struct {
		exit driverapi.Exit
		err  error
	}
	srvDone := make(chan res, 1)
	go func() {
		e, err := sessionRun(ctx, d, prof, ws, "session-A", srvOut, srvErr, "-c", pyServe, port, "hello-from-A")
		srvDone <- res{e, err}
	}()
	select {
	case <-srvOut.seen:
	case r := <-srvDone:
		t.Fatalf("server ended before listening: %+v %v stdout %q stderr %q", r.exit, r.err, srvOut, srvErr)
	case <-time.After(30 * time.Second):
		t.Fatalf("server not listening: stdout %q stderr %q", srvOut, srvErr)
	}
	ino := nsInode(t, srvOut.String())

	// The host's loopback is another stack: nothing listens there.
	if c, err := net.DialTimeout("tcp4", "127.0.0.1:"+port, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("the host reached the sandbox's listener on port %s", port)
	}

	client := func(session string) string {
		t.Helper()
		out, errw := newLineWriter(`^$`), newLineWriter(`^$`)
		e, err := sessionRun(ctx, d, prof, ws, session, out, errw, "-c", pyConnect, port)
		if err != nil || e.ExitCode != 0 || !strings.Contains(out.String(), "own-loopback-ok") {
			t.Fatalf("client of %q: %+v %v stdout %q stderr %q", session, e, err, out, errw)
		}
		return out.String()
	}
	if out := client("session-B"); !strings.Contains(out, "refused") || nsInode(t, out) == ino {
		t.Errorf("session B reached session A's listener (or shares its namespace): %q", out)
	}
	if out := client(""); !strings.Contains(out, "refused") || nsInode(t, out) == ino {
		t.Errorf("a command without a session reached session A's listener: %q", out)
	}
	if out := client("session-A"); !strings.Contains(out, "got:hello-from-A") || nsInode(t, out) != ino {
		t.Errorf("session A's second command did not reach its listener: %q", out)
	}
	r := <-srvDone
	if r.err != nil || r.exit.ExitCode != 0 {
		t.Fatalf("server: %+v %v stderr %q", r.exit, r.err, srvErr)
	}

	if held := d.heldInodes(); len(held) != 2 || (held[0] != ino && held[1] != ino) {
		t.Fatalf("held namespaces %v, want session A's %d and session B's", held, ino)
	}
	if h := netnsHolders(ino); len(h) == 0 {
		t.Fatal("positive control: nothing holds session A's namespace before the forget")
	}
	if err := d.ForgetSession(ctx, "session-A"); err != nil {
		t.Fatal(err)
	}
	if h := netnsHolders(ino); len(h) != 0 {
		t.Fatalf("session A's namespace is still held after the forget: %v", h)
	}
	if len(d.heldInodes()) != 1 {
		t.Fatalf("held after forgetting A: %v", d.heldInodes())
	}
	// The next command of A gets a fresh namespace (the kernel may give
	// it the freed inode number again).
	if out := client("session-A"); !strings.Contains(out, "refused") {
		t.Errorf("after the forget session A still reaches the old namespace: %q", out)
	}
	var ie *driverapi.InvalidSpecError
	if err := d.ForgetSession(ctx, ""); !errors.As(err, &ie) {
		t.Errorf("ForgetSession(\"\") = %v, want InvalidSpecError", err)
	}
	d.ForgetSession(ctx, "session-A")
	d.ForgetSession(ctx, "session-B")
	if held := d.heldInodes(); len(held) != 0 {
		t.Errorf("held after forgetting every session: %v", held)
	}
}

// TestSessionNetworkHostListenerUnreachable: a listener on the host's
// loopback is out of reach of a session's command, whose own loopback works.
func TestSessionNetworkHostListenerUnreachable(t *testing.T) {
	d := sessionNetDriver(t)
	ws := newWorkspace(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ctx := context.Background()
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	out, errw := newLineWriter(`^$`), newLineWriter(`^$`)
	e, err := sessionRun(ctx, d, prof, ws, "s-host", out, errw, "-c", pyConnect, port)
	if err != nil || e.ExitCode != 0 || !strings.Contains(out.String(), "own-loopback-ok") || !strings.Contains(out.String(), "refused") {
		t.Fatalf("%+v %v stdout %q stderr %q", e, err, out, errw)
	}
	select {
	case <-accepted:
		t.Fatal("the host listener accepted a connection from the sandbox")
	default:
	}
	d.ForgetSession(ctx, "s-host")
}

// TestSessionNetworkLandlockTierDenies: without namespaces there is no
// loopback of the sandbox's own, so network none keeps denying inet
// sockets there, says so, and never claims a loopback; a plan that asks for
// the loopback mode is run unix_only.
func TestSessionNetworkLandlockTierDenies(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	d := tierDriver(t, options{})
	ctx := context.Background()
	hc, err := d.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := hc.Details[driverapi.DetailNetworkNoneLoopback]; ok || !strings.Contains(hc.Details["network_none"], "denied") {
		t.Fatalf("the Landlock tier reports %q = %q, network_none %q", driverapi.DetailNetworkNoneLoopback,
			hc.Details[driverapi.DetailNetworkNoneLoopback], hc.Details["network_none"])
	}
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := decodePlan(prof.Data)
	if err != nil || plan.SocketMode != socketUnixOnly {
		t.Fatalf("Landlock tier plan for none: %q %v", plan.SocketMode, err)
	}
	plan.SocketMode = socketLoopback
	if m := d.landlockInitSpec(plan).SocketMode; m != socketUnixOnly {
		t.Fatalf("a loopback plan runs with socket mode %q in the Landlock tier", m)
	}
	out, errw := newLineWriter(`^$`), newLineWriter(`^$`)
	e, err := sessionRun(ctx, d, prof, ws, "tier-session", out, errw, "-c", "print('ran', flush=True)\n"+pyConnect, "1")
	if err != nil || e.ExitCode == 0 || !strings.Contains(out.String(), "ran") || !strings.Contains(errw.String(), "PermissionError") {
		t.Fatalf("want the program to run and its socket refused: %+v %v stdout %q stderr %q", e, err, out, errw)
	}
	if len(d.heldInodes()) != 0 {
		t.Fatalf("the Landlock tier made session namespaces: %v", d.heldInodes())
	}
}

// TestPlanNoneLoopback: network none plans the loopback socket mode in
// bwrap's own namespace; a command of a session shares the session's
// instead of unsharing one; a plan with the old unix_only mode stays valid.
func TestPlanNoneLoopback(t *testing.T) {
	ws := newWorkspace(t)
	p, err := buildPlan(driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	if p.SocketMode != socketLoopback || p.ShareNet {
		t.Fatalf("none: socket mode %q share_net %v", p.SocketMode, p.ShareNet)
	}
	has := func(args []string, flag string) bool {
		for _, a := range args {
			if a == flag {
				return true
			}
		}
		return false
	}
	if args := p.BwrapFlags(ws, "", nil, nil); has(args, "--share-net") || !has(args, "--unshare-all") {
		t.Fatalf("a command without a session shares a network: %v", args)
	}
	p.joinNet = true
	if args := p.BwrapFlags(ws, "", nil, nil); !has(args, "--share-net") {
		t.Fatalf("a command of a session does not share its namespace: %v", args)
	}
	p.joinNet = false
	old := p
	old.SocketMode = socketUnixOnly
	data, _ := old.Encode()
	if _, err := decodePlan(data); err != nil {
		t.Fatalf("a unix_only plan for none is refused: %v", err)
	}
	forged := p
	forged.ShareNet = true
	data, _ = forged.Encode()
	if _, err := decodePlan(data); err == nil {
		t.Fatal("a none plan sharing the host's network was accepted")
	}
}

// TestSessionNetworksFullIsLimitError: with every session namespace in use
// by a running command, a command of one more session is refused with the
// typed LimitError naming the key (the host reports resource_exhausted),
// and runs once the other command has ended (control).
func TestSessionNetworksFullIsLimitError(t *testing.T) {
	d := testDriver(t, options{MaxSessionNetworks: 1, Prepared: preparedOff})
	if d.probe().sessionNet == "" {
		t.Skipf("no session network namespaces here: %s", d.probe().sessionNetWhy)
	}
	ws := newWorkspace(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	spec := func(session string, args ...string) driverapi.RunSpec {
		return driverapi.RunSpec{Program: "/bin/sleep", Args: args, Env: pathEnv(), Cwd: ws, Profile: prof,
			Timeout: time.Minute, MaxOutputBytes: 1 << 10, SessionID: session}
	}
	done := make(chan error, 1)
	go func() {
		_, err := d.Run(ctx, spec("A", "60"), driverapi.Streams{Stdout: io.Discard, Stderr: io.Discard})
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(d.heldInodes()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(d.heldInodes()) != 1 {
		t.Fatal("session A's command never held a namespace")
	}
	_, err = d.Run(context.Background(), spec("B", "0"), driverapi.Streams{Stdout: io.Discard, Stderr: io.Discard})
	var le *driverapi.LimitError
	if !errors.As(err, &le) || le.Limit != "sandbox.linux.max_session_networks" || le.Value != 1 {
		t.Fatalf("a second session over a cap of 1: %v", err)
	}
	cancel()
	<-done
	if _, err := d.Run(context.Background(), spec("B", "0"), driverapi.Streams{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
		t.Fatalf("session B once A's command ended: %v", err)
	}
}
