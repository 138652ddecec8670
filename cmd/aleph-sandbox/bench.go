package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// benchResult is the --json object of docs/cli.md.
type benchResult struct {
	N           int     `json:"n"`
	Concurrency int     `json:"concurrency"`
	P50MS       float64 `json:"p50_ms"`
	P90MS       float64 `json:"p90_ms"`
	P99MS       float64 `json:"p99_ms"`
	PerSecond   float64 `json:"per_second"`
	DirectP50MS float64 `json:"direct_p50_ms"`
	Backend     string  `json:"backend"`
	// The side-by-side baselines (added to the fields of docs/cli.md): bubblewrap
	// alone with the driver's flags (Linux with the bwrap driver only, else
	// 0), and a fresh CLI process per run. The ratios are p50 over raw p50
	// (0 when there is no raw figure).
	RawP50MS  float64 `json:"raw_p50_ms"`
	ColdP50MS float64 `json:"cold_p50_ms"`
	WarmVsRaw float64 `json:"warm_vs_raw"`
	ColdVsRaw float64 `json:"cold_vs_raw"`
	// The daemon rows: one command through a private `serve` from this
	// process (the in-service round trip, as a language client pays it)
	// and from a fresh `exec --host` process each time; and the CLI's own
	// start (`--version`). 0 when serve could not be started.
	ServeP50MS    float64 `json:"serve_p50_ms"`
	HostCLIP50MS  float64 `json:"host_cli_p50_ms"`
	CLIStartP50MS float64 `json:"cli_start_p50_ms"`
	ServeVsRaw    float64 `json:"serve_vs_raw"`
	HostCLIVsRaw  float64 `json:"host_cli_vs_raw"`
	// The smallest bwrap sandbox (every namespace, the system directories,
	// /proc, /dev, the workspace): the floor of any bwrap-based sandbox,
	// and each way's p50 over it (0 when there is none).
	RawMinimalP50MS  float64 `json:"raw_minimal_p50_ms"`
	WarmVsMinimal    float64 `json:"warm_vs_minimal"`
	ColdVsMinimal    float64 `json:"cold_vs_minimal"`
	ServeVsMinimal   float64 `json:"serve_vs_minimal"`
	HostCLIVsMinimal float64 `json:"host_cli_vs_minimal"`
	// The session rows through the private serve (0 when it could not
	// start). serve_p50_ms above is a command in an existing session (the
	// session reused, its first command excluded); these add the first
	// command of a new session (p50 over benchNewSessions sessions, each
	// deleted after it) and throughput at concurrency
	// benchThroughputWorkers, one session per worker, against raw bwrap
	// with the driver's flags at the same concurrency (0 without it).
	ServeNewSessionP50MS     float64 `json:"serve_new_session_p50_ms"`
	ServeNewSessionVsMinimal float64 `json:"serve_new_session_vs_minimal"`
	ServeConcurrentPerSecond float64 `json:"serve_concurrent_per_second"`
	RawConcurrentPerSecond   float64 `json:"raw_concurrent_per_second"`
	ServeConcurrentVsRaw     float64 `json:"serve_concurrent_vs_raw"`
	ThroughputConcurrency    int     `json:"throughput_concurrency"`
	// A command in the same existing session through the same serve from
	// the Python client (clients/python, python3), timed by the client
	// around its exec call; 0 when python3 or the client is not there
	// (bench says why on stderr).
	ServePythonP50MS     float64 `json:"serve_python_p50_ms"`
	ServePythonVsMinimal float64 `json:"serve_python_vs_minimal"`
}

// benchOnlyFlags are bench's own flags; the rest are exec's and are passed
// on to the cold CLI runs. The value says whether the flag is boolean.
var benchOnlyFlags = map[string]bool{"n": false, "concurrency": false, "json": true}

// execFlags returns the exec flags among bench's arguments (everything
// before the program except bench's own flags), so a cold run shapes the
// command exactly as the warm runs do.
func execFlags(fs *flag.FlagSet, args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		isBool := false
		if fl := fs.Lookup(name); fl != nil {
			if bf, ok := fl.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				isBool = true
			}
		}
		takesNext := !hasValue && !isBool && i+1 < len(args)
		if _, own := benchOnlyFlags[name]; !own {
			out = append(out, a)
			if takesNext {
				out = append(out, args[i+1])
			}
		}
		if takesNext {
			i++
		}
	}
	return out
}

// benchWay is one way of running the command: it runs it once and returns
// the failure, if any, and how long the run took when it measured that
// itself (the raw bwrap runs are timed in the process that starts bwrap,
// without the pipe to it); 0 lets the caller time the call.
type benchWay func() (took time.Duration, failure string)

// timed is a way the caller times.
func timed(fn func() string) benchWay {
	return func() (time.Duration, string) { return 0, fn() }
}

// settled is w followed, outside its timing, by a pause of d: a driver
// with prepared sandboxes ends the one it used and builds the next in the
// background once it has answered, and that work must not land on the row
// measured next (it is CPU each command costs all the same: the
// throughput benchmarks count it).
func settled(w benchWay, d time.Duration) benchWay {
	return func() (time.Duration, string) {
		took, msg := runWay(w)
		time.Sleep(d)
		return took, msg
	}
}

// benchSettle is settled's pause: a sandbox's teardown and the build of
// the next take a few tens of milliseconds on a loaded two-core machine.
const benchSettle = 40 * time.Millisecond

// runWay runs w once and returns its latency and failure.
func runWay(w benchWay) (time.Duration, string) {
	t := time.Now()
	took, msg := w()
	if took <= 0 {
		took = time.Since(t)
	}
	return took, msg
}

// ratio is a over b, 0 when there is no b.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return math.Round(a/b*100) / 100
}

// runBench runs the command N times through one warm pipeline (the driver
// launched once, as an embedding host would) and the same program directly,
// and prints latency percentiles side by side.
func runBench(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var f runFlags
	f.register(fs)
	n := fs.Int("n", 100, "number of runs")
	conc := fs.Int("concurrency", 1, "runs at a time")
	warmOnly := fs.Bool("warm-only", false, "measure the warm pipeline alone, no baselines (the soak: long runs without thousands of cold CLI starts)")
	if done, code := parseFlags(fs, args, io, "aleph-sandbox bench [exec flags] [--n N] [--concurrency C] [--json] -- PROGRAM [ARG...]"); done {
		return code
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
	cmd, err := f.command(fs.Arg(0), fs.Args()[1:], io.In)
	if err != nil {
		return fail(io.Err, "%s", oneLine(err.Error()))
	}
	// The benchmark measures the sandbox, not the throttle in front of it.
	p, err := buildPipeline(cfg, &approver{yes: f.yes}, io.Err, alephsandbox.WithoutRateLimit())
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

	warm := func() string {
		out, err := p.sandbox.Execute(ctx, cmd)
		return benchFailure(out, err)
	}
	var rawRun, minRun, pyRun benchWay
	var coldRun, tripRun, hostRun, startRun, directRun func() string
	var cleanups []func()
	var srv *benchServe
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()
	if !*warmOnly {
		var stopRaw func()
		rawRun, minRun, stopRaw, err = rawRunner(ctx, cfg, cmd)
		if err != nil {
			return fail(io.Err, "bench: raw bwrap baseline: %s", oneLine(err.Error()))
		}
		cleanups = append(cleanups, stopRaw)
		if rawRun != nil {
			if _, msg := rawRun(); msg != "" {
				// The baseline cannot run here (bwrap without namespaces: the
				// Landlock tier): the other rows still mean something.
				fmt.Fprintf(io.Err, "bench: no raw bwrap row: %s\n", oneLine(msg))
				rawRun = nil
			}
		}
		if minRun != nil {
			if _, msg := minRun(); msg != "" {
				fmt.Fprintf(io.Err, "bench: no raw minimal bwrap row: %s\n", oneLine(msg))
				minRun = nil
			}
		}
		coldRun, err = coldRunner(ctx, execFlags(fs, args), cmd)
		if err != nil {
			return fail(io.Err, "bench: %s", oneLine(err.Error()))
		}
		if srv, err = startBenchServe(ctx, &f); err != nil {
			fmt.Fprintf(io.Err, "bench: no daemon rows: %s\n", oneLine(err.Error()))
			srv = nil
		} else {
			cleanups = append(cleanups, srv.stop)
			tripRun = srv.roundTrip(ctx, cmd)
			hargs := append([]string{"exec", "--host", "unix:" + srv.sock}, hostFlags(execFlags(fs, args))...)
			hargs = append(append(hargs, "--", cmd.Program), cmd.Args...)
			if hostRun, err = selfRunner(ctx, "exec --host", hargs, cmd.Stdin); err != nil {
				return fail(io.Err, "bench: %s", oneLine(err.Error()))
			}
			// The service's first command launches its driver.
			if msg := tripRun(); msg != "" {
				return fail(io.Err, "bench: warm-up %s", msg)
			}
			py, err := startPyBench(ctx, srv.sock, cmd)
			switch {
			case errors.Is(err, errNoPython):
				fmt.Fprintf(io.Err, "bench: %s\n", oneLine(err.Error()))
			case err != nil:
				return fail(io.Err, "bench: Python client: %s", oneLine(err.Error()))
			default:
				cleanups = append(cleanups, py.stop)
				// Its first call opens the client's first connection.
				if _, msg := py.way(); msg != "" {
					return fail(io.Err, "bench: warm-up %s", msg)
				}
				pyRun = py.way
			}
		}
		if startRun, err = selfRunner(ctx, "CLI start", []string{"--version"}, nil); err != nil {
			return fail(io.Err, "bench: %s", oneLine(err.Error()))
		}
		directRun = func() string {
			c := exec.CommandContext(ctx, cmd.Program, cmd.Args...)
			if len(cmd.Stdin) > 0 {
				c.Stdin = bytes.NewReader(cmd.Stdin)
			}
			if err := c.Run(); err != nil {
				return "direct run: " + err.Error()
			}
			return ""
		}
	}
	var lat, raw, rawMin, cold, direct, trip, py, host, start []time.Duration
	var elapsed time.Duration
	var msg string
	// The ways beside the warm pipeline, each with where its latencies go.
	others := []struct {
		run benchWay
		lat *[]time.Duration
	}{{timedOrNil(coldRun), &cold}, {timedOrNil(directRun), &direct}, {rawRun, &raw}, {minRun, &rawMin},
		{settledOrNil(timedOrNil(tripRun)), &trip}, {settledOrNil(pyRun), &py}, {settledOrNil(timedOrNil(hostRun)), &host},
		{timedOrNil(startRun), &start}}
	if *conc == 1 {
		// One round runs each way once, so load that comes and goes on a
		// shared machine touches all of them alike and the ratios hold.
		ways := []benchWay{timed(warm)}
		if !*warmOnly {
			ways[0] = settled(ways[0], benchSettle)
		}
		for _, o := range others {
			if o.run != nil {
				ways = append(ways, o.run)
			}
		}
		var all [][]time.Duration
		all, msg = interleave(*n, ways)
		lat = all[0]
		i := 1
		for _, o := range others {
			if o.run != nil {
				*o.lat = all[i]
				i++
			}
		}
		for _, d := range lat {
			elapsed += d
		}
	} else {
		// Concurrent warm runs first, then the others one at a time.
		lat, elapsed, msg = measure(*n, *conc, timed(warm))
		for _, o := range others {
			if msg == "" && o.run != nil {
				*o.lat, _, msg = measure(*n, 1, o.run)
			}
		}
	}
	if msg != "" {
		return fail(io.Err, "bench: %s", msg)
	}
	// The session rows, after the rounds: a new session's first command,
	// then throughput with a session per worker beside raw bwrap's.
	var newSess []time.Duration
	var tp sessionThroughput
	if srv != nil {
		if newSess, msg = srv.newSessionRuns(ctx, cmd, min(*n, benchNewSessions)); msg == "" {
			tp, msg = measureSessionThroughput(ctx, srv, cfg, cmd, rawRun != nil, min(*n, benchThroughputCommands))
		}
		if msg != "" {
			return fail(io.Err, "bench: %s", msg)
		}
	}
	r := benchResult{
		N: *n, Concurrency: *conc,
		P50MS: pct(lat, 50), P90MS: pct(lat, 90), P99MS: pct(lat, 99),
		PerSecond:     float64(*n) / elapsed.Seconds(),
		DirectP50MS:   pct(direct, 50),
		Backend:       backend,
		RawP50MS:      pct(raw, 50),
		ColdP50MS:     pct(cold, 50),
		ServeP50MS:    pct(trip, 50),
		HostCLIP50MS:  pct(host, 50),
		CLIStartP50MS: pct(start, 50),
	}
	r.RawMinimalP50MS = pct(rawMin, 50)
	r.WarmVsMinimal, r.ColdVsMinimal = ratio(r.P50MS, r.RawMinimalP50MS), ratio(r.ColdP50MS, r.RawMinimalP50MS)
	r.ServeVsMinimal, r.HostCLIVsMinimal = ratio(r.ServeP50MS, r.RawMinimalP50MS), ratio(r.HostCLIP50MS, r.RawMinimalP50MS)
	r.WarmVsRaw, r.ColdVsRaw = ratio(r.P50MS, r.RawP50MS), ratio(r.ColdP50MS, r.RawP50MS)
	r.ServeVsRaw, r.HostCLIVsRaw = ratio(r.ServeP50MS, r.RawP50MS), ratio(r.HostCLIP50MS, r.RawP50MS)
	r.ServePythonP50MS = pct(py, 50)
	r.ServePythonVsMinimal = ratio(r.ServePythonP50MS, r.RawMinimalP50MS)
	r.ServeNewSessionP50MS = pct(newSess, 50)
	r.ServeNewSessionVsMinimal = ratio(r.ServeNewSessionP50MS, r.RawMinimalP50MS)
	r.ServeConcurrentPerSecond, r.RawConcurrentPerSecond = tp.serve, tp.raw
	r.ServeConcurrentVsRaw = ratio(tp.serve, tp.raw)
	if tp.serve > 0 {
		r.ThroughputConcurrency = benchThroughputWorkers
	}
	if f.json {
		writeJSON(io.Out, r)
		return 0
	}
	printBench(io.Out, r, lat, raw, cold, direct, benchRow{"raw minimal bwrap", rawMin},
		benchRow{"CLI start (--version)", start}, benchRow{"serve, session reused", trip}, benchRow{"serve, Python client", py},
		benchRow{"serve, new session", newSess}, benchRow{"exec --host (fresh CLI)", host})
	return 0
}

// printBench prints the side-by-side table: each way of running the
// command, its percentiles and its p50 over raw bubblewrap's.
func printBench(w io.Writer, r benchResult, warm, raw, cold, direct []time.Duration, extra ...benchRow) {
	fmt.Fprintf(w, "%-22s %9s %9s %9s %9s %11s\n", "", "p50 ms", "p90 ms", "p99 ms", "vs raw", "vs minimal")
	row := func(name string, d []time.Duration) {
		if len(d) == 0 {
			return
		}
		vs, vsMin := "-", "-"
		if r.RawP50MS > 0 {
			vs = fmt.Sprintf("%.2fx", ratio(pct(d, 50), r.RawP50MS))
		}
		if r.RawMinimalP50MS > 0 {
			vsMin = fmt.Sprintf("%.2fx", ratio(pct(d, 50), r.RawMinimalP50MS))
		}
		fmt.Fprintf(w, "%-22s %9.3f %9.3f %9.3f %9s %11s\n", name, pct(d, 50), pct(d, 90), pct(d, 99), vs, vsMin)
	}
	row("direct exec", direct)
	row("raw bwrap, same flags", raw)
	row("warm pipeline ("+r.Backend+")", warm)
	row("cold CLI", cold)
	for _, e := range extra {
		row(e.name, e.lat)
	}
	fmt.Fprintf(w, "warm: %.1f runs/s at concurrency %d; n=%d each\n", r.PerSecond, r.Concurrency, r.N)
	// Throughput through serve, a session per worker, against raw bwrap
	// at the same concurrency: the goal's commands/s ratio.
	if r.ServeConcurrentPerSecond > 0 {
		vs := "no raw bwrap to compare"
		if r.RawConcurrentPerSecond > 0 {
			vs = fmt.Sprintf("%.2fx raw bwrap's %.1f", r.ServeConcurrentVsRaw, r.RawConcurrentPerSecond)
		}
		fmt.Fprintf(w, "serve, a session per worker: %.1f commands/s at concurrency %d (%s)\n",
			r.ServeConcurrentPerSecond, r.ThroughputConcurrency, vs)
	}
	// The one-shot figure the performance goals name, on a line of its
	// own: a fresh `exec` per command against the smallest bwrap sandbox,
	// both from this run.
	if r.RawMinimalP50MS > 0 && len(cold) > 0 {
		fmt.Fprintf(w, "one-shot CLI vs raw minimal bwrap: %.2fx (p50 %.3f ms over %.3f ms)\n",
			ratio(pct(cold, 50), r.RawMinimalP50MS), pct(cold, 50), r.RawMinimalP50MS)
	}
}

// benchRow is a row of the table beyond the first four.
type benchRow struct {
	name string
	lat  []time.Duration
}

// settledOrNil is settled(w, benchSettle), nil for no way.
func settledOrNil(w benchWay) benchWay {
	if w == nil {
		return nil
	}
	return settled(w, benchSettle)
}

// timedOrNil is timed(fn), or nil for a way that is not measured.
func timedOrNil(fn func() string) benchWay {
	if fn == nil {
		return nil
	}
	return timed(fn)
}

// benchThroughputWorkers is the concurrency of the throughput line: the
// goals' "c=4".
const benchThroughputWorkers = 4

// benchThroughputCommands caps the commands each way of the throughput
// line runs (eight per worker): enough for a commands/s figure, few
// enough that the line adds a few seconds to a bench that runs in CI.
const benchThroughputCommands = 8 * benchThroughputWorkers

// sessionThroughput is commands per second at benchThroughputWorkers
// through serve (a session per worker) and through raw bwrap with the
// driver's flags (0 where there is none).
type sessionThroughput struct{ serve, raw float64 }

// measureSessionThroughput runs n commands each way, half and half in two
// alternating batches so load that comes and goes touches both alike:
// through serve with a session per worker (each warmed by its first
// command, which builds the session's sandbox, outside the count), and,
// when withRaw, through raw bwrap, a driver raw-mode process per worker
// (one process runs one bwrap at a time). The sessions are deleted and
// the raw processes ended before it returns.
func measureSessionThroughput(ctx context.Context, srv *benchServe, cfg core.Config, cmd core.Command, withRaw bool, n int) (sessionThroughput, string) {
	var tp sessionThroughput
	serveWays, done, msg := srv.sessionWorkers(ctx, cmd, benchThroughputWorkers)
	defer done()
	if msg != "" {
		return tp, "throughput through serve: " + msg
	}
	var rawWays []benchWay
	if withRaw {
		for w := range benchThroughputWorkers {
			// Each raw worker gets a workspace of its own, as each serve
			// worker has its session's: the driver processes protect and
			// release their workspace's entries around every run, and two
			// of them sharing one would remove what the other's bwrap is
			// about to bind.
			rawCmd := cmd
			rawCmd.Workspace = filepath.Join(srv.dir, fmt.Sprintf("raw-workspace-%d", w))
			if err := os.Mkdir(rawCmd.Workspace, 0o700); err != nil {
				return tp, fmt.Sprintf("throughput through raw bwrap: %v", err)
			}
			way, _, stop, err := rawRunner(ctx, cfg, rawCmd)
			defer stop()
			if err != nil || way == nil {
				return tp, fmt.Sprintf("throughput through raw bwrap: %v", err)
			}
			rawWays = append(rawWays, way)
		}
	}
	var served, rawed int
	var serveTime, rawTime time.Duration
	for batch := range 2 {
		k := n / 2
		if batch == 1 {
			k = n - k
		}
		if k == 0 {
			continue
		}
		took, msg := throughput(k, serveWays)
		if msg != "" {
			return tp, "throughput through serve: " + msg
		}
		served, serveTime = served+k, serveTime+took
		if rawWays != nil {
			took, msg := throughput(k, rawWays)
			if msg != "" {
				return tp, "throughput through raw bwrap: " + msg
			}
			rawed, rawTime = rawed+k, rawTime+took
		}
	}
	tp.serve = float64(served) / serveTime.Seconds()
	if rawed > 0 {
		tp.raw = float64(rawed) / rawTime.Seconds()
	}
	return tp, ""
}

// throughput runs n commands, len(ways) at a time, worker w always
// through ways[w], and returns the wall time of the whole and the first
// failure (which stops the rest).
func throughput(n int, ways []benchWay) (time.Duration, string) {
	var next atomic.Int64
	var stop atomic.Bool
	var mu sync.Mutex
	first := ""
	var wg sync.WaitGroup
	start := time.Now()
	for _, w := range ways {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && next.Add(1) <= int64(n) {
				if _, msg := runWay(w); msg != "" {
					mu.Lock()
					if first == "" {
						first = msg
					}
					mu.Unlock()
					stop.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), first
}

// interleave runs n rounds, each calling every way once in turn, and
// returns each way's latencies and the first failure.
func interleave(n int, ways []benchWay) ([][]time.Duration, string) {
	lat := make([][]time.Duration, len(ways))
	for i := 0; i < n; i++ {
		for w, fn := range ways {
			took, msg := runWay(fn)
			lat[w] = append(lat[w], took)
			if msg != "" {
				return lat, fmt.Sprintf("run %d: %s", i+1, msg)
			}
		}
	}
	return lat, ""
}

// coldRunner returns a function that runs the command as `aleph-sandbox
// exec`, a fresh process each time (config load, driver launch, handshake,
// probe, run, teardown): what a caller that shells out per command pays.
func coldRunner(ctx context.Context, flags []string, cmd core.Command) (func() string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cold runs: locate own binary: %w", err)
	}
	args := append([]string{"exec"}, flags...)
	args = append(append(args, "--", cmd.Program), cmd.Args...)
	// The benchmark measures the sandbox, not the throttle in front of it.
	env := append(os.Environ(), core.EnvPrefix+"RATE_LIMIT__ENABLED=false")
	return func() string {
		c := exec.CommandContext(ctx, self, args...)
		tieToBench(c)
		c.Env = env
		if len(cmd.Stdin) > 0 {
			c.Stdin = bytes.NewReader(cmd.Stdin)
		}
		var stderr bytes.Buffer
		c.Stderr = &stderr
		if err := c.Run(); err != nil {
			return "cold CLI run: " + err.Error() + ": " + oneLine(stderr.String())
		}
		return ""
	}, nil
}

func benchFailure(out *core.Output, err error) string {
	switch {
	case err != nil:
		return oneLine(userMessage(err))
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
func measure(n, c int, fn benchWay) ([]time.Duration, time.Duration, string) {
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
				took, msg := runWay(fn)
				lat[i] = took
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
