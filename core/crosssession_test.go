package core

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// One session may not reach another's workspace: not by a read or write
// grant of the neighbour's directory under the workspace root, nor by
// naming it as its workspace. Controls: a grant inside its own workspace
// and one outside the root are fine, and the neighbour itself runs there.
func TestGrantsCannotReachAnotherSessionsWorkspace(t *testing.T) {
	cfg := testConfig(t)
	fake := &drivertest.FakeDriver{}
	sb, err := NewWorkspaceSandbox(cfg, WithDriver(drivertest.Connect(t, fake)), WithAuditSink(&memSink{}),
		WithApprovalRequester(&drivertest.FakeApprover{Outcome: driverapi.ApprovalApproved}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	ctx := context.Background()
	// Session b exists and has its workspace.
	if _, err := sb.Execute(ctx, Command{SessionID: "b", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.EvalSymlinks(cfg.Sandbox.WorkspaceRoot)
	bws := filepath.Join(root, SessionDirName("b"))
	for _, c := range []Command{
		{SessionID: "a", Program: "echo", Capabilities: driverapi.Capabilities{FSRead: []string{bws}}},
		{SessionID: "a", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{bws}}},
		{SessionID: "a", Program: "echo", Workspace: bws},
	} {
		_, err := sb.Execute(ctx, c)
		var ie *InvalidCommandError
		if !errors.As(err, &ie) || !strings.Contains(ie.Reason, "other sessions' workspaces") {
			t.Fatalf("%+v: want a refusal, got %T %v", c, err, err)
		}
	}
	runs := fake.Runs()
	if runs != 1 {
		t.Fatalf("a refused command reached the driver (%d runs)", runs)
	}
	aws := filepath.Join(root, SessionDirName("a"))
	outside := t.TempDir()
	for _, c := range []Command{
		{SessionID: "a", Program: "echo", Capabilities: driverapi.Capabilities{FSRead: []string{aws}}},
		{SessionID: "a", Program: "echo", Capabilities: driverapi.Capabilities{FSWrite: []string{outside}}},
		{SessionID: "b", Program: "echo", Workspace: bws},
	} {
		if _, err := sb.Execute(ctx, c); err != nil {
			t.Fatalf("control %+v: %v", c, err)
		}
	}
}
