//go:build linux

package scripts

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeBench stands in for `aleph-sandbox bench` and `go test -bench`: like
// the real bench it starts a long-lived child in its own process group (the
// private serve) that ignores SIGTERM for a moment, as a server finishing
// its requests would, writes that child's pid, then waits.
const fakeBench = `#!/bin/sh
sh -c 'trap "" TERM; echo $$ > "$0"; exec sleep 300' "$FAKE_DIR/serve.$(basename "$0").pid" &
echo started >> "$FAKE_DIR/started"
wait
`

// TestMakeBenchKilledLeavesNothing kills `make bench` part way, in the
// ways a user or CI does, and checks the private serve is gone afterwards.
// The positive control: the serve was running just before the kill.
func TestMakeBenchKilledLeavesNothing(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid (util-linux) is not installed")
	}
	for _, kill := range []struct {
		name   string
		signal syscall.Signal
		whom   string // "make": make itself; "group": make's process group (Ctrl-C)
	}{
		{"SIGTERM to make", syscall.SIGTERM, "make"},
		{"Ctrl-C", syscall.SIGINT, "group"},
		{"SIGKILL to make", syscall.SIGKILL, "make"},
	} {
		t.Run(kill.name, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "bin")
			if err := os.MkdirAll(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"aleph-sandbox", "go"} {
				if err := os.WriteFile(filepath.Join(bin, name), []byte(fakeBench), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			// -o build: the fakes stand in for the build's binaries.
			cmd := exec.Command("make", "-s", "-C", "..", "-o", "build", "bench", "BIN="+bin, "GO="+filepath.Join(bin, "go"))
			cmd.Env = append(os.Environ(), "FAKE_DIR="+dir, "TMPDIR="+dir)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			pidFile := filepath.Join(dir, "serve.aleph-sandbox.pid")
			serve := 0
			for deadline := time.Now().Add(30 * time.Second); serve == 0 || !alive(serve); {
				if time.Now().After(deadline) {
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					t.Fatalf("the fake serve never started (positive control)\n%s", out.String())
				}
				time.Sleep(20 * time.Millisecond)
				b, _ := os.ReadFile(pidFile)
				serve, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			}
			t.Cleanup(func() { _ = syscall.Kill(serve, syscall.SIGKILL) })

			target := cmd.Process.Pid
			if kill.whom == "group" {
				target = -target
			}
			if err := syscall.Kill(target, kill.signal); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("make did not end")
			}
			// Generous: the script gives SIGTERM 5 s before SIGKILL, the
			// watchdog polls twice a second.
			for deadline := time.Now().Add(30 * time.Second); alive(serve); {
				if time.Now().After(deadline) {
					t.Fatalf("the private serve (pid %d) outlived `make bench` killed by %s\n%s", serve, kill.name, out.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "started")); strings.Count(string(b), "started") != 1 {
				t.Errorf("steps after the kill ran too: %q", b)
			}
			left, _ := filepath.Glob(filepath.Join(dir, "aleph-bench.*"))
			for deadline := time.Now().Add(10 * time.Second); len(left) > 0 && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
				left, _ = filepath.Glob(filepath.Join(dir, "aleph-bench.*"))
			}
			if len(left) > 0 {
				t.Errorf("the bench's private TMPDIR is left: %v", left)
			}
		})
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}
