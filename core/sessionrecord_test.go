package core

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// A session whose workspace is made is listed by a later pipeline on the
// same workspace root (a restarted process), from the record written
// beside its workspace; forget and delete unlist it, delete removing the
// workspace and the record.
func TestRecordedSessionsOutliveTheProcess(t *testing.T) {
	cfg := testConfig(t)
	sb1, err := NewWorkspaceSandbox(cfg, WithDriver(&drivertest.FakeDriver{}), WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"s1", "../../etc", "café \u2028 \"quoted\""}
	for _, id := range ids {
		if _, err := sb1.Execute(WithSession(context.Background(), id), Command{Program: "echo"}); err != nil {
			t.Fatal(err)
		}
	}
	sb1.Close()

	rec := sessionRecordPath(cfg, "s1")
	st, err := os.Stat(rec)
	if err != nil {
		t.Fatalf("no record of s1: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("record mode %v, want 0600", st.Mode().Perm())
	}
	sb2, err := NewWorkspaceSandbox(cfg, WithDriver(&drivertest.FakeDriver{}), WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	defer sb2.Close()
	want := slices.Sorted(slices.Values(ids))
	if got := sb2.KeptSessions(); !slices.Equal(got, want) {
		t.Fatalf("a new pipeline lists %q, want %q", got, want)
	}

	sb2.ForgetSession("../../etc")
	ws := filepath.Join(cfg.Sandbox.WorkspaceRoot, SessionDirName("../../etc"))
	if _, err := os.Stat(ws); err != nil {
		t.Fatalf("forget removed the workspace: %v", err)
	}
	if got := sb2.KeptSessions(); slices.Contains(got, "../../etc") {
		t.Fatalf("a forgotten session is still listed: %q", got)
	}

	if err := sb2.DeleteSession("s1"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{rec, filepath.Join(cfg.Sandbox.WorkspaceRoot, SessionDirName("s1"))} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there after delete: %v", p, err)
		}
	}
	if got := sb2.KeptSessions(); !slices.Equal(got, []string{ids[2]}) {
		t.Fatalf("after forget and delete: %q, want %q", got, ids[2:])
	}
	// Idle expiry deletes: the record goes with the workspace.
	if err := sb2.ExpireSession(context.Background(), ids[2], time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sessionRecordPath(cfg, ids[2])); !os.IsNotExist(err) {
		t.Errorf("the record of an expired session is still there: %v", err)
	}
	if got := sb2.KeptSessions(); len(got) != 0 {
		t.Fatalf("after expiry: %q, want none", got)
	}
}

// A record edited to hold another session's id is not listed, and
// deleting that id removes nothing of the directory the record sits
// beside. A record of a workspace that is gone, an oversized one and one
// of another version are not listed either.
func TestRecordedSessionsRefuseTamperedRecords(t *testing.T) {
	cfg := testConfig(t)
	root := cfg.Sandbox.WorkspaceRoot
	for _, id := range []string{"victim", "control"} {
		if err := os.MkdirAll(filepath.Join(root, SessionDirName(id)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := writeSessionRecord(cfg, id); err != nil {
			t.Fatal(err)
		}
	}
	// Positive control: both are listed as written.
	if got := RecordedSessions(cfg); !slices.Equal(got, []string{"control", "victim"}) {
		t.Fatalf("listed %q, want [control victim]", got)
	}

	// victim's record now names "attacker".
	b, _ := json.Marshal(sessionRecord{Version: sessionRecordVersion, Session: "attacker"})
	if err := os.WriteFile(sessionRecordPath(cfg, "victim"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	// A record of a session whose workspace is gone; one too large; one
	// of another version; one that is not JSON.
	_ = os.WriteFile(sessionRecordPath(cfg, "gone"), mustJSON(t, sessionRecord{Version: sessionRecordVersion, Session: "gone"}), 0o600)
	_ = os.MkdirAll(filepath.Join(root, SessionDirName("big")), 0o700)
	_ = os.MkdirAll(filepath.Join(root, SessionDirName("v9")), 0o700)
	_ = os.WriteFile(sessionRecordPath(cfg, "v9"), mustJSON(t, sessionRecord{Version: 9, Session: "v9"}), 0o600)
	_ = os.WriteFile(filepath.Join(sessionRecordsDir(cfg), "zz.json"), []byte("{"), 0o600)
	if err := os.WriteFile(sessionRecordPath(cfg, "big"), append(mustJSON(t, sessionRecord{Version: sessionRecordVersion, Session: "big"}), []byte(strings.Repeat(" ", maxSessionRecordBytes))...), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := RecordedSessions(cfg); !slices.Equal(got, []string{"control"}) {
		t.Fatalf("listed %q, want only [control]", got)
	}

	victimDir := filepath.Join(root, SessionDirName("victim"))
	if err := RemoveSessionWorkspace(cfg, "attacker"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(victimDir); err != nil {
		t.Fatalf("deleting the id a tampered record holds removed the directory it sits beside: %v", err)
	}
	if _, err := os.Stat(sessionRecordPath(cfg, "victim")); err != nil {
		t.Fatalf("deleting the id a tampered record holds removed that record: %v", err)
	}
	// Control: deleting the directory's own session removes it and its record.
	if err := RemoveSessionWorkspace(cfg, "victim"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{victimDir, sessionRecordPath(cfg, "victim")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there after deleting its session: %v", p, err)
		}
	}
}

// A workspace made before records were written gets one when its session
// next uses it, and is listed from then on.
func TestWorkspaceWithoutRecordIsRecordedOnUse(t *testing.T) {
	cfg := testConfig(t)
	if err := os.MkdirAll(filepath.Join(cfg.Sandbox.WorkspaceRoot, SessionDirName("old")), 0o700); err != nil {
		t.Fatal(err)
	}
	if got := RecordedSessions(cfg); len(got) != 0 {
		t.Fatalf("a workspace without a record is listed: %q", got)
	}
	sb, err := NewWorkspaceSandbox(cfg, WithDriver(&drivertest.FakeDriver{}), WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if _, err := sb.WorkspacePath("old"); err != nil {
		t.Fatal(err)
	}
	if got := RecordedSessions(cfg); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("listed %q after use, want [old]", got)
	}
}

// The records' directory is the sandbox's own state: a grant reaching it
// is refused, beside a control grant that is not.
func TestSessionRecordsAreOwnState(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.Session.Home = HomeWorkspace
	sb, err := NewWorkspaceSandbox(cfg, WithDriver(&drivertest.FakeDriver{}), WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	if err := sb.reachesOwnState("capabilities.fs_read", filepath.Join(cfg.Sandbox.WorkspaceRoot, SessionsDirName), false); err == nil {
		t.Fatal("a grant of the records' directory was not refused")
	}
	if err := sb.reachesOwnState("capabilities.fs_read", t.TempDir(), false); err != nil {
		t.Fatalf("control grant refused: %v", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
