package mcpserver_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/mcpserver"
	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// pipeClient is how a test's client is set up: elicitation when elicit is
// set, progress notifications to progress when set.
type pipeClient struct {
	elicit   func(*mcp.ElicitRequest) *mcp.ElicitResult
	progress func(*mcp.ProgressNotificationClientRequest)
}

// connectPipe starts the server of cfg on the streaming fake driver and the
// SDK's client, the two speaking over OS pipes through the server's stdio
// transport (the one `aleph-sandbox mcp` serves on), newline-delimited
// JSON-RPC as a client that starts the binary speaks it.
func connectPipe(t *testing.T, cfg mcpserver.Config, pc pipeClient) (*mcp.ClientSession, *procServer) {
	t.Helper()
	ps := newProcServer(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// Client to server, and server to client.
	c2sR, c2sW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	s2cR, s2cW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, f := range []*os.File{c2sR, c2sW, s2cR, s2cW} {
			_ = f.Close()
		}
	})
	ss, err := ps.srv.Connect(ctx, mcpserver.NewStdioTransport(c2sR, s2cW, mcpserver.DefaultMaxLineBytes), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	opts := &mcp.ClientOptions{}
	if pc.elicit != nil {
		opts.ElicitationHandler = func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return pc.elicit(r), nil
		}
	}
	if pc.progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			pc.progress(r)
		}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "pipe-client", Version: "1"}, opts).
		Connect(ctx, &mcp.IOTransport{Reader: s2cR, Writer: c2sW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, ps
}

// A shell command asks for spawn by itself: the user is asked (and the
// shell runs with spawn once approved), a client that cannot be asked gets
// a refusal naming spawn, and a baseline with spawn runs it unasked. Before,
// the line ran without spawn, unasked, and its shell could not fork.
func TestMCPShellCommandAsksForSpawn(t *testing.T) {
	var asked []string
	cs, ps := connectPipe(t, mcpserver.Config{}, pipeClient{elicit: func(r *mcp.ElicitRequest) *mcp.ElicitResult {
		asked = append(asked, r.Params.Message)
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}
	}})
	res, out := call(t, cs, map[string]any{"command": "echo a | tr a b"})
	if res.IsError || len(asked) != 1 || !strings.Contains(asked[0], "subprocesses") {
		t.Fatalf("shell line with a client that can be asked: %+v %q, asked %q", out, text(res), asked)
	}
	if s := ps.fake.LastSpec(); s.Program != "/bin/sh" || !strings.Contains(string(s.Profile.Data), `"spawn_subprocess":true`) {
		t.Fatalf("the shell ran without spawn: %s %s", s.Program, s.Profile.Data)
	}
	// The approval is the session's: the next line is not asked again.
	if res, out := call(t, cs, map[string]any{"command": "true"}); res.IsError || len(asked) != 1 {
		t.Fatalf("second line: %+v, asked %d times", out, len(asked))
	}

	// A client that cannot be asked: refused, naming spawn, before
	// anything ran; argv beside it runs (positive control).
	cs, ps = connectPipe(t, mcpserver.Config{}, pipeClient{})
	res, out = call(t, cs, map[string]any{"command": "echo a | tr a b"})
	if !res.IsError || !out.Denied || out.ReasonCode != string(core.ReasonApprovalDenied) ||
		!strings.Contains(out.Hint, "spawn") || !strings.Contains(text(res), "hint: ") || !strings.Contains(text(res), "spawn") {
		t.Fatalf("shell line, nobody to ask: %+v %q", out, text(res))
	}
	if n := ps.fake.started(); n != 0 {
		t.Fatalf("the refused shell line reached the driver (%d runs)", n)
	}
	if res, out := call(t, cs, map[string]any{"argv": []string{"echo", "direct"}}); res.IsError || out.Stdout != "direct\n" || out.Hint != "" {
		t.Fatalf("argv (control): %+v %q", out, text(res))
	}
	// start_process takes a shell line the same way.
	var pr mcpserver.ProcessResult
	res = tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"command": "sleep 60"}, &pr)
	if !res.IsError || !pr.Denied || !strings.Contains(pr.Hint, "spawn") || !strings.Contains(text(res), "hint: ") {
		t.Fatalf("start_process of a shell line, nobody to ask: %+v %q", pr, text(res))
	}

	// Spawn in the server's baseline: no question, and it runs with it.
	cs, ps = connectPipe(t, mcpserver.Config{Baseline: core.BaselinePresets()["spawn"]}, pipeClient{})
	if res, out := call(t, cs, map[string]any{"command": "echo a | tr a b"}); res.IsError || out.Denied {
		t.Fatalf("shell line within the baseline: %+v %q", out, text(res))
	}
	if s := ps.fake.LastSpec(); !strings.Contains(string(s.Profile.Data), `"spawn_subprocess":true`) {
		t.Fatalf("the shell ran without spawn: %s", s.Profile.Data)
	}
}

// start_process's result has the spawn hint run_command's has when the
// sandbox refused the process a subprocess; with spawn there is none.
func TestMCPStartProcessSpawnRefusedHint(t *testing.T) {
	cs, _ := connectPipe(t, mcpserver.Config{}, pipeClient{elicit: func(*mcp.ElicitRequest) *mcp.ElicitResult {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}
	}})
	var r mcpserver.ProcessResult
	res := tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"fork"}, "wait_seconds": 5}, &r)
	// The start returns at the first output; the end, with the hint,
	// comes with it or with a read.
	for i := 0; r.Running && i < 40; i++ {
		res = tool(t, cs, mcpserver.ToolReadProcess, map[string]any{"id": r.ID, "offset": r.NextOffset, "wait_seconds": 0.5}, &r)
	}
	if res.IsError || r.Running || r.ReasonCode != string(core.ReasonSpawnRefused) || r.SpawnRefused != 1 ||
		!strings.Contains(r.Hint, `"spawn": true`) || !strings.Contains(text(res), "hint: ") {
		t.Fatalf("start_process of a fork without spawn: %+v %q", r, text(res))
	}
	r = mcpserver.ProcessResult{}
	res = tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"fork"}, "spawn": true, "wait_seconds": 5}, &r)
	if r.Running {
		r, _ = readUntil(t, cs, r.ID, 0, "")
	}
	if res.IsError || r.ExitCode != 0 || r.SpawnRefused != 0 || r.Hint != "" || r.ReasonCode == string(core.ReasonSpawnRefused) {
		t.Fatalf("with spawn (control): %+v %q", r, text(res))
	}
}
