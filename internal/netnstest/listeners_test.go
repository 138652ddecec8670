package netnstest

import (
	"io"
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

func TestStreamGreets(t *testing.T) {
	for _, tc := range []struct{ network, addr string }{{"tcp4", "127.0.0.1:0"}, {"unix", filepath.Join(t.TempDir(), "s.sock")}} {
		if tc.network == "unix" && runtime.GOOS == "windows" {
			continue
		}
		ln := Stream(t, tc.network, tc.addr, "hello")
		c, err := net.Dial(tc.network, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(b) != "hello" {
			t.Errorf("%s: read %q, %v; want the greeting, then EOF", tc.network, b, err)
		}
	}
}

func TestDatagramEchoesAndReports(t *testing.T) {
	pc, got := Datagram(t, "udp4", "127.0.0.1:0")
	c, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 16)
	n, err := c.Read(b)
	if err != nil || string(b[:n]) != "ping" {
		t.Errorf("echo: %q, %v", b[:n], err)
	}
	select {
	case s := <-got:
		if s != "ping" {
			t.Errorf("reported %q", s)
		}
	case <-time.After(10 * time.Second):
		t.Error("the datagram was not reported")
	}
}
