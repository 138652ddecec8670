package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// Two pipelines on one workspace root stand for two processes (a CLI and
// a serve): the expiry of one sees the other's use of a session through
// the session's lock and stamp, and deletes it only once neither says it
// is in use; the other's next command then runs in a fresh workspace.
func TestExpireIdleSessionSeesAnotherPipelinesUse(t *testing.T) {
	cfg := testConfig(t)
	sink := &memSink{}
	user, err := NewWorkspaceSandbox(cfg, WithDriver(&drivertest.FakeDriver{}), WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	expirer, err := NewWorkspaceSandbox(cfg, WithDriver(&drivertest.FakeDriver{}), WithAuditSink(sink))
	if err != nil {
		t.Fatal(err)
	}
	defer expirer.Close()
	ctx := context.Background()
	const id, ttl = "s1", time.Minute
	if _, err := user.Execute(WithSession(ctx, id), Command{Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(cfg.Sandbox.WorkspaceRoot, SessionDirName(id))
	if err := os.WriteFile(filepath.Join(ws, "mark"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var kept *SessionKeptError

	// Just used (the command's stamp): kept.
	if st, ok := SessionLastUsed(cfg, id); !ok || time.Since(st) > ttl {
		t.Fatalf("stamp after a command: %v %v", st, ok)
	}
	if _, err := expirer.ExpireIdleSession(ctx, id, ttl, time.Time{}); !errors.As(err, &kept) {
		t.Fatalf("a session used now: %v, want kept", err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(sessionRecordPath(cfg, id), old, old); err != nil {
		t.Fatal(err)
	}
	// The caller's own recent sight keeps it whatever the stamp says.
	if _, err := expirer.ExpireIdleSession(ctx, id, ttl, time.Now()); !errors.As(err, &kept) {
		t.Fatalf("a session the caller saw now: %v, want kept", err)
	}
	// Held by the other pipeline (a command or file call running): kept,
	// however old its stamp.
	release, err := user.UseSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(sessionRecordPath(cfg, id), old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := expirer.ExpireIdleSession(ctx, id, ttl, time.Time{}); !errors.As(err, &kept) {
		t.Fatalf("a held session: %v, want kept", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "mark")); err != nil {
		t.Fatalf("a kept session lost its workspace: %v", err)
	}
	release()
	// Released, and its stamp (set by the release) made old again: it goes.
	if err := os.Chtimes(sessionRecordPath(cfg, id), old, old); err != nil {
		t.Fatal(err)
	}
	idle, err := expirer.ExpireIdleSession(ctx, id, ttl, time.Time{})
	if err != nil || idle < time.Hour-time.Minute {
		t.Fatalf("an idle session: %v (idle %s)", err, idle)
	}
	for _, p := range []string{ws, sessionRecordPath(cfg, id), sessionLockPath(cfg, id)} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s is left after the expiry: %v", p, err)
		}
	}
	if sink.last(t).Reason != ReasonSessionExpired {
		t.Fatalf("the expiry is not audited: %+v", sink.all())
	}

	// The other pipeline still holds the session in memory: its next
	// command makes the workspace afresh, without the old file.
	if _, err := user.Execute(WithSession(ctx, id), Command{Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ws); err != nil {
		t.Fatalf("no fresh workspace: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "mark")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the fresh workspace has the expired one's file: %v", err)
	}
	if got := RecordedSessions(cfg); len(got) != 1 || got[0] != id {
		t.Fatalf("recorded sessions after the fresh command: %v", got)
	}
}

// A command of a session an expiry holds waits for it; its context ends
// the wait, and the command does not run.
func TestUseSessionWaitsForAnExpiry(t *testing.T) {
	cfg := testConfig(t)
	fake := &drivertest.FakeDriver{}
	sb, err := NewWorkspaceSandbox(cfg, WithDriver(fake), WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if err := ensureRecordsDir(cfg); err != nil {
		t.Fatal(err)
	}
	f, busy, err := openSessionLock(sessionLockPath(cfg, "s1"), true)
	if err != nil || busy {
		t.Fatalf("taking the lock: %v %v", busy, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := sb.Execute(WithSession(ctx, "s1"), Command{Program: "echo"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a command while an expiry holds its session: %v, want the context's end", err)
	}
	if n := fake.Runs(); n != 0 {
		t.Fatalf("the command ran %d times while its session was held", n)
	}
	f.Close()
	// Control: released, it runs.
	if _, err := sb.Execute(WithSession(context.Background(), "s1"), Command{Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	if n := fake.Runs(); n != 1 {
		t.Fatalf("the command ran %d times once released, want 1", n)
	}
}
