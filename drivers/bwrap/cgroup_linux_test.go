//go:build linux

package bwrap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup/cgrouptest"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/ownertag"
)

// A v2 cgroup that is not a real cgroup must make Run fail, never run the
// command outside its limits.
func TestCgroupV2FailsClosed(t *testing.T) {
	root, selfFile := cgrouptest.FakeV2(t)
	d, err := newDriver(config{Options: options{Cgroup: cgroupV2}, InitBinary: driverBin, CgroupRoot: root, SelfCgroup: selfFile})
	if err != nil {
		t.Fatal(err)
	}
	caps, _ := d.Capabilities(context.Background())
	if caps.CgroupMode != "v2" || !caps.Has(driverapi.FeatureMemoryLimit) || !caps.Has(driverapi.FeaturePidLimit) {
		t.Fatalf("fake v2 not reported: %+v", caps)
	}
	ws := newWorkspace(t)
	r := drvSh(t, d, ws, "touch ran")
	if r.err == nil {
		t.Fatalf("ran with an unusable cgroup: %+v", r.exit)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
		t.Fatal("the command ran")
	}
	ents, _ := os.ReadDir(filepath.Join(root, "user.slice", "svc"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "aleph-") && e.Name() != "aleph-driver" {
			t.Fatalf("command cgroup %s left behind", e.Name())
		}
	}
	// Control: the same driver setup without cgroups runs the command.
	d2 := testDriver(t, options{Cgroup: cgroupNone})
	expectOK(t, drvSh(t, d2, ws, "touch ran"))
}

func u64(n uint64) *uint64 { return &n }

// cgroupGone checks the command's cgroup directories no longer exist.
func cgroupGone(t *testing.T, d *Driver, exit driverapi.Exit) {
	t.Helper()
	name := exit.Details["cgroup_name"]
	if name == "" {
		t.Fatalf("no cgroup used: %+v", exit.Details)
	}
	if exit.Details["prepared"] == "1" {
		// A prepared sandbox is torn down in the background once its
		// command is answered (endSandbox), bounded by endWait.
		done := make(chan struct{})
		go func() { d.pool.WaitEnded(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * endWait):
			t.Fatal("an answered prepared sandbox was not torn down")
		}
	}
	h := d.probe()
	for _, base := range h.cg.Bases() {
		if _, err := os.Stat(filepath.Join(base, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s left behind", filepath.Join(base, name))
		}
	}
}

func TestMemoryLimit(t *testing.T) {
	d := testDriver(t, options{})
	ctx := context.Background()
	caps, err := d.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace(t)
	lim := driverapi.Capabilities{SpawnSubprocess: true, MaxMemoryMB: 64}
	if !caps.Has(driverapi.FeatureMemoryLimit) {
		// Honest degrade (e.g. unprivileged without delegated cgroups):
		// reported unavailable with a reason and a fix, and refused.
		if !hasUnavailable(caps, driverapi.FeatureMemoryLimit) {
			t.Fatalf("memory_limit neither claimed nor reported unavailable: %+v", caps)
		}
		r := drvRun(t, ctx, d, ws, lim, nil, "/bin/true")
		var ue *unavailableError
		if !errors.As(r.err, &ue) || ue.Feature != driverapi.FeatureMemoryLimit {
			t.Fatalf("memory limit request not refused: %v", r.err)
		}
		if os.Geteuid() != 0 {
			t.Logf("uid %d: memory_limit unavailable: %s", os.Geteuid(), ue.Reason)
		}
		return
	}
	// Control: 16 MiB in tmpfs (charged to the cgroup) fits.
	r := drvRun(t, ctx, d, ws, lim, nil, "/bin/sh", "-c", "head -c 16777216 /dev/zero > /tmp/fill && echo ok")
	expectOK(t, r)
	// shmem pages (tmpfs, memfd) count against the cgroup but not against
	// RLIMIT_AS, so this exercises the cgroup itself. A memfd, not /tmp:
	// the command's tmpfs mounts are sized within the limit and would end
	// the fill with ENOSPC first (TestTmpfsBounded).
	r = drvRun(t, ctx, d, ws, lim, nil, "/usr/bin/python3", "-c",
		"import os\nf = os.memfd_create('fill')\nfor _ in range(256): os.write(f, bytes(1 << 20))")
	if r.err != nil || r.exit.ExitCode == 0 || !r.exit.OOMKilled {
		t.Fatalf("256 MiB under a 64 MiB limit: err=%v exit=%+v stderr=%q", r.err, r.exit, r.stderr)
	}
	cgroupGone(t, d, r.exit)
	// A single large allocation in one process is stopped too (by the
	// cgroup; RLIMIT_AS is only a backstop with headroom above the limit).
	r = drvRun(t, ctx, d, ws, lim, nil, "/bin/sh", "-c", "head -c 134217728 /dev/zero | tail -n 1 >/dev/null")
	if r.err != nil || r.exit.ExitCode == 0 {
		t.Fatalf("128 MiB in one process under a 64 MiB limit: err=%v exit=%+v", r.err, r.exit)
	}
}

func TestPidLimit(t *testing.T) {
	d := testDriver(t, options{MaxPids: u64(20)})
	ctx := context.Background()
	caps, _ := d.Capabilities(ctx)
	ws := newWorkspace(t)
	if !caps.Has(driverapi.FeaturePidLimit) {
		if !hasUnavailable(caps, driverapi.FeaturePidLimit) {
			t.Fatalf("pid_limit neither claimed nor reported unavailable: %+v", caps)
		}
		return
	}
	// Control: a few processes are fine.
	expectOK(t, drvSh(t, d, ws, "for i in 1 2 3 4 5; do sleep 0.1 & done; wait; echo done"))
	r := drvSh(t, d, ws, "i=0; while [ $i -lt 60 ]; do sleep 5 & i=$((i+1)); done; echo spawned-all")
	if r.err != nil || strings.Contains(r.stdout, "spawned-all") && r.exit.ExitCode == 0 {
		t.Fatalf("60 processes under pids.max=20: err=%v exit=%+v stdout=%q", r.err, r.exit, r.stdout)
	}
	if caps.Details["pid_limit_via"] == "cgroup" {
		cgroupGone(t, d, r.exit)
	}
}

func hasUnavailable(h driverapi.HostCapabilities, f string) bool {
	for _, u := range h.Unavailable {
		if u.Feature == f && u.Reason != "" && u.Fix != "" {
			return true
		}
	}
	return false
}

func TestCgroupV1Files(t *testing.T) {
	d := testDriver(t, options{CPUQuotaPercent: 50, MaxPids: u64(33)})
	caps, _ := d.Capabilities(context.Background())
	h := d.probe()
	if h.cg.Mode() != cgroup.V1 || !h.cg.Has(cgroup.CPU) {
		// Not enforceable here: must be said, not claimed.
		if caps.Has(driverapi.FeatureCPULimit) && h.cg.Mode() != cgroup.V2 {
			t.Fatalf("cpu_limit claimed with cgroup mode %s", h.cg.Mode())
		}
		if h.cg.Mode() == cgroup.None && !hasUnavailable(caps, driverapi.FeatureCPULimit) {
			t.Fatalf("cpu_limit not explained: %+v", caps.Unavailable)
		}
		return
	}
	if !caps.Has(driverapi.FeatureCPULimit) {
		t.Fatalf("cpu controller writable and quota set, cpu_limit not claimed: %+v", caps)
	}
	cg, err := h.cg.Create(cgroup.Limits{MemoryBytes: 64 << 20, Pids: 33, CPUQuotaPercent: 50}, ownertag.Self())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		cgroup.CPU:    {"cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"},
		cgroup.Pids:   {"pids.max": "33"},
		cgroup.Memory: {"memory.limit_in_bytes": "67108864"},
	}
	if h.cg.Memsw() {
		want[cgroup.Memory]["memory.memsw.limit_in_bytes"] = "67108864"
	}
	for c, files := range want {
		for f, v := range files {
			if got := cgrouptest.ReadTrim(t, filepath.Join(cg.Dir(c), f)); got != v {
				t.Errorf("%s/%s = %s, want %s", c, f, got, v)
			}
		}
	}
	cg.Remove()
	for c := range want {
		if _, err := os.Stat(cg.Dir(c)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s cgroup left: %v", c, err)
		}
	}
}

// commandCgroups lists the command cgroups under d's bases.
func commandCgroups(d *Driver) map[string]bool {
	out := map[string]bool{}
	h := d.probe()
	for _, b := range h.cg.Bases() {
		ents, _ := os.ReadDir(b)
		for _, e := range ents {
			if e.IsDir() && strings.HasPrefix(e.Name(), "aleph-") && e.Name() != "aleph-driver" {
				out[filepath.Join(b, e.Name())] = true
			}
		}
	}
	return out
}
