package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

type countingApprover struct{ asked int }

func (a *countingApprover) RequestApproval(context.Context, driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error) {
	a.asked++
	return driverapi.ApprovalApproved, nil
}

func storeSandbox(t *testing.T, dir, root string, a ApprovalRequester) *WorkspaceSandbox {
	t.Helper()
	cfg := testConfig(t)
	cfg.Sandbox.WorkspaceRoot = root
	opts := []Option{WithDriver(drivertest.Connect(t, &drivertest.FakeDriver{})), WithAuditSink(&memSink{}), WithGrantStore(NewFileGrantStore(dir))}
	if a != nil {
		opts = append(opts, WithApprovalRequester(a))
	}
	sb, err := NewWorkspaceSandbox(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

// Grants approved in one pipeline hold in the next one (another process,
// in real use) of the same session, and only of that session.
func TestGrantsOutliveThePipeline(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	ctx := context.Background()
	net := driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}
	a := &countingApprover{}
	first := storeSandbox(t, dir, root, a)
	if _, err := first.Execute(ctx, Command{SessionID: "s1", Program: "echo", Capabilities: net}); err != nil {
		t.Fatal(err)
	}
	d1, err := first.ApplyNetworkGrant(ctx, "s1", "example.com", 443, first.PolicyDigest("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if a.asked != 1 {
		t.Fatalf("asked %d times", a.asked)
	}
	st, err := os.Stat(filepath.Join(dir, SessionDirName("s1")+".json"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("grant file: %v %v", st, err)
	}

	// A new pipeline with no approver at all: the kept grant lets the
	// command through, the digest is the same, and another session gets
	// nothing of it.
	second := storeSandbox(t, dir, root, nil)
	if _, err := second.Execute(ctx, Command{SessionID: "s1", Program: "echo", Capabilities: net}); err != nil {
		t.Fatalf("kept grant not used: %v", err)
	}
	if got := second.PolicyDigest("s1"); got != d1 {
		t.Fatalf("digest %s after reload, %s before", got, d1)
	}
	_, err = second.Execute(ctx, Command{SessionID: "s2", Program: "echo", Capabilities: net})
	wantDenied(t, err, ReasonApprovalDenied)

	// Forgetting the session removes what was kept.
	second.ForgetSession("s1")
	third := storeSandbox(t, dir, root, nil)
	_, err = third.Execute(ctx, Command{SessionID: "s1", Program: "echo", Capabilities: net})
	wantDenied(t, err, ReasonApprovalDenied)
}

// A grant file that was tampered with (edited grants, so the digest no
// longer matches) is not used.
func TestTamperedGrantsAreNotUsed(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	ctx := context.Background()
	spawn := driverapi.Capabilities{SpawnSubprocess: true}
	first := storeSandbox(t, dir, root, &countingApprover{})
	if _, err := first.Execute(ctx, Command{SessionID: "s", Program: "echo", Capabilities: spawn}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, SessionDirName("s")+".json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	forged := strings.Replace(string(data), `"network_grants":[]`, `"network_grants":["evil.example"]`, 1)
	if forged == string(data) {
		t.Fatalf("test could not forge the file: %s", data)
	}
	if err := os.WriteFile(path, []byte(forged), 0o600); err != nil {
		t.Fatal(err)
	}
	second := storeSandbox(t, dir, root, nil)
	_, err = second.Execute(ctx, Command{SessionID: "s", Program: "echo", Capabilities: spawn})
	wantDenied(t, err, ReasonApprovalDenied)
}

// No grant and no named workspace may reach the store: a command that
// could write it would approve its own next elevation.
func TestGrantsCannotReachTheStore(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "state", "sessions")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sb := storeSandbox(t, dir, t.TempDir(), &countingApprover{})
	ctx := context.Background()
	for _, c := range []Command{
		{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{base}}},
		{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSRead: []string{filepath.Join(dir, "x.json")}}},
		{SessionID: "s", Program: "echo", Workspace: base},
	} {
		_, err := sb.Execute(ctx, c)
		var ie *InvalidCommandError
		if !errors.As(err, &ie) || !strings.Contains(ie.Reason, "own state") {
			t.Errorf("%+v: want a refusal naming the sandbox's own state, got %v", c, err)
		}
	}
	// Positive control: a sibling path is granted.
	other := filepath.Join(base, "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Execute(ctx, Command{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{other}}}); err != nil {
		t.Fatalf("a sibling grant: %v", err)
	}
}

// The store and the audit log named through a symbolic link: a grant of
// the real directory the link leads to reaches them just the same, so it
// is refused too. (Drivers mount only canonical paths, so the real path is
// the one a command would be granted.)
func TestGrantsCannotReachTheStoreThroughALink(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.MkdirAll(filepath.Join(real, "state", "sessions"), 0o700); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(base, "other")
	if err := os.MkdirAll(filepath.Join(other, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(other, "logs"), filepath.Join(base, "loglink")); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Sandbox.AuditLog = filepath.Join(base, "loglink", "audit.jsonl")
	fake := &drivertest.FakeDriver{}
	sb, err := NewWorkspaceSandbox(cfg, WithDriver(drivertest.Connect(t, fake)), WithAuditSink(&memSink{}),
		WithGrantStore(NewFileGrantStore(filepath.Join(base, "link", "state", "sessions"))),
		WithApprovalRequester(&countingApprover{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	ctx := context.Background()
	for _, c := range []Command{
		{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{real}}},
		{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{filepath.Join(real, "state")}}},
		{SessionID: "s", Program: "echo", Workspace: filepath.Join(real, "state")},
		{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{filepath.Join(other, "logs")}}},
	} {
		_, err := sb.Execute(ctx, c)
		var ie *InvalidCommandError
		if !errors.As(err, &ie) || !strings.Contains(ie.Reason, "own state") {
			t.Errorf("%+v: want a refusal naming the sandbox's own state, got %v", c, err)
		}
	}
	// Positive control: a sibling of the store's real directory, and one
	// of the log's, are granted and the command runs.
	for _, p := range []string{filepath.Join(real, "work"), filepath.Join(other, "src")} {
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		out, err := sb.Execute(ctx, Command{SessionID: "s", Program: "echo", Args: []string{"ran"}, Capabilities: driverapi.Capabilities{FSWrite: []string{p}}})
		if err != nil || !strings.Contains(string(out.Stdout), "ran") {
			t.Fatalf("sibling grant %s: %v", p, err)
		}
	}
}

// A baseline is checked like a command's capabilities: a relative path, or
// one that reaches the grant store, is refused when the sandbox is built.
// Within a valid baseline a command runs without an approver (positive
// control) and leaves nothing kept for the session.
func TestBaselineChecked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "sessions")
	build := func(b driverapi.Capabilities) (*WorkspaceSandbox, error) {
		return NewWorkspaceSandbox(testConfig(t), WithDriver(drivertest.Connect(t, &drivertest.FakeDriver{})),
			WithAuditSink(&memSink{}), WithGrantStore(NewFileGrantStore(dir)), WithBaseline(b))
	}
	for _, b := range []driverapi.Capabilities{{FSRead: []string{"relative"}}, {FSWrite: []string{filepath.Dir(dir)}}} {
		if sb, err := build(b); err == nil {
			_ = sb.Close()
			t.Errorf("baseline %+v accepted", b)
		}
	}
	sb, err := build(driverapi.Capabilities{SpawnSubprocess: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	out, err := sb.Execute(context.Background(), Command{SessionID: "s", Program: "echo", Args: []string{"ran"}, Capabilities: driverapi.Capabilities{SpawnSubprocess: true}})
	if err != nil || string(out.Stdout) != "ran\n" {
		t.Fatalf("within the baseline: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, SessionDirName("s")+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a request within the baseline was kept as a grant: %v", err)
	}
}

// The store is the session's grants for every process sharing it: a
// session forgotten, or a grant revoked, in one process is no longer
// honoured by another that loaded it earlier, and a process that has not
// run the session yet lists and revokes what is kept.
func TestKeptGrantsAreSharedNotCopied(t *testing.T) {
	dir, root := t.TempDir(), t.TempDir()
	ctx := context.Background()
	spawn := Command{SessionID: "s", Program: "echo", Args: []string{"ran"}, Capabilities: driverapi.Capabilities{SpawnSubprocess: true}}
	a := storeSandbox(t, dir, root, &countingApprover{})
	if _, err := a.Execute(ctx, spawn); err != nil {
		t.Fatal(err)
	}
	b := storeSandbox(t, dir, root, nil)
	if out, err := b.Execute(ctx, spawn); err != nil || string(out.Stdout) != "ran\n" {
		t.Fatalf("kept grant not used: %v", err)
	}
	a.ForgetSession("s")
	_, err := b.Execute(ctx, spawn)
	wantDenied(t, err, ReasonApprovalDenied)

	// Approved again; a fresh process lists the kept grant and revokes it.
	if _, err := a.Execute(ctx, spawn); err != nil {
		t.Fatal(err)
	}
	c := storeSandbox(t, dir, root, nil)
	g := c.Grants("s")
	if len(g.Grants) != 1 {
		t.Fatalf("a fresh process lists %d kept grants, want 1", len(g.Grants))
	}
	if _, err := c.RevokeGrant(ctx, "s", g.Grants[0].ID); err != nil {
		t.Fatalf("revoke in a fresh process: %v", err)
	}
	_, err = b.Execute(ctx, spawn)
	wantDenied(t, err, ReasonApprovalDenied)
	_, err = storeSandbox(t, dir, root, nil).Execute(ctx, spawn)
	wantDenied(t, err, ReasonApprovalDenied)
}

// The files the sandbox runs or reads outside any sandbox (what
// WithProtectedPaths names: hook plugins, the configuration) may be
// read but never written by a command: a command that could replace one
// would run unconfined the next time. So no write grant and no named
// workspace may hold one; a read grant may, and a sibling directory may be
// written (positive controls, the command runs).
func TestProgramsTheSandboxRunsAreNotWritable(t *testing.T) {
	base := t.TempDir()
	tools, conf, other := filepath.Join(base, "tools"), filepath.Join(base, "conf"), filepath.Join(base, "other")
	for _, d := range []string{tools, conf, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	hook := filepath.Join(tools, "my-hook")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	// The hook plugin is handed in as the assembly hands it (it launches
	// the plugins and protects them, alephsandbox's protectedPaths): core
	// reads no plugin's name from the configuration.
	sb, err := NewWorkspaceSandbox(cfg, WithDriver(drivertest.Connect(t, &drivertest.FakeDriver{})), WithAuditSink(&memSink{}),
		WithApprovalRequester(&countingApprover{}), WithProtectedPaths(hook, filepath.Join(conf, "config.toml")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	ctx := context.Background()
	for _, c := range []Command{
		{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{tools}}},
		{SessionID: "s", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{conf}}},
		{SessionID: "s", Program: "echo", Workspace: tools},
	} {
		_, err := sb.Execute(ctx, c)
		var ie *InvalidCommandError
		if !errors.As(err, &ie) || !strings.Contains(ie.Reason, "own state") {
			t.Errorf("%+v: want a refusal naming the sandbox's own state, got %v", c, err)
		}
	}
	for _, c := range []Command{
		{SessionID: "s", Program: "echo", Args: []string{"ran"}, Capabilities: driverapi.Capabilities{FSRead: []string{tools, conf}}},
		{SessionID: "s", Program: "echo", Args: []string{"ran"}, Capabilities: driverapi.Capabilities{FSWrite: []string{other}}},
	} {
		if out, err := sb.Execute(ctx, c); err != nil || string(out.Stdout) != "ran\n" {
			t.Errorf("%+v: %v", c.Capabilities, err)
		}
	}
}

// A store that cannot be written keeps grants in this process: a second
// command of the session is not asked again (positive control: with the
// store writable the grant is in the file).
func TestUnwritableStoreKeepsGrantsInProcess(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(parent, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a := &countingApprover{}
	// A directory under a regular file can never be created.
	sb := storeSandbox(t, filepath.Join(parent, "sessions"), t.TempDir(), a)
	ctx := context.Background()
	spawn := Command{SessionID: "s", Program: "echo", Args: []string{"ran"}, Capabilities: driverapi.Capabilities{SpawnSubprocess: true}}
	for i := 0; i < 2; i++ {
		if out, err := sb.Execute(ctx, spawn); err != nil || string(out.Stdout) != "ran\n" {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	if a.asked != 1 {
		t.Fatalf("asked %d times, want 1", a.asked)
	}
}

// Grants and RevokeGrant take only ids Execute takes: an id that is not
// valid UTF-8 would share its file name with another id (the name hashes
// the id's JSON, which replaces invalid bytes). Positive control: the
// valid id lists its grant.
func TestGrantsRefuseInvalidSessionIDs(t *testing.T) {
	sb := storeSandbox(t, t.TempDir(), t.TempDir(), &countingApprover{})
	ctx := context.Background()
	if _, err := sb.Execute(ctx, Command{SessionID: "a\ufffd", Program: "echo", Capabilities: driverapi.Capabilities{SpawnSubprocess: true}}); err != nil {
		t.Fatal(err)
	}
	if n := len(sb.Grants("a\ufffd").Grants); n != 1 {
		t.Fatalf("valid id lists %d grants", n)
	}
	if n := len(sb.Grants("a\xff").Grants); n != 0 {
		t.Fatalf("an invalid id lists %d grants of another", n)
	}
	var ie *InvalidCommandError
	if _, err := sb.RevokeGrant(ctx, "a\xff", "cap-x"); !errors.As(err, &ie) {
		t.Fatalf("revoke with an invalid id: %v", err)
	}
}
