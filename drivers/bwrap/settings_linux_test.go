//go:build linux

package bwrap

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup/cgrouptest"
)

// refusedFor checks that d claims nothing, explains every feature with
// want, and refuses a profile naming want.
func refusedFor(t *testing.T, d *Driver, want string) {
	t.Helper()
	caps, _ := d.Capabilities(context.Background())
	if len(caps.Features) != 0 || len(caps.Unavailable) != len(driverapi.KnownFeatures()) || !strings.Contains(caps.Unavailable[0].Reason, want) {
		t.Fatalf("want every feature unavailable because %q: %+v", want, caps)
	}
	ws := newWorkspace(t)
	_, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	var ue *unavailableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
		t.Fatalf("ProfileFor: %v, want an UnavailableError saying %q", err, want)
	}
}

// cgroup = "v2" where no v2 hierarchy offers memory and pids used to run
// every command with no process limit and no word said; every configured
// limit the host cannot enforce now fails closed, naming the setting.
func TestUnenforceableCgroupSettingsRefused(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("no bwrap")
	}
	root, selfFile := cgrouptest.FakeV2(t)
	own := filepath.Join(root, "user.slice", "svc")
	mk := func(o options) *Driver {
		d, err := newDriver(config{Options: o, InitBinary: driverBin, DriverBinary: driverBin, CgroupRoot: root, SelfCgroup: selfFile})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Control: the fake v2 offers memory and pids, so v2 is usable.
	d := mk(options{Cgroup: cgroupV2})
	ws := newWorkspace(t)
	if _, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws}); err != nil {
		t.Fatalf("usable v2 refused: %v", err)
	}
	// The host of the report: v2 offers only hugetlb.
	if err := os.WriteFile(filepath.Join(own, "cgroup.controllers"), []byte("hugetlb"), 0o644); err != nil {
		t.Fatal(err)
	}
	refusedFor(t, mk(options{Cgroup: cgroupV2}), `[sandbox.linux] cgroup = "v2" cannot be enforced here`)
	// A CPU quota without a cpu controller, whatever the mode.
	refusedFor(t, mk(options{Cgroup: cgroupNone, CPUQuotaPercent: 50}), "[sandbox.linux] cpu_quota_percent = 50 cannot be enforced")
	// Control: with cgroup = "none" and no quota the sandbox stands (the
	// limits it lacks are reported unavailable one by one).
	dn := mk(options{Cgroup: cgroupNone})
	if caps, _ := dn.Capabilities(context.Background()); !caps.Has(driverapi.FeatureFSReadIsolation) || caps.Has(driverapi.FeatureMemoryLimit) {
		t.Fatalf("cgroup none: %+v", caps)
	}
}

// A bwrap_path that is not bubblewrap is named as the problem; "install
// bubblewrap" is the answer only when bwrap is looked up on PATH.
func TestConfiguredBwrapPathNotBubblewrap(t *testing.T) {
	for _, p := range []string{"/bin/false", "/bin/echo", "/nonexistent/bwrap"} {
		d := testDriver(t, options{BwrapPath: p, Cgroup: cgroupNone})
		refusedFor(t, d, `the configured bwrap_path "`+p+`" is not a working bubblewrap`)
		caps, _ := d.Capabilities(context.Background())
		if fix := caps.Unavailable[0].Fix; strings.Contains(fix, "install bubblewrap") || !strings.Contains(fix, "bwrap_path") {
			t.Fatalf("%s: fix %q", p, fix)
		}
	}
	// Control: the real bubblewrap, configured by path, works.
	real, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("no bwrap")
	}
	d := testDriver(t, options{BwrapPath: real, Cgroup: cgroupNone})
	caps, _ := d.Capabilities(context.Background())
	if !caps.Has(driverapi.FeatureFSReadIsolation) {
		if len(caps.Unavailable) > 0 && strings.Contains(caps.Unavailable[0].Reason, "cannot create namespaces") {
			t.Skipf("bwrap cannot create namespaces for uid %d here: %s", os.Geteuid(), caps.Unavailable[0].Reason)
		}
		t.Fatalf("bwrap_path %s: %+v", real, caps)
	}
}

// A memory limit too small for the sandbox's own setup used to surface as
// "could not be set up (exit status 137)"; the error now says the limit is
// too small to start the program, with a hint of what is needed. Control:
// a workable limit runs the same program.
func TestMemoryTooSmallToStart(t *testing.T) {
	d := testDriver(t, options{})
	if caps, _ := d.Capabilities(context.Background()); !caps.Has(driverapi.FeatureMemoryLimit) {
		t.Skipf("memory limits are not enforced for uid %d here", os.Geteuid())
	}
	ws := newWorkspace(t)
	r := drvRun(t, context.Background(), d, ws, driverapi.Capabilities{MaxMemoryMB: 1}, nil, "/bin/true")
	var mt *cgroup.MemoryTooSmallError
	if !errors.As(r.err, &mt) || mt.LimitBytes != 1<<20 || !strings.Contains(r.err.Error(), "1 MiB is too small to start the program") ||
		!strings.Contains(r.err.Error(), "hint:") {
		t.Fatalf("--memory 1: err=%v exit=%+v", r.err, r.exit)
	}
	// It crosses the plugin boundary as bad input naming the field.
	var ise *driverapi.InvalidSpecError
	if !errors.As(r.err, &ise) || ise.Field != "max_memory_mb" {
		t.Fatalf("--memory 1: want an InvalidSpecError for max_memory_mb, got %v", r.err)
	}
	expectOK(t, drvRun(t, context.Background(), d, ws, driverapi.Capabilities{MaxMemoryMB: 64}, nil, "/bin/true"))
}
