package conformance

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
)

// The network cases are only as good as their probe and fixtures: run the
// probe's net step on the host, unsandboxed and in process, where every
// connection must work (and a wrong token must not count).
func TestProbeAndFixturesWork(t *testing.T) {
	ctx := t.Context()
	h := &H{Root: t.TempDir()}
	defer h.cleanup()
	run := func(proxy string, args ...string) string {
		t.Helper()
		t.Setenv("HTTPS_PROXY", proxy)
		var out bytes.Buffer
		probe.Run(append([]string{"net"}, args...), nil, &out, io.Discard)
		return out.String()
	}

	tcp, err := h.listenStream("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprint(portOf(tcp.addr))
	if out := run("", "tcp", "127.0.0.1", port, "wrong-token"); tcp.reached() || strings.Contains(out, "pong") {
		t.Fatalf("a wrong token counted as reaching the listener: %q", out)
	}
	if out := run("", "tcp", "127.0.0.1", port, tcp.token); !tcp.reached() || !strings.Contains(out, "reply:pong") {
		t.Errorf("tcp probe: %q", out)
	}

	udp, err := h.listenUDP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if out := run("", "udp", "127.0.0.1", fmt.Sprint(portOf(udp.addr)), udp.token); !waitFor(ctx, 2*time.Second, udp.reached) {
		t.Errorf("udp probe: %q", out)
	}

	unix, err := h.listenStream("unix", filepath.Join(h.Root, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if out := run("", "unix", unix.addr, unix.token); !unix.reached() {
		t.Errorf("unix probe: %q", out)
	}

	if runtime.GOOS == "linux" {
		name := "aleph-conformance-test-" + newToken()
		abs, err := h.listenStream("unix", "@"+name)
		if err != nil {
			t.Fatal(err)
		}
		if out := run("", "abstract", name, abs.token); !abs.reached() {
			t.Errorf("abstract probe: %q", out)
		}
	}

	target, err := h.listenStream("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hostPort := fmt.Sprintf("%s:%d", allowedHost, portOf(target.addr))
	p, err := h.startProxy(ctx, map[string]string{hostPort: target.addr}, filepath.Join(h.Root, "p.sock"))
	if err != nil {
		t.Fatal(err)
	}
	env := "http://" + p.tcpAddr
	if out := run(env, "proxy", "denied.conformance.test:443", target.token); !strings.Contains(out, "proxy-status:HTTP/1.1 403") || target.reached() {
		t.Errorf("denied host through the proxy: %q", out)
	}
	if out := run(env, "proxy", hostPort, target.token); !target.reached() || !strings.Contains(out, "reply:pong") || p.tunnels.Load() != 1 {
		t.Errorf("allowed host through the proxy: %q", out)
	}
	// The proxy's unix socket (what a bridge relays to) speaks the same.
	c, err := net.Dial("unix", p.unixPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", hostPort, hostPort)
	r := bufio.NewReader(c)
	if st, _ := r.ReadString('\n'); !strings.HasPrefix(st, "HTTP/1.1 200") {
		t.Errorf("CONNECT over the unix socket: %q", st)
	}
	for l, _ := r.ReadString('\n'); strings.TrimSpace(l) != ""; l, _ = r.ReadString('\n') {
	}
	fmt.Fprintf(c, "%s\n", target.token)
	if reply, _ := io.ReadAll(io.LimitReader(r, 5)); string(reply) != "pong\n" {
		t.Errorf("tunnel over the unix socket replied %q", reply)
	}
}

// The listen probe really listens: unsandboxed, the host reaches it.
func TestListenProbeWorks(t *testing.T) {
	stdout, w := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- probe.Run([]string{"listen"}, nil, w, io.Discard)
		w.Close()
	}()
	defer func() { _, _ = io.Copy(io.Discard, stdout); <-done }()
	r := bufio.NewReader(stdout)
	var port string
	for port == "" {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("no port line: %v", err)
		}
		if m := regexp.MustCompile(`^port:(\d+)`).FindStringSubmatch(l); m != nil {
			port = m[1]
		}
	}
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	rest, _ := io.ReadAll(r)
	if !strings.Contains(string(rest), "accepted") {
		t.Errorf("listener did not see the connection: %q", rest)
	}
}
