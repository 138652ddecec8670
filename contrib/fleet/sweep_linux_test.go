package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestSweepStale: the sweep at a fleet run's start removes the state of a
// run whose owner is gone and kills the HAProxy it left, but keeps a live
// run's state, a young directory without an owner file, and a process
// whose pid the dead run recorded but which is not that run's (a reused
// pid). Podman is not needed: these directories hold no podman storage.
func TestSweepStale(t *testing.T) {
	parent := t.TempDir()
	mk := func(name string) string {
		d := filepath.Join(parent, statePrefix+name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	live := mk("live")
	if err := writeOwner(live); err != nil {
		t.Fatal(err)
	}
	// Our pid with another start time: a pid reused since its run died.
	dead := mk("dead")
	if err := os.WriteFile(filepath.Join(dead, "owner"), []byte(fmt.Sprintf("%d 1\n", os.Getpid())), 0o600); err != nil {
		t.Fatal(err)
	}
	young := mk("young")
	old := mk("old")
	other := filepath.Join(parent, "not-the-fleet")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}

	// The dead run's router: a process with the run's directory in its
	// environment, as startRouter gives HAProxy.
	start := func(state string) *exec.Cmd {
		cmd := exec.Command("sleep", "300")
		cmd.Env = append(os.Environ(), "ALEPH_ROUTER_STATE="+state)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	router := start(dead)
	if err := os.WriteFile(filepath.Join(dead, "haproxy.pid"), []byte(strconv.Itoa(router.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	// The old run recorded a pid now another process's: not its router.
	stranger := start(live)
	if err := os.WriteFile(filepath.Join(old, "haproxy.pid"), []byte(strconv.Itoa(stranger.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Old enough to be a dead run's, though it has no owner file.
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	// The control: both processes run before the sweep.
	for _, c := range []*exec.Cmd{router, stranger} {
		if err := c.Process.Signal(syscall.Signal(0)); err != nil {
			t.Fatalf("pid %d is not running before the sweep: %v", c.Process.Pid, err)
		}
	}

	swept := sweepStale(context.Background(), parent, "")
	t.Logf("swept %v", swept)
	for _, d := range []string{dead, old} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s was left: %v", d, err)
		}
	}
	for _, d := range []string{live, young, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s was removed: %v", d, err)
		}
	}
	if len(swept) != 2 {
		t.Errorf("swept %v, want the dead and the old run's", swept)
	}
	// The dead run's router is killed (Wait reaps it: SIGKILL), the
	// stranger is not.
	err := router.Wait()
	if ws, ok := router.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the dead run's router ended with %v, want SIGKILL", err)
	}
	if err := stranger.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the sweep killed pid %d, which was not the dead run's router: %v", stranger.Process.Pid, err)
	}
}
