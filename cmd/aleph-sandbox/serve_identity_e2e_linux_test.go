package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// serve --node-id names the server in results and capabilities; a node id
// that is not one is refused naming the flag; `serve drain` drains the
// running server (once: a second says so) and new sessions are refused
// draining while the held one is served.
func TestServeNodeIDAndDrain(t *testing.T) {
	h := newServeHarness(t)
	bin := filepath.Join(h.bin, "aleph-sandbox")
	if out, err := exec.Command(bin, "serve", "--node-id", "bad id", "--listen", "unix:"+filepath.Join(t.TempDir(), "s.sock")).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "--node-id") {
		t.Fatalf("serve --node-id 'bad id': %v %s", err, out)
	}
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	h.start(t, sock, "", "--node-id", "e2e-node")
	c := client(sock)
	ctx := context.Background()
	o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "held", Argv: []string{"/bin/true"}}, nil)
	if o.err != nil || o.wire.GetNodeId() != "e2e-node" || len(o.wire.GetSessionIncarnation()) != 32 {
		t.Fatalf("a command: %v %+v", o.err, o.wire)
	}
	caps, err := c.Capabilities(ctx, connect.NewRequest(&hostv1.CapabilitiesRequest{}))
	if err != nil || caps.Msg.GetNodeId() != "e2e-node" {
		t.Fatalf("capabilities: %v %+v", err, caps)
	}
	// exec --host --verbose names the node that served it.
	out, err := exec.Command(bin, "exec", "--host", "unix:"+sock, "--session", "held", "--verbose", "--", "/bin/true").CombinedOutput()
	if err != nil || !strings.Contains(string(out), ", node e2e-node on "+sock) {
		t.Fatalf("exec --host --verbose: %v %s", err, out)
	}

	out, err = exec.Command(bin, "serve", "drain", "--host", "unix:"+sock).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "draining now: node e2e-node, 1 sessions held") {
		t.Fatalf("serve drain: %v %s", err, out)
	}
	out, err = exec.Command(bin, "serve", "drain", "--host", "unix:"+sock, "--json").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"started":false`) {
		t.Fatalf("serve drain a second time: %v %s", err, out)
	}
	o = execute(ctx, c, &hostv1.ExecuteRequest{Session: "new", Argv: []string{"/bin/true"}}, nil)
	if reasonOf(o.err) != service.ReasonDraining {
		t.Fatalf("a new session while draining: %v", o.err)
	}
	if o = execute(ctx, c, &hostv1.ExecuteRequest{Session: "held", Argv: []string{"/bin/true"}}, nil); o.err != nil {
		t.Fatalf("the held session while draining: %v", o.err)
	}
}
