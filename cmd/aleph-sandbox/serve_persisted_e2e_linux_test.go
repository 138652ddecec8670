//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
)

// sessionList is serve's Sessions list, by session.
func sessionList(t *testing.T, c hostv1connect.ServiceClient) map[string]*hostv1.Session {
	t.Helper()
	r, err := c.Sessions(context.Background(), connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_List{List: &hostv1.ListSessions{}}}))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*hostv1.Session{}
	for _, s := range r.Msg.GetSessions() {
		out[s.GetSession()] = s
	}
	return out
}

// stopServe ends a serve process with SIGTERM and waits for it.
func stopServe(t *testing.T, p *serveProc) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not stop on SIGTERM\n%s", p.stderr)
	}
}

// TestServeListsPersistedSessions: a serve started on the workspace root
// of an earlier one lists the sessions whose workspaces it left, marked
// persisted_only (before their record was written, such a session was not
// listed at all: no grant was kept for it, and the grant store is a fresh
// one here). Delete removes the workspace and the record; forget unlists
// the session and keeps its workspace. A record edited to name another
// session lists neither, and deleting the id it names leaves the
// directory it sits beside alone.
func TestServeListsPersistedSessions(t *testing.T) {
	h := newServeHarness(t)
	root := filepath.Join(t.TempDir(), "ws")
	// The same workspace root for both servers; each has a data
	// directory (and so a grant store) of its own.
	h.env = append(h.env, "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+root)
	ctx := context.Background()
	wsOf := func(id string) string { return filepath.Join(root, core.SessionDirName(id)) }
	recOf := func(id string) string {
		return filepath.Join(root, core.SessionsDirName, core.SessionDirName(id)+".json")
	}

	sock1 := filepath.Join(t.TempDir(), "run", "aleph.sock")
	srv1 := h.start(t, sock1, "")
	c1 := client(sock1)
	for _, id := range []string{"kept", "other", "victim"} {
		if o := execute(ctx, c1, &hostv1.ExecuteRequest{Session: id, Argv: []string{"/usr/bin/touch", "mark"}}, nil); o.err != nil || o.result.GetExitCode() != 0 {
			t.Fatalf("touch in %s: %+v %v\n%s", id, o.result, o.err, srv1.stderr)
		}
	}
	if s := sessionList(t, c1)["kept"]; s == nil || s.GetPersistedOnly() || s.GetIncarnation() == "" {
		t.Fatalf("the first server lists kept as %v, want held (not persisted_only)", s)
	}
	stopServe(t, srv1)

	// victim's record now names "attacker".
	b, err := os.ReadFile(recOf("victim"))
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	rec["session"] = "attacker"
	b, _ = json.Marshal(rec)
	if err := os.WriteFile(recOf("victim"), b, 0o600); err != nil {
		t.Fatal(err)
	}

	sock2 := filepath.Join(t.TempDir(), "run", "aleph.sock")
	srv2 := h.start(t, sock2, "")
	c2 := client(sock2)
	l := sessionList(t, c2)
	for _, id := range []string{"kept", "other"} {
		s := l[id]
		if s == nil || !s.GetPersistedOnly() || s.GetIncarnation() != "" {
			t.Fatalf("the restarted server lists %s as %v, want persisted_only (all: %v)\n%s", id, s, l, srv2.stderr)
		}
	}
	if l["victim"] != nil || l["attacker"] != nil {
		t.Fatalf("a tampered record is listed: %v", l)
	}

	// Deleting the id the tampered record names removes nothing of the
	// directory it sits beside.
	if _, err := c2.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Delete{Delete: &hostv1.DeleteSession{Session: "attacker"}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(wsOf("victim"), "mark")); err != nil {
		t.Fatalf("deleting the id of a tampered record removed the workspace beside it: %v", err)
	}

	// Delete: the workspace and the record go, and the list forgets it.
	if _, err := c2.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Delete{Delete: &hostv1.DeleteSession{Session: "kept"}}})); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{wsOf("kept"), recOf("kept")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Fatalf("%s is still there after delete: %v", p, err)
		}
	}
	if l := sessionList(t, c2); l["kept"] != nil {
		t.Fatalf("a deleted session is listed: %v", l["kept"])
	}

	// A persisted session's next command resumes it here, in its old
	// workspace: it is then held.
	if o := execute(ctx, c2, &hostv1.ExecuteRequest{Session: "other", Argv: []string{"/usr/bin/test", "-e", "mark"}}, nil); o.err != nil || o.result.GetExitCode() != 0 {
		t.Fatalf("the resumed session does not see its file: %+v %v", o.result, o.err)
	}
	if s := sessionList(t, c2)["other"]; s == nil || s.GetPersistedOnly() {
		t.Fatalf("a resumed session is listed as %v, want held", s)
	}
	// Forget: unlisted, its workspace stays.
	if _, err := c2.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Forget{Forget: &hostv1.ForgetSession{Session: "other"}}})); err != nil {
		t.Fatal(err)
	}
	if l := sessionList(t, c2); l["other"] != nil {
		t.Fatalf("a forgotten session is listed: %v", l["other"])
	}
	if _, err := os.Stat(filepath.Join(wsOf("other"), "mark")); err != nil {
		t.Fatalf("forget removed the workspace: %v", err)
	}
}
