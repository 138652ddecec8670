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

// TestMCPLayeredEndToEnd drives the real `aleph-sandbox mcp --workspace`
// binary over a pipe with the SDK's client, as root and (in the
// unprivileged pass) as an unprivileged user, whose session sandbox's
// supervisor mounts the overlay: a layered run_command writes a file; changes and
// diff list it and the host's file is untouched; apply declined by the
// user is refused, names the CLI command, and leaves the host untouched;
// accepted, it writes the host's file.
func TestMCPLayeredEndToEnd(t *testing.T) {
	h := newEscapeHarness(t)
	ws := t.TempDir()
	ans := &elicitAnswers{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "mcp", "--session", "mcp-layered", "--workspace", ws, "--allow-spawn")
	cmd.Env = append(h.env(), "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+h.root)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: ans.handle}).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	mcpLayeredScenario(t, ctx, cs, ws, "mcp-layered", "", nil, ans)
}

// TestMCPLayeredOnHostEndToEnd is the same scenario with `mcp --host`: the
// layered tools then go through the Go client to a real serve.
func TestMCPLayeredOnHostEndToEnd(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "s.sock")
	h.start(t, sock, "")
	ws := t.TempDir()
	ans := &elicitAnswers{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "mcp", "--host", "unix:"+sock, "--session", "mcp-layered-host", "--workspace", ws, "--allow-spawn")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: ans.handle}).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// The command a declined apply names is run as the user would: it
	// reaches the session on the service and applies.
	runCLI := func(argv []string) (int, string) {
		c := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), argv...)
		c.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
		out, err := c.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	mcpLayeredScenario(t, ctx, cs, ws, "mcp-layered-host", "unix:"+sock, runCLI, ans)
}

// elicitAnswers is the user of the scenario: it answers every question
// with accept or not, and keeps the questions.
type elicitAnswers struct {
	mu        sync.Mutex
	accept    bool
	questions []string
}

func (a *elicitAnswers) handle(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.questions = append(a.questions, req.Params.Message)
	if !a.accept {
		return &mcp.ElicitResult{Action: "decline"}, nil
	}
	return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
}

func (a *elicitAnswers) set(accept bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.accept = accept
}

func (a *elicitAnswers) asked() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.questions...)
}

// With hostAddr (mcp --host), the command a declined apply names carries
// --host, and runCLI runs it: it applies a later change on the service.
func mcpLayeredScenario(t *testing.T, ctx context.Context, cs *mcp.ClientSession, ws, session, hostAddr string,
	runCLI func(argv []string) (int, string), ans *elicitAnswers) {
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
	text := func(res *mcp.CallToolResult) string {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	readOnly := map[string]bool{}
	for _, tl := range tools.Tools {
		readOnly[tl.Name] = tl.Annotations != nil && tl.Annotations.ReadOnlyHint
		if tl.Name == mcpserver.ToolApply && (tl.Annotations == nil || tl.Annotations.DestructiveHint == nil || !*tl.Annotations.DestructiveHint) {
			t.Errorf("apply is not annotated destructive: %+v", tl.Annotations)
		}
	}
	if !readOnly[mcpserver.ToolChanges] || !readOnly[mcpserver.ToolDiff] || readOnly[mcpserver.ToolApply] {
		t.Errorf("read-only annotations: %v", readOnly)
	}
	host := filepath.Join(ws, "made.txt")

	var run mcpserver.RunCommandResult
	res := call(mcpserver.ToolRunCommand, map[string]any{"command": "echo layered > made.txt && cat made.txt", "layered": true}, &run)
	if res.IsError || run.ExitCode != 0 || run.Stdout != "layered\n" {
		if strings.Contains(run.Error, "unavailable") {
			t.Skipf("layered sessions unavailable here: %s", run.Error)
		}
		t.Fatalf("layered run_command: %+v", run)
	}
	if _, err := os.Stat(host); !os.IsNotExist(err) {
		t.Fatalf("the host's file exists before apply: %v", err)
	}
	var ch mcpserver.ChangesResult
	if res := call(mcpserver.ToolChanges, nil, &ch); res.IsError || len(ch.Changes) != 1 || ch.Changes[0].Path != "made.txt" || ch.Changes[0].Kind != "added" {
		t.Fatalf("changes: %+v %s", ch, text(res))
	}
	var d mcpserver.DiffResult
	if res := call(mcpserver.ToolDiff, map[string]any{"paths": []string{"made.txt"}}, &d); res.IsError || !strings.Contains(d.Diff, "+layered") {
		t.Fatalf("diff: %+v %s", d, text(res))
	}
	// A path leading out is refused, typed (with --host through the
	// service client's mapping of the status).
	var bad mcpserver.DiffResult
	if res := call(mcpserver.ToolDiff, map[string]any{"paths": []string{"../x"}}, &bad); !res.IsError || bad.ReasonCode != mcpserver.ReasonBadPath {
		t.Errorf("diff ../x: %+v %s", bad, text(res))
	}
	if _, err := os.Stat(host); !os.IsNotExist(err) {
		t.Fatalf("the host's file exists after changes and diff: %v", err)
	}

	// Declined: refused, nothing applied, the CLI command named.
	ans.set(false)
	var ap mcpserver.ApplyResult
	res = call(mcpserver.ToolApply, nil, &ap)
	want := "aleph-sandbox session apply " + session
	if hostAddr != "" {
		want = "aleph-sandbox session apply --host " + hostAddr + " " + session
	}
	if !res.IsError || ap.ReasonCode != mcpserver.ReasonNotApproved || ap.Command != want || !strings.Contains(text(res), want) || len(ap.Applied) != 0 {
		t.Fatalf("declined apply: %+v %q", ap, text(res))
	}
	if q := ans.asked(); len(q) != 1 || !strings.Contains(q[0], "made.txt") {
		t.Fatalf("the question did not show the changes: %q", q)
	}
	if _, err := os.Stat(host); !os.IsNotExist(err) {
		t.Fatalf("the host's file exists after a declined apply: %v", err)
	}

	// Accepted: applied (the positive control of the refusal above).
	ans.set(true)
	ap = mcpserver.ApplyResult{}
	res = call(mcpserver.ToolApply, nil, &ap)
	if res.IsError || len(ap.Applied) != 1 || ap.Applied[0] != "made.txt" {
		t.Fatalf("accepted apply: %+v %q", ap, text(res))
	}
	if b, err := os.ReadFile(host); err != nil || string(b) != "layered\n" {
		t.Fatalf("the host's file after apply: %q %v", b, err)
	}
	if q := ans.asked(); len(q) != 2 {
		t.Errorf("questions: %q", q)
	}
	if runCLI == nil {
		return
	}
	// A later change, declined, then applied by the named command.
	res = call(mcpserver.ToolRunCommand, map[string]any{"command": "echo later > later.txt", "layered": true}, &run)
	if res.IsError || run.ExitCode != 0 {
		t.Fatalf("run_command: %+v %q", run, text(res))
	}
	ans.set(false)
	ap = mcpserver.ApplyResult{}
	if res = call(mcpserver.ToolApply, nil, &ap); !res.IsError || ap.Command == "" {
		t.Fatalf("declined apply: %+v %q", ap, text(res))
	}
	later := filepath.Join(ws, "later.txt")
	if _, err := os.Stat(later); !os.IsNotExist(err) {
		t.Fatalf("the host's later.txt before the named command: %v", err)
	}
	code, out := runCLI(strings.Fields(ap.Command)[1:])
	if b, err := os.ReadFile(later); code != 0 || err != nil || string(b) != "later\n" {
		t.Fatalf("%s: exit %d %q; host's later.txt %q %v", ap.Command, code, out, b, err)
	}
}
