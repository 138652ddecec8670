package proxy

import (
	"io"
	"net"
	"testing"
)

// sinkServer counts and discards what it receives; the count of each
// connection is sent on the returned channel when it closes.
func sinkServer(b *testing.B) (string, chan int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	got := make(chan int64, 1)
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				n, _ := io.Copy(io.Discard, c)
				c.Close()
				got <- n
			}()
		}
	}()
	return ln.Addr().String(), got
}

// BenchmarkThroughput compares one-way bulk transfer over a direct
// loopback TCP connection with the same transfer through a CONNECT tunnel
// (over the bridge route's unix socket, as on Linux, and over the
// host-loopback route's TCP listener with the credential, as on macOS).
func BenchmarkThroughput(b *testing.B) {
	chunk := make([]byte, 1<<20)
	run := func(b *testing.B, dial func(b *testing.B, sink string) net.Conn) {
		sink, got := sinkServer(b)
		c := dial(b, sink)
		b.SetBytes(int64(len(chunk)))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := c.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		c.Close()
		if n := <-got; n != int64(b.N)*int64(len(chunk)) {
			b.Fatalf("sink got %d bytes, want %d", n, int64(b.N)*int64(len(chunk)))
		}
	}
	b.Run("direct", func(b *testing.B) {
		run(b, func(b *testing.B, sink string) net.Conn {
			c, err := net.Dial("tcp", sink)
			if err != nil {
				b.Fatal(err)
			}
			return c
		})
	})
	for _, unix := range []bool{true, false} {
		name := "proxy_tcp"
		if unix {
			name = "proxy_unix"
		}
		b.Run(name, func(b *testing.B) {
			run(b, func(b *testing.B, sink string) net.Conn {
				route := hostLoopback
				if unix {
					route = func(c *Config) { c.Route = RouteBridge }
				}
				p, _ := startProxy(b, []string{sink}, fakeResolver{}, route)
				c := dialProxy(b, p, unix)
				resp, br := connect(b, c, sink, childAuth(b, p)...)
				if resp.StatusCode != 200 || br.Buffered() != 0 {
					b.Fatal(resp.Status)
				}
				return c
			})
		})
	}
}
