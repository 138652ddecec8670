//go:build linux

package bwrap

import (
	"context"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// BenchmarkLaunch runs /bin/true five ways, interleaved: directly, through
// raw bwrap with the driver's flags, through the driver in-process
// (sandbox-init, cgroup, output plumbing), the same without cgroups, and
// through the driver plugin over gRPC (what the core does, warm). Each
// iteration runs every way once, so load that comes and goes on a shared
// machine touches all of them alike; ns/op is the sum of the five. The
// figures to read are the per-way p50 (ms) and each one's ratio to raw
// bwrap's p50 (x_raw).
func BenchmarkLaunch(b *testing.B) {
	ctx := context.Background()
	// The installed layout: the small aleph-sandbox-init beside the driver.
	d, err := New(Config{InitBinary: chooseInit(driverBin)})
	if err != nil {
		b.Fatal(err)
	}
	// Without cgroups: what the confinement costs apart from the cgroup
	// hand-over (on cgroup v1 the move of bwrap's child).
	dn, err := New(Config{Options: Options{Cgroup: CgroupNone}, InitBinary: chooseInit(driverBin)})
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
	p := launchPlugin(b)
	pd := p.Driver()
	pprof, err := pd.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		b.Fatal(err)
	}
	pspec := spec
	pspec.Profile = pprof
	run := func(dr driverapi.Driver, s driverapi.RunSpec) error {
		exit, err := dr.Run(ctx, s, driverapi.Streams{})
		if err == nil && exit.ExitCode != 0 {
			b.Fatalf("exit %+v", exit)
		}
		return err
	}
	ways := []struct {
		name string
		fn   func() error
	}{
		{"raw_bwrap", func() error {
			cmd, release, err := d.rawBwrapCommand(ctx, spec)
			if err != nil {
				return err
			}
			defer release()
			return cmd.Run()
		}},
		{"direct", func() error { return exec.Command("/bin/true").Run() }},
		{"in_process", func() error { return run(d, spec) }},
		{"no_cgroup", func() error { return run(dn, spec) }},
		{"plugin", func() error { return run(pd, pspec) }},
	}
	lat := make([][]time.Duration, len(ways))
	for b.Loop() {
		for i, w := range ways {
			t := time.Now()
			if err := w.fn(); err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			lat[i] = append(lat[i], time.Since(t))
		}
	}
	p50 := func(d []time.Duration) float64 {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	raw := p50(lat[0])
	for i, w := range ways {
		v := p50(lat[i])
		b.ReportMetric(v, w.name+"_p50_ms")
		if i > 0 && raw > 0 {
			b.ReportMetric(v/raw, w.name+"_x_raw")
		}
	}
}
