//go:build linux

package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
)

// netnsFetch prints the network namespace it runs in, then GETs the URL
// and prints "status:N" and the body, or "refused".
const netnsFetch = `
import os, sys, urllib.request
print(os.readlink("/proc/self/ns/net"))
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=10)
    print("status:%d" % r.status); print(r.read().decode())
except OSError as e:
    print("refused" if "refused" in str(e) else "error:" + str(e))
`

var netnsInodeRE = regexp.MustCompile(`net:\[(\d+)\]`)

// netnsHeldBy lists the host's processes in, or holding a descriptor of,
// the network namespace named like "net:[N]".
func netnsHeldBy(ns string) []string {
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		dir := "/proc/" + p.Name()
		if l, _ := os.Readlink(dir + "/ns/net"); l == ns {
			out = append(out, p.Name()+" in it")
		}
		fds, _ := os.ReadDir(dir + "/fd")
		for _, fd := range fds {
			if l, _ := os.Readlink(dir + "/fd/" + fd.Name()); l == ns {
				out = append(out, p.Name()+" fd "+fd.Name())
			}
		}
	}
	return out
}

// streamExec runs req and calls onOut with the stdout seen so far at every
// chunk; it returns the whole stdout and the result.
func streamExec(ctx context.Context, c hostv1connect.ServiceClient, req *hostv1.ExecuteRequest, onOut func(string)) (string, *hostv1.ExecResult, error) {
	st, err := c.Execute(ctx, connect.NewRequest(req))
	if err != nil {
		return "", nil, err
	}
	defer st.Close()
	var out strings.Builder
	var res *hostv1.ExecResult
	for st.Receive() {
		switch ev := st.Msg().GetEvent().(type) {
		case *hostv1.ExecuteResponse_Output:
			if ev.Output.GetStream() == hostv1.OutputChunk_STREAM_STDOUT {
				out.Write(ev.Output.GetData())
			}
			if onOut != nil {
				onOut(out.String())
			}
		case *hostv1.ExecuteResponse_Result:
			res = ev.Result
		}
	}
	return out.String(), res, st.Err()
}

// driverPlugin returns the pid of the bwrap driver plugin serve started.
func driverPlugin(t *testing.T, h *serveHarness, servePID int) int {
	t.Helper()
	want := filepath.Join(h.bin, "aleph-driver-bwrap")
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink("/proc/" + p.Name() + "/exe")
		st, _ := os.ReadFile("/proc/" + p.Name() + "/stat")
		// stat: pid (comm) state ppid ...
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:]))
		if exe == want && len(f) > 1 && f[1] == strconv.Itoa(servePID) {
			return pid
		}
	}
	t.Fatal("no driver plugin process of serve found")
	return 0
}

// TestNetSessionLoopbackE2E drives `serve` with the real sandbox: under the
// default network (none) a `python3 -m http.server` on 127.0.0.1 run by a
// command of session A answers a concurrent command of session A, while a
// command of session B and the host cannot reach it; the namespace is gone
// once session A is forgotten, and every session's namespace is gone once
// the driver is killed.
func TestNetSessionLoopbackE2E(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "s.sock") // serve makes run/ 0700
	p := h.start(t, sock, "")
	c := client(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	caps, err := c.Capabilities(ctx, connect.NewRequest(&hostv1.CapabilitiesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if rep := caps.Msg.GetReportJson(); !strings.Contains(rep, `"network.none_loopback":"session"`) {
		t.Fatalf("the driver does not report network.none_loopback = session: %s", rep)
	}

	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close() // free on the host: a host connection below must find nothing
	url := "http://127.0.0.1:" + port + "/"

	serverCtx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	serving := make(chan struct{})
	var once sync.Once
	serverDone := make(chan error, 1)
	go func() {
		_, _, err := streamExec(serverCtx, c, &hostv1.ExecuteRequest{Session: "net-e2e-A", TimeoutSeconds: 120,
			Argv: []string{"/usr/bin/python3", "-u", "-m", "http.server", "--bind", "127.0.0.1", port}},
			func(out string) {
				if strings.Contains(out, "Serving HTTP") {
					once.Do(func() { close(serving) })
				}
			})
		serverDone <- err
	}()
	select {
	case <-serving:
	case err := <-serverDone:
		t.Fatalf("http.server ended before serving: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("http.server did not start")
	}

	fetch := func(session string) (string, string) {
		t.Helper()
		out, res, err := streamExec(ctx, c, &hostv1.ExecuteRequest{Session: session, TimeoutSeconds: 60,
			Argv: []string{"/usr/bin/python3", "-c", netnsFetch, url}}, nil)
		if err != nil || res == nil || res.GetExitCode() != 0 {
			t.Fatalf("fetch in %s: %v %v %q", session, err, res, out)
		}
		m := netnsInodeRE.FindString(out)
		if m == "" {
			t.Fatalf("fetch in %s printed no namespace: %q", session, out)
		}
		return out, m
	}
	outA, nsA := fetch("net-e2e-A")
	if !strings.Contains(outA, "status:200") || !strings.Contains(outA, "Directory listing") {
		t.Fatalf("session A's second command did not get the page: %q", outA)
	}
	outB, nsB := fetch("net-e2e-B")
	if !strings.Contains(outB, "refused") || nsB == nsA {
		t.Fatalf("session B reached session A's server (or shares its namespace %s): %q", nsA, outB)
	}
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Fatalf("the host reached session A's server at %s", url)
	}
	stopServer()
	<-serverDone

	if len(netnsHeldBy(nsA)) == 0 {
		t.Fatalf("positive control: nothing holds session A's namespace %s before the forget", nsA)
	}
	if _, err := c.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{
		Action: &hostv1.SessionsRequest_Forget{Forget: &hostv1.ForgetSession{Session: "net-e2e-A"}}})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "session A's namespace to go", func() bool { return len(netnsHeldBy(nsA)) == 0 })
	if held := netnsHeldBy(nsB); len(held) == 0 {
		t.Fatalf("session B's namespace %s went with A's forget", nsB)
	}

	drv := driverPlugin(t, h, p.cmd.Process.Pid)
	if err := syscall.Kill(drv, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "session B's namespace to go with the driver", func() bool { return len(netnsHeldBy(nsB)) == 0 })
	// The service relaunches the driver; sessions start afresh. A command
	// sent in the moment before the host has reaped the killed plugin is
	// in flight on the dead one and fails, naming the driver; the next
	// one relaunches it.
	for i := 0; ; i++ {
		_, _, err := streamExec(ctx, c, &hostv1.ExecuteRequest{Session: "net-e2e-B", Argv: []string{"/bin/true"}}, nil)
		if err == nil {
			break
		}
		if i == 2 || !strings.Contains(err.Error(), "driver") {
			t.Fatalf("after the driver's death, no relaunch: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _ := fetch("net-e2e-B")
	if !strings.Contains(out, "refused") {
		t.Fatalf("after the driver's death: %q", out)
	}
}
