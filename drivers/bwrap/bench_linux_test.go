//go:build linux

package bwrap

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// BenchmarkLaunch runs /bin/true four ways, side by side, and logs the
// ratios: directly, through raw bwrap with the driver's flags, through the
// driver in-process (sandbox-init, cgroup, output plumbing), and through the
// driver plugin over gRPC (what the core does, warm).
func BenchmarkLaunch(b *testing.B) {
	ctx := context.Background()
	// The installed layout: the small aleph-sandbox-init beside the driver.
	d, err := New(Config{InitBinary: chooseInit(driverBin)})
	if err != nil {
		b.Fatal(err)
	}
	ws := newWorkspace(b)
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		b.Fatal(err)
	}
	spec := driverapi.RunSpec{Program: "/bin/true", Cwd: ws, Profile: prof, Timeout: 30 * time.Second,
		MaxOutputBytes: 1 << 20, Env: pathEnv()}
	perOp := map[string]float64{}
	// Each result also reports its ratio to raw bwrap, so the benchmark
	// output itself shows the side-by-side figures. With -count N every
	// sub-benchmark runs N times in a row (all raw_bwrap runs first); the
	// ratio compares the fastest run of each, the figure least disturbed by
	// other load on the machine.
	record := func(name string, b *testing.B) {
		ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		if old, ok := perOp[name]; !ok || ns < old {
			perOp[name] = ns
		}
		if raw := perOp["raw_bwrap"]; raw > 0 {
			b.ReportMetric(perOp[name]/raw, "x_raw_bwrap_best")
		}
	}

	b.Run("raw_bwrap", func(b *testing.B) {
		for b.Loop() {
			cmd, release, err := d.RawBwrapCommand(ctx, spec)
			if err != nil {
				b.Fatal(err)
			}
			err = cmd.Run()
			release()
			if err != nil {
				b.Fatal(err)
			}
		}
		record("raw_bwrap", b)
	})
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
		record("direct", b)
	})
	b.Run("driver_in_process", func(b *testing.B) {
		for b.Loop() {
			exit, err := d.Run(ctx, spec, driverapi.Streams{})
			if err != nil || exit.ExitCode != 0 {
				b.Fatal(err, exit)
			}
		}
		record("driver_in_process", b)
	})
	// Without cgroups: what the confinement costs apart from the cgroup
	// hand-over (on cgroup v1 the migration of bwrap's child waits for an
	// RCU grace period in the kernel).
	b.Run("driver_no_cgroup", func(b *testing.B) {
		dn, err := New(Config{Options: Options{Cgroup: CgroupNone}, InitBinary: chooseInit(driverBin)})
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			exit, err := dn.Run(ctx, spec, driverapi.Streams{})
			if err != nil || exit.ExitCode != 0 {
				b.Fatal(err, exit)
			}
		}
		record("driver_no_cgroup", b)
	})
	b.Run("driver_plugin", func(b *testing.B) {
		p := launchPlugin(b)
		pd := p.Driver()
		pprof, err := pd.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
		if err != nil {
			b.Fatal(err)
		}
		s := spec
		s.Profile = pprof
		for b.Loop() {
			exit, err := pd.Run(ctx, s, driverapi.Streams{})
			if err != nil || exit.ExitCode != 0 {
				b.Fatal(err, exit)
			}
		}
		record("driver_plugin", b)
	})
}
