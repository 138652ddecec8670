//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aleph-sandbox/aleph-sandbox/internal/mcpserver"
)

// TestMCPServerEndToEnd drives the real `aleph-sandbox mcp` binary over a
// pipe with the SDK's client, on the real sandbox: initialize, tools/list,
// a call that runs, one the command policy denies, one that times out.
func TestMCPServerEndToEnd(t *testing.T) {
	h := newEscapeHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "mcp", "--session", "mcp-e2e", "--allow-spawn")
	cmd.Env = append(h.env(), "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+h.root)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if init := cs.InitializeResult(); init == nil || init.ServerInfo.Name != "aleph-sandbox" {
		t.Fatalf("initialize: %+v", init)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != mcpserver.ToolRunCommand {
		t.Fatalf("tools/list: %+v %v", tools, err)
	}
	call := func(args map[string]any) (bool, mcpserver.RunCommandResult) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolRunCommand, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		var out mcpserver.RunCommandResult
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return res.IsError, out
	}
	if isErr, out := call(map[string]any{"argv": []string{"/bin/echo", "hi"}}); isErr || out.Stdout != "hi\n" || out.Backend != "bwrap" {
		t.Fatalf("echo: error=%v %+v", isErr, out)
	}
	// A shell line runs (spawn is in this server's baseline) and sees only
	// its workspace as cwd.
	if isErr, out := call(map[string]any{"command": "echo $((6*7)); exit 3"}); isErr || out.Stdout != "42\n" || out.ExitCode != 3 {
		t.Fatalf("command: error=%v %+v", isErr, out)
	}
	if isErr, out := call(map[string]any{"command": "rm -rf /"}); !isErr || !out.Denied || out.Rule == "" {
		t.Fatalf("rm -rf /: error=%v %+v", isErr, out)
	}
	if isErr, out := call(map[string]any{"argv": []string{"/bin/sleep", "10"}, "timeout_seconds": 0.5}); isErr || !out.TimedOut {
		t.Fatalf("timeout: error=%v %+v", isErr, out)
	}
	// Beyond the baseline, with a client that cannot be asked: denied.
	if isErr, out := call(map[string]any{"argv": []string{"/bin/true"}, "network": "all"}); !isErr || out.ReasonCode != "approval_denied" {
		t.Fatalf("network all: error=%v %+v", isErr, out)
	}
}
