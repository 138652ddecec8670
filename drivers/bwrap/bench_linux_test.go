//go:build linux

package bwrap

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// BenchmarkLaunch runs /bin/true several ways, interleaved: directly,
// through the smallest bwrap sandbox (raw_minimal), through raw bwrap with
// the driver's flags, through the driver in-process (sandbox-init, cgroup,
// output plumbing), the same without cgroups, through the driver plugin
// over gRPC (what the core does, warm), and the raw and in-process ways
// once more with the set-up as it was before the /etc view and the
// precompiled seccomp programs (_before). Each iteration runs every way
// once, so load that comes and goes on a shared machine touches all of them
// alike; ns/op is the sum. The figures to read are the per-way p50 (ms) and
// each one's ratio to raw bwrap's p50 (x_raw).
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
	// The set-up before the /etc view and the precompiled programs.
	dl, err := New(Config{InitBinary: chooseInit(driverBin), legacySetup: true})
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
	minimal := minimalBwrapArgs(d, ws)
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
		{"raw_bwrap_before", func() error {
			cmd, release, err := dl.rawBwrapCommand(ctx, spec)
			if err != nil {
				return err
			}
			defer release()
			return cmd.Run()
		}},
		{"direct", func() error { return exec.Command("/bin/true").Run() }},
		{"raw_minimal", func() error { return exec.Command(d.probe().bwrap, minimal...).Run() }},
		{"in_process", func() error { return run(d, spec) }},
		{"in_process_before", func() error { return run(dl, spec) }},
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

// minimalBwrapArgs is the smallest bubblewrap sandbox that runs /bin/true
// here: every namespace, the system directories (as the plan has them:
// merged-/usr hosts link /bin to usr/bin), /proc, /dev and the workspace.
// It is the floor any bwrap-based sandbox pays per command.
func minimalBwrapArgs(d *Driver, ws string) []string { return minimalArgs(ws, "/bin/true") }

// BenchmarkThroughput runs /bin/true from 4 and 8 goroutines at once,
// through raw bwrap with the driver's flags and through the driver in
// process, one batch of each per iteration (interleaved, as BenchmarkLaunch).
// The figures are execs/s per way and the driver's ratio to raw bwrap.
func BenchmarkThroughput(b *testing.B) {
	for _, conc := range []int{4, 8} {
		b.Run("c"+strconv.Itoa(conc), func(b *testing.B) { benchThroughput(b, conc) })
	}
}

func benchThroughput(b *testing.B, conc int) {
	ctx := context.Background()
	d, err := New(Config{InitBinary: chooseInit(driverBin)})
	if err != nil {
		b.Fatal(err)
	}
	dl, err := New(Config{InitBinary: chooseInit(driverBin), legacySetup: true})
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
		{"driver", func() error { return runTrue(ctx, d, spec) }},
		{"driver_before", func() error { return runTrue(ctx, dl, spec) }},
	}
	perBatch := 4 * conc
	total := make([]time.Duration, len(ways))
	for b.Loop() {
		for i, w := range ways {
			t := time.Now()
			if err := batch(conc, perBatch, w.fn); err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			total[i] += time.Since(t)
		}
	}
	rate := func(i int) float64 { return float64(perBatch*b.N) / total[i].Seconds() }
	for i, w := range ways {
		b.ReportMetric(rate(i), w.name+"_execs/s")
	}
	b.ReportMetric(rate(1)/rate(0), "driver_x_raw")
	b.ReportMetric(rate(1)/rate(2), "driver_x_before")
}

func runTrue(ctx context.Context, d *Driver, spec driverapi.RunSpec) error {
	exit, err := d.Run(ctx, spec, driverapi.Streams{})
	if err == nil && exit.ExitCode != 0 {
		return fmt.Errorf("exit %+v", exit)
	}
	return err
}

// batch runs n calls of fn from conc goroutines and returns the first error.
func batch(conc, n int, fn func() error) error {
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	errs := make(chan error, conc)
	for range conc {
		go func() {
			var first error
			for range jobs {
				if err := fn(); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	var first error
	for range conc {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
