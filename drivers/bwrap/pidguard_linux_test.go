//go:build linux

package bwrap

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPIDGuardEndsOrphans kills bwrap while its sandbox runs, with nothing
// else (no --die-with-parent, no lifeline) to take the sandbox down: under
// the guard the kernel ends every process bwrap cloned; unguarded (the
// control that shows the check can fail) they run on.
func TestPIDGuardEndsOrphans(t *testing.T) {
	path, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatal(err)
	}
	chosen := choosePIDGuard(path)
	if chosen.mode == guardNone {
		t.Fatalf("no guard chosen here (%s)", chosen.why)
	}
	for _, tc := range []struct {
		guard     pidGuard
		survivors bool
	}{
		{chosen, false},
		{pidGuard{mode: guardNone}, true},
	} {
		t.Run(tc.guard.mode, func(t *testing.T) {
			marker := "aleph-guard-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			c := exec.Command(path, "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
				"--", "/bin/sh", "-c", "sleep 300 & wait", marker)
			c.Env = []string{}
			c.SysProcAttr = &syscall.SysProcAttr{}
			tc.guard.apply(c.SysProcAttr)
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, p := range argvProcs(marker) {
					n, _ := strconv.Atoi(strings.Fields(p)[0])
					_ = syscall.Kill(n, syscall.SIGKILL)
				}
			}()
			// The sandbox runs when its shell has started sleep.
			deadline := time.Now().Add(10 * time.Second)
			for !hasSleepChild(marker) {
				if time.Now().After(deadline) {
					t.Fatalf("the sandbox never started: %v", argvProcs(marker))
				}
				time.Sleep(5 * time.Millisecond)
			}
			_ = c.Process.Kill()
			_ = c.Wait()
			var left []string
			for deadline = time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if left = argvProcs(marker); len(left) == 0 {
					break
				}
			}
			if got := len(left) > 0; got != tc.survivors {
				t.Fatalf("guard %s: processes left after bwrap was killed: %v, want survivors %v", tc.guard.mode, left, tc.survivors)
			}
		})
	}
}

// hasSleepChild reports whether the shell carrying marker has a child.
func hasSleepChild(marker string) bool {
	for _, p := range argvProcs(marker) {
		f := strings.Fields(p)
		if f[1] != "sh" {
			continue
		}
		pid := f[0]
		b, _ := exec.Command("sh", "-c", "cat /proc/"+pid+"/task/*/children").Output()
		if len(strings.Fields(string(b))) > 0 {
			return true
		}
	}
	return false
}

// TestChildHostPID maps the pid bwrap reports for its child (counted in the
// guard's namespace) to the driver's pid of that child.
func TestChildHostPID(t *testing.T) {
	path, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []pidGuard{choosePIDGuard(path), {mode: guardNone}} {
		t.Run(g.mode, func(t *testing.T) {
			c := exec.Command(path, "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "sleep", "30")
			c.Env = []string{}
			c.SysProcAttr = &syscall.SysProcAttr{}
			g.apply(c.SysProcAttr)
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
			var child int
			for deadline := time.Now().Add(10 * time.Second); child == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				b, _ := exec.Command("sh", "-c", "cat /proc/"+strconv.Itoa(c.Process.Pid)+"/task/*/children").Output()
				if f := strings.Fields(string(b)); len(f) == 1 {
					child, _ = strconv.Atoi(f[0])
				}
			}
			if child == 0 {
				t.Fatal("bwrap never cloned its child")
			}
			ids := nsPIDs(child)
			level := len(nsPIDs(c.Process.Pid)) - 1
			if len(ids) <= level {
				t.Fatalf("NSpid of the child: %v", ids)
			}
			if g.mode != guardNone && ids[level] == child {
				t.Fatalf("guarded bwrap sees its child under the host's pid %d: no namespace", child)
			}
			got, err := childHostPID(c.Process.Pid, ids[level])
			if err != nil || got != child {
				t.Fatalf("childHostPID(%d, %d) = %d, %v; want %d", c.Process.Pid, ids[level], got, err, child)
			}
			if _, err := childHostPID(c.Process.Pid, ids[level]+1000); err == nil {
				t.Fatal("a pid bwrap has no child under was mapped")
			}
		})
	}
}

// TestPIDGuardFallback: where bwrap works but not inside the guard's
// namespaces, the probe runs it unguarded and says why; where it works
// inside them, the guard stays on. The stand-in bwrap fails exactly when it
// is PID 1, as it is under the guard.
func TestPIDGuardFallback(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	version := `[ "$1" = --version ] && { echo "bubblewrap 0.8.0"; exit 0; }` + "\n"
	refusing := write("bwrap-refusing", version+`[ $$ = 1 ] && { echo "namespace refused by policy" >&2; exit 1; }`+"\nexit 0\n")
	working := write("bwrap-working", version+"exit 0\n")

	_, _, g, err, _ := probeBwrap(refusing)
	if err != nil {
		t.Fatalf("probe of a bwrap that works unguarded: %v", err)
	}
	if g.mode != guardNone || !strings.Contains(g.why, "namespace refused by policy") {
		t.Fatalf("guard %+v, want none with the refusal as reason", g)
	}
	_, _, g, err, _ = probeBwrap(working)
	if err != nil || g.mode == guardNone {
		t.Fatalf("guard %+v, %v: want the guard on", g, err)
	}
}

// TestPIDGuardSetuidBwrap: a non-root driver does not wrap a setuid bwrap
// in a user namespace (which would void the setuid bit); root does not
// need one and keeps the guard.
func TestPIDGuardSetuidBwrap(t *testing.T) {
	p := t.TempDir() + "/bwrap"
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	g := choosePIDGuard(p)
	if os.Geteuid() == 0 {
		if g.mode != guardPID {
			t.Fatalf("root: guard %+v, want %s", g, guardPID)
		}
		return
	}
	if g.mode != guardNone || !strings.Contains(g.why, "setuid") {
		t.Fatalf("non-root, setuid bwrap: guard %+v, want none (setuid)", g)
	}
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	if g := choosePIDGuard(p); g.mode != guardUserPID {
		t.Fatalf("non-root, plain bwrap: guard %+v, want %s", g, guardUserPID)
	}
}
