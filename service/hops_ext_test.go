package service_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
	"github.com/aleph-sandbox/aleph-sandbox/service"
)

// module is this module's import path: its packages are named in a chain
// by their path inside it ("service", "core"), the root as "alephsandbox".
const module = "github.com/aleph-sandbox/aleph-sandbox"

// chain is the call chain a goroutine's stack shows, outermost call
// first, down to the first frame whose function name contains last: one
// stop per run of frames of one package of this
// module, and one per run of frames of libraries (the standard library,
// Connect, gRPC), named by the outermost one's package, whose insides are
// not followed. Consecutive stops differ, so a chain of n stops made n-1
// calls across a package boundary: its hops.
func chain(goroutine, last string) []string {
	var funcs []string
	for _, l := range strings.Split(goroutine, "\n")[1:] {
		// Frames are a function line and a "\tfile:line" line, innermost
		// first.
		if l == "" || strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "created by ") {
			continue
		}
		funcs = append(funcs, l)
	}
	slices.Reverse(funcs)
	end := slices.IndexFunc(funcs, func(f string) bool { return strings.Contains(f, last) })
	if end < 0 {
		return nil
	}
	funcs = funcs[:end+1]
	var out []string
	lib := false
	for _, f := range funcs {
		pkg, own := packageOf(f)
		if !own && lib {
			continue // inside a library
		}
		if len(out) == 0 || out[len(out)-1] != pkg {
			out = append(out, pkg)
		}
		lib = !own
	}
	return out
}

// packageOf is the package of the function a stack line names
// ("path/pkg.(*T).M(...)", "path/pkg.F.func1(...)"), and whether it is
// one of this module's.
func packageOf(line string) (string, bool) {
	if i := strings.LastIndexByte(line, '('); i > 0 && strings.HasSuffix(line, ")") {
		line = line[:i] // the arguments
	}
	slash := strings.LastIndexByte(line, '/')
	dot := strings.IndexByte(line[slash+1:], '.')
	pkg := line[:slash+1+dot]
	switch {
	case pkg == module:
		return "alephsandbox", true
	case strings.HasPrefix(pkg, module+"/"):
		return strings.TrimPrefix(pkg, module+"/"), true
	}
	return pkg, false
}

// goroutineWith is the stack of the first goroutine of all whose frames
// name each of fns, or "".
func goroutineWith(all string, fns ...string) string {
	for _, g := range strings.Split(all, "\n\n") {
		if !slices.ContainsFunc(fns, func(fn string) bool { return !strings.Contains(g, fn) }) {
			return g
		}
	}
	return ""
}

// TestExecHops counts the package crossings of one Execute on the serve
// side, as the stacks of the running command show them: the request's
// goroutine from the HTTP server down to the driver client (and, for each
// output chunk, from the driver client back up to the client's
// connection), and the driver's goroutine from its gRPC server to the
// driver. The client stops reading, so both stay blocked on the way out
// (flow control) while the stacks are taken. The lists are the in-process
// part of the walk in docs/architecture.md ("The walk of one Python
// exec"); a layer added or cut on the way changes them here.
func TestExecHops(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	cfg := core.DefaultConfig()
	cfg.Sandbox.WorkspaceRoot = filepath.Join(t.TempDir(), "ws")
	cfg.Sandbox.AuditLog = ""
	cfg.Sandbox.MaxOutputBytes = 64 << 20
	cfg.Serve.MaxOutputBytes = 64 << 20
	sock := filepath.Join(t.TempDir(), "run", "s.sock")
	sigs, done, ready := make(chan os.Signal, 1), make(chan error, 1), make(chan struct{})
	conn := drivertest.Connect(t, &drivertest.FakeDriver{})
	go func() {
		done <- service.Run(context.Background(), service.Config{Sandbox: cfg, Sockets: []string{sock}, Signals: sigs,
			Ready: func() { close(ready) }, RuntimeOptions: []alephsandbox.Option{alephsandbox.WithDriver(conn)}})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run returned before serving: %v", err)
	}
	defer func() {
		sigs <- os.Interrupt
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// The request as the Python client sends it: Connect's JSON
	// streaming framing over HTTP/1.1 on the unix socket.
	body, _ := json.Marshal(map[string]any{"session": "s1", "argv": []string{"flood", "33554432"}, "signalKey": "sig-hops"})
	frame := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(body)))
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequest(http.MethodPost, "http://localhost/aleph.host.v1.Service/Execute", bytes.NewReader(append(frame, body...)))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("X-Aleph-Session", "s1")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// Not read until the stacks are taken: the command is held on its
	// way out. Closing it at the end cancels the command.
	defer resp.Body.Close()

	// Where each chain ends: the message handed to the protocol's own
	// connection (Connect's, gRPC's), below whatever wraps it on the way.
	const upEnd, drvEnd = "connect.(*errorTranslatingHandlerConnCloser).Send", "grpc.(*serverStream).SendMsg"
	var up, drv string
	buf := make([]byte, 1<<22)
	// Not a timing: a bound on waiting for the state the stacks are taken
	// in (it comes once a few MiB are on their way).
	deadline := time.Now().Add(2 * time.Minute)
	for up == "" || drv == "" {
		all := string(buf[:runtime.Stack(buf, true)])
		up = goroutineWith(all, "service.(*streamWriter).Write", upEnd)
		drv = goroutineWith(all, "driverapi.(*driverServer).Run.func1", drvEnd)
		if up != "" && drv != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the command was never seen blocked on its way out; goroutines:\n%s", all)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The serve process: the request's goroutine, from the HTTP server
	// down to the driver's gRPC client, and each chunk from there up to
	// the Connect stream.
	wantUp := []string{
		"net/http",                         // the server reads the request
		"service",                          // limitBody bounds the body
		"net/http",                         // the mux picks the service
		"service/api/hostv1/hostv1connect", // the generated routes
		"connectrpc.com/connect",           // decodes the request
		"service",                          // Server.Execute
		"core",                             // the pipeline (WorkspaceSandbox.Execute)
		"driverapi",                        // the driver's gRPC client (Run)
		"core",                             // an output chunk: the budget (liveFirst)
		"service",                          // streamWriter: one output event
		"connectrpc.com/connect",           // sent to the client
	}
	// The driver process (here the stand-in, behind the same gRPC
	// service): the run from the gRPC server to the driver, and each chunk
	// back onto the stream.
	wantDrv := []string{
		"google.golang.org/grpc",  // the server reads the call
		"driverapi/proto/alephv1", // the generated handler
		"driverapi",               // driverServer.Run
		"driverapi/drivertest",    // the driver's Run (drivers/bwrap in serve)
		"driverapi",               // an output chunk: the budget, then the chunk writer
		"google.golang.org/grpc",  // sent to the host
	}
	if got := chain(up, upEnd); !slices.Equal(got, wantUp) {
		t.Errorf("serve's chain (%d hops):\n  %q\nwant (%d hops):\n  %q\nstack:\n%s", len(got)-1, got, len(wantUp)-1, wantUp, up)
	}
	if got := chain(drv, drvEnd); !slices.Equal(got, wantDrv) {
		t.Errorf("the driver's chain (%d hops):\n  %q\nwant (%d hops):\n  %q\nstack:\n%s", len(got)-1, got, len(wantDrv)-1, wantDrv, drv)
	}
	// The control: what the stacks show is the command's output reaching
	// the client, one output event of the stand-in's bytes.
	head := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, head); err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, binary.BigEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(resp.Body, msg); err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Output struct {
			Data []byte `json:"data"`
		} `json:"output"`
	}
	if err := json.Unmarshal(msg, &ev); err != nil || len(ev.Output.Data) == 0 || strings.Trim(string(ev.Output.Data), "x") != "" {
		t.Fatalf("first event %.200s (%v): want the command's output", msg, err)
	}
}
