//go:build linux

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
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

// TestExecHostVerboseSaysWhichServe: exec --host --verbose names the serve
// that answered (its pid as the kernel reports the listener, its version
// and data dir), and the command still runs there.
func TestExecHostVerboseSaysWhichServe(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	p := h.start(t, sock, "")
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "exec", "--host", "unix:"+sock, "--verbose", "--", "/bin/echo", "ran")
	cmd.Env = append(os.Environ(), "XDG_DATA_HOME="+t.TempDir(), "XDG_CONFIG_HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || out.String() != "ran\n" {
		t.Fatalf("exec --host --verbose: %v, stdout %q, stderr %q", err, out.String(), errb.String())
	}
	want := fmt.Sprintf("aleph-sandbox: served by pid %d, version %s, data dir ", p.cmd.Process.Pid, cliVersion)
	if !strings.Contains(errb.String(), want) || !strings.Contains(errb.String(), " on "+sock+"\n") {
		t.Fatalf("stderr %q, want it to contain %q and the socket", errb.String(), want)
	}
}
