//go:build linux || darwin

package driverapi

import (
	"context"
	"os"
	"sort"
	"syscall"
	"testing"
	"time"
)

// BenchmarkPluginStart starts a plugin (this test binary's fake driver, or
// the driver binary ALEPH_BENCH_DRIVER names, told it runs one command),
// makes one call and ends it, as a one-shot CLI does with its driver: with
// the keyed unix transport and with mutual TLS, alternating, so both ways
// see the same load. It reports each way's p50 and CPU (this process and
// the plugin) per start, and keyed over TLS for both.
func BenchmarkPluginStart(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	type way struct {
		name string
		tls  bool
		lat  []time.Duration
		cpu  time.Duration
	}
	ways := []*way{{name: "keyed"}, {name: "mtls", tls: true}}
	cpuNow := func() time.Duration {
		var self, kids syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
		_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
		return time.Duration(self.Utime.Nano() + self.Stime.Nano() + kids.Utime.Nano() + kids.Stime.Nano())
	}
	cfg := LaunchConfig{Path: exe, Env: []string{"ALEPH_DRIVERAPI_TEST_PLUGIN=driver"}}
	if p := os.Getenv("ALEPH_BENCH_DRIVER"); p != "" {
		cfg = LaunchConfig{Path: p, Env: []string{"ALEPH_DRIVER_ONE_COMMAND=1"}}
	}
	ctx := context.Background()
	for b.Loop() {
		for _, w := range ways {
			c0, t0 := cpuNow(), time.Now()
			c := cfg
			c.MutualTLS = w.tls
			proc, err := LaunchDriver(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := proc.Driver().Capabilities(ctx); err != nil {
				b.Fatal(err)
			}
			proc.Kill() // waits for the process: its CPU is in RUSAGE_CHILDREN now
			w.lat = append(w.lat, time.Since(t0))
			w.cpu += cpuNow() - c0
		}
	}
	p50 := func(d []time.Duration) float64 {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return float64(s[len(s)/2]) / 1e6
	}
	k, m := ways[0], ways[1]
	b.ReportMetric(p50(k.lat), "keyed_p50_ms")
	b.ReportMetric(p50(m.lat), "mtls_p50_ms")
	b.ReportMetric(p50(k.lat)/p50(m.lat), "keyed/mtls_p50")
	b.ReportMetric(float64(k.cpu)/float64(len(k.lat))/1e6, "keyed_cpu_ms")
	b.ReportMetric(float64(m.cpu)/float64(len(m.lat))/1e6, "mtls_cpu_ms")
	b.ReportMetric(float64(k.cpu)/float64(m.cpu), "keyed/mtls_cpu")
}
