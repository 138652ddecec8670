package mcpserver_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
	return connectPipeTo(t, ps.srv, pc), ps
}

// connectPipeTo is connectPipe to the server srv.
func connectPipeTo(t *testing.T, srv *mcpserver.Server, pc pipeClient) *mcp.ClientSession {
	t.Helper()
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
	ss, err := srv.Connect(ctx, mcpserver.NewStdioTransport(c2sR, s2cW, mcpserver.DefaultMaxLineBytes), nil)
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
	return cs
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

// What a model is told before its first call comes from the server's
// configuration: the instructions and run_command's description say the
// configured default timeout and output limit and the workspace, and the
// tools carry read-only and destructive hints. The workspace given is the
// one every call runs in.
func TestMCPGuidesTheModel(t *testing.T) {
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := mcpserver.Config{Workspace: ws, DefaultTimeout: 42 * time.Second, MaxOutputBytes: 12346}
	cs, ps := connectPipe(t, cfg, pipeClient{})
	init := cs.InitializeResult()
	for _, want := range []string{"42 s", "12346 bytes", ws, "run_command", "start_process", "spawn", "layered: true", "changes and diff", "apply"} {
		if !strings.Contains(init.Instructions, want) {
			t.Errorf("instructions lack %q: %q", want, init.Instructions)
		}
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tl := range tools.Tools {
		byName[tl.Name] = tl
	}
	run := byName[mcpserver.ToolRunCommand]
	if run == nil || !strings.Contains(run.Description, "42 s") || !strings.Contains(run.Description, "12346 bytes of output (6173 for stdout, 6173 for stderr)") {
		t.Fatalf("run_command's description: %+v", run)
	}
	for name, readOnly := range map[string]bool{
		mcpserver.ToolRunCommand: false, mcpserver.ToolStartProcess: false, mcpserver.ToolWriteProcess: false,
		mcpserver.ToolSignalProcess: false, mcpserver.ToolStopProcess: false,
		mcpserver.ToolReadProcess: true, mcpserver.ToolListProcesses: true,
	} {
		a := byName[name].Annotations
		switch {
		case a == nil:
			t.Errorf("%s: no annotations", name)
		case a.ReadOnlyHint != readOnly:
			t.Errorf("%s: readOnlyHint %v, want %v", name, a.ReadOnlyHint, readOnly)
		case !readOnly && (a.DestructiveHint == nil || !*a.DestructiveHint):
			t.Errorf("%s: destructiveHint %v, want true", name, a.DestructiveHint)
		}
	}
	if res, out := call(t, cs, map[string]any{"argv": []string{"echo", "in the project"}}); res.IsError || out.Stdout != "in the project\n" {
		t.Fatalf("run: %+v", out)
	}
	if got := ps.fake.LastProfileRequest().Workspace; got != ws {
		t.Fatalf("ran in workspace %q, want %q", got, ws)
	}

	// Another configuration, other words (so they are not written in):
	// no workspace given is said, and spawn in the baseline.
	cs, _ = connectPipe(t, mcpserver.Config{DefaultTimeout: 1500 * time.Millisecond, MaxOutputBytes: 1 << 20,
		Baseline: core.BaselinePresets()["agent"]}, pipeClient{})
	if in := cs.InitializeResult().Instructions; !strings.Contains(in, "1.5 s") || !strings.Contains(in, "1048576 bytes") ||
		strings.Contains(in, ws) || !strings.Contains(in, "allowed without asking") {
		t.Fatalf("instructions: %q", in)
	}
}

// progressRunner writes a first line to the live output it is given, and
// ends only once release is closed: the test closes it when the line has
// reached the client as a progress notification, so the notification is
// seen while the command still runs, with no timing assumed.
type progressRunner struct {
	release chan struct{}
	live    chan bool
}

func (p progressRunner) Execute(ctx context.Context, cmd core.Command) (*core.Output, error) {
	p.live <- cmd.Stdout != nil
	if cmd.Stdout != nil {
		_, _ = cmd.Stdout.Write([]byte("first line\n"))
		_, _ = cmd.Stderr.Write([]byte("a warning\n"))
		select {
		case <-p.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &core.Output{Stdout: []byte("first line\nsecond line\n"), Stderr: []byte("a warning\n"), Backend: "test"}, nil
}

// A call with a progress token gets the command's output as it comes in
// notifications/progress, before its result; without one there are none.
func TestMCPProgressNotifications(t *testing.T) {
	pr := progressRunner{release: make(chan struct{}), live: make(chan bool, 2)}
	srv := mcpserver.New(pr, mcpserver.Config{})
	t.Cleanup(srv.Close)
	var mu sync.Mutex
	var seen []*mcp.ProgressNotificationParams
	var once sync.Once
	cs := connectPipeTo(t, srv, pipeClient{progress: func(r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		seen = append(seen, r.Params)
		all := ""
		for _, p := range seen {
			all += p.Message
		}
		mu.Unlock()
		if strings.Contains(all, "first line") && strings.Contains(all, "a warning") {
			once.Do(func() { close(pr.release) })
		}
	}})
	params := &mcp.CallToolParams{Name: mcpserver.ToolRunCommand, Arguments: map[string]any{"argv": []string{"build"}}}
	params.SetProgressToken("tok-1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	var out mcpserver.RunCommandResult
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	if res.IsError || out.Stdout != "first line\nsecond line\n" || !<-pr.live {
		t.Fatalf("result %+v", out)
	}
	mu.Lock()
	n := len(seen)
	for _, p := range seen {
		if p.ProgressToken != "tok-1" || p.Progress <= 0 {
			t.Errorf("notification %+v", p)
		}
	}
	mu.Unlock()
	if n == 0 {
		t.Fatal("no progress notification")
	}
	// Without a token (control): no live output asked for, none sent.
	if res, out := call(t, cs, map[string]any{"argv": []string{"build"}}); res.IsError || <-pr.live || out.Stdout == "" {
		t.Fatalf("without a token: %+v", out)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Fatalf("%d notifications without a token", len(seen)-n)
	}
}
