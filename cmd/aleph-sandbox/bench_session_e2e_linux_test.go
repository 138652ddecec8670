package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// bench with the real driver prints the session rows through its private
// serve, each with its ratio: a command in an existing session and the
// first command of a new session over raw minimal bwrap, throughput with
// a session per worker over raw bwrap at the same concurrency; and the
// sessions it opened for them are gone from the workspace root afterwards
// (control: the session it reuses, "cli", is still there).
func TestBenchSessionRows(t *testing.T) {
	h := newServeHarness(t)
	data := t.TempDir()
	ws := filepath.Join(data, "ws")
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, loadFullEnv+"=") && !strings.HasPrefix(e, hostileFullEnv+"=") && !strings.HasPrefix(e, "PYTHONPATH=") {
			env = append(env, e)
		}
	}
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "bench", "--n", "4", "--", "/bin/true")
	cmd.Env = append(env, "XDG_DATA_HOME="+data, "XDG_CONFIG_HOME="+t.TempDir(), "XDG_RUNTIME_DIR="+t.TempDir(),
		"ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+ws, "ALEPH_SANDBOX_SANDBOX__AUDIT_LOG=", "PYTHONPATH="+pythonClientOfTree(t))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !regexp.MustCompile(`(?m)^raw minimal bwrap +[0-9.]+ `).MatchString(out) {
		// The control: without the floor there is no ratio to print.
		t.Skipf("no raw minimal bwrap row on this host (%s): the ratios need it\n%s", strings.TrimSpace(stderr.String()), out)
	}
	for _, row := range []string{"serve, session reused", "serve, new session"} {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(row) + ` +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x +[0-9.]+x$`)
		if !re.MatchString(out) {
			t.Errorf("no %q row with its ratios:\n%s", row, out)
		}
	}
	// The Python client's row, when python3 and the client are here
	// (bench says why on stderr when not: the skip's control).
	pyRow := regexp.MustCompile(`(?m)^serve, Python client +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x +[0-9.]+x$`)
	if _, err := exec.LookPath("python3"); err != nil {
		if pyRow.MatchString(out) || !strings.Contains(stderr.String(), "no Python client row: python3") {
			t.Errorf("no python3 here (%v), yet the row or no reason:\n%s\n%s", err, out, stderr.String())
		}
	} else if !pyRow.MatchString(out) {
		t.Errorf("python3 is here, no %q row with its ratios:\n%s\n%s", "serve, Python client", out, stderr.String())
	}
	if !regexp.MustCompile(`(?m)^serve, a session per worker: [0-9.]+ commands/s at concurrency 4 \([0-9.]+x raw bwrap's [0-9.]+\)$`).MatchString(out) {
		t.Errorf("no throughput line with its ratio:\n%s", out)
	}
	// Each session's workspace is a directory named after it.
	has := func(id string) bool {
		_, err := os.Stat(filepath.Join(ws, core.SessionDirName(id)))
		return err == nil
	}
	if !has("cli") {
		t.Fatalf("the reused session's workspace is not under %s", ws)
	}
	for _, kind := range []string{"new", "worker"} {
		for i := range 5 {
			if id := benchSessionID(cmd.Process.Pid, kind, i); has(id) {
				t.Errorf("bench left the workspace of its session %s", id)
			}
		}
	}
}
