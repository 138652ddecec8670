//go:build linux

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
)

// heldSessions are the sessions serve lists.
func heldSessions(t *testing.T, c hostv1connect.ServiceClient) map[string]bool {
	t.Helper()
	r, err := c.Sessions(context.Background(), connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_List{List: &hostv1.ListSessions{}}}))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, s := range r.Msg.GetSessions() {
		out[s.GetSession()] = true
	}
	return out
}

// TestServeSessionIdleTTL: with serve.session_idle_ttl, a session with no
// call for that long is deleted (its workspace removed, audited, counted),
// and its next call runs on a fresh one; a session with a running process
// and one called in time are kept. When the process has been waited for,
// its session goes too (the process was what kept it).
func TestServeSessionIdleTTL(t *testing.T) {
	h := newServeHarness(t)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	h.env = append(h.env, "ALEPH_SANDBOX_SANDBOX__AUDIT_LOG="+audit)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	const ttl = 2 * time.Second
	srv := h.start(t, sock, "[serve]\nsession_idle_ttl = \"2s\"\n", "--metrics", "tcp:127.0.0.1:0")
	maddr := tcpAddrOf(t, srv, "metrics")
	c := client(sock)
	ctx := context.Background()

	if o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "idle", Argv: []string{"/usr/bin/touch", "mark"}}, nil); o.err != nil || o.result.GetExitCode() != 0 {
		t.Fatalf("touch: %+v %v\n%s", o.result, o.err, srv.stderr)
	}
	d, err := c.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Describe{Describe: &hostv1.DescribeSession{Session: "idle"}}}))
	if err != nil {
		t.Fatal(err)
	}
	ws := d.Msg.GetSessions()[0].GetWorkspace()
	if _, err := os.Stat(filepath.Join(ws, "mark")); err != nil {
		t.Fatalf("the command's file is not in the workspace %q: %v", ws, err)
	}
	st, err := c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{
		Command: &hostv1.ExecuteRequest{Session: "proc", Argv: []string{"/bin/cat"}}}))
	if err != nil {
		t.Fatal(err)
	}
	pid := st.Msg.GetId()

	// "touched" is called every ttl/4 while "idle" expires.
	start := time.Now()
	for {
		if o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "touched", Argv: []string{"/bin/true"}}, nil); o.err != nil {
			t.Fatal(o.err)
		}
		if _, err := os.Lstat(ws); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the idle session's workspace is still there after 30 s (ttl %s)\n%s", ttl, srv.stderr)
		}
		time.Sleep(ttl / 4)
	}
	// The host removes the workspace, then the server drops the session
	// from its table: a listing in between still shows it (bounded;
	// "touched" is still called meanwhile).
	held := heldSessions(t, c)
	for deadline := time.Now().Add(10 * time.Second); held["idle"] && time.Now().Before(deadline); held = heldSessions(t, c) {
		if o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "touched", Argv: []string{"/bin/true"}}, nil); o.err != nil {
			t.Fatal(o.err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if held["idle"] || !held["proc"] || !held["touched"] {
		t.Fatalf("sessions held after the idle one expired: %v", held)
	}
	if l, err := c.ListProcesses(ctx, connect.NewRequest(&hostv1.ListProcessesRequest{Session: "proc"})); err != nil ||
		len(l.Msg.GetProcesses()) != 1 || l.Msg.GetProcesses()[0].GetExited() {
		t.Fatalf("the running process of a kept session: %v %v", l, err)
	}
	if m := scrape(t, maddr); m["aleph_sandbox_sessions_expired_total"] < 1 {
		t.Fatalf("sessions_expired_total: %v", m["aleph_sandbox_sessions_expired_total"])
	}
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	var expiredRec string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, `"session_expired"`) {
			expiredRec = line
		}
	}
	if !strings.Contains(expiredRec, `"session_id":"idle"`) {
		t.Fatalf("no session_expired audit record for the idle session in:\n%s", b)
	}

	// The next call of the expired session gets a fresh one: a new
	// workspace without the old session's file.
	if o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "idle", Argv: []string{"/usr/bin/test", "-e", "mark"}}, nil); o.err != nil || o.result.GetExitCode() != 1 {
		t.Fatalf("test -e mark in the fresh session: %+v %v", o.result, o.err)
	}
	if _, err := os.Stat(ws); err != nil {
		t.Fatalf("the fresh session has no workspace: %v", err)
	}

	// Control: once its process is waited for, "proc" expires too.
	if _, err := c.CloseProcessStdin(ctx, connect.NewRequest(&hostv1.CloseProcessStdinRequest{Id: pid})); err != nil {
		t.Fatal(err)
	}
	if r, err := c.WaitProcess(ctx, connect.NewRequest(&hostv1.WaitProcessRequest{Id: pid})); err != nil || r.Msg.GetResult().GetExitCode() != 0 {
		t.Fatalf("wait: %v %v", r, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for heldSessions(t, c)["proc"] {
		if time.Now().After(deadline) {
			t.Fatalf("the session whose process ended never expired\n%s", srv.stderr)
		}
		time.Sleep(ttl / 4)
	}
}
