//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup/cgrouptest"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/ownertag"
)

func TestCgroupV2FakeFS(t *testing.T) {
	root, selfFile := cgrouptest.FakeV2(t)
	self, _ := os.ReadFile(selfFile)
	cs := Detect(root, self, Auto, 4242)
	if cs.mode != V2 {
		t.Fatalf("mode %s (%v)", cs.mode, cs.why)
	}
	own := filepath.Join(root, "user.slice", "svc")
	if cs.v2Base != own || !cs.have[Memory] || !cs.have[Pids] || !cs.have[CPU] {
		t.Fatalf("%+v", cs)
	}
	// The driver moved itself into a leaf, then enabled the controllers.
	if got := cgrouptest.ReadTrim(t, filepath.Join(own, "aleph-driver", "cgroup.procs")); got != "4242" {
		t.Fatalf("leaf procs %q", got)
	}
	if got := cgrouptest.ReadTrim(t, filepath.Join(own, "cgroup.subtree_control")); got != "+memory +pids +cpu" {
		t.Fatalf("subtree_control %q", got)
	}
	cg, err := cs.Create(Limits{MemoryBytes: 64 << 20, Pids: 50, CPUQuotaPercent: 50}, ownertag.Self())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(own, cg.name)
	for file, want := range map[string]string{
		"memory.max": "67108864", "memory.swap.max": "0", "pids.max": "50", "cpu.max": "50000 100000",
	} {
		if got := cgrouptest.ReadTrim(t, filepath.Join(dir, file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	if cg.fd < 0 {
		t.Fatal("no cgroup fd for CLONE_INTO_CGROUP")
	}
	if cg.OOMKilled() {
		t.Fatal("oom before anything ran")
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.events"), []byte("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !cg.OOMKilled() {
		t.Fatal("oom_kill 1 not seen")
	}
	cg.Remove()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("command cgroup left behind: %v", err)
	}
	if cg.fd != -1 {
		t.Fatal("fd not closed")
	}
}

func TestCgroupV2FakeFSRefusals(t *testing.T) {
	root, selfFile := cgrouptest.FakeV2(t)
	own := filepath.Join(root, "user.slice", "svc")
	// Without the pids controller v2 is refused, with the reason.
	if err := os.WriteFile(filepath.Join(own, "cgroup.controllers"), []byte("cpu memory"), 0o644); err != nil {
		t.Fatal(err)
	}
	self, _ := os.ReadFile(selfFile)
	cs := Detect(root, self, V2, 1)
	if cs.mode != None || !strings.Contains(cs.Reason(Pids), "pids") {
		t.Fatalf("mode %s reason %q", cs.mode, cs.Reason(Pids))
	}
	// cgroup = none is honoured.
	cs = Detect(root, self, None, 1)
	if cs.mode != None || !strings.Contains(cs.Reason(Memory), "none") {
		t.Fatalf("none: %+v", cs)
	}
}

func TestSelfPath(t *testing.T) {
	in := []byte("12:pids:/a\n4:memory:/system.slice/x\n3:cpu,cpuacct:/c\n0::/u.slice\n")
	for ctrl, want := range map[string]string{"pids": "/a", "memory": "/system.slice/x", "cpu": "/c", "": "/u.slice"} {
		if got, ok := selfPath(in, ctrl); !ok || got != want {
			t.Errorf("%q: %q %v", ctrl, got, ok)
		}
	}
	if _, ok := selfPath(in, "hugetlb"); ok {
		t.Error("hugetlb found")
	}
}

func TestSweepStaleCommandCgroups(t *testing.T) {
	base := t.TempDir()
	for _, n := range []string{"aleph-old", "aleph-new", "aleph-driver", "other-old", "aleph-busy"} {
		if err := os.Mkdir(filepath.Join(base, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A non-empty cgroup (on a fake fs: a directory with a file) stays even
	// when old: the kernel refuses rmdir while a cgroup has members.
	if err := os.WriteFile(filepath.Join(base, "aleph-busy", "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, n := range []string{"aleph-old", "aleph-driver", "other-old", "aleph-busy"} {
		if err := os.Chtimes(filepath.Join(base, n), old, old); err != nil {
			t.Fatal(err)
		}
	}
	cs := &System{mode: V1, v1Base: map[string]string{Pids: base}}
	cs.Sweep()
	for n, want := range map[string]bool{"aleph-old": false, "aleph-new": true, "aleph-driver": true, "other-old": true, "aleph-busy": true} {
		_, err := os.Stat(filepath.Join(base, n))
		if (err == nil) != want {
			t.Errorf("%s: exists=%v, want %v", n, err == nil, want)
		}
	}
}

// Priming the v1 migration lock moves the driver to where it already is:
// its cgroup membership is the same afterwards, and the command cgroup
// still receives the command's process (positive control).
func TestPrimeV1KeepsDriverCgroups(t *testing.T) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip(err)
	}
	cs := Detect("/sys/fs/cgroup", self, V1, os.Getpid())
	if cs.mode != V1 || !cs.have[Pids] {
		t.Skipf("no writable cgroup v1 pids hierarchy: %v", cs.why)
	}
	cg, err := cs.Create(Limits{Pids: 50}, ownertag.Self())
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Remove()
	cs.PrimeV1(cg)
	after, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(self) {
		t.Fatalf("priming moved the driver:\nbefore %s\nafter %s", self, after)
	}
	c := exec.Command("/bin/sleep", "5")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	if err := cg.Join(c.Process.Pid); err != nil {
		t.Fatal(err)
	}
	procs, err := os.ReadFile(cg.dirs[Pids] + "/cgroup.procs")
	if err != nil || string(procs) != strconv.Itoa(c.Process.Pid)+"\n" {
		t.Fatalf("command cgroup holds %q (%v), want only %d", procs, err, c.Process.Pid)
	}
}

// A command cgroup removed from outside between create and join is made
// again, with its limit, and the process lands in it (not refused, not
// left unlimited).
func TestJoinRemakesAVanishedCgroup(t *testing.T) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip(err)
	}
	cs := Detect("/sys/fs/cgroup", self, V1, os.Getpid())
	if cs.mode != V1 || !cs.have[Pids] {
		t.Skipf("no writable cgroup v1 pids hierarchy: %v", cs.why)
	}
	cg, err := cs.Create(Limits{Pids: 37}, ownertag.Self())
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Remove()
	if err := os.Remove(cg.dirs[Pids]); err != nil {
		t.Fatal(err)
	}
	c := exec.Command("/bin/sleep", "5")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	if err := cg.Join(c.Process.Pid); err != nil {
		t.Fatalf("join after the cgroup vanished: %v", err)
	}
	procs, _ := os.ReadFile(cg.dirs[Pids] + "/cgroup.procs")
	max, _ := os.ReadFile(cg.dirs[Pids] + "/pids.max")
	if string(procs) != strconv.Itoa(c.Process.Pid)+"\n" || strings.TrimSpace(string(max)) != "37" {
		t.Fatalf("remade cgroup holds %q with pids.max %q", procs, max)
	}
}

func TestSweepDeadOwnersCgroups(t *testing.T) {
	base := t.TempDir()
	st, err := ownertag.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadName := fmt.Sprintf("aleph-%d-%d-ab12", os.Getpid(), st+1)
	liveName := "aleph-" + ownertag.Self() + "-cd34"
	// The same dead owner in this PID namespace's tag form, and an owner
	// in another PID namespace: its pid means nothing here, so it must be
	// kept even though no process here has that pid and start time.
	deadTagged := fmt.Sprintf("aleph-%d-%d-%s-ef56", os.Getpid(), st+1, ownertag.NamespaceTag())
	foreign := fmt.Sprintf("aleph-%d-%d-p1-ab78", os.Getpid(), st+1)
	for _, n := range []string{deadName, liveName, deadTagged, foreign} {
		if err := os.Mkdir(filepath.Join(base, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cs := &System{mode: V1, v1Base: map[string]string{Pids: base}}
	cs.Sweep()
	if _, err := os.Stat(filepath.Join(base, deadName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fresh cgroup of a dead owner kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, liveName)); err != nil {
		t.Errorf("cgroup of a live owner removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, deadTagged)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup of a dead owner of this PID namespace kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, foreign)); err != nil {
		t.Errorf("cgroup of an owner in another PID namespace removed: %v", err)
	}
}
