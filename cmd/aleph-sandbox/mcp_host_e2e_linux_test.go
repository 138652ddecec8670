//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/mcpserver"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// TestMCPServerOnHostEndToEnd drives `aleph-sandbox mcp --host` (the real
// binary, over a pipe, with the SDK's client) against a real `serve` on
// the real sandbox: run_command with an approval by elicitation answered
// yes, then no; a policy denial; the process tools; a background
// http.server answering a run_command of the same session; a process
// start beyond what the service lets through refused; and the server's
// processes gone from the service once the MCP client goes away.
func TestMCPServerOnHostEndToEnd(t *testing.T) {
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is not installed: the http.server case needs it", python)
	}
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "s.sock") // serve makes run/ 0700
	srvProc := h.start(t, sock, "")
	svc := client(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var mu sync.Mutex
	asked, answer := 0, true
	elicit := func(_ context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": answer}}, nil
	}
	timesAsked := func() int {
		mu.Lock()
		defer mu.Unlock()
		return asked
	}
	const session = "mcp-host"
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "mcp", "--host", "unix:"+sock, "--session", session)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
	// Kept for the failure messages below: the server's own account of
	// how it ended its processes.
	mcpStderr := &lockedBuffer{}
	cmd.Stderr = mcpStderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: elicit}).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call, follow := mcpTools(t, ctx, cs)

	var run mcpserver.RunCommandResult
	if call(mcpserver.ToolRunCommand, map[string]any{"argv": []string{"/bin/echo", "hi"}}, &run) || run.Stdout != "hi\n" || run.Backend != "bwrap" {
		t.Fatalf("echo: %+v", run)
	}
	if !call(mcpserver.ToolRunCommand, map[string]any{"command": "rm -rf /", "spawn": true}, &run) || !run.Denied || run.Rule == "" || run.ReasonCode != "hook_denied" {
		t.Fatalf("rm -rf /: %+v", run)
	}
	if n := timesAsked(); n != 0 {
		t.Fatalf("the policy denial asked the user (%d)", n)
	}

	// A process start beyond the service's baseline: nobody is on the
	// service's approvals, so it is refused (a process's approvals are the
	// service's, not this client's), and the user is not asked.
	// The service decides in the background: the start reports the
	// refusal when it comes within its wait, else the next read does.
	var denied mcpserver.ProcessResult
	isErr := call(mcpserver.ToolStartProcess, map[string]any{"argv": []string{"/bin/cat"}, "network": "all"}, &denied)
	for end := time.Now().Add(30 * time.Second); denied.Running && time.Now().Before(end); {
		isErr = call(mcpserver.ToolReadProcess, map[string]any{"id": denied.ID, "wait_seconds": 1}, &denied)
	}
	if !isErr || !denied.Denied || denied.ReasonCode != "approval_denied" {
		t.Fatalf("start beyond the service's baseline: %+v", denied)
	}

	// run_command beyond the baselines: the service asks, this server asks
	// the user by elicitation, and the shell line runs.
	if call(mcpserver.ToolRunCommand, map[string]any{"command": "echo $((6*7))", "spawn": true}, &run) || run.Stdout != "42\n" || timesAsked() != 1 {
		t.Fatalf("approved spawn: %+v (asked %d)", run, timesAsked())
	}
	mu.Lock()
	answer = false
	mu.Unlock()
	if !call(mcpserver.ToolRunCommand, map[string]any{"argv": []string{"/bin/true"}, "network": "all"}, &run) || run.ReasonCode != "approval_denied" || timesAsked() != 2 {
		t.Fatalf("declined network: %+v (asked %d)", run, timesAsked())
	}

	// The process tools, on the service.
	var st mcpserver.ProcessResult
	if call(mcpserver.ToolStartProcess, map[string]any{"argv": []string{"/bin/cat"}, "wait_seconds": 0}, &st) || !st.Running {
		t.Fatalf("start cat: %+v", st)
	}
	var w mcpserver.WriteProcessResult
	if call(mcpserver.ToolWriteProcess, map[string]any{"id": st.ID, "data": "over the host\n"}, &w) || w.Written != 14 {
		t.Fatalf("write: %+v", w)
	}
	if _, out := follow(st.ID, 0, "over the host\n"); out != "over the host\n" {
		t.Fatalf("cat gave %q", out)
	}
	var l mcpserver.ListProcessesResult
	if call(mcpserver.ToolListProcesses, map[string]any{}, &l); len(l.Processes) != 1 || l.Processes[0].ID != st.ID {
		t.Fatalf("list: %+v", l)
	}
	var sg mcpserver.SignalProcessResult
	if call(mcpserver.ToolSignalProcess, map[string]any{"id": st.ID, "signal": "INT"}, &sg) {
		t.Fatalf("signal: %+v", sg)
	}
	if r, _ := follow(st.ID, 14, ""); r.Signal != 2 {
		t.Fatalf("after INT: %+v", r)
	}
	// Reaped: the service no longer has it.
	if r, err := svc.ListProcesses(ctx, connect.NewRequest(&hostv1.ListProcessesRequest{Session: session})); err != nil || len(r.Msg.GetProcesses()) != 0 {
		t.Fatalf("the service's processes after the end: %v %v", r, err)
	}

	port := strconv.Itoa(20000 + int(time.Now().UnixNano()%20000))
	var srv mcpserver.ProcessResult
	if call(mcpserver.ToolStartProcess, map[string]any{"argv": []string{python, "-u", "-m", "http.server", "--bind", "127.0.0.1", port}}, &srv) || !srv.Running {
		t.Fatalf("start http.server: %+v", srv)
	}
	follow(srv.ID, 0, "Serving HTTP")
	get := "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:" + port + "/').status)"
	if call(mcpserver.ToolRunCommand, map[string]any{"argv": []string{python, "-c", get}}, &run) || run.Stdout != "200\n" {
		t.Fatalf("run_command against the background server: %+v", run)
	}

	// The MCP client goes away: the server it started ends on the service.
	if r, err := svc.ListProcesses(ctx, connect.NewRequest(&hostv1.ListProcessesRequest{Session: session})); err != nil || len(r.Msg.GetProcesses()) != 1 {
		t.Fatalf("the service's processes while it serves: %v %v", r, err)
	}
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	deadline := time.Now().Add(40 * time.Second)
	for {
		r, err := svc.ListProcesses(ctx, connect.NewRequest(&hostv1.ListProcessesRequest{Session: session}))
		if err != nil {
			t.Fatal(err)
		}
		// Ended, and killed: the service may still list it as exited
		// until its session is forgotten; nothing of it may run.
		running := 0
		for _, p := range r.Msg.GetProcesses() {
			if !p.GetExited() {
				running++
			}
		}
		if running == 0 && !serverRunning(port) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the MCP server's process outlived it: %v (running %v; mcp exited %v)\nmcp stderr:\n%s\nserve stderr:\n%s",
				r.Msg.GetProcesses(), serverRunning(port), cmd.ProcessState, mcpStderr, srvProc.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestMCPHostBaselineIsForTheCallOnly: `mcp --host --allow-spawn` runs a
// shell line that forks (its baseline approves the service's question for
// that call only), and keeps nothing on the service: the session lists no
// grant, and the next call of the same session through an mcp --host
// without the flag (whose client cannot be asked) is denied. Control: the
// server with the flag runs the line again (asked again, approved again).
func TestMCPHostBaselineIsForTheCallOnly(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "s.sock")
	config := ""
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") == "1" {
		// The claim is the pipeline's, the same in the Landlock tier
		// (scripts/test-nonamespaces.sh runs it there).
		config = "[sandbox.linux]\nfallback = \"landlock\"\n"
	}
	h.start(t, sock, config)
	svc := client(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const session = "mcp-host-once"
	connectMCP := func(flags ...string) func(string, map[string]any, any) bool {
		t.Helper()
		cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), append([]string{"mcp", "--host", "unix:" + sock, "--session", session}, flags...)...)
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
		cmd.Stderr = &lockedBuffer{}
		// No elicitation handler: the client cannot be asked, so only the
		// server's baseline (or a kept grant) can approve.
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("mcp %q: %v", flags, err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		call, _ := mcpTools(t, ctx, cs)
		return call
	}
	grants := func() int {
		t.Helper()
		r, err := svc.Grants(ctx, connect.NewRequest(&hostv1.GrantsRequest{Action: &hostv1.GrantsRequest_List{List: &hostv1.ListGrants{Session: session}}}))
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Msg.GetGrants())
	}
	// Two commands: the shell must fork for the first.
	line := map[string]any{"command": "/bin/echo one; /bin/echo two", "spawn": true}

	withFlag := connectMCP("--allow-spawn")
	var run mcpserver.RunCommandResult
	if withFlag(mcpserver.ToolRunCommand, line, &run) || run.Stdout != "one\ntwo\n" || run.ExitCode != 0 {
		t.Fatalf("--allow-spawn: %+v", run)
	}
	if n := grants(); n != 0 {
		t.Fatalf("the server's baseline became %d grant(s) of the session", n)
	}

	without := connectMCP()
	if !without(mcpserver.ToolRunCommand, line, &run) || !run.Denied || run.ReasonCode != "approval_denied" {
		t.Fatalf("the next call without the flag got the elevation: %+v", run)
	}
	// Control: the flag's server still runs it, asked again each call.
	if withFlag(mcpserver.ToolRunCommand, line, &run) || run.Stdout != "one\ntwo\n" {
		t.Fatalf("--allow-spawn again: %+v", run)
	}
	if n := grants(); n != 0 {
		t.Fatalf("%d grant(s) after the second call", n)
	}
}
