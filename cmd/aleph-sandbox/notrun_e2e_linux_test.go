//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExecProgramNotRun: a program the sandbox cannot run is the sandbox's
// refusal, named as the program, not a command that ran and exited 125:
// with --json, exit status 125 and an object with exit_code and signal
// null and the reason in error; without, exit 125 and one line. The
// control: an existing program runs, with exit_code 0 and no error.
func TestExecProgramNotRun(t *testing.T) {
	h := newEscapeHarness(t)
	ws := h.workspace(t)
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("echo never\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, program, says string }{
		{"missing", "/nonexistent", `PROGRAM: "/nonexistent" does not exist in the sandbox`},
		{"not on PATH", "aleph-no-such-program", "not found in the command's PATH"},
		{"not executable", "./notes.txt", "permission denied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.exec(t, ws, []string{"--json"}, c.program)
			var o map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &o); err != nil {
				t.Fatalf("exit %d: stdout %q is not one JSON object: %v (stderr %q)", r.code, r.stdout, err, r.stderr)
			}
			msg, _ := o["error"].(string)
			if r.code != 125 || o["exit_code"] != nil || o["signal"] != nil || !strings.Contains(msg, c.says) || o["stderr"] != "" {
				t.Fatalf("exit %d, object %v: want exit 125, exit_code and signal null, error saying %q", r.code, o, c.says)
			}
			if _, ok := o["exit_code"]; !ok {
				t.Fatalf("no exit_code key in %v", o)
			}
			r = h.exec(t, ws, nil, c.program)
			oneRefusalLine(t, r, c.says)
			if strings.Contains(r.stderr, "sandbox-init") {
				t.Fatalf("sandbox-init's own line reached the command's stderr: %q", r.stderr)
			}
		})
	}
	t.Run("control", func(t *testing.T) {
		r := h.exec(t, ws, []string{"--json"}, "./probe", "pid")
		var o map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &o); err != nil || r.code != 0 || o["exit_code"] != float64(0) || o["error"] != "" {
			t.Fatalf("exit %d, %v, object %v", r.code, err, o)
		}
	})
}
