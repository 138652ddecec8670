//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	hostclient "github.com/aleph-sandbox/aleph-sandbox/service/client"
)

// headerProxy is a router's place: a unix socket forwarding every call to
// a serve, recording the session header each call carried, by method.
type headerProxy struct {
	sock string
	mu   sync.Mutex
	seen map[string][]string
}

func startHeaderProxy(t *testing.T, target string) *headerProxy {
	t.Helper()
	p := &headerProxy{sock: filepath.Join(t.TempDir(), "proxy.sock"), seen: map[string][]string{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "aleph"
		},
		Transport:     unixHTTP(target, false).Transport,
		FlushInterval: -1,
	}
	l, err := net.Listen("unix", p.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		p.mu.Lock()
		p.seen[method] = append(p.seen[method], strings.Join(r.Header.Values(service.SessionHeader), ","))
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// check fails unless every call of each method carried want.
func (p *headerProxy) check(t *testing.T, want string, methods ...string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range methods {
		got := p.seen[m]
		if len(got) == 0 {
			t.Errorf("no %s call went through the proxy", m)
		}
		for _, v := range got {
			if v != want {
				t.Errorf("%s carried %s %q, want %q (all: %q)", m, service.SessionHeader, v, want, got)
			}
		}
	}
}

type approveOnce struct{}

func (approveOnce) RequestApproval(context.Context, driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error) {
	return driverapi.ApprovalApprovedOnce, nil
}

// TestClientsSendSessionHeader: every call of the Go client naming a
// session reaches a router with X-Aleph-Session: commands and the
// approvals they ask, processes named by id, files (of the session's
// workspace and of one the call names), a session's process list, the
// layered calls; so do exec --host's stdin calls, named by signal key.
// Control: the server refuses a header that disagrees with the body (or
// with the process an id names), and serves the same call with the
// right one.
func TestClientsSendSessionHeader(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	srv := h.start(t, sock, "")
	proxy := startHeaderProxy(t, sock)
	ctx := context.Background()
	const session = "héader s1"
	want := hostclient.SessionHeaderValue(session)

	p := hostclient.NewPipeline(proxy.sock, approveOnce{})
	// A command asking an elevation: its approval is answered by Approve.
	out, err := p.Execute(ctx, core.Command{SessionID: session, Program: "/bin/sh", Args: []string{"-c", "echo hi | cat > made.txt"},
		Capabilities: driverapi.Capabilities{SpawnSubprocess: true}})
	if err != nil || out.Exit.ExitCode != 0 {
		t.Fatalf("execute: %+v %v\n%s", out, err, srv.stderr)
	}
	id, err := p.Start(ctx, core.Command{SessionID: session, Program: "/bin/cat"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write(ctx, id, []byte("piped\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Read(ctx, id, 0, time.Second); err != nil {
		t.Fatal(err)
	}
	if r, err := p.Wait(ctx, id); err != nil || r.Output == nil || string(r.Output.Stdout) != "piped\n" {
		t.Fatalf("wait: %+v %v", r, err)
	}
	id2, err := p.Start(ctx, core.Command{SessionID: session, Program: "/bin/cat"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(ctx, id2, driverapi.SignalKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := p.List(ctx, session); err != nil {
		t.Fatal(err)
	}

	// Files: the session's own workspace...
	if _, err := p.WriteFile(ctx, session, "f.txt", strings.NewReader("data"), alephsandbox.WriteFileOptions{}); err != nil {
		t.Fatal(err)
	}
	f, _, err := p.OpenFile(ctx, session, "made.txt")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_, _ = b.ReadFrom(f)
	f.Close()
	if b.String() != "hi\n" {
		t.Fatalf("made.txt: %q", b.String())
	}
	if _, err := p.StatFile(ctx, session, "f.txt"); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveFile(ctx, session, "f.txt", alephsandbox.RemoveFileOptions{}); err != nil {
		t.Fatal(err)
	}
	// ...and a workspace the call names: the service reads that one.
	project := t.TempDir()
	if err := os.WriteFile(filepath.Join(project, "README"), []byte("the project\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := p.FilesIn(project).ListFiles(ctx, session, ".")
	if err != nil || len(l) != 1 || l[0].Name != "README" {
		t.Fatalf("list of the named workspace: %+v %v", l, err)
	}
	if _, err := p.FilesIn(project).WriteFile(ctx, session, "new", strings.NewReader("x"), alephsandbox.WriteFileOptions{}); err != nil {
		t.Fatalf("a write to the named workspace: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(project, "new")); err != nil || string(b) != "x" {
		t.Fatalf("the write did not land in the named workspace: %q %v", b, err)
	}
	// A refused name comes back as the runtime's typed error.
	var ic *core.InvalidCommandError
	if _, err := p.FilesIn(filepath.Join(project, "missing")).ListFiles(ctx, session, "."); !errors.As(err, &ic) || ic.Field != "workspace" {
		t.Fatalf("a missing workspace: %v, want the runtime's InvalidCommandError for workspace", err)
	}
	// The layered calls (this session is not layered: refused, but routed).
	_, _ = p.Changes(ctx, session)

	proxy.check(t, want, "Execute", "Approve", "StartProcess", "WriteProcess", "CloseProcessStdin", "ReadProcess",
		"WaitProcess", "SignalProcess", "ListProcesses", "WriteFile", "ReadFile", "StatFile", "RemoveFile", "ListFiles", "Changes")

	// exec --host: the command's stdin goes through WriteStdin and
	// CloseStdin, named by its signal key.
	proxy.mu.Lock()
	proxy.seen = map[string][]string{}
	proxy.mu.Unlock()
	cli := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "exec", "--host", "unix:"+proxy.sock, "--session", "cli s2", "-i", "--", "/bin/cat")
	cli.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
	cli.Stdin = strings.NewReader("from the cli\n")
	if got, err := cli.CombinedOutput(); err != nil || string(got) != "from the cli\n" {
		t.Fatalf("exec --host -i: %v %q", err, got)
	}
	proxy.check(t, hostclient.SessionHeaderValue("cli s2"), "Execute", "WriteStdin", "CloseStdin")

	// Control: straight to the server, a wrong header is refused for a
	// call naming the session in its body and for one naming a process;
	// the same calls with the right header are served.
	c := client(sock)
	id3, err := p.Start(ctx, core.Command{SessionID: session, Program: "/bin/cat"})
	if err != nil {
		t.Fatal(err)
	}
	stat := connect.NewRequest(&hostv1.StatFileRequest{Session: session, Path: "made.txt"})
	stat.Header().Set(service.SessionHeader, "other")
	_, err = c.StatFile(ctx, stat)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || hostclient.Detail(err).GetField() != service.FieldSessionHeader {
		t.Fatalf("StatFile with a wrong header: %v", err)
	}
	sig := connect.NewRequest(&hostv1.SignalProcessRequest{Id: id3, Signal: "KILL"})
	sig.Header().Set(service.SessionHeader, "other")
	_, err = c.SignalProcess(ctx, sig)
	if connect.CodeOf(err) != connect.CodeInvalidArgument || hostclient.Detail(err).GetField() != service.FieldSessionHeader {
		t.Fatalf("SignalProcess with a wrong header: %v", err)
	}
	stat = connect.NewRequest(&hostv1.StatFileRequest{Session: session, Path: "made.txt"})
	stat.Header().Set(service.SessionHeader, want)
	if _, err := c.StatFile(ctx, stat); err != nil {
		t.Fatalf("StatFile with the right header: %v", err)
	}
	sig = connect.NewRequest(&hostv1.SignalProcessRequest{Id: id3, Signal: "KILL"})
	sig.Header().Set(service.SessionHeader, want)
	if _, err := c.SignalProcess(ctx, sig); err != nil {
		t.Fatalf("SignalProcess with the right header: %v", err)
	}
	if _, err := p.Wait(ctx, id3); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(ctx, id2); err != nil {
		t.Fatal(err)
	}
}
