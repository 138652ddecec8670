//go:build linux

package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeRefusesLiveSocketNamingOwner: a second serve on a socket a live
// serve holds (another checkout's, another terminal's) refuses to start,
// and its message names the server already answering there (pid, version,
// data dir), so the user knows which one the clients reach. The positive
// control: the first server starts and answers on that socket.
func TestServeRefusesLiveSocketNamingOwner(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	first := h.start(t, sock, "")
	second := h.startNoWait(t, sock, "")
	select {
	case <-second.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the second serve did not refuse within 60 s")
	}
	if second.err == nil {
		t.Fatalf("the second serve exited 0:\n%s", second.stderr)
	}
	msg := second.stderr.String()
	for _, want := range []string{
		"another aleph-sandbox serve is listening on " + sock,
		fmt.Sprintf("pid %d", first.cmd.Process.Pid),
		"version " + cliVersion,
		"data dir ",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, msg)
		}
	}
	// The first still serves.
	select {
	case <-first.done:
		t.Fatalf("the first serve exited: %v\n%s", first.err, first.stderr)
	default:
	}
}
