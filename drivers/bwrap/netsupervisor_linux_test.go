//go:build linux

package bwrap

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

func TestBridgeSpecReadSet(t *testing.T) {
	s, err := bridgeSpec(driverBin, bridgePorts())
	if err != nil {
		t.Fatal(err)
	}
	if s.SocketMode != sandboxinit.SocketBridge || s.AllowSpawn || len(s.ReadWrite) != 0 ||
		!slices.Equal(s.BridgePorts, bridgePorts()) || !s.ScopeSignals || !s.ScopeAbstractUnix {
		t.Fatalf("bridge spec: %+v", s)
	}
	if s.ReadOnly[0] != driverBin {
		t.Errorf("read set does not start with the binary: %v", s.ReadOnly)
	}
	f, err := elf.Open(driverBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, _ := f.ImportedLibraries()
	for _, lib := range libs {
		found := false
		for _, p := range s.ReadOnly {
			found = found || strings.HasSuffix(p, "/"+lib)
		}
		if !found {
			t.Errorf("needed library %s missing from the read set %v", lib, s.ReadOnly)
		}
	}
	for _, p := range s.ReadOnly {
		for _, bad := range []string{"/etc/passwd", "/home", "/root", "/tmp"} {
			if p == bad {
				t.Errorf("read set grants %s", p)
			}
		}
	}
	if _, err := bridgeSpec("/nonexistent/bridge", bridgePorts()); err == nil {
		t.Error("missing binary accepted")
	}
	if _, err := bridgeSpec(driverBin, nil); err == nil {
		t.Error("no ports accepted")
	}
}

// procStatus returns the Seccomp, Seccomp_filters and NoNewPrivs lines.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// TestConfinedBridgeRelays starts the bridge exactly as the supervisor
// does (the driver binary under sandbox-init with bridgeSpec) on a free
// loopback port of the host: it relays to the proxy socket, carries
// no_new_privs and two seccomp filters, and is gone after stop.
func TestConfinedBridgeRelays(t *testing.T) {
	if !seccompAvailable() || landlockABI() < 4 {
		t.Skip("needs seccomp and Landlock ABI >= 4")
	}
	sock := fakeProxy(t)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	br, err := startConfinedBridge(context.Background(), driverBin, sock, []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	pid := br.cmd.Process.Pid
	stopped := false
	defer func() {
		if !stopped {
			br.stop()
		}
	}()

	st := procStatus(t, pid)
	if st["Seccomp"] != "2" || st["NoNewPrivs"] != "1" || st["Seccomp_filters"] != "2" {
		t.Errorf("bridge status: Seccomp=%s Seccomp_filters=%s NoNewPrivs=%s", st["Seccomp"], st["Seccomp_filters"], st["NoNewPrivs"])
	}
	// Every thread, not only the first, carries both filters.
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, task := range tasks {
		data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/status")
		if !strings.Contains(string(data), "Seccomp_filters:\t2\n") {
			t.Errorf("bridge thread %s without both filters", task.Name())
		}
	}
	cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if !strings.Contains(string(cmdline), bridgeCommand) {
		t.Errorf("pid %d is not the bridge: %q", pid, cmdline)
	}

	// Positive control: the confined bridge relays to the proxy.
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL(t, "http://"+addr))}, Timeout: 10 * time.Second}
	resp, err := hc.Get("http://example.com/through-confined")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "via-proxy GET http://example.com/through-confined") {
		t.Fatalf("through the confined bridge: %q", body)
	}

	br.stop()
	stopped = true
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bridge pid %d still there after stop: %v", pid, err)
	}
}

// TestConfinedBridgeStartFailure: a bridge that cannot bind exits before
// its ready line and the supervisor gets an error, never a half-started
// bridge.
func TestConfinedBridgeStartFailure(t *testing.T) {
	if !seccompAvailable() || landlockABI() < 4 {
		t.Skip("needs seccomp and Landlock ABI >= 4")
	}
	sock := fakeProxy(t)
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, err = startConfinedBridge(context.Background(), driverBin, sock, []string{busy.Addr().String()})
	var be *bridgeError
	if !errors.As(err, &be) {
		t.Fatalf("bridge on a busy port: %v, want *BridgeError", err)
	}
	for _, bad := range []string{"0.0.0.0:3128", "127.0.0.1:0", "localhost:3128"} {
		if _, err := startConfinedBridge(context.Background(), driverBin, sock, []string{bad}); !errors.As(err, &be) {
			t.Errorf("listen %s: %v, want *BridgeError", bad, err)
		}
	}
}

// TestAllowHostsBridgeConfinedInSandbox looks at the sandbox from its own
// command: the bridge process beside it runs under seccomp with
// no_new_privs, and the command still gets through it.
func TestAllowHostsBridgeConfinedInSandbox(t *testing.T) {
	d, ws, prof := allowHostsProfile(t)
	ctx := context.Background()
	script := `curl -s --max-time 10 -x http://127.0.0.1:3128 http://example.com/in; echo
for p in /proc/[0-9]*; do
  c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null)
  case "$c" in *sandbox-bridge*) echo "bridge $(grep -E '^(Seccomp|NoNewPrivs):' $p/status | tr -s '\t\n' '  ')";; esac
done`
	var out, errb lockedBuf
	exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", script}, Cwd: ws, Profile: prof,
		Timeout: 30 * time.Second, MaxOutputBytes: 1 << 16, Env: pathEnv()}, driverapi.Streams{Stdout: &out, Stderr: &errb})
	r := drvResult{exit: exit, err: err, stdout: out.String(), stderr: errb.String()}
	expectOK(t, r)
	if !strings.Contains(r.stdout, "via-proxy GET http://example.com/in") {
		t.Errorf("no answer through the bridge: %q %q", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "bridge NoNewPrivs: 1 Seccomp: 2") {
		t.Errorf("bridge not confined as seen from the sandbox:\n%s", r.stdout)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// BenchmarkConfinedBridgeThroughput is BenchmarkBridgeThroughput's Linux
// path with the bridge as the driver runs it: its own process under
// sandbox-init (Landlock, both seccomp filters), TCP → bridge → unix
// socket → proxy → TCP sink.
func BenchmarkConfinedBridgeThroughput(b *testing.B) {
	if !seccompAvailable() || landlockABI() < 4 {
		b.Skip("needs seccomp and Landlock ABI >= 4")
	}
	chunk := make([]byte, 1<<20)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { n, _ := io.Copy(io.Discard, c); c.Close(); got <- n }()
		}
	}()
	sink := ln.Addr().String()
	p := startHostProxy(b, sink)
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	br, err := startConfinedBridge(context.Background(), driverBin, p.UnixSocket, []string{addr})
	if err != nil {
		b.Fatal(err)
	}
	defer br.stop()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", sink)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		b.Fatalf("CONNECT: %v %v", resp, err)
	}
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
	if n := <-got; n != int64(b.N)*int64(len(chunk)) {
		b.Fatalf("sink got %d bytes", n)
	}
}

// In the allow_hosts chain bwrap's reaper stays PID 1 and the supervisor
// is its grandchild, which the kernel does not keep SIGKILL and SIGSTOP
// away from: where Landlock has the signal scope, a command that may spawn
// runs in a domain nested in the supervisor's and cannot signal it, ABRT
// included, which the supervisor does not catch there (before, kill -9
// $PPID ended the supervisor, and the run was reported as killed by
// SIGKILL, without its status record). Positive controls: the command
// ran, can signal its own child, and its own exit status is reported.
func TestAllowHostsCommandCannotSignalSupervisor(t *testing.T) {
	if landlockABI() < 6 {
		t.Skipf("Landlock ABI %d has no signal scope: the supervisor is not protected here (docs/linux.md)", landlockABI())
	}
	d, ws, prof := allowHostsProfile(t)
	ctx := context.Background()
	script := "echo ran; [ $PPID != 1 ] && echo not-pid1; kill -ABRT $PPID 2>/dev/null || echo abrt-refused; kill -STOP $PPID 2>/dev/null || echo stop-refused; " +
		"kill -9 $PPID 2>/dev/null || echo kill-refused; sleep 10 & kill -9 $!; wait $!; echo child $?; exit 7"
	var out, errb lockedBuf
	exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", script}, Cwd: ws, Profile: prof,
		Timeout: 30 * time.Second, MaxOutputBytes: 1 << 16, Env: pathEnv()}, driverapi.Streams{Stdout: &out, Stderr: &errb})
	if err != nil || exit.ExitCode != 7 || exit.Signal != 0 || out.String() != "ran\nnot-pid1\nabrt-refused\nstop-refused\nkill-refused\nchild 137\n" {
		t.Fatalf("exit %+v err %v stdout %q stderr %q", exit, err, out.String(), errb.String())
	}
}

// allowHostsProfile is a driver, a fresh workspace and the profile of a
// command that may spawn and reach example.com through a fake proxy (the
// test is skipped where network_via_proxy is unavailable).
func allowHostsProfile(t *testing.T) (*Driver, string, driverapi.Profile) {
	t.Helper()
	d := testDriver(t, options{})
	ctx := context.Background()
	caps, _ := d.Capabilities(ctx)
	if !caps.Has(driverapi.FeatureNetworkViaProxy) {
		t.Skip("network_via_proxy unavailable here")
	}
	ws := newWorkspace(t)
	sock := fakeProxy(t)
	req := driverapi.Capabilities{SpawnSubprocess: true, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}}
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: req, Workspace: ws, Cwd: ws, Proxy: &driverapi.ProxyEndpoint{UnixSocket: sock}})
	if err != nil {
		t.Fatal(err)
	}
	return d, ws, prof
}
