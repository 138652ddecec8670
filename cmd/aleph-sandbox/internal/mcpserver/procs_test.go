package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/mcpserver"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// streamFake is the fake driver with the streaming and signal calls a
// process needs: "cat" copies its streamed stdin to stdout until EOF, and
// a signal ends it as the signal's death (TERM only when the program is
// "cat", so that "stubborn" shows stop's KILL); anything else is the fake
// driver's program.
type streamFake struct {
	drivertest.FakeDriver

	mu     sync.Mutex
	sigs   map[string]chan driverapi.Signal
	starts int
}

var sigNum = map[driverapi.Signal]int32{driverapi.SignalINT: 2, driverapi.SignalKILL: 9, driverapi.SignalTERM: 15, driverapi.SignalHUP: 1}

func (d *streamFake) RunStream(ctx context.Context, spec driverapi.RunSpec, in driverapi.StreamInput, st driverapi.Streams) (driverapi.Exit, error) {
	d.mu.Lock()
	d.starts++
	d.mu.Unlock()
	if spec.Program != "cat" && spec.Program != "stubborn" {
		return d.Run(ctx, spec, st)
	}
	ch := make(chan driverapi.Signal, 4)
	d.mu.Lock()
	if d.sigs == nil {
		d.sigs = map[string]chan driverapi.Signal{}
	}
	d.sigs[spec.CommandID] = ch
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.sigs, spec.CommandID)
		d.mu.Unlock()
	}()
	if spec.Tty != nil {
		fmt.Fprintf(st.Stdout, "tty %dx%d\n", spec.Tty.Rows, spec.Tty.Cols)
	}
	chunks := make(chan []byte)
	go func() {
		defer close(chunks)
		if in.Stdin == nil {
			return
		}
		for {
			b := make([]byte, 4096)
			n, err := in.Stdin.Read(b)
			if n > 0 {
				select {
				case chunks <- b[:n]:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return driverapi.Exit{}, ctx.Err()
		case sig := <-ch:
			if spec.Program == "stubborn" && sig != driverapi.SignalKILL {
				continue
			}
			n := sigNum[sig]
			return driverapi.Exit{ExitCode: 128 + n, Signal: n}, nil
		case b, ok := <-chunks:
			if !ok {
				return driverapi.Exit{}, nil
			}
			_, _ = st.Stdout.Write(b)
		}
	}
}

func (d *streamFake) Signal(_ context.Context, commandID string, sig driverapi.Signal) error {
	d.mu.Lock()
	ch, ok := d.sigs[commandID]
	d.mu.Unlock()
	if !ok {
		return &driverapi.NotRunningError{CommandID: commandID}
	}
	ch <- sig
	return nil
}

// started is how many runs reached the driver.
func (d *streamFake) started() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.starts + d.Runs()
}

// running is how many streamed runs are in progress.
func (d *streamFake) running() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.sigs)
}

// procServer is the server on the streaming fake, for sessions to connect.
type procServer struct {
	t    *testing.T
	srv  *mcpserver.Server
	fake *streamFake
}

func newProcServer(t *testing.T, cfg mcpserver.Config) *procServer {
	t.Helper()
	rt, fake := newProcRuntime(t, cfg)
	srv := mcpserver.New(rt, cfg)
	t.Cleanup(srv.Close)
	return &procServer{t: t, srv: srv, fake: fake}
}

// newProcRuntime is the runtime a server of cfg runs on, over a streamFake.
func newProcRuntime(t *testing.T, cfg mcpserver.Config) (*alephsandbox.Runtime, *streamFake) {
	t.Helper()
	data := t.TempDir()
	t.Setenv("XDG_DATA_HOME", data)
	fake := &streamFake{}
	conf := core.DefaultConfig()
	conf.Sandbox.WorkspaceRoot = filepath.Join(data, "workspaces")
	conf.Sandbox.AuditLog = ""
	rt, err := alephsandbox.New(conf, append(mcpserver.RuntimeOptions(cfg), alephsandbox.WithDriver(drivertest.Connect(t, fake)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	return rt, fake
}

// connect is a new MCP session of the server, with elicitation when
// elicit is set.
func (p *procServer) connect(elicit func(*mcp.ElicitRequest) *mcp.ElicitResult) *mcp.ClientSession {
	t := p.t
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := p.srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	var opts *mcp.ClientOptions
	if elicit != nil {
		opts = &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return elicit(r), nil
		}}
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// tool calls name with args and decodes its structured result into out.
func tool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: structured content %s: %v", name, b, err)
	}
	return res
}

// readUntil follows a process's output from offset with read_process until
// it holds want (or the process ends, when want is "").
func readUntil(t *testing.T, cs *mcp.ClientSession, id string, offset int64, want string) (mcpserver.ProcessResult, string) {
	t.Helper()
	var all strings.Builder
	deadline := time.Now().Add(20 * time.Second)
	for {
		var r mcpserver.ProcessResult
		res := tool(t, cs, mcpserver.ToolReadProcess, map[string]any{"id": id, "offset": offset, "wait_seconds": 0.5}, &r)
		if res.IsError {
			t.Fatalf("read_process: %+v %q", r, text(res))
		}
		all.WriteString(r.Output)
		offset = r.NextOffset
		if (want != "" && strings.Contains(all.String(), want)) || (want == "" && !r.Running) {
			return r, all.String()
		}
		if !r.Running || time.Now().After(deadline) {
			t.Fatalf("never saw %q in %q (running %v)", want, all.String(), r.Running)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMCPProcessToolsListed(t *testing.T) {
	cs := newProcServer(t, mcpserver.Config{}).connect(nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]string{}
	for _, tl := range res.Tools {
		in, _ := json.Marshal(tl.InputSchema)
		out, _ := json.Marshal(tl.OutputSchema)
		schemas[tl.Name] = string(in) + string(out)
	}
	for name, fields := range map[string][]string{
		mcpserver.ToolRunCommand:    {"argv", "stdout"},
		mcpserver.ToolStartProcess:  {"argv", "command", "spawn", "network", "tty", "wait_seconds", "id", "output", "next_offset", "running"},
		mcpserver.ToolWriteProcess:  {"id", "data", "close_stdin", "written"},
		mcpserver.ToolReadProcess:   {"id", "offset", "wait_seconds", "output", "next_offset", "exit_code", "signal", "timed_out", "truncated", "denied"},
		mcpserver.ToolSignalProcess: {"id", "signal"},
		mcpserver.ToolStopProcess:   {"id", "grace_seconds", "exit_code", "signal"},
		mcpserver.ToolListProcesses: {"processes", "program", "running"},
	} {
		s, ok := schemas[name]
		if !ok {
			t.Errorf("tool %s is not listed", name)
			continue
		}
		for _, f := range fields {
			if !strings.Contains(s, `"`+f+`"`) {
				t.Errorf("%s's schemas lack %q: %s", name, f, s)
			}
		}
	}
	if len(res.Tools) != 13 {
		t.Errorf("%d tools, want 13 (run_command, the process tools, the file tools, the layered tools)", len(res.Tools))
	}
}

// start cat, write, read it back, list, signal; then a second one closed
// by close_stdin, and a stubborn one that stop_process has to KILL.
func TestMCPProcessRoundTrip(t *testing.T) {
	ps := newProcServer(t, mcpserver.Config{Session: "agent"})
	cs := ps.connect(nil)
	var st mcpserver.ProcessResult
	if res := tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"cat"}, "wait_seconds": 0}, &st); res.IsError || st.ID == "" || !st.Running {
		t.Fatalf("start: %+v %q", st, text(res))
	}
	var w mcpserver.WriteProcessResult
	if res := tool(t, cs, mcpserver.ToolWriteProcess, map[string]any{"id": st.ID, "data": "hello\n"}, &w); res.IsError || w.Written != 6 {
		t.Fatalf("write: %+v %q", w, text(res))
	}
	r, all := readUntil(t, cs, st.ID, 0, "hello\n")
	if all != "hello\n" || r.NextOffset != 6 || !r.Running {
		t.Fatalf("read %q, %+v", all, r)
	}
	// Following on from next_offset gives only what is new.
	tool(t, cs, mcpserver.ToolWriteProcess, map[string]any{"id": st.ID, "data": "again\n"}, &w)
	if _, all = readUntil(t, cs, st.ID, r.NextOffset, "again\n"); all != "again\n" {
		t.Fatalf("read from offset %d: %q", r.NextOffset, all)
	}
	var l mcpserver.ListProcessesResult
	if tool(t, cs, mcpserver.ToolListProcesses, map[string]any{}, &l); len(l.Processes) != 1 || l.Processes[0].ID != st.ID || !l.Processes[0].Running || l.Processes[0].Program != "cat" {
		t.Fatalf("list: %+v", l)
	}
	var sg mcpserver.SignalProcessResult
	if res := tool(t, cs, mcpserver.ToolSignalProcess, map[string]any{"id": st.ID, "signal": "int"}, &sg); res.IsError || sg.Signal != "INT" {
		t.Fatalf("signal: %+v %q", sg, text(res))
	}
	if r, _ = readUntil(t, cs, st.ID, 12, ""); r.Signal != 2 || r.ExitCode != 130 || r.Running {
		t.Fatalf("after INT: %+v", r)
	}
	// Read to its end, it is gone.
	if tool(t, cs, mcpserver.ToolListProcesses, map[string]any{}, &l); len(l.Processes) != 0 {
		t.Fatalf("list after the end: %+v", l)
	}
	if res := tool(t, cs, mcpserver.ToolReadProcess, map[string]any{"id": st.ID}, &r); !res.IsError || r.ReasonCode != mcpserver.ReasonProcessUnknown {
		t.Fatalf("read of a reaped process: %+v", r)
	}

	// close_stdin: cat reads EOF and exits 0.
	tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"cat"}, "wait_seconds": 0}, &st)
	if res := tool(t, cs, mcpserver.ToolWriteProcess, map[string]any{"id": st.ID, "data": "last", "close_stdin": true}, &w); res.IsError || !w.StdinClosed {
		t.Fatalf("write and close: %+v", w)
	}
	if r, all = readUntil(t, cs, st.ID, 0, ""); r.ExitCode != 0 || r.Signal != 0 || all != "last" {
		t.Fatalf("after EOF: %+v %q", r, all)
	}

	// stop_process: TERM is ignored, KILL after the grace.
	tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"stubborn"}, "wait_seconds": 0}, &st)
	tool(t, cs, mcpserver.ToolWriteProcess, map[string]any{"id": st.ID, "data": "kept"}, &w)
	readUntil(t, cs, st.ID, 0, "kept")
	if res := tool(t, cs, mcpserver.ToolStopProcess, map[string]any{"id": st.ID, "grace_seconds": 0.2}, &r); res.IsError || r.Running || r.Signal != 9 || r.Output != "kept" {
		t.Fatalf("stop: %+v %q", r, text(res))
	}
	if ps.fake.running() != 0 {
		t.Fatalf("%d runs left", ps.fake.running())
	}
	if tool(t, cs, mcpserver.ToolListProcesses, map[string]any{}, &l); len(l.Processes) != 0 {
		t.Fatalf("list after stop: %+v", l)
	}
}

// tty gives the process a terminal of 24 rows and 80 columns; without it
// there is none.
func TestMCPProcessTerminal(t *testing.T) {
	cs := newProcServer(t, mcpserver.Config{}).connect(nil)
	var r mcpserver.ProcessResult
	tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"cat"}, "tty": true, "wait_seconds": 0}, &r)
	if _, out := readUntil(t, cs, r.ID, 0, "\n"); out != "tty 24x80\n" {
		t.Fatalf("tty start: %q", out)
	}
	var plain mcpserver.ProcessResult
	tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"cat"}, "wait_seconds": 0}, &plain)
	var w mcpserver.WriteProcessResult
	tool(t, cs, mcpserver.ToolWriteProcess, map[string]any{"id": plain.ID, "data": "x\n"}, &w)
	if _, out := readUntil(t, cs, plain.ID, 0, "\n"); out != "x\n" {
		t.Fatalf("a start without tty: %q", out)
	}
}

func TestMCPProcessBadInput(t *testing.T) {
	cs := newProcServer(t, mcpserver.Config{}).connect(nil)
	var r mcpserver.ProcessResult
	for name, args := range map[string]map[string]any{
		"neither":       {},
		"both":          {"argv": []string{"cat"}, "command": "cat"},
		"negative wait": {"argv": []string{"cat"}, "wait_seconds": -1},
	} {
		if res := tool(t, cs, mcpserver.ToolStartProcess, args, &r); !res.IsError || r.ReasonCode != mcpserver.ReasonInvalid {
			t.Errorf("start %s: %+v", name, r)
		}
	}
	var st mcpserver.ProcessResult
	tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"cat"}, "wait_seconds": 0}, &st)
	var sg mcpserver.SignalProcessResult
	if res := tool(t, cs, mcpserver.ToolSignalProcess, map[string]any{"id": st.ID, "signal": "STOP"}, &sg); !res.IsError || sg.ReasonCode != mcpserver.ReasonInvalid {
		t.Errorf("signal STOP: %+v", sg)
	}
	var w mcpserver.WriteProcessResult
	if res := tool(t, cs, mcpserver.ToolWriteProcess, map[string]any{"id": "proc-nope", "data": "x"}, &w); !res.IsError || w.ReasonCode != mcpserver.ReasonProcessUnknown {
		t.Errorf("write to an unknown id: %+v", w)
	}
	tool(t, cs, mcpserver.ToolWriteProcess, map[string]any{"id": st.ID, "close_stdin": true}, &w)
	if res := tool(t, cs, mcpserver.ToolWriteProcess, map[string]any{"id": st.ID, "data": "x"}, &w); !res.IsError ||
		(w.ReasonCode != mcpserver.ReasonStdinClosed && w.ReasonCode != mcpserver.ReasonProcessEnded) {
		t.Errorf("write after close_stdin: %+v", w)
	}
}

// A start beyond the baseline, with a client that cannot be asked, is a
// tool error with the reason code, and the program never ran; a start
// the command policy refuses carries the rule. The positive control is
// the cat of the round trip.
func TestMCPProcessDenials(t *testing.T) {
	ps := newProcServer(t, mcpserver.Config{})
	cs := ps.connect(nil)
	var r mcpserver.ProcessResult
	res := tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"cat"}, "spawn": true}, &r)
	if !res.IsError || !r.Denied || r.ReasonCode != string(core.ReasonApprovalDenied) || r.Running || !strings.Contains(text(res), "denied") {
		t.Fatalf("spawn beyond the baseline: %+v %q", r, text(res))
	}
	res = tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"command": "rm -rf /", "spawn": true}, &r)
	if !res.IsError || !r.Denied || r.ReasonCode != string(core.ReasonHookDenied) || r.Rule == "" {
		t.Fatalf("rm -rf /: %+v %q", r, text(res))
	}
	if n := ps.fake.started(); n != 0 {
		t.Fatalf("%d refused starts reached the driver", n)
	}
	var l mcpserver.ListProcessesResult
	if tool(t, cs, mcpserver.ToolListProcesses, map[string]any{}, &l); len(l.Processes) != 0 {
		t.Fatalf("refused starts are listed: %+v", l)
	}
}

func TestMCPProcessApprovalByElicitation(t *testing.T) {
	var mu sync.Mutex
	asked := 0
	answer := true
	ps := newProcServer(t, mcpserver.Config{})
	cs := ps.connect(func(*mcp.ElicitRequest) *mcp.ElicitResult {
		mu.Lock()
		defer mu.Unlock()
		asked++
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": answer}}
	})
	var r mcpserver.ProcessResult
	if res := tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"cat"}, "spawn": true, "wait_seconds": 0}, &r); res.IsError || !r.Running || asked != 1 {
		t.Fatalf("approved start: %+v (asked %d) %q", r, asked, text(res))
	}
	var w mcpserver.WriteProcessResult
	tool(t, cs, mcpserver.ToolWriteProcess, map[string]any{"id": r.ID, "data": "approved\n"}, &w)
	readUntil(t, cs, r.ID, 0, "approved\n")
	mu.Lock()
	answer = false
	mu.Unlock()
	if res := tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"cat"}, "network": "all"}, &r); !res.IsError || r.ReasonCode != string(core.ReasonApprovalDenied) || asked != 2 {
		t.Fatalf("declined start: %+v (asked %d)", r, asked)
	}
}

// One MCP session cannot reach another's processes, and a session's
// processes are killed when it ends; the server's Close kills the rest.
func TestMCPProcessesBelongToTheirSession(t *testing.T) {
	ps := newProcServer(t, mcpserver.Config{Session: "shared"})
	a, b := ps.connect(nil), ps.connect(nil)
	var ra, rb mcpserver.ProcessResult
	tool(t, a, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"cat"}, "wait_seconds": 0}, &ra)
	tool(t, b, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"cat"}, "wait_seconds": 0}, &rb)
	waitFor(t, "both cats run", func() bool { return ps.fake.running() == 2 })
	var r mcpserver.ProcessResult
	if res := tool(t, b, mcpserver.ToolReadProcess, map[string]any{"id": ra.ID}, &r); !res.IsError || r.ReasonCode != mcpserver.ReasonProcessUnknown {
		t.Fatalf("b reads a's process: %+v", r)
	}
	var sg mcpserver.SignalProcessResult
	if res := tool(t, b, mcpserver.ToolSignalProcess, map[string]any{"id": ra.ID, "signal": "KILL"}, &sg); !res.IsError {
		t.Fatalf("b signals a's process: %+v", sg)
	}
	var l mcpserver.ListProcessesResult
	if tool(t, b, mcpserver.ToolListProcesses, map[string]any{}, &l); len(l.Processes) != 1 || l.Processes[0].ID != rb.ID {
		t.Fatalf("b's list: %+v", l)
	}
	// a's own read works (the control of the refusals above).
	if res := tool(t, a, mcpserver.ToolReadProcess, map[string]any{"id": ra.ID}, &r); res.IsError || !r.Running {
		t.Fatalf("a reads its process: %+v", r)
	}
	_ = a.Close()
	waitFor(t, "a's process is killed when a ends", func() bool { return ps.fake.running() == 1 })
	if res := tool(t, b, mcpserver.ToolReadProcess, map[string]any{"id": rb.ID}, &r); res.IsError || !r.Running {
		t.Fatalf("b's process after a ended: %+v", r)
	}
	ps.srv.Close()
	if n := ps.fake.running(); n != 0 {
		t.Fatalf("%d runs left after Close", n)
	}
	if res := tool(t, b, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"cat"}}, &r); !res.IsError {
		t.Fatalf("a start after Close: %+v", r)
	}
}

// slowSignal is Processes whose Signal takes a while, as a service's does
// over its socket, and tells when it is entered and when it returned.
type slowSignal struct {
	mcpserver.Processes
	entered chan struct{}
	once    sync.Once
	mu      sync.Mutex
	done    bool
}

func (s *slowSignal) Signal(ctx context.Context, id string, sig driverapi.Signal) error {
	s.once.Do(func() { close(s.entered) })
	time.Sleep(200 * time.Millisecond)
	err := s.Processes.Signal(ctx, id, sig)
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
	return err
}

// TestMCPCloseWaitsForEndingSession: a session ends (its goroutine has
// taken its processes and is killing them) just as the server closes, as
// when the client's stdin closes and Run returns. Close must not return
// before those kills are out: the binary exits right after it, and a
// service would keep the processes running.
func TestMCPCloseWaitsForEndingSession(t *testing.T) {
	cfg := mcpserver.Config{Session: "ending"}
	rt, fake := newProcRuntime(t, cfg)
	table := core.NewProcessTable(rt, core.ProcessLimits{})
	t.Cleanup(table.Close)
	procs := &slowSignal{Processes: mcpserver.TableProcesses(table), entered: make(chan struct{})}
	cfg.Processes = procs
	ps := &procServer{t: t, srv: mcpserver.New(rt, cfg), fake: fake}
	cs := ps.connect(nil)
	var r mcpserver.ProcessResult
	if tool(t, cs, mcpserver.ToolStartProcess, map[string]any{"argv": []string{"cat"}, "wait_seconds": 0}, &r); !r.Running {
		t.Fatalf("start: %+v", r)
	}
	waitFor(t, "cat runs", func() bool { return fake.running() == 1 })
	_ = cs.Close()
	select {
	case <-procs.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the ended session's process was never signalled")
	}
	ps.srv.Close()
	procs.mu.Lock()
	done := procs.done
	procs.mu.Unlock()
	if !done {
		t.Fatal("Close returned while the ended session's kill was still on its way")
	}
	waitFor(t, "cat is killed", func() bool { return fake.running() == 0 })
}
