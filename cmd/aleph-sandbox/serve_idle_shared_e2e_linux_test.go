//go:build linux

package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// TestServeExpiresPersistedSessions: serve's idle expiry covers the
// sessions it only sees on disk, made by the CLI in the same data
// directory, judged by what the CLI leaves there: the record's stamp
// and the session's lock. A session whose stamp is past the TTL is
// deleted (workspace, record, audited); one whose CLI command is running
// is kept however old its stamp, and one the CLI used within the TTL is
// kept. Controls: once the running command has ended, or the recent one's
// stamp is past the TTL, each goes too, so the hold and the stamp were
// what kept them.
func TestServeExpiresPersistedSessions(t *testing.T) {
	h := newServeHarness(t)
	data := t.TempDir()
	root := filepath.Join(data, "ws")
	audit := filepath.Join(data, "audit.jsonl")
	h.env = append(h.env, "XDG_DATA_HOME="+data, "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+root,
		"ALEPH_SANDBOX_SANDBOX__AUDIT_LOG="+audit)
	cliConfig := t.TempDir()
	cli := func(args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), append([]string{"exec"}, args...)...)
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+cliConfig)
		cmd.Env = append(cmd.Env, h.env...)
		return cmd
	}
	wsOf := func(id string) string { return filepath.Join(root, core.SessionDirName(id)) }
	recOf := func(id string) string {
		return filepath.Join(root, core.SessionsDirName, core.SessionDirName(id)+".json")
	}
	lockOf := func(id string) string {
		return filepath.Join(root, core.SessionsDirName, core.SessionDirName(id)+".lock")
	}
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	age := func(id string) {
		t.Helper()
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(recOf(id), old, old); err != nil {
			t.Fatal(err)
		}
	}

	for _, id := range []string{"old", "recent"} {
		if out, err := cli("--session", id, "--", "/usr/bin/touch", "mark").CombinedOutput(); err != nil {
			t.Fatalf("exec --session %s: %v\n%s", id, err, out)
		}
		if !exists(filepath.Join(wsOf(id), "mark")) || !exists(recOf(id)) {
			t.Fatalf("the CLI left no workspace or record for %s", id)
		}
	}
	// The stamp of a CLI command: its record's time, set as it ran.
	recentUsed, ok := core.SessionLastUsed(core.Config{Sandbox: core.SandboxConfig{WorkspaceRoot: root}}, "recent")
	if !ok || time.Since(recentUsed) > time.Minute {
		t.Fatalf("recent's stamp after a CLI command: %v %v", recentUsed, ok)
	}
	age("old")

	// "busy": a CLI command that runs until its stdin closes.
	busy := cli("--session", "busy", "-i", "--timeout", "300s", "--", "/usr/bin/tee", "started")
	stdin, err := busy.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	busyOut := &lockedBuffer{}
	busy.Stdout, busy.Stderr = busyOut, busyOut
	// Killed at the end of a failed test: its output copy does not wait
	// for a descendant that kept the pipe.
	busy.WaitDelay = 5 * time.Second
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	busyDone := make(chan struct{})
	var busyErr error
	go func() { busyErr = busy.Wait(); close(busyDone) }()
	t.Cleanup(func() {
		_ = stdin.Close()
		select {
		case <-busyDone:
		case <-time.After(30 * time.Second):
			_ = busy.Process.Kill()
			<-busyDone
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !exists(filepath.Join(wsOf("busy"), "started")) {
		if time.Now().After(deadline) {
			t.Fatalf("the busy command never started: %s", busyOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := io.WriteString(stdin, "ran\n"); err != nil {
		t.Fatal(err)
	}
	// Its stamp is old: only its hold keeps it.
	age("busy")

	const ttl = 8 * time.Second
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	srv := h.start(t, sock, "[serve]\nsession_idle_ttl = \"8s\"\n")
	c := client(sock)
	l := sessionList(t, c)
	for _, id := range []string{"old", "recent", "busy"} {
		if s := l[id]; s == nil || !s.GetPersistedOnly() {
			t.Fatalf("serve lists %s as %v, want persisted_only (all: %v)\n%s", id, s, l, srv.stderr)
		}
	}

	waitGone := func(id string) {
		t.Helper()
		// The workspace, its record and its lock: nothing is left behind.
		deadline := time.Now().Add(3 * ttl)
		for _, p := range []string{wsOf(id), recOf(id), lockOf(id)} {
			for exists(p) {
				if time.Now().After(deadline) {
					t.Fatalf("%s of %s is still there %s after its stamp was past the TTL\n%s", p, id, 3*ttl, srv.stderr)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	waitGone("old")
	// A sweep ran and expired "old"; "recent" was used within the TTL
	// then (else this control says nothing), and "busy" is held.
	if since := time.Since(recentUsed); since >= ttl {
		t.Skipf("the machine is too slow for this test: old expired %s after recent's CLI command (ttl %s), so recent's keeping proves nothing", since, ttl)
	}
	for _, id := range []string{"recent", "busy"} {
		if !exists(filepath.Join(wsOf(id), "mark")) && !exists(filepath.Join(wsOf(id), "started")) {
			t.Fatalf("%s was expired although %s", id, map[string]string{"recent": "used within the TTL", "busy": "its command runs"}[id])
		}
	}
	b, err := os.ReadFile(audit)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"session_id":"old"`) || !strings.Contains(string(b), `"session_expired"`) {
		t.Fatalf("no session_expired audit record for old in:\n%s", b)
	}
	if l := sessionList(t, c); l["old"] != nil || l["recent"] == nil || l["busy"] == nil {
		t.Fatalf("sessions listed after the expiry: %v", l)
	}

	// Controls: past the TTL, "recent" goes; once its command has ended
	// (it ran: its output is the line written), "busy" goes too.
	age("recent")
	waitGone("recent")
	if !exists(wsOf("busy")) {
		t.Fatal("busy was expired while its command ran")
	}
	_ = stdin.Close()
	select {
	case <-busyDone:
		if busyErr != nil || busyOut.String() != "ran\n" {
			t.Fatalf("the busy command: %v %q", busyErr, busyOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the busy command did not end when its stdin closed")
	}
	age("busy")
	waitGone("busy")
}
