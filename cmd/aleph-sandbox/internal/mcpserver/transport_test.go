package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/mcpserver"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// One malformed message never ends the server: each is answered as
// JSON-RPC says (parse error, invalid request) and the server keeps
// serving; ids come back exactly; a request without a method or with a
// null id is answered; text that is not valid UTF-8 is refused, never
// replaced and run. Control: well-formed calls before and after are
// answered, and a run_command runs.
func TestStdioTransportSurvivesHostileMessages(t *testing.T) {
	data := t.TempDir()
	t.Setenv("XDG_DATA_HOME", data)
	conf := core.DefaultConfig()
	conf.Sandbox.WorkspaceRoot = filepath.Join(data, "workspaces")
	conf.Sandbox.AuditLog = ""
	fake := &drivertest.FakeDriver{Stdout: []byte("hi\n")}
	cfg := mcpserver.Config{Session: "t", Version: "test"}
	rt, err := alephsandbox.New(conf, append(mcpserver.RuntimeOptions(cfg), alephsandbox.WithDriver(drivertest.Connect(t, fake)))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	srv := mcpserver.New(rt, cfg)
	t.Cleanup(srv.Close)

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ended := make(chan error, 1)
	go func() { ended <- srv.Run(ctx, mcpserver.NewStdioTransport(inR, outW, 1<<20)) }()
	answers := make(chan map[string]json.RawMessage, 64)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				answers <- m
			}
		}
		close(answers)
	}()
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatalf("the server stopped reading: %v", err)
		}
	}
	next := func(what string) map[string]json.RawMessage {
		t.Helper()
		select {
		case m, ok := <-answers:
			if !ok {
				t.Fatalf("%s: the server ended (%v)", what, <-ended)
			}
			return m
		case err := <-ended:
			t.Fatalf("%s: the server ended: %v", what, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: no answer", what)
		}
		return nil
	}
	wantError := func(what string, code int, id string) {
		t.Helper()
		m := next(what)
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(m["error"], &e); err != nil || e.Code != code || string(m["id"]) != id {
			t.Fatalf("%s: want error %d with id %s, got id %s error %s result %.100s", what, code, id, m["id"], m["error"], m["result"])
		}
	}
	wantResult := func(what, id string) map[string]json.RawMessage {
		t.Helper()
		m := next(what)
		if string(m["id"]) != id || m["result"] == nil {
			t.Fatalf("%s: want a result with id %s, got %v", what, id, m)
		}
		return m
	}

	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	wantResult("initialize", "1")
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	send(`this is not json`)
	wantError("not JSON", -32700, "null")
	send(`[]`)
	wantError("empty array", -32600, "null")
	send(`[{"jsonrpc":"2.0","id":2,"method":"ping"}]`)
	wantError("batch", -32600, "null")
	send(`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`)
	wantError("object id", -32600, "null")
	send(`{"jsonrpc":"2.0","id":1e400,"method":"ping"}`)
	wantError("1e400 id", -32600, "null")
	send(`{"id":3,"method":"ping"}`)
	wantError("no jsonrpc", -32600, "3")
	send(`{"jsonrpc":"2.0","id":4,"method":"ping","params":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`)
	wantError("deep nesting", -32700, "null")
	send(`{"jsonrpc":"2.0","id":5,"method":"ping","params":{"pad":"` + strings.Repeat("x", 2<<20) + `"}}`)
	wantError("over-long line", -32600, "null")
	send(`{"jsonrpc":"2.0","id":null,"method":"ping"}`)
	wantError("null id", -32600, "null")
	send(`{"jsonrpc":"2.0","id":6}`)
	wantError("no method", -32600, "6")
	send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"run_command","arguments":{"argv":["/bin/echo","` + "\xff\xfe" + `"]}}}`)
	wantError("raw invalid UTF-8", -32700, "null")
	send(`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"run_command","arguments":{"argv":["/bin/echo","\udc80"]}}}`)
	wantError("lone surrogate escape", -32700, "null")
	if fake.Runs() != 0 {
		t.Fatal("a command with text that is not UTF-8 ran")
	}

	// Ids come back exactly as sent.
	send(`{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}`)
	wantResult("huge id", "123456789012345678901234567890")
	send(`{"jsonrpc":"2.0","id":"abc","method":"ping"}`)
	wantResult("string id", `"abc"`)

	// Control: the server still runs commands.
	send(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"run_command","arguments":{"argv":["/bin/echo","hi"]}}}`)
	m := wantResult("run_command", "9")
	if fake.Runs() != 1 || !strings.Contains(string(m["result"]), "hi") {
		t.Fatalf("run_command: runs %d, result %s", fake.Runs(), m["result"])
	}
	_ = inW.Close()
	select {
	case <-ended:
	case <-time.After(60 * time.Second):
		t.Fatal("the server did not end at the end of its input")
	}
}
