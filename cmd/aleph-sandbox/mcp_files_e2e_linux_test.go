package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/mcpserver"
)

// TestMCPFileToolsEndToEnd drives the real `aleph-sandbox mcp` binary over
// a pipe with the SDK's client: write_file writes what run_command's
// sandboxed command reads, read_file reads what the command wrote, and a
// link the command planted to a host file is refused by read_file (the
// command really ran: it reports the link made). Protected entries are
// never written.
func TestMCPFileToolsEndToEnd(t *testing.T) {
	h := newEscapeHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cs, secret := mcpFilesInProcess(t, ctx, h, "--session", "mcp-files")
	mcpFileToolsScenario(t, ctx, cs, secret)
}

// mcpFilesInProcess starts the real `aleph-sandbox mcp` (in-process
// runtime, spawn allowed) with args, connects the SDK's client over a
// pipe (closed at the test's end), and makes a host secret for the
// scenario's planted link.
func mcpFilesInProcess(t *testing.T, ctx context.Context, h *escapeHarness, args ...string) (*mcp.ClientSession, string) {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), append(append([]string{"mcp"}, args...), "--allow-spawn")...)
	cmd.Env = append(h.env(), "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+h.root)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, secret
}

// TestMCPFileToolsOnHostEndToEnd is the same scenario with `mcp --host`:
// the file tools then go through the Go client to a real serve's files
// API.
func TestMCPFileToolsOnHostEndToEnd(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "s.sock")
	h.start(t, sock, "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	secret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "mcp", "--host", "unix:"+sock, "--session", "mcp-files-host", "--allow-spawn")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	mcpFileToolsScenario(t, ctx, cs, secret)
}

func mcpFileToolsScenario(t *testing.T, ctx context.Context, cs *mcp.ClientSession, secret string) {
	t.Helper()
	call := func(name string, args map[string]any, out any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s structured %s: %v", name, b, err)
		}
		return res
	}
	var w mcpserver.WriteFileResult
	if res := call(mcpserver.ToolWriteFile, map[string]any{"path": "src/main.py", "content": "print('hi')\n"}, &w); res.IsError || w.Size != 12 {
		t.Fatalf("write_file: %+v %+v", res, w)
	}
	var run mcpserver.RunCommandResult
	call(mcpserver.ToolRunCommand, map[string]any{"command": "cat src/main.py && ln -s " + secret + " out && echo made > made.txt && echo linked", "spawn": true}, &run)
	if run.ExitCode != 0 || run.Stdout != "print('hi')\nlinked\n" {
		t.Fatalf("run_command: %+v", run)
	}
	var r mcpserver.ReadFileResult
	if res := call(mcpserver.ToolReadFile, map[string]any{"path": "made.txt"}, &r); res.IsError || r.Content != "made\n" || r.Encoding != "utf-8" {
		t.Fatalf("read_file made.txt: %+v", r)
	}
	r = mcpserver.ReadFileResult{}
	res := call(mcpserver.ToolReadFile, map[string]any{"path": "out"}, &r)
	if !res.IsError || r.ReasonCode != "link_refused" || strings.Contains(r.Content, "host secret") {
		t.Fatalf("read_file through a planted link out: %+v", r)
	}
	w = mcpserver.WriteFileResult{}
	res = call(mcpserver.ToolWriteFile, map[string]any{"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"}, &w)
	if !res.IsError || w.ReasonCode != "protected_entry" || w.Entry != ".git" {
		t.Fatalf("write_file into .git: %+v", w)
	}
	var l mcpserver.ListFilesResult
	call(mcpserver.ToolListFiles, map[string]any{}, &l)
	kinds := map[string]string{}
	for _, e := range l.Entries {
		kinds[e.Name] = e.Kind
	}
	if kinds["src"] != "dir" || kinds["out"] != "link" || kinds["made.txt"] != "file" || kinds[".git"] != "" {
		t.Fatalf("list_files: %+v", l)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if tl.Name == mcpserver.ToolReadFile && (tl.Annotations == nil || !tl.Annotations.ReadOnlyHint) {
			t.Errorf("read_file is not annotated read-only: %+v", tl.Annotations)
		}
		if tl.Name == mcpserver.ToolWriteFile && (tl.Annotations == nil || tl.Annotations.DestructiveHint == nil || !*tl.Annotations.DestructiveHint) {
			t.Errorf("write_file is not annotated destructive: %+v", tl.Annotations)
		}
	}
}

// TestMCPFileToolsInProjectEndToEnd is the same scenario with `mcp
// --workspace DIR` (the user's project): the file tools reach DIR, where
// run_command runs, so a file written is on the host in DIR and the
// session's own directory holds none of it.
func TestMCPFileToolsInProjectEndToEnd(t *testing.T) {
	h := newEscapeHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	project, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cs, secret := mcpFilesInProcess(t, ctx, h, "--session", "mcp-files-project", "--workspace", project)
	mcpFileToolsScenario(t, ctx, cs, secret)
	if b, err := os.ReadFile(filepath.Join(project, "src", "main.py")); err != nil || string(b) != "print('hi')\n" {
		t.Fatalf("write_file did not write the project: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(project, "made.txt")); err != nil || string(b) != "made\n" {
		t.Fatalf("the command did not run in the project: %q %v", b, err)
	}
	own, _ := filepath.Glob(filepath.Join(h.root, "*", "src", "main.py"))
	if len(own) > 0 {
		t.Fatalf("the file tools wrote a session directory: %v", own)
	}
}
