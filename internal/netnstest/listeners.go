package netnstest

import (
	"net"
	"sync"
	"testing"
)

// Serve answers every connection accepted on ln with greeting (nothing
// when empty) and closes it, until the test ends; ln is closed then and
// its goroutine waited for. A sandboxed client that reads the greeting
// proves it reached the listener (a connect alone can be a proxy's).
func Serve(t testing.TB, ln net.Listener, greeting string) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if greeting != "" {
				_, _ = c.Write([]byte(greeting))
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
}

// Stream listens on network and addr ("tcp4", "127.0.0.1:0"; "unix",
// PATH) and serves greeting there (Serve). It fails the test when the
// listen fails.
func Stream(t testing.TB, network, addr, greeting string) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	Serve(t, ln, greeting)
	return ln
}

// Datagram listens on network and addr ("udp4", "127.0.0.1:0"), sends
// every datagram back to its sender and passes a copy to the channel
// (which holds 16; later ones are dropped there, still echoed), until the
// test ends.
func Datagram(t testing.TB, network, addr string) (net.PacketConn, <-chan string) {
	t.Helper()
	pc, err := net.ListenPacket(network, addr)
	if err != nil {
		t.Fatalf("listen %s %s: %v", network, addr, err)
	}
	got := make(chan string, 16)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		b := make([]byte, 64<<10)
		for {
			n, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(b[:n], from)
			select {
			case got <- string(b[:n]):
			default:
			}
		}
	}()
	t.Cleanup(func() { pc.Close(); wg.Wait() })
	return pc, got
}
