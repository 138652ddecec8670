package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os/exec"
	"sort"
	"sync"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// benchResult is the --json object of CLI.md.
type benchResult struct {
	N           int     `json:"n"`
	Concurrency int     `json:"concurrency"`
	P50MS       float64 `json:"p50_ms"`
	P90MS       float64 `json:"p90_ms"`
	P99MS       float64 `json:"p99_ms"`
	PerSecond   float64 `json:"per_second"`
	DirectP50MS float64 `json:"direct_p50_ms"`
	Backend     string  `json:"backend"`
}

// runBench runs the command N times through one warm pipeline (the driver
// launched once, as an embedding host would) and the same program directly,
// and prints latency percentiles side by side.
func runBench(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Err)
	var f runFlags
	f.register(fs)
	n := fs.Int("n", 100, "number of runs")
	conc := fs.Int("concurrency", 1, "runs at a time")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return fail(io.Err, "bench: %v", err)
	}
	if fs.NArg() == 0 {
		return fail(io.Err, "bench: no program given (usage: aleph-sandbox bench [flags] -- PROGRAM [ARG...])")
	}
	if *n < 1 || *conc < 1 {
		return fail(io.Err, "bench: --n and --concurrency must be at least 1")
	}
	cfg, err := loadConfig(f.config, f.workspaceRoot, f.driver)
	if err != nil {
		return fail(io.Err, "%s", oneLine(err.Error()))
	}
	// The benchmark measures the sandbox, not the throttle in front of it.
	cfg.Sandbox.RateLimit.Enabled = false
	cmd, err := f.command(fs.Arg(0), fs.Args()[1:], io.In)
	if err != nil {
		return fail(io.Err, "%s", oneLine(err.Error()))
	}
	p, err := buildPipeline(cfg, &approver{yes: f.yes}, io.Err)
	if err != nil {
		return fail(io.Err, "%s", oneLine(err.Error()))
	}
	defer p.Close()

	// One warm-up run launches the driver and creates the workspace.
	out, err := p.sandbox.Execute(ctx, cmd)
	if msg := benchFailure(out, err); msg != "" {
		return fail(io.Err, "bench: warm-up run failed: %s", msg)
	}
	backend := out.Backend

	lat, elapsed, msg := measure(*n, *conc, func() string {
		out, err := p.sandbox.Execute(ctx, cmd)
		return benchFailure(out, err)
	})
	if msg != "" {
		return fail(io.Err, "bench: %s", msg)
	}
	direct, _, msg := measure(*n, 1, func() string {
		c := exec.CommandContext(ctx, cmd.Program, cmd.Args...)
		if err := c.Run(); err != nil {
			return "direct run: " + err.Error()
		}
		return ""
	})
	if msg != "" {
		return fail(io.Err, "bench: %s", msg)
	}
	r := benchResult{
		N: *n, Concurrency: *conc,
		P50MS: pct(lat, 50), P90MS: pct(lat, 90), P99MS: pct(lat, 99),
		PerSecond:   float64(*n) / elapsed.Seconds(),
		DirectP50MS: pct(direct, 50),
		Backend:     backend,
	}
	if f.json {
		writeJSON(io.Out, r)
		return 0
	}
	fmt.Fprintf(io.Out, "%-10s %9s %9s %9s %11s\n", "", "p50 ms", "p90 ms", "p99 ms", "runs/s")
	fmt.Fprintf(io.Out, "%-10s %9.3f %9.3f %9.3f %11.1f\n", backend, r.P50MS, r.P90MS, r.P99MS, r.PerSecond)
	fmt.Fprintf(io.Out, "%-10s %9.3f %9.3f %9.3f\n", "direct", r.DirectP50MS, pct(direct, 90), pct(direct, 99))
	if r.DirectP50MS > 0 {
		fmt.Fprintf(io.Out, "sandbox p50 / direct p50 = %.2fx (n=%d, concurrency=%d)\n", r.P50MS/r.DirectP50MS, *n, *conc)
	}
	return 0
}

func benchFailure(out *core.Output, err error) string {
	switch {
	case err != nil:
		return oneLine(err.Error())
	case out.Exit.TimedOut:
		return "the command timed out"
	case out.Exit.Signal != 0:
		return fmt.Sprintf("the command died of signal %d", out.Exit.Signal)
	case out.Exit.ExitCode != 0:
		return fmt.Sprintf("the command exited %d: %s", out.Exit.ExitCode, oneLine(string(out.Stderr)))
	}
	return ""
}

// measure runs fn n times, c at a time, and returns each run's latency, the
// wall time of the whole, and the first failure.
func measure(n, c int, fn func() string) ([]time.Duration, time.Duration, string) {
	lat := make([]time.Duration, n)
	var mu sync.Mutex
	first := ""
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t := time.Now()
				msg := fn()
				lat[i] = time.Since(t)
				if msg != "" {
					mu.Lock()
					if first == "" {
						first = fmt.Sprintf("run %d: %s", i+1, msg)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		mu.Lock()
		stop := first != ""
		mu.Unlock()
		if stop {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return lat, time.Since(start), first
}

// pct is the p-th percentile (nearest rank) in milliseconds.
func pct(d []time.Duration, p float64) float64 {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i].Microseconds()) / 1000
}
