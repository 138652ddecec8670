//go:build linux

package proxy

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// listeningTCPPorts is the set of ports of the TCP sockets in the LISTEN
// state that this process holds, read from the kernel's tables rather
// than from the proxy's own bookkeeping.
func listeningTCPPorts(t *testing.T) map[int]bool {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	ports := map[int]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue // no IPv6
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || fs[3] != "0A" || !inodes[fs[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fs[1], ":")
			port, err := strconv.ParseUint(hexPort, 16, 16)
			if err != nil {
				t.Fatalf("%s: %q", table, fs[1])
			}
			ports[int(port)] = true
		}
		f.Close()
	}
	return ports
}

// TestNoTCPListenerOnBridgeRoute: starting a bridge-route proxy adds no
// listening TCP socket to the process; a host-loopback proxy adds exactly
// its endpoint (which shows the check sees the proxy's listeners at all).
func TestNoTCPListenerOnBridgeRoute(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	for _, c := range []struct {
		name  string
		route Route
	}{{"bridge", RouteBridge}, {"default", RouteDefault}, {"host loopback", RouteHostLoopback}} {
		t.Run(c.name, func(t *testing.T) {
			before := listeningTCPPorts(t)
			p, _ := startProxy(t, []string{echo}, fakeResolver{}, func(cfg *Config) { cfg.Route = c.route })
			var added []int
			for port := range listeningTCPPorts(t) {
				if !before[port] {
					added = append(added, port)
				}
			}
			if c.route == RouteHostLoopback {
				_, ps, _ := net.SplitHostPort(p.Endpoint().TCPAddr)
				if len(added) != 1 || strconv.Itoa(added[0]) != ps {
					t.Fatalf("new TCP listeners %v, want exactly the endpoint %s", added, p.Endpoint().TCPAddr)
				}
			} else if len(added) != 0 {
				t.Fatalf("bridge route opened TCP listeners on ports %v", added)
			}
			// The unix socket serves in every case (to a client with the
			// child's credential on the host-loopback route).
			if resp, _ := connect(t, dialProxy(t, p, true), echo, childAuth(t, p)...); resp.StatusCode != 200 {
				t.Fatalf("CONNECT over the unix socket: %s", resp.Status)
			}
		})
	}
}
