//go:build linux

package bwrap

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
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

	_, _, g, err, _ := probeBwrap(refusing, procCoverArgs(), nil)
	if err != nil {
		t.Fatalf("probe of a bwrap that works unguarded: %v", err)
	}
	if g.mode != guardNone || !strings.Contains(g.why, "namespace refused by policy") {
		t.Fatalf("guard %+v, want none with the refusal as reason", g)
	}
	_, _, g, err, _ = probeBwrap(working, procCoverArgs(), nil)
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

func TestKernelAtLeast(t *testing.T) {
	for _, tc := range []struct {
		release string
		want    bool
	}{
		{"6.18.44-fc-v669", true},
		{"5.14.0-362.el9.x86_64", true},
		{"5.13.19", false},
		{"4.19.0", false},
		{"10.0", true},
		{"garbage", false},
		{"", false},
	} {
		if got := kernelAtLeast(tc.release, 5, 14); got != tc.want {
			t.Errorf("kernelAtLeast(%q, 5, 14) = %v", tc.release, got)
		}
	}
}

// TestPidLimitWithoutCgroup: with no cgroup, an unprivileged driver caps
// the sandbox's tasks with RLIMIT_NPROC, counted in the sandbox's own user
// namespace: a fork loop stops at the limit while a few processes run
// (control), and other sandboxes of the same user are not counted against
// it. As root (RLIMIT_NPROC does not bind uid 0) the limit is not claimed.
func TestPidLimitWithoutCgroup(t *testing.T) {
	d := testDriver(t, options{Cgroup: cgroupNone, MaxPids: u64(20)})
	caps, _ := d.Capabilities(context.Background())
	if os.Geteuid() == 0 {
		if caps.Has(driverapi.FeaturePidLimit) || !hasUnavailable(caps, driverapi.FeaturePidLimit) {
			t.Fatalf("root without cgroups: pid_limit must be reported unavailable: %+v", caps)
		}
		return
	}
	if !caps.Has(driverapi.FeaturePidLimit) || caps.Details["pid_limit_via"] != "rlimit_nproc" {
		t.Fatalf("unprivileged, no cgroup: pid_limit via RLIMIT_NPROC not claimed: %+v", caps)
	}
	ws := newWorkspace(t)
	// Another sandbox of the same user holds 15 processes meanwhile: a
	// host-wide count would leave the one below almost no room.
	done := make(chan drvResult, 1)
	go func() {
		done <- drvSh(t, d, ws, "for i in $(seq 15); do sleep 3 & done; wait")
	}()
	time.Sleep(300 * time.Millisecond)
	expectOK(t, drvSh(t, d, ws, "for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.2 & done; wait; echo done"))
	r := drvSh(t, d, ws, "i=0; while [ $i -lt 60 ]; do sleep 5 & i=$((i+1)); done; echo spawned-all")
	if r.err != nil || strings.Contains(r.stdout, "spawned-all") && r.exit.ExitCode == 0 {
		t.Fatalf("60 processes under max_pids=20: err=%v exit=%+v stdout=%q", r.err, r.exit, r.stdout)
	}
	if o := <-done; o.err != nil || o.exit.ExitCode != 0 {
		t.Fatalf("the other sandbox's 15 processes: %+v", o)
	}
}

// TestPIDGuardWithCloneIntoCgroup: on cgroup v2 bwrap is born inside the
// command's cgroup (CLONE_INTO_CGROUP), and the guard's namespaces are
// created by the same clone3 call: the kernel must accept the combination
// and the process must land in the cgroup, for each guard mode. Needs a
// writable cgroup v2 hierarchy (root here); without one the driver never
// picks v2, which is asserted instead.
func TestPIDGuardWithCloneIntoCgroup(t *testing.T) {
	base := ""
	for _, p := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(p + "/cgroup.procs"); err == nil && unix.Access(p, unix.W_OK) == nil {
			var st unix.Statfs_t
			if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
				base = p
				break
			}
		}
	}
	if base == "" {
		caps, _ := testDriver(t, options{}).Capabilities(context.Background())
		if caps.CgroupMode == string(cgroupV2) {
			t.Fatal("no writable cgroup v2 hierarchy, yet the driver picked v2")
		}
		return
	}
	path, err := exec.LookPath("bwrap")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []pidGuard{{mode: guardPID}, {mode: guardUserPID}, {mode: guardNone}} {
		t.Run(g.mode, func(t *testing.T) {
			name := "aleph-guardtest-" + strconv.FormatInt(time.Now().UnixNano(), 36)
			dir := base + "/" + name
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			defer func() {
				for i := 0; i < 100 && os.Remove(dir) != nil; i++ {
					time.Sleep(10 * time.Millisecond)
				}
			}()
			fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			c := exec.Command(path, "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "sleep", "0.5")
			c.Env = []string{}
			c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
			g.apply(c.SysProcAttr)
			if err := c.Start(); err != nil {
				t.Fatalf("clone into the cgroup with guard %s: %v", g.mode, err)
			}
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(c.Process.Pid) + "/cgroup")
			if err := c.Wait(); err != nil {
				t.Fatalf("the sandbox failed: %v", err)
			}
			if !strings.Contains(string(b), "0::/"+name+"\n") {
				t.Fatalf("bwrap is not in the command's cgroup: %q", b)
			}
		})
	}
}
