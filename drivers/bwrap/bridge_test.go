//go:build linux

package bwrap

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// unixServer serves handle on a unix socket in a temp dir.
func unixServer(t *testing.T, handle func(c *net.UnixConn)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "proxy.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c.(*net.UnixConn))
			}()
		}
	}()
	return path
}

func unixEcho(c *net.UnixConn) {
	io.Copy(c, c)
	c.CloseWrite()
}

func startTestBridge(t *testing.T, ctx context.Context, sock string) (*bridge, string) {
	t.Helper()
	b, err := openBridge(ctx, []string{"127.0.0.1:0", "[::1]:0"}, sock)
	if err != nil {
		// Hosts without IPv6 loopback: IPv4 alone.
		b, err = openBridge(ctx, []string{"127.0.0.1:0"}, sock)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, b.Addrs()[0].String()
}

func TestBridgeEchoAndHalfClose(t *testing.T) {
	sock := unixServer(t, unixEcho)
	b, addr := startTestBridge(t, context.Background(), sock)
	for _, a := range b.Addrs() {
		c, err := net.Dial("tcp", a.String())
		if err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte("0123456789"), 100_000)
		go func() {
			c.Write(msg)
			// Client half-close must reach the proxy side as EOF, or the
			// echo never ends.
			c.(*net.TCPConn).CloseWrite()
		}()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("%s: echoed %d bytes (%v), want %d", a, len(got), err, len(msg))
		}
	}
	_ = addr
}

func TestBridgeServerHalfClose(t *testing.T) {
	// The proxy side sends a banner and closes its sending side first; the
	// client must see EOF and still be able to send.
	received := make(chan string, 1)
	sock := unixServer(t, func(c *net.UnixConn) {
		io.WriteString(c, "banner")
		c.CloseWrite()
		b, _ := io.ReadAll(c)
		received <- string(b)
	})
	_, addr := startTestBridge(t, context.Background(), sock)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	banner, err := io.ReadAll(c)
	if err != nil || string(banner) != "banner" {
		t.Fatalf("banner = %q, %v", banner, err)
	}
	io.WriteString(c, "after-eof")
	c.(*net.TCPConn).CloseWrite()
	select {
	case got := <-received:
		if got != "after-eof" {
			t.Fatalf("proxy side got %q", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("client data after server half-close never arrived")
	}
}

func TestBridgeManyConnections(t *testing.T) {
	sock := unixServer(t, unixEcho)
	_, addr := startTestBridge(t, context.Background(), sock)
	const n = 100
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			msg := fmt.Sprintf("connection-%d-%s", i, bytes.Repeat([]byte{'x'}, i*100))
			io.WriteString(c, msg)
			c.(*net.TCPConn).CloseWrite()
			got, err := io.ReadAll(c)
			if err == nil && string(got) != msg {
				err = fmt.Errorf("connection %d: got %d bytes, want %d", i, len(got), len(msg))
			}
			errs <- err
		}(i)
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestBridgeContextCancelStopsItWithoutLeaks(t *testing.T) {
	arrived := make(chan struct{}, 5)
	sock := unixServer(t, func(c *net.UnixConn) {
		var b [1]byte
		if _, err := c.Read(b[:]); err == nil {
			arrived <- struct{}{}
		}
		io.Copy(io.Discard, c) // holds the relay open
	})
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	b, err := openBridge(ctx, []string{"127.0.0.1:0"}, sock)
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addrs()[0].String()
	var open []net.Conn
	for i := 0; i < 5; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "x")
		open = append(open, c)
	}
	// Positive control: all five relays are live end to end.
	for range open {
		select {
		case <-arrived:
		case <-time.After(30 * time.Second):
			t.Fatal("relay did not deliver")
		}
	}
	done := make(chan error, 1)
	go func() { <-ctx.Done(); done <- b.Close() }()
	cancel()
	<-done
	for _, c := range open {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		// Ended means EOF or a reset (the bridge closed with bytes
		// unread); a timeout means the relay outlived its bridge.
		if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("relay not ended by cancel: %v", err)
		}
		c.Close()
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("bridge still accepting after cancel")
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunBridgeReturnsOnCancel(t *testing.T) {
	sock := unixServer(t, unixEcho)
	ctx, cancel := context.WithCancel(context.Background())
	ret := make(chan error, 1)
	go func() { ret <- runBridge(ctx, []string{"127.0.0.1:0"}, sock) }()
	cancel()
	select {
	case err := <-ret:
		if err != nil {
			t.Fatalf("RunBridge = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RunBridge did not return after cancel")
	}
	// A bad address is an error at once, not a hang.
	err := runBridge(context.Background(), []string{"10.0.0.1:3128"}, sock)
	var be *bridgeError
	if !errors.As(err, &be) {
		t.Fatalf("non-loopback address: %v", err)
	}
}

func TestBridgeRefusesNonLoopbackAddresses(t *testing.T) {
	for _, a := range []string{"0.0.0.0:3128", "[::]:3128", "192.0.2.1:80", "localhost:3128", ":3128", "127.0.0.1", ""} {
		b, err := openBridge(context.Background(), []string{a}, "/nonexistent.sock")
		var be *bridgeError
		if !errors.As(err, &be) {
			if b != nil {
				b.Close()
			}
			t.Errorf("StartBridge(%q) = %v, want *BridgeError", a, err)
		}
	}
	if _, err := openBridge(context.Background(), []string{"127.0.0.1:0"}, ""); err == nil {
		t.Error("empty socket path accepted")
	}
	// A second listen address that cannot bind releases the first.
	b, err := openBridge(context.Background(), []string{"127.0.0.1:0"}, "/nonexistent.sock")
	if err != nil {
		t.Fatal(err)
	}
	taken := b.Addrs()[0].String()
	defer b.Close()
	if _, err := openBridge(context.Background(), []string{"127.0.0.1:0", taken}, "/nonexistent.sock"); err == nil {
		t.Error("binding a taken port succeeded")
	}
}

func TestBridgeProxyAbsent(t *testing.T) {
	// No proxy socket yet: the client is closed promptly (not left
	// hanging) and the bridge keeps serving.
	path := filepath.Join(t.TempDir(), "proxy.sock")
	_, addr := startTestBridge(t, context.Background(), path)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("client not closed: %v", err)
	}
	c.Close()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			unixEcho(c.(*net.UnixConn))
			c.Close()
		}
	}()
	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "late")
	c.(*net.TCPConn).CloseWrite()
	if got, _ := io.ReadAll(c); string(got) != "late" {
		t.Fatalf("after the proxy appeared: %q", got)
	}
}

// BenchmarkBridgeThroughput compares one-way bulk transfer over a direct
// loopback connection with the Linux allowlist path: TCP to the bridge,
// unix socket to the managed proxy, CONNECT tunnel to the server.
func BenchmarkBridgeThroughput(b *testing.B) {
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
	run := func(b *testing.B, c net.Conn) {
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
	b.Run("direct", func(b *testing.B) {
		c, err := net.Dial("tcp", sink)
		if err != nil {
			b.Fatal(err)
		}
		run(b, c)
	})
	b.Run("bridge_proxy", func(b *testing.B) {
		p := startHostProxy(b, sink)
		br, err := openBridge(context.Background(), []string{"127.0.0.1:0"}, p.UnixSocket)
		if err != nil {
			b.Fatal(err)
		}
		defer br.Close()
		c, err := net.Dial("tcp", br.Addrs()[0].String())
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", sink)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("CONNECT: %v %v", resp, err)
		}
		run(b, c)
	})
}

func TestBridgeMain(t *testing.T) {
	sock := unixServer(t, unixEcho)
	// Pick a free port, then hand it to BridgeMain.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Keep a dup of w for BridgeMain: it closes the fd it is given.
	fd, err := syscall.Dup(int(w.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	code := make(chan int, 1)
	go func() {
		code <- BridgeMain([]string{"--socket", sock, "--listen", addr, "--ready-fd", strconv.Itoa(fd)})
	}()
	ready, err := io.ReadAll(r)
	if err != nil || string(ready) != "ready\n" {
		t.Fatalf("ready signal = %q, %v", ready, err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "main")
	c.(*net.TCPConn).CloseWrite()
	if got, _ := io.ReadAll(c); string(got) != "main" {
		t.Fatalf("echo = %q", got)
	}
	c.Close()
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case rc := <-code:
		if rc != 0 {
			t.Fatalf("exit %d after SIGTERM", rc)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("BridgeMain did not stop on SIGTERM")
	}
	for _, bad := range [][]string{{"--socket"}, {"--listen", "0.0.0.0:1", "--socket", sock}, {"--ready-fd", "x"}, {"--bogus"}} {
		if rc := BridgeMain(bad); rc != 2 {
			t.Errorf("BridgeMain(%q) = %d, want 2", bad, rc)
		}
	}
}

// TestBridgeEndToEndCurlInBwrap runs curl in a bubblewrap sandbox with its
// own network namespace, the bridge started inside before curl, and the
// managed proxy on the host: the allowlisted server answers through HTTP
// and SOCKS5, an unlisted one gets the proxy's 403, and a direct
// connection that ignores the proxy variables fails, while the same
// server is reachable directly from outside the sandbox.
func TestBridgeEndToEndCurlInBwrap(t *testing.T) {
	for _, tool := range []string{"bwrap", "curl", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " not installed")
		}
	}
	hostIP := nonLoopbackIPv4(t)
	srvLn, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello-from-upstream") })}
	go srv.Serve(srvLn)
	defer srv.Close()
	port := strconv.Itoa(srvLn.Addr().(*net.TCPAddr).Port)

	// Positive control for the direct-egress check: from outside the
	// sandbox the server answers on the host address.
	if resp, err := http.Get("http://" + net.JoinHostPort(hostIP, port) + "/"); err != nil {
		t.Fatalf("server not reachable from the host: %v", err)
	} else {
		resp.Body.Close()
	}

	p := startHostProxy(t, "127.0.0.1:"+port)

	bin := filepath.Join(t.TempDir(), "bridgemain")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "./testdata/bridgemain")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build bridge: %v\n%s", err, out)
	}
	sockDir := filepath.Dir(p.UnixSocket)
	script := `set -u
mkfifo /tmp/ready
"$BRIDGE" --socket "$SOCK" --listen 127.0.0.1:3128 --listen 127.0.0.1:1080 --ready-fd 3 3>/tmp/ready &
read line </tmp/ready
echo "bridge=$line"
echo "allowed=$(curl -sS --max-time 20 http://127.0.0.1:$PORT/ 2>&1)"
echo "socks=$(curl -sS --max-time 20 --proxy socks5h://127.0.0.1:1080 http://127.0.0.1:$PORT/ 2>&1)"
echo "denied=$(curl -sS --max-time 20 -o /dev/null -w '%{http_code}' http://127.0.0.2:$PORT/ 2>&1)"
if curl -sS --noproxy '*' --max-time 5 "http://$HOSTIP:$PORT/" >/dev/null 2>&1; then echo direct=reached; else echo direct=failed; fi
`
	args := []string{
		"--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session",
		"--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--ro-bind", sockDir, sockDir, "--ro-bind", bin, bin,
		"--clearenv",
	}
	for _, e := range p.Env {
		args = append(args, "--setenv", e.Name, e.Value)
	}
	args = append(args, "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "BRIDGE", bin,
		"--setenv", "SOCK", p.UnixSocket, "--setenv", "PORT", port, "--setenv", "HOSTIP", hostIP,
		"sh", "-c", script)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bwrap", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("bwrap: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			got[k] = v
		}
	}
	want := map[string]string{
		"bridge": "ready", "allowed": "hello-from-upstream", "socks": "hello-from-upstream",
		"denied": "403", "direct": "failed",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q\n%s", k, got[k], v, out)
		}
	}
}

func nonLoopbackIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address to test direct egress against")
	return ""
}
