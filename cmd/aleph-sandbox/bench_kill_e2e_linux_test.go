package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A bench killed with SIGKILL (no cleanup of its own runs) leaves nothing
// running: its private serve, the serve's driver and the CLI runs it
// timed all end. Control: they were running when it was killed.
func TestBenchKilledLeavesNothingRunning(t *testing.T) {
	h := newServeHarness(t)
	data := t.TempDir()
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "bench", "--n", "100000", "--", "/bin/true")
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, loadFullEnv+"=") && !strings.HasPrefix(e, hostileFullEnv+"=") {
			env = append(env, e)
		}
	}
	cmd.Env = append(env, "XDG_DATA_HOME="+data, "XDG_CONFIG_HOME="+t.TempDir(), "XDG_RUNTIME_DIR="+t.TempDir(),
		"ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+filepath.Join(data, "ws"), "ALEPH_SANDBOX_SANDBOX__AUDIT_LOG=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()
	isServe := func(pid int) bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return bytes.Contains(b, []byte("\x00serve\x00"))
	}
	// Wait for the private serve and its driver to be up.
	var tree map[int]string
	deadline := time.Now().Add(90 * time.Second)
	for {
		tree = descendants(cmd.Process.Pid)
		serve, driver := false, false
		for p, name := range tree {
			serve = serve || isServe(p)
			driver = driver || strings.HasPrefix(name, "aleph-driver")
		}
		if serve && driver {
			break
		}
		select {
		case <-done:
			t.Fatalf("bench ended before its serve rows: %s", stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no private serve with a driver under bench: %v\n%s", tree, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	// serve stops on its parent's death as on SIGTERM (a grace of 10 s
	// for running commands); its driver and sandboxes go with it.
	deadline = time.Now().Add(60 * time.Second)
	for {
		var alive []string
		for p, name := range tree {
			if _, _, ok := procStat(p); ok {
				alive = append(alive, fmt.Sprintf("%d %s", p, name))
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bench killed, still running: %v", alive)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
