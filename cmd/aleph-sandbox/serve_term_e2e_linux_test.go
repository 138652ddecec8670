package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// When serve stops and grace_seconds is over, a command still running is
// sent SIGTERM, and its handler runs (what it writes reaches the client)
// before serve kills it term_grace_seconds later; the call still ends as
// service_stopping. Control: the command was running when serve was told
// to stop, and serve stops well before the command's own end.
func TestServeStopSendsTERMBeforeKILL(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	p := h.start(t, sock, "[serve]\ngrace_seconds = 1\nterm_grace_seconds = 30\n", "--yes")
	marker := fmt.Sprintf("%d.%d", 600+os.Getpid()%100, time.Now().UnixNano()%1000000)
	script := `trap 'echo got-term; exit 3' TERM; echo started; while :; do /bin/sleep ` + marker + ` & wait $!; done`
	res := make(chan execOutcome, 1)
	go func() {
		res <- execute(context.Background(), client(sock), &hostv1.ExecuteRequest{Session: "s1", Spawn: true,
			Argv: []string{"/bin/sh", "-c", script}, TimeoutSeconds: 120}, nil)
	}()
	waitFor(t, "the command to start", func() bool { return markerRunning(marker) })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not stop\n%s", p.stderr)
	}
	o := <-res
	var out strings.Builder
	for _, c := range o.chunks {
		out.Write(c.GetData())
	}
	if !strings.Contains(out.String(), "started") {
		t.Fatalf("control: the command's output was not streamed: %q %v", out.String(), o.err)
	}
	if !strings.Contains(out.String(), "got-term") {
		t.Errorf("the command's TERM handler did not run before it was killed: output %q, %v\n%s", out.String(), o.err, p.stderr)
	}
	if connect.CodeOf(o.err) != connect.CodeUnavailable {
		t.Errorf("the call: %v, want Unavailable (service_stopping)", o.err)
	}
	if markerRunning(marker) {
		t.Error("the command's process outlived serve")
	}
}
