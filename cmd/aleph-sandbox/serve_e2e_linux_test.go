//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
	hostclient "github.com/aleph-sandbox/aleph-sandbox/service/client"
)

// serveHarness is the real binaries (CLI, bwrap driver, sandbox init) and
// the private directories a `serve` process runs with.
type serveHarness struct {
	bin, home string
	// env is added to the environment of the serve processes started.
	env []string
}

func newServeHarness(t testing.TB) *serveHarness {
	t.Helper()
	if testing.Short() {
		t.Skip("serve tests build and run the real sandbox; skipped with -short")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap (bwrap) is not installed: serve tests run the real sandbox")
	}
	dir := t.TempDir()
	h := &serveHarness{bin: filepath.Join(dir, "bin"), home: filepath.Join(dir, "home")}
	installBinaries(t, h.bin)
	return h
}

// lockedBuffer is the server's stderr, written by the copying goroutine
// and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type serveProc struct {
	cmd    *exec.Cmd
	sock   string
	stderr *lockedBuffer
	// done is closed when the process has exited; err is then its status.
	done chan struct{}
	err  error
}

// start runs `serve` listening on sock with the config text given.
func (h *serveHarness) start(t testing.TB, sock, config string, extra ...string) *serveProc {
	t.Helper()
	p := h.startNoWait(t, sock, config, extra...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c := client(sock)
		_, err := c.CheckPolicy(context.Background(), connect.NewRequest(&hostv1.CheckPolicyRequest{Command: "true"}))
		if err == nil {
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("serve exited early: %v\n%s", p.err, p.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready: %v\n%s", err, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *serveHarness) startNoWait(t testing.TB, sock, config string, extra ...string) *serveProc {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--config", cfg, "--listen", "unix:" + sock}, extra...)
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), args...)
	data := t.TempDir()
	// The load test's switch is the test's, not a configuration override
	// (serve refuses unknown ALEPH_SANDBOX_ variables).
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, loadFullEnv+"=") {
			env = append(env, e)
		}
	}
	cmd.Env = append(env, "XDG_DATA_HOME="+data, "XDG_CONFIG_HOME="+t.TempDir(),
		"ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+filepath.Join(data, "ws"), "ALEPH_SANDBOX_SANDBOX__AUDIT_LOG=")
	cmd.Env = append(cmd.Env, h.env...)
	p := &serveProc{cmd: cmd, sock: sock, stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// unixHTTP is an HTTP client whose every connection goes to sock; h2
// speaks HTTP/2 in cleartext (for gRPC), else HTTP/1.1.
func unixHTTP(sock string, h2 bool) *http.Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	if h2 {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: tr}
}

// client speaks the Connect protocol (JSON) over HTTP/1.1.
func client(sock string) hostv1connect.ServiceClient {
	return hostv1connect.NewServiceClient(unixHTTP(sock, false), "http://aleph", connect.WithProtoJSON())
}

type execOutcome struct {
	chunks    []*hostv1.OutputChunk
	approvals []*hostv1.ApprovalRequest
	// result is the final message with the command's whole output in
	// stdout and stderr, assembled from the chunks as a client does (the
	// service sends each byte once); wire is the message as it came.
	result *hostv1.ExecResult
	wire   *hostv1.ExecResult
	err    error
}

// execute runs req; onApproval (if set) answers approval requests.
func execute(ctx context.Context, c hostv1connect.ServiceClient, req *hostv1.ExecuteRequest, onApproval func(*hostv1.ApprovalRequest)) execOutcome {
	var o execOutcome
	st, err := c.Execute(ctx, connect.NewRequest(req))
	if err != nil {
		o.err = err
		return o
	}
	defer st.Close()
	for st.Receive() {
		switch ev := st.Msg().GetEvent().(type) {
		case *hostv1.ExecuteResponse_Output:
			o.chunks = append(o.chunks, ev.Output)
		case *hostv1.ExecuteResponse_ApprovalRequest:
			o.approvals = append(o.approvals, ev.ApprovalRequest)
			if onApproval != nil {
				onApproval(ev.ApprovalRequest)
			}
		case *hostv1.ExecuteResponse_Result:
			o.wire = ev.Result
		}
	}
	o.err = st.Err()
	if o.wire != nil {
		var got hostclient.Output
		for _, c := range o.chunks {
			got.Add(c)
		}
		o.result = proto.CloneOf(o.wire)
		o.result.Stdout, o.result.Stderr = got.Whole(o.wire)
	}
	return o
}

func errDetail(t *testing.T, err error) *hostv1.ErrorDetail {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("want a connect error, got %v", err)
	}
	for _, d := range ce.Details() {
		v, derr := d.Value()
		if derr != nil {
			t.Fatal(derr)
		}
		if ed, ok := v.(*hostv1.ErrorDetail); ok {
			return ed
		}
	}
	t.Fatalf("error %v has no ErrorDetail", err)
	return nil
}

// markerRunning reports whether any process on the host has marker in its
// command line (sandboxed processes are in a PID namespace, but /proc of
// the host sees them).
func markerRunning(marker string) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestServe(t *testing.T) {
	h := newServeHarness(t)
	sockDir := filepath.Join(t.TempDir(), "run")
	sock := filepath.Join(sockDir, "aleph.sock")
	srv := h.start(t, sock, "")
	c := client(sock)
	ctx := context.Background()

	t.Run("socket 0600 in a 0700 directory", func(t *testing.T) {
		for path, want := range map[string]os.FileMode{sockDir: 0o700, sock: 0o600} {
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != want {
				t.Errorf("%s: mode %o, want %o", path, st.Mode().Perm(), want)
			}
		}
	})

	t.Run("Execute streams output then the result", func(t *testing.T) {
		o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "s1",
			Argv: []string{"/bin/sh", "-c", "echo out1; echo err1 >&2; echo out2; exit 3"}}, nil)
		if o.err != nil {
			t.Fatalf("%v\n%s", o.err, srv.stderr)
		}
		if o.result == nil || o.result.GetExitCode() != 3 || o.result.GetCommandId() == "" || o.result.GetBackend() == "" {
			t.Fatalf("result %+v", o.result)
		}
		var out, errb strings.Builder
		for _, ch := range o.chunks {
			switch ch.GetStream() {
			case hostv1.OutputChunk_STREAM_STDOUT:
				out.Write(ch.GetData())
			case hostv1.OutputChunk_STREAM_STDERR:
				errb.Write(ch.GetData())
			}
		}
		if out.String() != "out1\nout2\n" || errb.String() != "err1\n" {
			t.Errorf("chunks stdout %q stderr %q", out.String(), errb.String())
		}
		if string(o.result.GetStdout()) != "out1\nout2\n" || o.result.GetReasonCode() != "allowed" {
			t.Errorf("result stdout %q reason %q", o.result.GetStdout(), o.result.GetReasonCode())
		}
	})

	t.Run("gRPC over h2c on the same socket", func(t *testing.T) {
		g := hostv1connect.NewServiceClient(unixHTTP(sock, true), "http://aleph", connect.WithGRPC())
		o := execute(ctx, g, &hostv1.ExecuteRequest{Session: "s1", Argv: []string{"/bin/echo", "via-grpc"}}, nil)
		if o.err != nil || o.result == nil || string(o.result.GetStdout()) != "via-grpc\n" {
			t.Fatalf("err %v result %+v", o.err, o.result)
		}
	})

	t.Run("a policy denial is a typed result, the command not run", func(t *testing.T) {
		ws := t.TempDir()
		victim := filepath.Join(ws, "victim")
		if err := os.WriteFile(victim, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "s1", Workspace: ws,
			Argv: []string{"/bin/sh", "-c", "rm -rf / ; echo ran"}}, nil)
		if o.err != nil || o.result == nil {
			t.Fatalf("%v", o.err)
		}
		r := o.result
		if !r.GetDenied() || r.GetReasonCode() != "hook_denied" || r.GetRule() != "rm-root" || len(r.GetStdout()) != 0 {
			t.Errorf("result %+v", r)
		}
		// Positive control: the same workspace runs an allowed command.
		o = execute(ctx, c, &hostv1.ExecuteRequest{Session: "s1", Workspace: ws, Argv: []string{"/bin/cat", "victim"}}, nil)
		if o.err != nil || o.result == nil || string(o.result.GetStdout()) != "x" {
			t.Errorf("control: err %v result %+v", o.err, o.result)
		}
	})

	t.Run("approvals: denied with no approver, answered by the sending client", func(t *testing.T) {
		req := &hostv1.ExecuteRequest{Session: "s-appr", Spawn: true, Argv: []string{"/bin/sh", "-c", "/bin/echo spawned"}}
		o := execute(ctx, c, req, nil)
		if o.err != nil || o.result == nil || !o.result.GetDenied() || o.result.GetReasonCode() != "approval_denied" {
			t.Fatalf("no approver: err %v result %+v", o.err, o.result)
		}
		req.AnswerApprovals = true
		o = execute(ctx, c, req, func(a *hostv1.ApprovalRequest) {
			if _, err := c.Approve(ctx, connect.NewRequest(&hostv1.ApproveRequest{Id: a.GetId(), Approved: false})); err != nil {
				t.Errorf("approve: %v", err)
			}
		})
		if o.err != nil || len(o.approvals) != 1 || !o.result.GetDenied() {
			t.Fatalf("refused by the client: err %v approvals %d result %+v", o.err, len(o.approvals), o.result)
		}
		if a := o.approvals[0]; a.GetSession() != "s-appr" || !a.GetRequested().GetSpawn() || !strings.Contains(a.GetSummary(), "subprocesses") || a.GetPolicyDigest() == "" {
			t.Errorf("approval request %+v", a)
		}
		o = execute(ctx, c, req, func(a *hostv1.ApprovalRequest) {
			if _, err := c.Approve(ctx, connect.NewRequest(&hostv1.ApproveRequest{Id: a.GetId(), Approved: true})); err != nil {
				t.Errorf("approve: %v", err)
			}
		})
		if o.err != nil || o.result == nil || o.result.GetDenied() || string(o.result.GetStdout()) != "spawned\n" {
			t.Fatalf("approved: err %v result %+v", o.err, o.result)
		}
		g, err := c.Grants(ctx, connect.NewRequest(&hostv1.GrantsRequest{Action: &hostv1.GrantsRequest_List{List: &hostv1.ListGrants{Session: "s-appr"}}}))
		if err != nil || len(g.Msg.GetGrants()) != 1 {
			t.Fatalf("grants after approval: %v %+v", err, g)
		}
		if _, err := c.Approve(ctx, connect.NewRequest(&hostv1.ApproveRequest{Id: "apr-unknown", Approved: true})); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("unknown approval id: %v", err)
		}
	})

	t.Run("approvals: a client on the Approvals stream answers others' commands", func(t *testing.T) {
		actx, stop := context.WithCancel(ctx)
		defer stop()
		got := make(chan *hostv1.ApprovalRequest, 8)
		// The call returns with the first request (the response headers
		// come with it), so it is made aside.
		go func() {
			st, err := c.Approvals(actx, connect.NewRequest(&hostv1.ApprovalsRequest{}))
			if err != nil {
				return
			}
			defer st.Close()
			for st.Receive() {
				got <- st.Msg()
				_, _ = c.Approve(ctx, connect.NewRequest(&hostv1.ApproveRequest{Id: st.Msg().GetId(), Approved: true}))
			}
		}()
		// The subscription is in place once the server has the call; until
		// then a request finds no approver and is denied, so try a few times.
		var o execOutcome
		for i := 0; i < 50; i++ {
			o = execute(ctx, c, &hostv1.ExecuteRequest{Session: fmt.Sprintf("s-stream-%d", i), Spawn: true, Argv: []string{"/bin/sh", "-c", "/bin/echo by-stream"}}, nil)
			if o.err != nil || o.result == nil || !o.result.GetDenied() {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if o.err != nil || o.result == nil || o.result.GetDenied() || string(o.result.GetStdout()) != "by-stream\n" {
			t.Fatalf("err %v result %+v", o.err, o.result)
		}
		select {
		case r := <-got:
			if !r.GetRequested().GetSpawn() || r.GetCommandId() == "" {
				t.Errorf("request %+v", r)
			}
		default:
			t.Error("the approver saw no request")
		}
	})

	t.Run("malformed requests are InvalidArgument with the field", func(t *testing.T) {
		cases := map[string]*hostv1.ExecuteRequest{
			"argv":            {Session: "s1"},
			"session":         {Argv: []string{"/bin/true"}},
			"read[0]":         {Session: "s1", Argv: []string{"/bin/true"}, Read: []string{"relative/path"}},
			"net":             {Session: "s1", Argv: []string{"/bin/true"}, Net: "exa mple.com"},
			"timeout_seconds": {Session: "s1", Argv: []string{"/bin/true"}, TimeoutSeconds: -1},
		}
		for field, req := range cases {
			o := execute(ctx, c, req, nil)
			if connect.CodeOf(o.err) != connect.CodeInvalidArgument {
				t.Errorf("%s: want InvalidArgument, got %v", field, o.err)
				continue
			}
			if d := errDetail(t, o.err); d.GetField() != field || d.GetReasonCode() != service.ReasonInvalidRequest {
				t.Errorf("%s: detail %+v", field, d)
			}
		}
	})

	t.Run("grants covering the socket's directory are refused", func(t *testing.T) {
		for _, p := range []string{sockDir, filepath.Dir(sockDir), "/", sock} {
			o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "s1", Argv: []string{"/bin/true"}, Read: []string{p}, AnswerApprovals: true}, nil)
			if connect.CodeOf(o.err) != connect.CodePermissionDenied || errDetail(t, o.err).GetReasonCode() != service.ReasonProtectedPath {
				t.Errorf("read %s: want PermissionDenied protected_path, got %v", p, o.err)
			}
		}
		o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "s1", Argv: []string{"/bin/true"}, Workspace: filepath.Dir(sockDir)}, nil)
		if connect.CodeOf(o.err) != connect.CodePermissionDenied {
			t.Errorf("workspace over the socket: %v", o.err)
		}
		// Positive control: another directory is granted (the client
		// approves) and really read inside the sandbox.
		other := t.TempDir()
		if err := os.WriteFile(filepath.Join(other, "f"), []byte("readable"), 0o644); err != nil {
			t.Fatal(err)
		}
		o = execute(ctx, c, &hostv1.ExecuteRequest{Session: "s-read", Argv: []string{"/bin/cat", filepath.Join(other, "f")}, Read: []string{other}, AnswerApprovals: true},
			func(a *hostv1.ApprovalRequest) {
				_, _ = c.Approve(ctx, connect.NewRequest(&hostv1.ApproveRequest{Id: a.GetId(), Approved: true}))
			})
		if o.err != nil || o.result == nil || string(o.result.GetStdout()) != "readable" {
			t.Errorf("control: err %v result %+v", o.err, o.result)
		}
	})

	t.Run("a sandboxed command cannot reach the socket", func(t *testing.T) {
		if _, err := os.Stat("/usr/bin/python3"); err != nil {
			t.Skip("/usr/bin/python3 is the probe")
		}
		// Network all (the host's network namespace) is the worst case; the
		// socket's path is still outside the sandbox's mount namespace.
		probe := `import socket,sys
s=socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("connected")
except OSError as e:
    print("refused", e.errno)`
		o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "s-probe", Net: "all", AnswerApprovals: true,
			Argv: []string{"/usr/bin/python3", "-c", probe, sock}},
			func(a *hostv1.ApprovalRequest) {
				_, _ = c.Approve(ctx, connect.NewRequest(&hostv1.ApproveRequest{Id: a.GetId(), Approved: true}))
			})
		if o.err != nil || o.result == nil || o.result.GetDenied() {
			t.Fatalf("err %v result %+v", o.err, o.result)
		}
		// The probe ran (it printed its verdict) and did not connect.
		if got := string(o.result.GetStdout()); !strings.HasPrefix(got, "refused") {
			t.Errorf("probe inside the sandbox: %q %q", got, o.result.GetStderr())
		}
		// Positive control: the same probe outside the sandbox connects.
		out, err := exec.Command("/usr/bin/python3", "-c", probe, sock).Output()
		if err != nil || !strings.HasPrefix(string(out), "connected") {
			t.Errorf("probe on the host: %v %q", err, out)
		}
	})

	t.Run("a client that disconnects mid-command cancels it", func(t *testing.T) {
		marker := fmt.Sprintf("%d.%d", 600+os.Getpid()%100, time.Now().UnixNano()%1000000)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		res := make(chan execOutcome, 1)
		// The call returns with the first message, which a silent command
		// sends only at its end.
		go func() {
			res <- execute(cctx, c, &hostv1.ExecuteRequest{Session: "s-dc", Argv: []string{"/bin/sleep", marker}}, nil)
		}()
		waitFor(t, "the command to start", func() bool { return markerRunning(marker) })
		cancel()
		if o := <-res; o.err == nil {
			t.Errorf("a cancelled call ended with a result: %+v", o.result)
		}
		waitFor(t, "the command to be killed", func() bool { return !markerRunning(marker) })
	})

	t.Run("a live socket is never stolen", func(t *testing.T) {
		p := h.startNoWait(t, sock, "")
		select {
		case <-p.done:
			err := p.err
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 125 || !strings.Contains(p.stderr.String(), sock) {
				t.Errorf("second serve: %v, stderr %q", err, p.stderr)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("second serve did not exit")
		}
		// The first one still answers.
		o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "s1", Argv: []string{"/bin/true"}}, nil)
		if o.err != nil || o.result == nil {
			t.Errorf("first serve after the attempt: %v", o.err)
		}
	})

	t.Run("exec --host: the statuses, output and --json of in-process exec", func(t *testing.T) {
		cli := filepath.Join(h.bin, "aleph-sandbox")
		run := func(env []string, args ...string) (int, string, string) {
			cmd := exec.Command(cli, args...)
			cmd.Env = append(os.Environ(), env...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			return cmd.ProcessState.ExitCode(), out.String(), errb.String()
		}
		host := "unix:" + sock
		if code, out, errs := run(nil, "exec", "--host", host, "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 4"); code != 4 || out != "out\n" || errs != "err\n" {
			t.Errorf("exit 4: %d %q %q", code, out, errs)
		}
		if code, out, _ := run(nil, "exec", "--host", host, "--json", "--", "/bin/echo", "hi"); code != 0 || !strings.Contains(out, `"stdout":"hi\n"`) || !strings.Contains(out, `"backend":"bwrap"`) {
			t.Errorf("--json: %d %q", code, out)
		}
		// ALEPH_SANDBOX_HOST; no terminal and no --yes: the elevation is
		// denied (125), as in-process; --yes approves it.
		env := []string{"ALEPH_SANDBOX_HOST=" + host}
		if code, _, errs := run(env, "exec", "--spawn", "--", "/bin/sh", "-c", "/bin/echo x"); code != 125 || !strings.Contains(errs, "approval_denied") ||
			!strings.Contains(errs, "(asked for by --spawn; approve with --yes") {
			t.Errorf("denied: %d %q, want the flag that asked and how to approve", code, errs)
		}
		// The notes of in-process exec: output cut at the budget, and a
		// fork refused without --spawn (the control: none for a command
		// within both).
		if code, _, errs := run(env, "exec", "--max-output", "100", "--", "/usr/bin/seq", "1", "100000"); code != 0 || !strings.Contains(errs, "output truncated") || !strings.Contains(errs, "--max-output") {
			t.Errorf("truncated: %d %q", code, errs)
		}
		if code, _, errs := run(env, "exec", "--", "/bin/sh", "-c", "ls | cat"); code == 0 || !strings.Contains(errs, "subprocesses need --spawn") {
			t.Errorf("fork without --spawn: %d %q", code, errs)
		}
		if code, _, errs := run(env, "exec", "--max-output", "100", "--", "/bin/echo", "short"); code != 0 || errs != "" {
			t.Errorf("control: %d %q", code, errs)
		}
		if code, out, _ := run(env, "exec", "--spawn", "--yes", "--", "/bin/sh", "-c", "/bin/echo spawned"); code != 0 || out != "spawned\n" {
			t.Errorf("--yes: %d %q", code, out)
		}
		if code, _, _ := run(nil, "exec", "--host", host, "--timeout", "1s", "--", "/bin/sleep", "5"); code != 124 {
			t.Errorf("timeout: %d", code)
		}
		if code, _, errs := run(nil, "exec", "--host", "unix:"+filepath.Join(t.TempDir(), "none.sock"), "--", "/bin/true"); code != 125 || !strings.Contains(errs, "no service at") {
			t.Errorf("no service: %d %q", code, errs)
		}
	})

	t.Run("a signal during the approval: nothing ran, Aborted with its own reason code", func(t *testing.T) {
		key := newSignalKey()
		ws := t.TempDir()
		marker := filepath.Join(ws, "ran")
		o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "s-sig", Argv: []string{"/bin/sh", "-c", "touch " + marker}, Workspace: ws,
			Spawn: true, AnswerApprovals: true, SignalKey: key}, func(*hostv1.ApprovalRequest) {
			// Unanswered: the signal comes while the command waits for it.
			if _, err := c.Signal(ctx, connect.NewRequest(&hostv1.SignalRequest{SignalKey: key, Signal: "TERM"})); err != nil {
				t.Errorf("Signal: %v", err)
			}
		})
		if connect.CodeOf(o.err) != connect.CodeAborted || errDetail(t, o.err).GetReasonCode() != "signal_before_start" {
			t.Fatalf("%v, want Aborted / signal_before_start", o.err)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the command ran")
		}
		// The control: approved, the same command runs.
		o = execute(ctx, c, &hostv1.ExecuteRequest{Session: "s-sig", Argv: []string{"/bin/sh", "-c", "touch " + marker}, Workspace: ws,
			Spawn: true, AnswerApprovals: true}, func(r *hostv1.ApprovalRequest) {
			_, _ = c.Approve(ctx, connect.NewRequest(&hostv1.ApproveRequest{Id: r.GetId(), Approved: true}))
		})
		if o.err != nil || o.result.GetExitCode() != 0 {
			t.Fatalf("the control: %v %+v", o.err, o.result)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Fatalf("the control did not run: %v", err)
		}
	})

	t.Run("health", func(t *testing.T) {
		hc := unixHTTP(sock, false)
		resp, err := hc.Post("http://aleph/grpc.health.v1.Health/Check", "application/json", strings.NewReader(`{"service":"aleph.host.v1.Service"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(b.String(), "SERVING") {
			t.Errorf("health: %d %s", resp.StatusCode, b.String())
		}
	})
}

// TestServeRefusesOtherUID: a peer of another uid is told it is not
// allowed and disconnected before any RPC, even when the socket's mode
// would let it connect.
func TestServeRefusesOtherUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("connecting as another uid needs root (setuid to nobody)")
	}
	// The system's interpreter: one under root's home is not executable
	// by nobody.
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("/usr/bin/python3 is the other-uid client here")
	}
	h := newServeHarness(t)
	dir := filepath.Join(t.TempDir(), "run")
	sock := filepath.Join(dir, "aleph.sock")
	h.start(t, sock, "")
	// Open the directory and the socket to everyone, so only the peer check
	// stands between nobody and the service.
	for d := filepath.Dir(dir); d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, m := range map[string]os.FileMode{dir: 0o755, sock: 0o666} {
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
	}
	script := `import socket,sys
s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
b=b'{"command":"true"}'
d=b""
try:
    s.sendall(b"POST /aleph.host.v1.Service/CheckPolicy HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(b), b))
except (BrokenPipeError, ConnectionResetError):
    sys.exit(0)
while True:
    try:
        x=s.recv(4096)
    except ConnectionResetError:
        break
    if not x: break
    d+=x
sys.stdout.write(d.decode(errors="replace"))`
	run := func(cred *syscall.Credential) (string, error) {
		cmd := exec.Command(py, "-c", script, sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return string(out), fmt.Errorf("%w: %s", err, stderr.String())
		}
		return string(out), nil
	}
	// Positive control: our own uid gets an answer.
	if out, err := run(nil); err != nil || !strings.Contains(out, `"verdict"`) {
		t.Fatalf("own uid: %v %q", err, out)
	}
	out, err := run(&syscall.Credential{Uid: 65534, Gid: 65534})
	if err != nil {
		t.Fatalf("nobody's client failed to connect at all (it must connect, then be closed): %v", err)
	}
	// Told why, in the one fixed answer, and nothing of the service's.
	if !strings.HasPrefix(out, "HTTP/1.1 403 ") || !strings.Contains(out, `"code":"permission_denied"`) ||
		!strings.Contains(out, "peer uid 65534 is not allowed") || strings.Contains(out, `"verdict"`) {
		t.Errorf("uid 65534 got %q, not the refusal", out)
	}
}

// TestServeStaleSocketAndSIGTERM: a socket left by a dead server is
// replaced; SIGTERM lets a running command go for the grace period, then
// kills it, removes the socket and leaves no process.
func TestServeStaleSocketAndSIGTERM(t *testing.T) {
	h := newServeHarness(t)
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "aleph.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the stale socket should exist: %v", err)
	}
	p := h.start(t, sock, "[serve]\ngrace_seconds = 1\n")
	c := client(sock)
	marker := fmt.Sprintf("%d.%d", 700+os.Getpid()%100, time.Now().UnixNano()%1000000)
	res := make(chan execOutcome, 1)
	go func() {
		res <- execute(context.Background(), c, &hostv1.ExecuteRequest{Session: "s1", Argv: []string{"/bin/sleep", marker}}, nil)
	}()
	waitFor(t, "the command to start", func() bool { return markerRunning(marker) })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("serve after SIGTERM: %v\n%s", p.err, p.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
	o := <-res
	if o.err == nil {
		t.Errorf("the command outlived the grace period: %+v", o.result)
	} else if connect.CodeOf(o.err) != connect.CodeUnavailable {
		// service_stopping when the answer gets out before the server
		// closes the connection, else the lost connection itself.
		t.Errorf("the killed command: %v, want Unavailable", o.err)
	}
	if markerRunning(marker) {
		t.Errorf("the command's process is still running after serve exited\n%s", p.stderr)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	if !strings.Contains(p.stderr.String(), "replacing a stale socket") {
		t.Errorf("log does not say the stale socket was replaced:\n%s", p.stderr)
	}
}

// TestServeSecondSignalEndsGrace: a second SIGTERM during the grace period
// kills the running commands at once instead of waiting it out.
func TestServeSecondSignalEndsGrace(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	p := h.start(t, sock, "[serve]\ngrace_seconds = 600\n")
	marker := fmt.Sprintf("%d.%d", 800+os.Getpid()%100, time.Now().UnixNano()%1000000)
	res := make(chan execOutcome, 1)
	go func() {
		res <- execute(context.Background(), client(sock), &hostv1.ExecuteRequest{Session: "s1", Argv: []string{"/bin/sleep", marker}}, nil)
	}()
	waitFor(t, "the command to start", func() bool { return markerRunning(marker) })
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, "the graceful stop to begin", func() bool { return strings.Contains(p.stderr.String(), "stopping") })
	if !markerRunning(marker) {
		t.Fatal("the first signal killed the command: it has the grace period")
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("serve still waits for the grace period after a second signal")
	}
	<-res
	if markerRunning(marker) {
		t.Error("the command survived the server")
	}
}

// BenchmarkServeExecute: one /bin/true through serve (Connect JSON over
// the unix socket, as the Python client sends it) against the same command
// through an in-process warm pipeline with the same driver; the ratio of
// the two is the service's cost per command.
func BenchmarkServeExecute(b *testing.B) {
	h := newServeHarness(b)
	const cfgText = "[sandbox.rate_limit]\nenabled = false\n"
	sock := filepath.Join(b.TempDir(), "run", "aleph.sock")
	h.start(b, sock, cfgText)
	c := client(sock)
	req := &hostv1.ExecuteRequest{Session: "bench", Argv: []string{"/bin/true"}}
	b.Run("serve", func(b *testing.B) {
		for b.Loop() {
			o := execute(context.Background(), c, req, nil)
			if o.err != nil || o.result == nil || o.result.GetExitCode() != 0 {
				b.Fatalf("%v %+v", o.err, o.result)
			}
		}
	})
	b.Run("in-process", func(b *testing.B) {
		cfgPath := filepath.Join(b.TempDir(), "c.toml")
		if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
			b.Fatal(err)
		}
		b.Setenv("XDG_DATA_HOME", b.TempDir())
		b.Setenv("ALEPH_SANDBOX_SANDBOX__AUDIT_LOG", "")
		cfg, err := core.LoadConfig(cfgPath)
		if err != nil {
			b.Fatal(err)
		}
		rt, err := alephsandbox.New(cfg, alephsandbox.WithDriverDirs(h.bin))
		if err != nil {
			b.Fatal(err)
		}
		defer rt.Close()
		cmd := core.Command{SessionID: "bench", Program: "/bin/true"}
		for b.Loop() {
			out, err := rt.Execute(context.Background(), cmd)
			if err != nil || out.Exit.ExitCode != 0 {
				b.Fatalf("%v", err)
			}
		}
	})
}
