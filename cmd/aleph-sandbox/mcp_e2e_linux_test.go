//go:build linux

package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/mcpserver"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
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
	if err != nil || len(tools.Tools) != 13 || !slices.ContainsFunc(tools.Tools, func(tl *mcp.Tool) bool { return tl.Name == mcpserver.ToolRunCommand }) {
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
	// What the sandbox refused is in the structured result: a denied
	// syscall (the command ran, and got EPERM) as a violation; the echo
	// above, refused nothing, has none and says which kinds were watched.
	if isErr, out := call(map[string]any{"argv": []string{"/usr/bin/unshare", "-U", "/bin/true"}}); isErr || out.ExitCode == 0 ||
		!strings.Contains(out.Stderr, "Operation not permitted") || !slices.Contains(out.Violations,
		driverapi.Violation{Kind: "syscall", Operation: "syscall", Target: "unshare", Count: 1}) {
		t.Fatalf("unshare: error=%v %+v", isErr, out)
	}
	if isErr, out := call(map[string]any{"argv": []string{"/bin/echo", "hi"}}); isErr || out.Stdout != "hi\n" || len(out.Violations) != 0 ||
		!slices.Contains(out.ViolationKinds, "syscall") {
		t.Fatalf("echo (control): error=%v %+v", isErr, out)
	}
	// What a command consumed is in its structured result; a denial ran
	// nothing and has none.
	burn := "x = bytearray(96 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\n"
	if isErr, out := call(map[string]any{"argv": []string{"/usr/bin/python3", "-c", burn}}); isErr || out.ExitCode != 0 || out.Usage == nil ||
		out.Usage.MaxRSSKB < 96<<10 || out.Usage.CPUMS <= 0 || out.Usage.CPUMS != out.Usage.UserMS+out.Usage.SystemMS {
		t.Fatalf("usage: error=%v %+v %+v", isErr, out, out.Usage)
	}
	// A shell line runs (spawn is in this server's baseline) and sees only
	// its workspace as cwd.
	if isErr, out := call(map[string]any{"command": "echo $((6*7)); exit 3"}); isErr || out.Stdout != "42\n" || out.ExitCode != 3 {
		t.Fatalf("command: error=%v %+v", isErr, out)
	}
	if isErr, out := call(map[string]any{"command": "rm -rf /"}); !isErr || !out.Denied || out.Rule == "" || out.Usage != nil {
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

// TestMCPServerProcessesEndToEnd drives the process tools of the real
// `aleph-sandbox mcp` binary over a pipe on the real sandbox: cat round
// trip, list, signal, stop; a background http.server that a later
// run_command of the same session reaches on 127.0.0.1 (the session's
// loopback is shared); a start beyond the baseline refused as a tool
// error; and nothing left running once the client is gone.
func TestMCPServerProcessesEndToEnd(t *testing.T) {
	h := newEscapeHarness(t)
	// The system's python: the sandbox shows system paths, not a
	// user's shims.
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("%s is not installed: the http.server case needs it", python)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// No --allow-spawn: the baseline is strict.
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "mcp", "--session", "mcp-procs")
	cmd.Env = append(h.env(), "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+h.root)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call, follow := mcpTools(t, ctx, cs)

	var st mcpserver.ProcessResult
	if call(mcpserver.ToolStartProcess, map[string]any{"argv": []string{"/bin/cat"}, "wait_seconds": 0}, &st) || !st.Running || st.ID == "" {
		t.Fatalf("start cat: %+v", st)
	}
	var w mcpserver.WriteProcessResult
	if call(mcpserver.ToolWriteProcess, map[string]any{"id": st.ID, "data": "ping\n"}, &w) || w.Written != 5 {
		t.Fatalf("write: %+v", w)
	}
	if _, out := follow(st.ID, 0, "ping\n"); out != "ping\n" {
		t.Fatalf("cat gave %q", out)
	}
	var l mcpserver.ListProcessesResult
	if call(mcpserver.ToolListProcesses, map[string]any{}, &l); len(l.Processes) != 1 || l.Processes[0].ID != st.ID || !l.Processes[0].Running {
		t.Fatalf("list: %+v", l)
	}
	var sg mcpserver.SignalProcessResult
	if call(mcpserver.ToolSignalProcess, map[string]any{"id": st.ID, "signal": "INT"}, &sg) {
		t.Fatalf("signal: %+v", sg)
	}
	if r, _ := follow(st.ID, 5, ""); r.Signal != 2 {
		t.Fatalf("after INT: %+v", r)
	}
	// stop_process: TERM ends cat.
	call(mcpserver.ToolStartProcess, map[string]any{"argv": []string{"/bin/cat"}, "wait_seconds": 0}, &st)
	var stop mcpserver.ProcessResult
	if call(mcpserver.ToolStopProcess, map[string]any{"id": st.ID}, &stop) || stop.Running || stop.Signal != 15 {
		t.Fatalf("stop: %+v", stop)
	}
	if call(mcpserver.ToolListProcesses, map[string]any{}, &l); len(l.Processes) != 0 {
		t.Fatalf("list after the ends: %+v", l)
	}

	// A server in the background, reached by a later run_command.
	port := strconv.Itoa(20000 + int(time.Now().UnixNano()%20000))
	var srv mcpserver.ProcessResult
	if call(mcpserver.ToolStartProcess, map[string]any{"argv": []string{python, "-u", "-m", "http.server", "--bind", "127.0.0.1", port}}, &srv) || !srv.Running {
		t.Fatalf("start http.server: %+v", srv)
	}
	_, banner := follow(srv.ID, 0, "Serving HTTP")
	var run mcpserver.RunCommandResult
	get := "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:" + port + "/').status)"
	if call(mcpserver.ToolRunCommand, map[string]any{"argv": []string{python, "-c", get}}, &run) || run.Stdout != "200\n" {
		t.Fatalf("run_command against the background server: %+v", run)
	}
	// The request is in the server's log: it was this process that answered.
	if _, log := follow(srv.ID, int64(len(banner)), "GET / HTTP"); !strings.Contains(log, "200") {
		t.Fatalf("server log %q", log)
	}

	// Asking for spawn beyond the strict baseline, with a client that
	// cannot be asked: a tool error.
	var denied mcpserver.ProcessResult
	if !call(mcpserver.ToolStartProcess, map[string]any{"command": "sleep 60", "spawn": true}, &denied) || !denied.Denied || denied.ReasonCode != "approval_denied" {
		t.Fatalf("start asking for spawn: %+v", denied)
	}
	// A shell line asks for spawn by itself: refused the same way, with
	// a hint naming spawn.
	denied = mcpserver.ProcessResult{}
	if !call(mcpserver.ToolStartProcess, map[string]any{"command": "/bin/sleep 60"}, &denied) || !denied.Denied || !strings.Contains(denied.Hint, "spawn") {
		t.Fatalf("start of a shell line: %+v", denied)
	}
	// The shell run as argv, without spawn, starts (so the start itself
	// is not what was refused) and the sandbox refuses its fork, with the
	// hint.
	var nofork mcpserver.ProcessResult
	if call(mcpserver.ToolStartProcess, map[string]any{"argv": []string{"/bin/sh", "-c", "/bin/sleep 60; exit 0"}}, &nofork) {
		t.Fatalf("start of a shell as argv: %+v", nofork)
	}
	if r, out := follow(nofork.ID, 0, ""); r.ExitCode == 0 || !strings.Contains(out, "fork") || r.ReasonCode != "spawn_refused" || !strings.Contains(r.Hint, `"spawn": true`) {
		t.Fatalf("a shell without spawn: %+v %q", r, out)
	}
	if call(mcpserver.ToolListProcesses, map[string]any{}, &l); len(l.Processes) != 1 || l.Processes[0].ID != srv.ID {
		t.Fatalf("list: %+v", l)
	}

	// The client goes away with the server still running: the server's
	// process ends with the MCP server (it is seen running first, so the
	// check below is not vacuous).
	if !serverRunning(port) {
		t.Fatalf("no http.server on port %s seen in /proc while it serves", port)
	}
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for serverRunning(port) {
		if time.Now().After(deadline) {
			t.Fatalf("http.server on port %s still runs after the MCP client went away", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serverRunning reports whether a process of this host runs http.server
// on port.
func serverRunning(port string) bool {
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if slices.Contains(args, "http.server") && slices.Contains(args, port) {
			return true
		}
	}
	return false
}

// mcpTools returns call, which calls a tool of cs and decodes its
// structured result into out (reporting whether it is a tool error), and
// follow, which reads a process from offset until its output holds want
// (or, for "", until it has ended).
func mcpTools(t *testing.T, ctx context.Context, cs *mcp.ClientSession) (
	call func(name string, args map[string]any, out any) bool,
	follow func(id string, offset int64, want string) (mcpserver.ProcessResult, string)) {
	call = func(name string, args map[string]any, out any) bool {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %s: %v", name, b, err)
		}
		return res.IsError
	}
	follow = func(id string, offset int64, want string) (mcpserver.ProcessResult, string) {
		t.Helper()
		var all strings.Builder
		deadline := time.Now().Add(30 * time.Second)
		for {
			var r mcpserver.ProcessResult
			if call(mcpserver.ToolReadProcess, map[string]any{"id": id, "offset": offset, "wait_seconds": 1}, &r) {
				t.Fatalf("read_process: %+v", r)
			}
			all.WriteString(r.Output)
			offset = r.NextOffset
			if (want != "" && strings.Contains(all.String(), want)) || (want == "" && !r.Running) {
				return r, all.String()
			}
			if !r.Running || time.Now().After(deadline) {
				t.Fatalf("never saw %q in %q (running %v, %+v)", want, all.String(), r.Running, r)
			}
		}
	}
	return call, follow
}
