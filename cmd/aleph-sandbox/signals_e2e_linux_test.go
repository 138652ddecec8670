//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExecForwardsSignals: SIGTERM, SIGINT and SIGHUP reaching `exec` go to
// the command, which may handle them; the exit status is the command's own
// (docs/cli.md), and a command that ignores them is killed after --grace.
func TestExecForwardsSignals(t *testing.T) {
	h := newEscapeHarness(t)
	cases := []struct {
		name   string
		sig    syscall.Signal
		script string
		grace  string
		code   int
		stdout string
		stderr string
	}{
		{"TERM handled by the command", syscall.SIGTERM, `trap 'echo got-term; exit 3' TERM`, "10s", 3, "got-term\n", ""},
		{"INT handled by the command", syscall.SIGINT, `trap 'echo got-int; exit 4' INT`, "10s", 4, "got-int\n", ""},
		{"HUP handled by the command", syscall.SIGHUP, `trap 'echo got-hup; exit 5' HUP`, "10s", 5, "got-hup\n", ""},
		{"TERM not handled: 143", syscall.SIGTERM, `:`, "10s", 143, "", ""},
		{"TERM ignored: killed after the grace period", syscall.SIGTERM, `trap '' TERM`, "1s", 137, "", "did not end within 1s of SIGTERM"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := h.workspace(t)
			ready := filepath.Join(ws, "ready")
			// The shell waits in a loop of short sleeps, so a signal it
			// traps is handled at once.
			script := c.script + `; : > ready; while :; do sleep 0.05; done`
			r := h.run(t, runOpts{
				args: []string{"--workspace", ws, "--spawn", "--yes", "--grace", c.grace, "--", "/bin/sh", "-c", script},
				start: func(cmd *exec.Cmd) {
					deadline := time.Now().Add(20 * time.Second)
					for {
						if _, err := os.Stat(ready); err == nil {
							break
						}
						if time.Now().After(deadline) {
							t.Errorf("the command never started")
							break
						}
						time.Sleep(20 * time.Millisecond)
					}
					if err := cmd.Process.Signal(c.sig); err != nil {
						t.Error(err)
					}
				},
			}, "exec")
			if r.code != c.code || r.stdout != c.stdout || !strings.Contains(r.stderr, c.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr containing %q",
					r.code, r.stdout, r.stderr, c.code, c.stdout, c.stderr)
			}
		})
	}
}
