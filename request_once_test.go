package alephsandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The form of a command is checked by one validator, core.ValidateCommand,
// which Request.Command calls and the pipeline calls again for a Command
// an embedder builds by hand. Each malformed command is refused both ways:
// through a Request (a *RequestError naming the request's field, wrapping
// the validator's refusal where it made it) and handed to the pipeline
// directly (a *core.InvalidCommandError naming the command's field), and
// none reaches the driver. A well-formed one runs both ways.
func TestMalformedCommandRefusedThroughRequestAndDirectly(t *testing.T) {
	rt, fake := newRuntime(t, testConfig(t))
	ctx := context.Background()
	goodReq := alephsandbox.Request{Session: "s", Argv: []string{"echo", "hi"}}
	goodCmd := core.Command{SessionID: "s", Program: "echo", Args: []string{"hi"}}
	type edit struct {
		req      func(*alephsandbox.Request) // nil: a request cannot say it
		reqField string
		cmd      func(*core.Command) // nil: a Command cannot say it
		cmdField string
	}
	for name, tc := range map[string]edit{
		"no session": {func(r *alephsandbox.Request) { r.Session = "" }, "session",
			func(c *core.Command) { c.SessionID = "" }, "session_id"},
		"NUL in session": {func(r *alephsandbox.Request) { r.Session = "a\x00b" }, "session",
			func(c *core.Command) { c.SessionID = "a\x00b" }, "session_id"},
		"long session": {func(r *alephsandbox.Request) { r.Session = strings.Repeat("s", 1025) }, "session",
			func(c *core.Command) { c.SessionID = strings.Repeat("s", 1025) }, "session_id"},
		"no program": {func(r *alephsandbox.Request) { r.Argv = []string{""} }, "argv",
			func(c *core.Command) { c.Program = "" }, "program"},
		"NUL in program": {func(r *alephsandbox.Request) { r.Argv = []string{"ec\x00ho"} }, "argv",
			func(c *core.Command) { c.Program = "ec\x00ho" }, "program"},
		"NUL in an argument": {func(r *alephsandbox.Request) { r.Argv = []string{"echo", "a", "b\x00"} }, "argv[2]",
			func(c *core.Command) { c.Args = []string{"a", "b\x00"} }, "args[1]"},
		"argument not UTF-8": {func(r *alephsandbox.Request) { r.Argv = []string{"echo", "\xff"} }, "argv[1]",
			func(c *core.Command) { c.Args = []string{"\xff"} }, "args[0]"},
		"relative read": {func(r *alephsandbox.Request) { r.Read = []string{"/a", "rel"} }, "read[1]",
			func(c *core.Command) { c.Capabilities.FSRead = []string{"/a", "rel"} }, "capabilities.fs_read[1]"},
		"relative write": {func(r *alephsandbox.Request) { r.Write = []string{"rel"} }, "write[0]",
			func(c *core.Command) { c.Capabilities.FSWrite = []string{"rel"} }, "capabilities.fs_write[0]"},
		"NUL in a read path": {func(r *alephsandbox.Request) { r.Read = []string{"/a\x00"} }, "read[0]",
			func(c *core.Command) { c.Capabilities.FSRead = []string{"/a\x00"} }, "capabilities.fs_read[0]"},
		"relative workspace": {func(r *alephsandbox.Request) { r.Workspace = "ws" }, "workspace",
			func(c *core.Command) { c.Workspace = "ws" }, "workspace"},
		"negative output budget": {func(r *alephsandbox.Request) { r.MaxOutputBytes = -1 }, "max_output",
			func(c *core.Command) { c.MaxOutputBytes = -1 }, "max_output_bytes"},
		"stdin too large": {func(r *alephsandbox.Request) { r.Stdin = make([]byte, driverapi.MaxStdinBytes+1) }, "stdin",
			func(c *core.Command) { c.Stdin = make([]byte, driverapi.MaxStdinBytes+1) }, "stdin"},
		"env name with =": {func(r *alephsandbox.Request) { r.Env = map[string]string{"A=B": "1"} }, "env",
			func(c *core.Command) { c.Env = map[string]string{"A=B": "1"} }, `env "A=B"`},
		"env name not UTF-8": {func(r *alephsandbox.Request) { r.Env = map[string]string{"A\xff": "1"} }, "env",
			func(c *core.Command) { c.Env = map[string]string{"A\xff": "1"} }, `env "A\xff"`},
		"NUL in an env value": {func(r *alephsandbox.Request) { r.Env = map[string]string{"A": "x\x00"} }, "env",
			func(c *core.Command) { c.Env = map[string]string{"A": "x\x00"} }, "env A"},
		"secret colliding with env": {func(r *alephsandbox.Request) {
			r.Net, r.Env, r.Secrets = "a.example", map[string]string{"T": "1"}, map[string]string{"T": "s"}
		}, "secrets", func(c *core.Command) {
			c.Capabilities.Network = driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"a.example"}}
			c.Env, c.Secrets = map[string]string{"T": "1"}, map[string]string{"T": "s"}
		}, "secret T"},
		"negative timeout": {func(r *alephsandbox.Request) { r.TimeoutSeconds = -1 }, "timeout_seconds",
			func(c *core.Command) { c.Timeout = -time.Second }, "timeout"},
		"timeout above the maximum": {func(r *alephsandbox.Request) { r.TimeoutSeconds = core.MaxTimeout.Seconds() + 1 }, "timeout_seconds",
			func(c *core.Command) { c.Timeout = core.MaxTimeout + time.Second }, "timeout"},
		"host the proxy refuses": {func(r *alephsandbox.Request) { r.NetHosts = []string{"exa mple.com"} }, "net_hosts[0]",
			func(c *core.Command) {
				c.Capabilities.Network = driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"exa mple.com"}}
			}, "capabilities.network.hosts[0]"},
		"allow_hosts without hosts": {nil, "",
			func(c *core.Command) {
				c.Capabilities.Network = driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts}
			}, "capabilities.network.hosts"},
		"resize without a terminal": {nil, "",
			func(c *core.Command) { c.Resize = make(chan driverapi.WindowSize) }, "resize"},
	} {
		if tc.req != nil {
			r := goodReq
			tc.req(&r)
			_, err := r.Command()
			var re *alephsandbox.RequestError
			if !errors.As(err, &re) || re.Field != tc.reqField || re.Reason == "" {
				t.Errorf("%s: through Request: got %T %v, want a RequestError of field %s", name, err, err, tc.reqField)
			}
		}
		if tc.cmd != nil {
			c := goodCmd
			tc.cmd(&c)
			_, err := rt.Execute(ctx, c)
			var ie *core.InvalidCommandError
			if !errors.As(err, &ie) || ie.Field != tc.cmdField || ie.Reason == "" {
				t.Errorf("%s: directly: got %T %v, want an InvalidCommandError of field %s", name, err, err, tc.cmdField)
			}
		}
	}
	if n := fake.Runs(); n != 0 {
		t.Fatalf("%d malformed commands reached the driver", n)
	}

	// Positive controls: the well-formed command runs both ways.
	cmd, err := goodReq.Command()
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	for _, c := range []core.Command{cmd, goodCmd} {
		out, err := rt.Execute(ctx, c)
		if err != nil || string(out.Stdout) != "hi\n" {
			t.Fatalf("control: %+v %v", out, err)
		}
	}
	if fake.Runs() != 2 {
		t.Fatalf("control: the driver ran %d commands, want 2", fake.Runs())
	}
}
