//go:build linux

package bwrap

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The driver binary's raw mode (what `aleph-sandbox bench` runs for its
// raw bubblewrap row): one reply line per run line, timed; the run really
// happens with the driver's flags (a file the command writes in the
// workspace appears on the host), and a command that fails is reported as
// failed, not timed as a success.
func TestRawRunsMode(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	ws := newWorkspace(t)
	rawRuns := func(program string, args ...string) []rawRunsReply {
		t.Helper()
		req, err := json.Marshal(rawRunsRequest{
			Request: driverapi.ProfileRequest{Workspace: ws, Cwd: ws},
			Spec: driverapi.RunSpec{Program: program, Args: args, Env: pathEnv(), Cwd: ws,
				Timeout: 30 * time.Second, MaxOutputBytes: 1 << 20},
		})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(driverBin, rawRunsCommand)
		cmd.Env = append(os.Environ(), optionsEnv+"={}")
		cmd.Stdin = strings.NewReader(string(req) + "\nrun\nrun\n")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var replies []rawRunsReply
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var r rawRunsReply
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("reply %q: %v", sc.Text(), err)
			}
			replies = append(replies, r)
		}
		_, _ = io.Copy(io.Discard, out)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("raw mode: %v: %s", err, stderr.String())
		}
		return replies
	}
	got := rawRuns("/bin/sh", "-c", "echo x >> raw-ran")
	if len(got) > 0 && strings.Contains(got[0].Error, "raw bwrap: ") {
		// The Landlock tier (no namespaces here): there is no bwrap run to
		// measure, and the mode says so in each reply.
		t.Skipf("bubblewrap cannot run here: %s", got[0].Error)
	}
	if len(got) != 2 || got[0].Error != "" || got[1].Error != "" || got[0].Nanoseconds <= 0 {
		t.Fatalf("replies %+v, want two timed successes", got)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "raw-ran")); err != nil || string(b) != "x\nx\n" {
		t.Errorf("the raw runs did not run the command twice in the workspace: %q, %v", b, err)
	}
	if got := rawRuns("/bin/sh", "-c", "exit 3"); len(got) != 2 || !strings.Contains(got[0].Error, "exit status 3") {
		t.Errorf("a failing command: %+v, want its failure in each reply", got)
	}
}
