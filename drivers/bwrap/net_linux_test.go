//go:build linux

package bwrap

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// fakeProxy answers every connection on a unix socket with a fixed HTTP
// response naming the request line it saw, standing in for the host proxy.
func fakeProxy(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "aleph-proxy-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	sock := filepath.Join(dir, "proxy.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait(); os.RemoveAll(dir) })
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
				line, _ := bufio.NewReader(c).ReadString('\n')
				body := "via-proxy " + strings.TrimSpace(line)
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: " +
					strconv.Itoa(len(body)) + "\r\n\r\n" + body))
			}()
		}
	}()
	real, _ := filepath.EvalSymlinks(sock)
	return real
}

func TestAllowHostsThroughBridge(t *testing.T) {
	d := testDriver(t, options{})
	ctx := context.Background()
	caps, _ := d.Capabilities(ctx)
	ws := newWorkspace(t)
	sock := fakeProxy(t)
	req := driverapi.Capabilities{SpawnSubprocess: true, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}}
	if !caps.Has(driverapi.FeatureNetworkViaProxy) {
		if !hasUnavailable(caps, driverapi.FeatureNetworkViaProxy) {
			t.Fatalf("network_via_proxy neither claimed nor explained: %+v", caps)
		}
		_, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: req, Workspace: ws, Cwd: ws, Proxy: &driverapi.ProxyEndpoint{UnixSocket: sock}})
		var ue *unavailableError
		if !errors.As(err, &ue) {
			t.Fatalf("allow_hosts not refused: %v", err)
		}
		return
	}
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: req, Workspace: ws, Cwd: ws, Proxy: &driverapi.ProxyEndpoint{UnixSocket: sock}})
	if err != nil {
		t.Fatal(err)
	}
	runIt := func(script string) drvResult {
		var out, errb lockedBuf
		exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", script}, Cwd: ws, Profile: prof,
			Timeout: 30 * time.Second, MaxOutputBytes: 1 << 16, Env: pathEnv()}, driverapi.Streams{Stdout: &out, Stderr: &errb})
		return drvResult{exit: exit, err: err, stdout: out.String(), stderr: errb.String()}
	}
	// Positive control: through the bridge to the proxy, on both ports.
	r := runIt("curl -s --max-time 10 -x http://127.0.0.1:3128 http://example.com/x")
	expectOK(t, r)
	if !strings.Contains(r.stdout, "via-proxy GET http://example.com/x") {
		t.Fatalf("proxy answer %q (stderr %q)", r.stdout, r.stderr)
	}
	r = runIt("printf 'GET http://example.com/y HTTP/1.0\\r\\n\\r\\n' | curl -s --max-time 10 telnet://127.0.0.1:1080 || true")
	if !strings.Contains(r.stdout, "via-proxy GET http://example.com/y") {
		t.Fatalf("second bridge port: %q %q", r.stdout, r.stderr)
	}
	// Anything that ignores the proxy has nowhere to go.
	for _, script := range []string{
		"curl -s --max-time 5 http://1.1.1.1/",
		"curl -s --max-time 5 http://127.0.0.1:8080/",
		"curl -s --max-time 5 --noproxy '*' http://example.com/",
	} {
		expectFail(t, runIt(script))
	}
}

func TestAllowHostsBadProxy(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	caps := driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}}
	notSock := filepath.Join(ws, "file")
	os.WriteFile(notSock, nil, 0o644)
	for name, proxy := range map[string]*driverapi.ProxyEndpoint{
		"none": nil, "tcp only": {TCPAddr: "127.0.0.1:1"}, "relative": {UnixSocket: "p.sock"},
		"missing": {UnixSocket: ws + "/nope.sock"}, "not a socket": {UnixSocket: notSock},
	} {
		_, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws, Proxy: proxy})
		var ise *driverapi.InvalidSpecError
		var ue *unavailableError
		if !errors.As(err, &ise) && !errors.As(err, &ue) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
