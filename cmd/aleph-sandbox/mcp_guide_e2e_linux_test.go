//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/mcpserver"
)

// startMCP starts the real `aleph-sandbox mcp` binary with args (and the
// variables of env added to the harness's environment) and connects the
// SDK's client to it over its stdin and stdout.
func startMCP(t *testing.T, ctx context.Context, h *escapeHarness, env []string, opts *mcp.ClientOptions, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), append([]string{"mcp"}, args...)...)
	cmd.Env = append(append(h.env(), "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+h.root), env...)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, opts).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func approveAll() *mcp.ClientOptions {
	return &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
	}}
}

// A shell command asks for spawn by itself, on the real sandbox: with a
// client that approves it the line forks and runs; with one that cannot be
// asked it is refused naming spawn, while argv runs beside it. Before, the
// line ran unasked without spawn and failed with "/bin/sh: Cannot fork"
// (exit 2, not a tool error).
func TestMCPShellCommandSpawnEndToEnd(t *testing.T) {
	h := newEscapeHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The line forks: a pipeline of two programs.
	line := "/bin/echo forked | /usr/bin/tr a-z A-Z"

	cs := startMCP(t, ctx, h, nil, approveAll(), "--session", "mcp-shell-yes")
	call, _ := mcpTools(t, ctx, cs)
	var out mcpserver.RunCommandResult
	if call(mcpserver.ToolRunCommand, map[string]any{"command": line}, &out) || out.Stdout != "FORKED\n" || out.ExitCode != 0 {
		t.Fatalf("approved shell line: %+v", out)
	}

	cs = startMCP(t, ctx, h, nil, nil, "--session", "mcp-shell-no")
	call, _ = mcpTools(t, ctx, cs)
	out = mcpserver.RunCommandResult{}
	if !call(mcpserver.ToolRunCommand, map[string]any{"command": line}, &out) || !out.Denied || out.ReasonCode != "approval_denied" ||
		!strings.Contains(out.Hint, "spawn") || strings.Contains(out.Stderr, "fork") {
		t.Fatalf("shell line, nobody to ask: %+v", out)
	}
	out = mcpserver.RunCommandResult{}
	if call(mcpserver.ToolRunCommand, map[string]any{"argv": []string{"/bin/echo", "direct"}}, &out) || out.Stdout != "direct\n" {
		t.Fatalf("argv (control): %+v", out)
	}
}

// The agent baseline preset, on the real sandbox, from each front end:
// `exec` runs a shell line that forks without --spawn, `mcp` runs one
// without asking a client that cannot be asked, and a `serve` configured
// with it runs one for `mcp --host` without any flag; the network stays
// refused in each (everything but spawn is strict). The controls: under
// strict the same line cannot fork (exec) or is refused (mcp).
func TestAgentBaselineEndToEnd(t *testing.T) {
	h := newEscapeHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const line = "/bin/echo forked | /usr/bin/tr a-z A-Z"
	agent := "ALEPH_SANDBOX_SANDBOX__SESSION__BASELINE=agent"

	execCLI := func(env string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(h.bin, "aleph-sandbox"), append([]string{"exec", "--session", "agent-cli"}, args...)...)
		cmd.Env = append(h.env(), "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+h.root, env)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	if code, out, errs := execCLI(agent, "--", "/bin/sh", "-c", line); code != 0 || out != "FORKED\n" {
		t.Fatalf("exec under agent: exit %d, %q, %q", code, out, errs)
	}
	if code, out, _ := execCLI("ALEPH_SANDBOX_SANDBOX__SESSION__BASELINE=strict", "--", "/bin/sh", "-c", line); code == 0 || out == "FORKED\n" {
		t.Fatalf("exec under strict (control): exit %d, %q", code, out)
	}
	if code, _, errs := execCLI(agent, "--net", "all", "--", "/bin/true"); code == 0 || !strings.Contains(errs, "network") {
		t.Fatalf("exec --net all under agent: exit %d, %q", code, errs)
	}

	cs := startMCP(t, ctx, h, []string{agent}, nil, "--session", "agent-mcp")
	call, _ := mcpTools(t, ctx, cs)
	var out mcpserver.RunCommandResult
	if call(mcpserver.ToolRunCommand, map[string]any{"command": line}, &out) || out.Stdout != "FORKED\n" {
		t.Fatalf("mcp under agent: %+v", out)
	}
	out = mcpserver.RunCommandResult{}
	if !call(mcpserver.ToolRunCommand, map[string]any{"argv": []string{"/bin/true"}, "network": "all"}, &out) || out.ReasonCode != "approval_denied" {
		t.Fatalf("mcp network all under agent: %+v", out)
	}

	sh := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "s.sock")
	config := "[sandbox.session]\nbaseline = \"agent\"\n"
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") == "1" {
		config += "[sandbox.linux]\nfallback = \"landlock\"\n"
	}
	sh.start(t, sock, config)
	cmd := exec.Command(filepath.Join(sh.bin, "aleph-sandbox"), "mcp", "--host", "unix:"+sock, "--session", "agent-serve")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
	hcs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer hcs.Close()
	call, _ = mcpTools(t, ctx, hcs)
	out = mcpserver.RunCommandResult{}
	if call(mcpserver.ToolRunCommand, map[string]any{"command": line}, &out) || out.Stdout != "FORKED\n" {
		t.Fatalf("mcp --host on a serve under agent: %+v", out)
	}
	out = mcpserver.RunCommandResult{}
	if !call(mcpserver.ToolRunCommand, map[string]any{"argv": []string{"/bin/true"}, "network": "all"}, &out) || !out.Denied {
		t.Fatalf("mcp --host network all on a serve under agent: %+v", out)
	}
}

// `mcp --workspace DIR` on the real sandbox: every call runs in the user's
// project (it reads a file there, and what it writes is there on the
// host); the instructions name the project and the configured limits; and
// a long command's output reaches a client that sent a progress token
// while it runs: the command waits for a file that the test makes only
// once the notification with its first line has arrived, so without the
// notification it would never end.
func TestMCPWorkspaceAndProgressEndToEnd(t *testing.T) {
	h := newEscapeHarness(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	project, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "README"), []byte("the project\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var released sync.Once
	var notes []string
	var mu sync.Mutex
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		notes = append(notes, r.Params.Message)
		mu.Unlock()
		if strings.Contains(r.Params.Message, "first") {
			released.Do(func() { _ = os.WriteFile(filepath.Join(project, "go"), nil, 0o644) })
		}
	}}
	cs := startMCP(t, ctx, h, []string{"ALEPH_SANDBOX_SANDBOX__DEFAULT_TIMEOUT_SECONDS=77", "ALEPH_SANDBOX_SANDBOX__MAX_OUTPUT_BYTES=200000"},
		opts, "--session", "mcp-project", "--workspace", project, "--allow-spawn")
	if in := cs.InitializeResult().Instructions; !strings.Contains(in, project) || !strings.Contains(in, "77 s") || !strings.Contains(in, "200000 bytes") {
		t.Fatalf("instructions: %q", in)
	}
	call, _ := mcpTools(t, ctx, cs)
	var out mcpserver.RunCommandResult
	if call(mcpserver.ToolRunCommand, map[string]any{"argv": []string{"/bin/cat", "README"}}, &out) || out.Stdout != "the project\n" {
		t.Fatalf("cat README in the project: %+v", out)
	}
	out = mcpserver.RunCommandResult{}
	if call(mcpserver.ToolRunCommand, map[string]any{"command": "echo made > out.txt"}, &out) || out.ExitCode != 0 {
		t.Fatalf("write in the project: %+v", out)
	}
	if b, err := os.ReadFile(filepath.Join(project, "out.txt")); err != nil || string(b) != "made\n" {
		t.Fatalf("out.txt on the host: %q %v", b, err)
	}
	// The file tools reach the project too: read_file returns what the
	// command wrote there (it read the session's private directory, where
	// no command runs), and write_file writes there.
	var rf mcpserver.ReadFileResult
	if call(mcpserver.ToolReadFile, map[string]any{"path": "out.txt"}, &rf) || rf.Content != "made\n" {
		t.Fatalf("read_file out.txt of the project: %+v", rf)
	}
	var wf mcpserver.WriteFileResult
	if call(mcpserver.ToolWriteFile, map[string]any{"path": "new.txt", "content": "x"}, &wf) {
		t.Fatalf("write_file into the project: %+v", wf)
	}
	if b, err := os.ReadFile(filepath.Join(project, "new.txt")); err != nil || string(b) != "x" {
		t.Fatalf("write_file did not write the project: %q %v", b, err)
	}

	res, out := runLongWithProgress(t, ctx, cs, "e2e-progress")
	mu.Lock()
	defer mu.Unlock()
	if res.IsError || out.TimedOut || out.Stdout != "first\nsecond\n" || len(notes) == 0 {
		t.Fatalf("long command with a progress token: %+v, notifications %q", out, notes)
	}
}

// runLongWithProgress calls run_command with a progress token on a command
// that prints "first", waits for a file named go in its workspace (the
// caller's notification handler makes it), then prints "second".
func runLongWithProgress(t *testing.T, ctx context.Context, cs *mcp.ClientSession, token string) (*mcp.CallToolResult, mcpserver.RunCommandResult) {
	t.Helper()
	params := &mcp.CallToolParams{Name: mcpserver.ToolRunCommand, Arguments: map[string]any{
		"command":         "echo first; while [ ! -e go ]; do /bin/sleep 0.1; done; echo second",
		"timeout_seconds": 90,
	}}
	params.SetProgressToken(token)
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	var out mcpserver.RunCommandResult
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	return res, out
}
