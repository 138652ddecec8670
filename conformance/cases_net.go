package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sync"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

const allowedHost = "allowed.conformance.test"

// linuxBridgeHTTPAddr is where a Linux child finds the managed proxy: the
// contract's namespace-bridge route (driverapi.RouteNamespaceBridge), a
// bridge in the child's own network namespace relaying to
// ProxyEndpoint.UnixSocket.
func linuxBridgeHTTPAddr() string { return driverapi.BridgeHTTPAddr() }

// childProxyAddr is the proxy address the host puts in the child's
// HTTP(S)_PROXY for the route the driver reports: the in-namespace bridge
// for namespace_bridge, the proxy's own loopback TCP address for
// host_loopback. A driver that reports no route gets the platform's, as
// the host does (the bridge on Linux, loopback elsewhere).
func childProxyAddr(route driverapi.ProxyRoute, tcpAddr string) string {
	switch route {
	case driverapi.RouteNamespaceBridge:
		return linuxBridgeHTTPAddr()
	case driverapi.RouteHostLoopback:
		return tcpAddr
	}
	if runtime.GOOS == "linux" {
		return linuxBridgeHTTPAddr()
	}
	return tcpAddr
}

func netCases() []Case {
	none, all, proxy := driverapi.FeatureNetworkNone, driverapi.FeatureNetworkAll, driverapi.FeatureNetworkViaProxy
	return []Case{
		{ID: "net/none-blocks-tcp", Level: Must, Feature: none,
			Description: "With network none a program cannot open a TCP connection to a listener on the host (loopback or the host's own address); the probe itself runs, and with network all (when claimed) the same probe connects.",
			run: func(ctx context.Context, h *H) error {
				t, err := h.listenStream("tcp", ":0")
				if err != nil {
					return err
				}
				return noneBlocks(ctx, h, t, tcpProbes(t))
			}},
		{ID: "net/none-blocks-tcp6", Level: Must, Feature: none,
			Description: "With network none a program cannot reach a TCP listener on the host's IPv6 loopback [::1].",
			run: func(ctx context.Context, h *H) error {
				t, err := h.listenStream("tcp6", "[::1]:0")
				if err != nil {
					return skipf("this host has no IPv6 loopback: %v", err)
				}
				return noneBlocks(ctx, h, t, [][]string{{"tcp", "::1", fmt.Sprint(portOf(t.addr))}})
			}},
		{ID: "net/none-blocks-udp", Level: Must, Feature: none,
			Description: "With network none no UDP datagram from the program reaches a host listener; with network all (when claimed) it does.",
			run: func(ctx context.Context, h *H) error {
				t, err := h.listenUDP(":0")
				if err != nil {
					return err
				}
				var probes [][]string
				for _, ip := range hostIPs() {
					probes = append(probes, []string{"udp", ip, fmt.Sprint(portOf(t.addr))})
				}
				return noneBlocks(ctx, h, t, probes)
			}},
		{ID: "net/none-blocks-unix", Level: Must, Feature: none,
			Description: "With network none a program cannot connect to a host unix socket outside its workspace (a docker/dbus-style socket).",
			run: func(ctx context.Context, h *H) error {
				t, err := h.listenStream("unix", filepath.Join(h.Out, "host.sock"))
				if err != nil {
					return err
				}
				return noneBlocksWith(ctx, h, t, [][]string{{"unix", t.addr}}, &driverapi.Capabilities{}, false)
			}},
		{ID: "net/none-blocks-unix-granted-path", Level: Should, Feature: none,
			Description: "With network none a program cannot connect to a host unix socket even when fs_read grants its directory: network none is enforced on sockets, not only by hiding paths.",
			run: func(ctx context.Context, h *H) error {
				t, err := h.listenStream("unix", filepath.Join(h.Out, "host.sock"))
				if err != nil {
					return err
				}
				return noneBlocksWith(ctx, h, t, [][]string{{"unix", t.addr}}, &driverapi.Capabilities{FSRead: []string{h.Out}}, false)
			}},
		{ID: "net/unix-host-socket-unreachable", Level: Must, Feature: none,
			Description: "With network none a program cannot connect to a host unix socket bound inside its workspace, nor send to a host datagram socket there, nor reach a host socket in a directory it may write (fs_write): a driver that lets commands have unix sockets of their own must still tell the host's apart, wherever they are bound.",
			run:         caseUnixHostSocketUnreachable},
		{ID: "net/unix-own-sockets", Level: Must, Feature: none,
			OS: POSIXOnly, OSReason: "datagram unix sockets and socket pairs are POSIX's",
			Description: "With network none, a driver that reports unix sockets of the command's own (HostCapabilities.Details[\"" + driverapi.DetailNetworkNoneUnixSockets + "\"] = \"own\") lets the program listen on a unix socket in its workspace and connect to it, send to a datagram socket it bound there, use a datagram socket pair and, on Linux, an abstract name, while in the same command a host socket bound in the workspace stays out of reach. A driver that cannot tell its commands' sockets from the host's reports nothing and the case skips.",
			run:         caseUnixOwnSockets},
		{ID: "net/none-blocks-abstract", Level: Must, Feature: none,
			OS: LinuxOnly, OSReason: "abstract unix sockets exist only on Linux",
			Description: "With network none a program cannot connect to an abstract unix socket of the host (Linux only; they live per network namespace, outside the filesystem).",
			run: func(ctx context.Context, h *H) error {
				name := "aleph-conformance-" + newToken()
				t, err := h.listenStream("unix", "@"+name)
				if err != nil {
					return err
				}
				return noneBlocksWith(ctx, h, t, [][]string{{"abstract", name}}, &driverapi.Capabilities{}, false)
			}},
		{ID: "net/none-own-loopback", Level: Must, Feature: none,
			Description: "With network none, a driver that reports a loopback of the command's own (HostCapabilities.Details[\"" + driverapi.DetailNetworkNoneLoopback + "\"]) lets the program bind and connect on 127.0.0.1 over TCP and UDP, while in the same command a listener on the host's loopback stays out of reach: the loopback is the sandbox's, not the host's.",
			run:         caseNoneOwnLoopback},
		{ID: "net/none-blocks-listen", Level: Must, Feature: none,
			Description: "With network none a program cannot serve the host: a TCP listener it opens (if it can open one at all) accepts no connection from the host's loopback or address.",
			run:         caseNoneListen},
		{ID: "net/all-tcp", Level: Must, Feature: all,
			Description: "With network all a program opens a TCP connection to a host listener and exchanges data.",
			run: func(ctx context.Context, h *H) error {
				t, err := h.listenStream("tcp", ":0")
				if err != nil {
					return err
				}
				return allReaches(ctx, h, t, tcpProbes(t))
			}},
		{ID: "net/all-udp", Level: Must, Feature: all,
			Description: "With network all a program's UDP datagram reaches a host listener.",
			run: func(ctx context.Context, h *H) error {
				t, err := h.listenUDP(":0")
				if err != nil {
					return err
				}
				var probes [][]string
				for _, ip := range hostIPs() {
					probes = append(probes, []string{"udp", ip, fmt.Sprint(portOf(t.addr))})
				}
				return allReaches(ctx, h, t, probes)
			}},
		{ID: "net/allow-hosts-via-proxy", Level: Must, Feature: proxy,
			Description: "With network allow_hosts a program reaches an allowed host through the managed proxy given in the ProfileRequest, at the address the host puts in HTTPS_PROXY (on Linux the in-namespace bridge 127.0.0.1:3128 relaying to the proxy's unix socket; elsewhere the proxy's loopback TCP address), and the proxy refuses a host not on the list.",
			run:         caseProxyAllowed},
		{ID: "net/allow-hosts-direct-blocked", Level: Must, Feature: proxy,
			Description: "With network allow_hosts a direct TCP connection that bypasses the proxy fails, while the proxied one in the same command works.",
			run:         caseProxyDirectBlocked},
		{ID: "net/allow-hosts-udp-blocked", Level: Must, Feature: proxy,
			Description: "With network allow_hosts no UDP datagram leaves the sandbox (the proxy carries TCP only), while the proxied TCP connection works.",
			run:         caseProxyUDPBlocked},
	}
}

func tcpProbes(t *target) [][]string {
	var probes [][]string
	for _, ip := range hostIPs() {
		probes = append(probes, []string{"tcp", ip, fmt.Sprint(portOf(t.addr))})
	}
	return probes
}

// netProbe runs the probe's net step for each argument list, one command
// each; it returns the combined stdout and the first driver error.
func netProbe(ctx context.Context, h *H, t *target, probes [][]string, c Cmd) ([]byte, error) {
	var out []byte
	for _, p := range probes {
		c = h.ProbeCmd(c, append(append([]string{"net"}, p...), t.token)...)
		if c.Timeout == 0 {
			c.Timeout = 15 * time.Second
		}
		o := h.Exec(ctx, c)
		if o.Err != nil {
			return out, o.Err
		}
		out = append(out, o.Stdout...)
		if !bytes.Contains(o.Stdout, []byte("probe-start")) {
			return out, fmt.Errorf("probe %v did not run (positive control): %s", p, o)
		}
	}
	return out, nil
}

func noneBlocks(ctx context.Context, h *H, t *target, probes [][]string) error {
	return noneBlocksWith(ctx, h, t, probes, &driverapi.Capabilities{}, true)
}

// noneBlocksWith runs probes under network none (caps' other fields kept)
// and requires that none reached t; then, when the driver claims network
// all and allCheck is set, that the same probes reach it.
func noneBlocksWith(ctx context.Context, h *H, t *target, probes [][]string, caps *driverapi.Capabilities, allCheck bool) error {
	c := *caps
	c.Network = driverapi.NetworkPolicy{Mode: driverapi.NetworkNone}
	if _, err := netProbe(ctx, h, t, probes, Cmd{Caps: &c}); err != nil {
		return err
	}
	sleepCtx(ctx, 500*time.Millisecond) // datagrams in flight
	if t.reached() {
		return fmt.Errorf("with network none the program reached the host listener %s", t.addr)
	}
	if allCheck && h.Caps.Has(driverapi.FeatureNetworkAll) {
		return allReaches(ctx, h, t, probes)
	}
	return nil
}

func allReaches(ctx context.Context, h *H, t *target, probes [][]string) error {
	caps := &driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}
	out, err := netProbe(ctx, h, t, probes, Cmd{Caps: caps})
	if err != nil {
		return err
	}
	if !waitFor(ctx, 2*time.Second, t.reached) {
		return fmt.Errorf("with network all the program did not reach the host listener %s (positive control): %q", t.addr, clip(out))
	}
	return nil
}

// proxySetup starts a target, the allow-list proxy in front of it, and
// returns the command template that uses the proxy.
func proxySetup(ctx context.Context, h *H) (*target, *connectProxy, Cmd, error) {
	t, err := h.listenStream("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, Cmd{}, err
	}
	hostPort := fmt.Sprintf("%s:%d", allowedHost, portOf(t.addr))
	// The proxy's unix socket sits outside the workspace, where a driver
	// bridges it into the sandbox.
	p, err := h.startProxy(ctx, map[string]string{hostPort: t.addr}, filepath.Join(h.Root, "proxy.sock"))
	if err != nil {
		return nil, nil, Cmd{}, err
	}
	proxyURL := "http://" + childProxyAddr(h.Caps.NetworkRoute(), p.tcpAddr)
	c := Cmd{
		Caps:  &driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{hostPort}}},
		Proxy: &driverapi.ProxyEndpoint{TCPAddr: p.tcpAddr, UnixSocket: p.unixPath},
		Env: h.envWith(
			driverapi.EnvVar{Name: "HTTP_PROXY", Value: proxyURL}, driverapi.EnvVar{Name: "HTTPS_PROXY", Value: proxyURL},
			driverapi.EnvVar{Name: "ALL_PROXY", Value: proxyURL}),
	}
	return t, p, c, nil
}

// viaProxy: the proxied connection to the allowed host must work.
func viaProxy(ctx context.Context, h *H, t *target, c Cmd) error {
	hostPort := fmt.Sprintf("%s:%d", allowedHost, portOf(t.addr))
	out, err := netProbe(ctx, h, t, [][]string{{"proxy", hostPort}}, c)
	if err != nil {
		return err
	}
	if !t.reached() || !bytes.Contains(out, []byte("reply:pong")) {
		return fmt.Errorf("the allowed host was not reached through the proxy (positive control): %q", clip(out))
	}
	return nil
}

func caseProxyAllowed(ctx context.Context, h *H) error {
	t, p, c, err := proxySetup(ctx, h)
	if err != nil {
		return err
	}
	if err := viaProxy(ctx, h, t, c); err != nil {
		return err
	}
	out, err := netProbe(ctx, h, t, [][]string{{"proxy", "denied.conformance.test:443"}}, c)
	if err != nil {
		return err
	}
	if !bytes.Contains(out, []byte("proxy-status:HTTP/1.1 403")) || p.refused.Load() == 0 {
		return fmt.Errorf("a host not on the list was not refused by the proxy: %q", clip(out))
	}
	return nil
}

func caseProxyDirectBlocked(ctx context.Context, h *H) error {
	t, _, c, err := proxySetup(ctx, h)
	if err != nil {
		return err
	}
	direct, err := h.listenStream("tcp", ":0")
	if err != nil {
		return err
	}
	if _, err := netProbe(ctx, h, direct, tcpProbes(direct), c); err != nil {
		return err
	}
	if direct.reached() {
		return fmt.Errorf("with allow_hosts a direct connection bypassed the proxy to %s", direct.addr)
	}
	return viaProxy(ctx, h, t, c)
}

func caseProxyUDPBlocked(ctx context.Context, h *H) error {
	t, _, c, err := proxySetup(ctx, h)
	if err != nil {
		return err
	}
	u, err := h.listenUDP(":0")
	if err != nil {
		return err
	}
	var probes [][]string
	for _, ip := range hostIPs() {
		probes = append(probes, []string{"udp", ip, fmt.Sprint(portOf(u.addr))})
	}
	if _, err := netProbe(ctx, h, u, probes, c); err != nil {
		return err
	}
	sleepCtx(ctx, 500*time.Millisecond)
	if u.reached() {
		return errors.New("with allow_hosts a UDP datagram left the sandbox")
	}
	return viaProxy(ctx, h, t, c)
}

func caseNoneOwnLoopback(ctx context.Context, h *H) error {
	if h.Caps.Details[driverapi.DetailNetworkNoneLoopback] == "" {
		return skipf("the driver reports no loopback under network none (%s)", driverapi.DetailNetworkNoneLoopback)
	}
	t, err := h.listenStream("tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	o := h.Exec(ctx, h.ProbeCmd(Cmd{Caps: &driverapi.Capabilities{}, Timeout: 20 * time.Second},
		"loopback", sep, "try", "net", "tcp", "127.0.0.1", fmt.Sprint(portOf(t.addr)), t.token, sep, "print", "done"))
	if err := ran("loopback", o, "done"); err != nil {
		return err
	}
	if !bytes.Contains(o.Stdout, []byte("loopback-tcp-ok")) || !bytes.Contains(o.Stdout, []byte("loopback-udp-ok")) {
		return fmt.Errorf("with network none the program could not use its own loopback: %s", o)
	}
	if t.reached() || bytes.Contains(o.Stdout, []byte("reply:pong")) {
		return fmt.Errorf("with network none the program reached the host's loopback listener %s", t.addr)
	}
	return nil
}

func caseNoneListen(ctx context.Context, h *H) error {
	var (
		mu        sync.Mutex
		buf       []byte
		wg        sync.WaitGroup
		connected []string
	)
	dialed := false
	portRE := regexp.MustCompile(`port:(\d+)\n`)
	o := h.Exec(ctx, h.ProbeCmd(Cmd{Caps: &driverapi.Capabilities{},
		OnStdout: func(b []byte) {
			buf = append(buf, b...)
			m := portRE.FindSubmatch(buf)
			if m == nil || dialed {
				return
			}
			dialed = true
			for _, ip := range hostIPs() {
				addr := net.JoinHostPort(ip, string(m[1]))
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := net.DialTimeout("tcp", addr, time.Second)
					if err == nil {
						c.Close()
						mu.Lock()
						connected = append(connected, addr)
						mu.Unlock()
					}
				}()
			}
		}}, "listen"))
	wg.Wait()
	if err := ran("listener", o, "probe-start"); err != nil {
		return err
	}
	if len(connected) > 0 || bytes.Contains(o.Stdout, []byte("accepted")) {
		return fmt.Errorf("with network none the host connected to a listener inside the sandbox at %v", connected)
	}
	return nil
}

// caseUnixHostSocketUnreachable puts host sockets where the program may
// write: a stream and a datagram socket in the workspace, a stream socket
// in an fs_write grant. Path hiding cannot help there; only a driver that
// refuses unix sockets, or tells its own from the host's, passes.
func caseUnixOwnSockets(ctx context.Context, h *H) error {
	if got := h.Caps.Details[driverapi.DetailNetworkNoneUnixSockets]; got != "own" {
		return skipf("the driver reports no unix sockets of the command's own under network none (%s=%q)", driverapi.DetailNetworkNoneUnixSockets, got)
	}
	path := filepath.Join(h.Work, "host-"+newToken()+".sock")
	t, err := h.listenStream("unix", path)
	if err != nil {
		return err
	}
	// A non-root command must be allowed to write to the socket: only the
	// sandbox may stand in the way.
	_ = os.Chmod(path, 0o777)
	o := h.Exec(ctx, h.ProbeCmd(Cmd{Caps: &driverapi.Capabilities{}, Timeout: 20 * time.Second},
		"try", "unixown", sep, "try", "net", "unix", path, t.token, sep, "print", "done"))
	if err := ran("unix sockets", o, "done"); err != nil {
		return err
	}
	want := []string{"unix-own-stream-ok", "unix-own-dgram-ok", "unix-own-pair-ok", "unix-own-abstract-ok"}
	if runtime.GOOS != "linux" {
		want[3] = "unix-own-abstract-none"
	}
	for _, w := range want {
		if !bytes.Contains(o.Stdout, []byte(w+"\n")) {
			return fmt.Errorf("with network none the program could not use unix sockets of its own (no %s): %s", w, o)
		}
	}
	sleepCtx(ctx, 200*time.Millisecond)
	if t.reached() || bytes.Contains(o.Stdout, []byte("reply:pong")) {
		return fmt.Errorf("with network none the program reached the host's unix socket %s", path)
	}
	return nil
}

func caseUnixHostSocketUnreachable(ctx context.Context, h *H) error {
	if runtime.GOOS == "windows" {
		return skipf("AF_UNIX sockets in a directory the program writes are tested on POSIX hosts")
	}
	grant := filepath.Join(h.Root, "granted-"+newToken())
	if err := os.MkdirAll(grant, 0o777); err != nil {
		return err
	}
	_ = os.Chmod(grant, 0o777)
	for _, c := range []struct {
		network, path string
		caps          *driverapi.Capabilities
	}{
		{"unix", filepath.Join(h.Work, "host-"+newToken()+".sock"), &driverapi.Capabilities{}},
		{"unixgram", filepath.Join(h.Work, "host-"+newToken()+".dgram"), &driverapi.Capabilities{}},
		{"unix", filepath.Join(grant, "host.sock"), &driverapi.Capabilities{FSWrite: []string{grant}}},
	} {
		var (
			t   *target
			err error
		)
		if c.network == "unixgram" {
			t, err = h.listenPacket("unixgram", c.path)
		} else {
			t, err = h.listenStream("unix", c.path)
		}
		if err != nil {
			return err
		}
		// A non-root command must be allowed to write to the socket: only
		// the sandbox may stand in the way.
		_ = os.Chmod(c.path, 0o777)
		if err := noneBlocksWith(ctx, h, t, [][]string{{c.network, c.path}}, c.caps, false); err != nil {
			return err
		}
	}
	return nil
}
