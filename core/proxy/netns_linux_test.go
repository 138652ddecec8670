//go:build linux

package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	xproxy "golang.org/x/net/proxy"
	"golang.org/x/sys/unix"
)

// testNet is a test host in its own network namespace, reached over a veth
// pair: a private address (10.231.N.2/30) and a documentation-range address
// (203.0.113.N, unroutable on the internet) that the proxy treats as public.
type testNet struct {
	privateIP, publicIP string
	port                int
	dial                DialFunc // nil: the real dialer
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// setupNetns builds the namespace and veth and registers their removal
// before anything else can fail.
func setupNetns(t *testing.T) testNet {
	n := 1 + rand.IntN(250)
	tag := fmt.Sprintf("%d%03d", os.Getpid()%10000, n)
	ns, vh, vn := "alephpx"+tag, "apxh"+tag, "apxn"+tag
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", vh).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	priv, hostSide, pub := fmt.Sprintf("10.231.%d.2", n), fmt.Sprintf("10.231.%d.1/30", n), fmt.Sprintf("203.0.113.%d", n)
	ipCmd(t, "netns", "add", ns)
	ipCmd(t, "link", "add", vh, "type", "veth", "peer", "name", vn, "netns", ns)
	ipCmd(t, "addr", "add", hostSide, "dev", vh)
	ipCmd(t, "link", "set", vh, "up")
	ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	ipCmd(t, "-n", ns, "addr", "add", priv+"/30", "dev", vn)
	ipCmd(t, "-n", ns, "addr", "add", pub+"/32", "dev", vn)
	ipCmd(t, "-n", ns, "link", "set", vn, "up")
	ipCmd(t, "route", "add", pub+"/32", "via", priv, "dev", vh)

	ln, err := listenInNetns("/var/run/netns/"+ns, "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return testNet{privateIP: priv, publicIP: pub, port: ln.Addr().(*net.TCPAddr).Port}
}

// listenInNetns creates a listening socket inside another network
// namespace: a socket belongs to the namespace it was created in, so the
// thread switches in, listens and switches back. A thread that cannot
// switch back is left locked and dies with its goroutine.
func listenInNetns(nsPath, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns: %w", err)}
			return
		}
		ln, lerr := net.Listen("tcp", addr)
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			if ln != nil {
				ln.Close()
			}
			ch <- result{err: fmt.Errorf("setns back: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{ln: ln, err: lerr}
	}()
	r := <-ch
	return r.ln, r.err
}

// runNetScenario checks the rules against the test host: listed private
// IP allowed, a name resolving to it refused, a name resolving to the
// public-class address allowed (CONNECT and SOCKS5), the same address as
// an unlisted literal refused.
func runNetScenario(t *testing.T, tn testNet) {
	port := strconv.Itoa(tn.port)
	res := fakeResolver{
		"internal.test": addrs(tn.privateIP),
		"public.test":   addrs(tn.publicIP),
	}
	p, log := startProxy(t, []string{"internal.test", "public.test:" + port}, res,
		func(c *Config) { c.Dial = tn.dial })
	// The same rules plus the private address as a literal.
	pLit, _ := startProxy(t, []string{tn.privateIP + ":" + port, "internal.test", "public.test:" + port}, res,
		func(c *Config) { c.Dial = tn.dial })

	echoVia := func(p *Proxy, target string) (int, string) {
		c := dialProxy(t, p, true)
		resp, br := connect(t, c, target)
		if resp.StatusCode != 200 {
			return resp.StatusCode, body(t, resp)
		}
		fmt.Fprint(c, "across-namespaces")
		c.(*net.UnixConn).CloseWrite()
		b, _ := io.ReadAll(br)
		return 200, string(b)
	}
	if code, b := echoVia(p, tn.privateIP+":"+port); code != 403 || !strings.Contains(b, string(ReasonIPLiteralNotAllowed)) {
		t.Errorf("unlisted private literal: %d %q", code, b)
	}
	if code, b := echoVia(pLit, tn.privateIP+":"+port); code != 200 || b != "across-namespaces" {
		t.Errorf("listed private literal: %d %q", code, b)
	}
	if code, b := echoVia(pLit, "internal.test:"+port); code != 200 || b != "across-namespaces" {
		t.Errorf("name resolving to a listed private literal: %d %q", code, b)
	}
	if code, b := echoVia(p, "internal.test:"+port); code != 403 || !strings.Contains(b, string(ReasonRefusedPrivate)) {
		t.Errorf("name resolving to a private address: %d %q", code, b)
	}
	if code, b := echoVia(p, "public.test:"+port); code != 200 || b != "across-namespaces" {
		t.Errorf("allowed name with public-class address: %d %q", code, b)
	}
	if d := log.last(t); !d.Allowed || !strings.Contains(d.Detail, tn.publicIP) && tn.dial == nil {
		t.Errorf("audit = %+v", d)
	}
	if code, b := echoVia(p, tn.publicIP+":"+port); code != 403 || !strings.Contains(b, string(ReasonIPLiteralNotAllowed)) {
		t.Errorf("unlisted literal of an allowed name: %d %q", code, b)
	}

	d, err := xproxy.SOCKS5("tcp", p.Endpoint().TCPAddr, nil, xproxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Dial("tcp", "public.test:"+port)
	if err != nil {
		t.Fatalf("SOCKS5 to public.test: %v", err)
	}
	fmt.Fprint(c, "socks")
	c.(*net.TCPConn).CloseWrite()
	if b, _ := io.ReadAll(c); string(b) != "socks" {
		t.Errorf("SOCKS5 echo = %q", b)
	}
	c.Close()
	if _, err := d.Dial("tcp", "internal.test:"+port); err == nil {
		t.Error("SOCKS5 to a name resolving to a private address succeeded")
	}
}

func TestNetworkNamespaceHost(t *testing.T) {
	if os.Geteuid() != 0 {
		// Without root no namespace can be made; run the same decisions
		// against a loopback stand-in whose dialer maps the two addresses
		// to it, so the rules are still exercised, then say why the real
		// check did not run.
		echo := echoServer(t, "127.0.0.1:0")
		_, ps, _ := net.SplitHostPort(echo)
		port, _ := strconv.Atoi(ps)
		tn := testNet{privateIP: "10.231.1.2", publicIP: "203.0.113.1", port: port}
		tn.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if h, _, _ := net.SplitHostPort(addr); h != tn.privateIP && h != tn.publicIP {
				return nil, errors.New("unexpected dial " + addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, echo)
		}
		runNetScenario(t, tn)
		t.Skip("not root: cannot create a network namespace and veth pair; ran the rules against a loopback stand-in instead")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("iproute2 'ip' not installed")
	}
	runNetScenario(t, setupNetns(t))
}
