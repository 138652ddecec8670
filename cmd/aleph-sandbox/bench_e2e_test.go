package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestBenchEndToEnd runs bench through the real plugin mechanism (the fake
// driver): N runs at concurrency C give the JSON fields the CLI contract
// names with the counts asked for; a run that fails stops bench with 125
// and one line naming the failure.
func TestBenchEndToEnd(t *testing.T) {
	drv := cliEnv(t)
	// The Python client of this tree, for the Python client's row (the
	// binary is built away from clients/python).
	t.Setenv("PYTHONPATH", pythonClientOfTree(t))
	// bench times cold runs of its own binary, so it runs as the real CLI
	// (the test binary serves only as the driver).
	bin := filepath.Join(t.TempDir(), "aleph-sandbox")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cli := func(t *testing.T, _ string, _ bool, args ...string) run {
		var out, errb bytes.Buffer
		c := exec.Command(bin, args...)
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return run{code, out.String(), errb.String()}
	}
	r := cli(t, "", false, "bench", "--driver", drv, "--n", "6", "--concurrency", "2", "--json", "--", "echo", "x")
	var o map[string]any
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &o) != nil {
		t.Fatalf("bench: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, k := range []string{"n", "concurrency", "p50_ms", "p90_ms", "p99_ms", "per_second", "direct_p50_ms", "backend"} {
		if _, ok := o[k]; !ok {
			t.Errorf("bench --json lacks %q: %s", k, r.stdout)
		}
	}
	if o["n"] != float64(6) || o["concurrency"] != float64(2) || o["backend"] != "fake" {
		t.Fatalf("bench --json: %s", r.stdout)
	}
	if p50, _ := o["p50_ms"].(float64); p50 <= 0 {
		t.Fatalf("p50 %v", o["p50_ms"])
	}
	if ps, _ := o["per_second"].(float64); ps <= 0 {
		t.Fatalf("per_second %v", o["per_second"])
	}
	// The daemon rows: the CLI's own start always; the rows through a
	// private serve where serve runs (Linux), else a note says why not.
	if v, _ := o["cli_start_p50_ms"].(float64); v <= 0 {
		t.Errorf("cli_start_p50_ms %v", o["cli_start_p50_ms"])
	}
	served, _ := o["serve_p50_ms"].(float64)
	host, _ := o["host_cli_p50_ms"].(float64)
	if runtime.GOOS == "linux" && (served <= 0 || host <= 0) {
		t.Errorf("no daemon rows: serve %v, exec --host %v; stderr %q", served, host, r.stderr)
	}
	// The session rows through the same serve: a new session's first
	// command and throughput with a session per worker (no raw bwrap with
	// the fake driver: no ratio to it, and none claimed).
	newSess, _ := o["serve_new_session_p50_ms"].(float64)
	perSec, _ := o["serve_concurrent_per_second"].(float64)
	if runtime.GOOS == "linux" && (newSess <= 0 || perSec <= 0 || o["throughput_concurrency"] != float64(4)) {
		t.Errorf("no session rows: new session %v, c=4 %v/s at %v; stderr %q", newSess, perSec, o["throughput_concurrency"], r.stderr)
	}
	// The Python client's row through the same serve, where python3 is
	// (else bench says why, and the field stays 0).
	pyP50, _ := o["serve_python_p50_ms"].(float64)
	if _, err := exec.LookPath("python3"); runtime.GOOS == "linux" && served > 0 {
		if err == nil && pyP50 <= 0 {
			t.Errorf("python3 is here, no Python client row: %v; stderr %q", o["serve_python_p50_ms"], r.stderr)
		}
		if err != nil && (pyP50 != 0 || !strings.Contains(r.stderr, "no Python client row")) {
			t.Errorf("no python3 (%v): row %v, stderr %q", err, pyP50, r.stderr)
		}
	}
	if v, _ := o["serve_concurrent_vs_raw"].(float64); v != 0 {
		t.Errorf("a throughput ratio without raw bwrap: %v", v)
	}
	// A failing run: 125, one line, naming it.
	r = cli(t, "", false, "bench", "--driver", drv, "--n", "3", "--", "sh", "-c", "exit 3")
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if r.code != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], "aleph-sandbox:") {
		t.Fatalf("failing bench: exit %d stderr %q", r.code, r.stderr)
	}
}

// pythonClientOfTree is this tree's clients/python, absolute.
func pythonClientOfTree(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "clients", "python"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
