package conformance

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func newToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "tok-" + hex.EncodeToString(b[:])
}

// target is a host-side listener that counts connections presenting its
// token (stream) or datagrams carrying it.
type target struct {
	token string
	hits  atomic.Int32
	addr  string // host:port, path, or abstract name
}

func (t *target) reached() bool { return t.hits.Load() > 0 }

// listenStream serves network/address (tcp, tcp6, unix) until the case ends.
func (h *H) listenStream(network, address string) (*target, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	t := &target{token: newToken(), addr: ln.Addr().String()}
	var wg sync.WaitGroup
	h.defer_(func() { ln.Close(); wg.Wait() })
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
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				line, _ := bufio.NewReader(c).ReadString('\n')
				if strings.TrimSpace(line) == t.token {
					t.hits.Add(1)
					_, _ = io.WriteString(c, "pong\n")
				}
			}()
		}
	}()
	return t, nil
}

// listenUDP counts datagrams carrying the token until the case ends.
func (h *H) listenUDP(address string) (*target, error) { return h.listenPacket("udp", address) }

// listenPacket counts datagrams carrying the token on network (udp,
// unixgram) until the case ends.
func (h *H) listenPacket(network, address string) (*target, error) {
	pc, err := net.ListenPacket(network, address)
	if err != nil {
		return nil, err
	}
	t := &target{token: newToken(), addr: pc.LocalAddr().String()}
	done := make(chan struct{})
	h.defer_(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if strings.Contains(string(buf[:n]), t.token) {
				t.hits.Add(1)
			}
		}
	}()
	return t, nil
}

// hostIPs are the addresses a sandboxed program might use to reach this
// host: loopback, and the first non-loopback IPv4 address (a driver that
// gives the child its own network namespace with a bridge reaches that one).
func hostIPs() []string {
	ips := []string{"127.0.0.1"}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ips
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return append(ips, n.IP.String())
		}
	}
	return ips
}

func splitPort(addr string) (string, string) {
	host, port, _ := net.SplitHostPort(addr)
	return host, port
}

// connectProxy is a minimal HTTP CONNECT proxy with an allow-list, standing
// in for the host's managed proxy: allowed names map to fixed addresses
// (no DNS), everything else gets 403.
type connectProxy struct {
	tcpAddr, unixPath string
	allowed           map[string]string // "name:port" → dial address
	tunnels           atomic.Int32
	refused           atomic.Int32
}

func (h *H) startProxy(ctx context.Context, allowed map[string]string, unixPath string) (*connectProxy, error) {
	p := &connectProxy{allowed: allowed, unixPath: unixPath}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.tcpAddr = tl.Addr().String()
	lns := []net.Listener{tl}
	if unixPath != "" {
		ul, err := net.Listen("unix", unixPath)
		if err != nil {
			tl.Close()
			return nil, err
		}
		lns = append(lns, ul)
	}
	var wg sync.WaitGroup
	h.defer_(func() {
		for _, l := range lns {
			l.Close()
		}
		wg.Wait()
	})
	for _, l := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				wg.Add(1)
				go func() { defer wg.Done(); p.serve(ctx, c) }()
			}
		}()
	}
	return p, nil
}

func (p *connectProxy) serve(ctx context.Context, c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if strings.TrimSpace(l) == "" {
			break
		}
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "CONNECT" {
		p.refused.Add(1)
		_, _ = io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	dst, ok := p.allowed[strings.ToLower(f[1])]
	if !ok {
		p.refused.Add(1)
		_, _ = io.WriteString(c, "HTTP/1.1 403 Forbidden\r\n\r\n")
		return
	}
	var d net.Dialer
	up, err := d.DialContext(ctx, "tcp", dst)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	_ = up.SetDeadline(time.Now().Add(10 * time.Second))
	p.tunnels.Add(1)
	_, _ = io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n")
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, r); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

func portOf(addr string) int {
	_, p := splitPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}
