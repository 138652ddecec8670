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
	"strconv"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/internal/netnstest"
)

// testNet is a test host in its own network namespace, reached over a veth
// pair: a private address (10.231.N.2/30) and a documentation-range address
// (203.0.113.N, unroutable on the internet) that the proxy treats as public.
type testNet struct {
	privateIP, publicIP string
	port                int
	dial                DialFunc // nil: the real dialer
}

// setupNetns builds the test host and adds its documentation-range
// address, routed over the veth, and an echo server listening on both.
func setupNetns(t *testing.T) testNet {
	n := 1 + rand.IntN(250)
	h := netnstest.New(t, "alephpx", n)
	pub := fmt.Sprintf("203.0.113.%d", n)
	netnstest.IP(t, "-n", h.Name, "addr", "add", pub+"/32", "dev", h.Peer())
	netnstest.IP(t, "route", "add", pub+"/32", "via", h.Addr, "dev", h.Veth)

	ln, err := netnstest.Listen(h.Path, "tcp", "0.0.0.0:0")
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
	return testNet{privateIP: h.Addr, publicIP: pub, port: ln.Addr().(*net.TCPAddr).Port}
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

	c, err := socksDial(t, p, true, "public.test:"+port)
	if err != nil {
		t.Fatalf("SOCKS5 to public.test: %v", err)
	}
	fmt.Fprint(c, "socks")
	c.(interface{ CloseWrite() error }).CloseWrite()
	if b, _ := io.ReadAll(c); string(b) != "socks" {
		t.Errorf("SOCKS5 echo = %q", b)
	}
	c.Close()
	if _, err := socksDial(t, p, true, "internal.test:"+port); err == nil {
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
	runNetScenario(t, setupNetns(t))
}
