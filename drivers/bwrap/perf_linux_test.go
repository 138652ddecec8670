//go:build linux

package bwrap

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Priming the v1 migration lock moves the driver to where it already is:
// its cgroup membership is the same afterwards, and the command cgroup
// still receives the command's process (positive control).
func TestPrimeV1KeepsDriverCgroups(t *testing.T) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip(err)
	}
	cs := detectCgroups("/sys/fs/cgroup", self, CgroupV1, os.Getpid())
	if cs.mode != CgroupV1 || !cs.have[ctrlPids] {
		t.Skipf("no writable cgroup v1 pids hierarchy: %v", cs.why)
	}
	cg, err := cs.create(cgroupLimits{Pids: 50}, ownerTag())
	if err != nil {
		t.Fatal(err)
	}
	defer cg.remove()
	cs.primeV1(cg)
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
	if err := cg.join(c.Process.Pid); err != nil {
		t.Fatal(err)
	}
	procs, err := os.ReadFile(cg.dirs[ctrlPids] + "/cgroup.procs")
	if err != nil || string(procs) != strconv.Itoa(c.Process.Pid)+"\n" {
		t.Fatalf("command cgroup holds %q (%v), want only %d", procs, err, c.Process.Pid)
	}
}

// Back-to-back commands (the primed v1 move, the fast removal poll) each
// leave no cgroup behind, and each ran in one (positive control).
func TestBackToBackCommandsLeaveNoCgroups(t *testing.T) {
	d := testDriver(t, Options{})
	if d.probe().cg.mode == CgroupNone {
		t.Skip("no writable cgroups here")
	}
	ctx := context.Background()
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	spec := driverapi.RunSpec{Program: "/bin/true", Cwd: ws, Profile: prof, Timeout: 30 * time.Second,
		MaxOutputBytes: 1 << 20, Env: pathEnv()}
	for i := 0; i < 15; i++ {
		exit, err := d.Run(ctx, spec, driverapi.Streams{})
		if err != nil || exit.ExitCode != 0 {
			t.Fatalf("run %d: %+v %v", i, exit, err)
		}
		cgroupGone(t, d, exit)
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
	cs := detectCgroups("/sys/fs/cgroup", self, CgroupV1, os.Getpid())
	if cs.mode != CgroupV1 || !cs.have[ctrlPids] {
		t.Skipf("no writable cgroup v1 pids hierarchy: %v", cs.why)
	}
	cg, err := cs.create(cgroupLimits{Pids: 37}, ownerTag())
	if err != nil {
		t.Fatal(err)
	}
	defer cg.remove()
	if err := os.Remove(cg.dirs[ctrlPids]); err != nil {
		t.Fatal(err)
	}
	c := exec.Command("/bin/sleep", "5")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	if err := cg.join(c.Process.Pid); err != nil {
		t.Fatalf("join after the cgroup vanished: %v", err)
	}
	procs, _ := os.ReadFile(cg.dirs[ctrlPids] + "/cgroup.procs")
	max, _ := os.ReadFile(cg.dirs[ctrlPids] + "/pids.max")
	if string(procs) != strconv.Itoa(c.Process.Pid)+"\n" || strings.TrimSpace(string(max)) != "37" {
		t.Fatalf("remade cgroup holds %q with pids.max %q", procs, max)
	}
}
