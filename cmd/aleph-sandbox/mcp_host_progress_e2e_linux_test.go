//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/mcpserver"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// TestMCPHostProgressAndLimits: `mcp --host` states the service's own
// default timeout and output limit (not this process's configuration) in
// its instructions and run_command's description, and a long command's
// output reaches a client that sent a progress token while it runs: the
// command waits for a file the test makes only once the notification with
// its first line has arrived, so without it the command would never end.
func TestMCPHostProgressAndLimits(t *testing.T) {
	h := newServeHarness(t)
	h.env = append(h.env, "ALEPH_SANDBOX_SANDBOX__DEFAULT_TIMEOUT_SECONDS=77", "ALEPH_SANDBOX_SANDBOX__MAX_OUTPUT_BYTES=200000")
	sock := filepath.Join(t.TempDir(), "run", "s.sock")
	srv := h.start(t, sock, "")
	svc := client(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const session = "mcp-host-progress"

	// The first call makes the session's workspace, where the test puts
	// the file the long command waits for.
	var ws string
	var released sync.Once
	var mu sync.Mutex
	var notes []string
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		notes = append(notes, r.Params.Message)
		mu.Unlock()
		if strings.Contains(r.Params.Message, "first") {
			released.Do(func() { _ = os.WriteFile(filepath.Join(ws, "go"), nil, 0o644) })
		}
	}}
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "mcp", "--host", "unix:"+sock, "--session", session, "--allow-spawn")
	// This process's own configuration says other limits: the service's
	// must be the ones stated.
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "ALEPH_SANDBOX_SANDBOX__DEFAULT_TIMEOUT_SECONDS=33")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, opts).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if in := cs.InitializeResult().Instructions; !strings.Contains(in, "77 s") || !strings.Contains(in, "200000 bytes") {
		t.Fatalf("instructions: %q", in)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tool := range tools.Tools {
		if tool.Name == mcpserver.ToolRunCommand {
			found = true
			if !strings.Contains(tool.Description, "77 s, the configured default") || !strings.Contains(tool.Description, "200000 bytes of output") {
				t.Fatalf("run_command's description: %q", tool.Description)
			}
		}
	}
	if !found {
		t.Fatal("no run_command tool")
	}
	call, _ := mcpTools(t, ctx, cs)
	var out mcpserver.RunCommandResult
	if call(mcpserver.ToolRunCommand, map[string]any{"argv": []string{"/bin/true"}}, &out) || out.ExitCode != 0 {
		t.Fatalf("true: %+v\n%s", out, srv.stderr)
	}
	d, err := svc.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Describe{Describe: &hostv1.DescribeSession{Session: session}}}))
	if err != nil || d.Msg.GetSessions()[0].GetWorkspace() == "" {
		t.Fatalf("describe: %v %v", d, err)
	}
	ws = d.Msg.GetSessions()[0].GetWorkspace()

	res, out := runLongWithProgress(t, ctx, cs, "e2e-host-progress")
	mu.Lock()
	defer mu.Unlock()
	if res.IsError || out.TimedOut || out.Stdout != "first\nsecond\n" || len(notes) == 0 {
		t.Fatalf("long command with a progress token over --host: %+v, notifications %q", out, notes)
	}
}
