//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
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
	// The installed layout, prepared sandboxes on (the default).
	d := benchDriver(b, options{}, false)
	// Every sandbox built for its command.
	du := benchDriver(b, options{Prepared: preparedOff}, false)
	// Without cgroups: what the confinement costs apart from the cgroup
	// hand-over (on cgroup v1 the move of bwrap's child).
	dn := benchDriver(b, options{Cgroup: cgroupNone, Prepared: preparedOff}, false)
	// The set-up before the /etc view and the precompiled programs.
	dl := benchDriver(b, options{Prepared: preparedOff}, true)
	spec, ws := benchSpec(b, d)
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
	// A way's settle runs after it, untimed: a prepared sandbox ends and
	// the next is built in the background once the command is answered,
	// and that must not land on the way measured next
	// (BenchmarkThroughput counts it).
	ways := []struct {
		name   string
		fn     func() error
		settle func()
	}{
		{"raw_bwrap", func() error {
			cmd, release, err := d.rawBwrapCommand(ctx, spec)
			if err != nil {
				return err
			}
			defer release()
			return cmd.Run()
		}, nil},
		{"raw_bwrap_before", func() error {
			cmd, release, err := dl.rawBwrapCommand(ctx, spec)
			if err != nil {
				return err
			}
			defer release()
			return cmd.Run()
		}, nil},
		{"direct", func() error { return exec.Command("/bin/true").Run() }, nil},
		{"raw_minimal", func() error { return exec.Command(d.probe().bwrap, minimal...).Run() }, nil},
		{"in_process", func() error { return run(d, spec) }, d.pool.WaitIdle},
		{"in_process_unprepared", func() error { return run(du, spec) }, nil},
		{"in_process_before", func() error { return run(dl, spec) }, nil},
		{"no_cgroup", func() error { return run(dn, spec) }, nil},
		// The plugin's pool is in another process: a pause long enough for
		// a teardown and a build here.
		{"plugin", func() error { return run(pd, pspec) }, func() { time.Sleep(40 * time.Millisecond) }},
	}
	lat := make([][]time.Duration, len(ways))
	for b.Loop() {
		for i, w := range ways {
			t := time.Now()
			if err := w.fn(); err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			lat[i] = append(lat[i], time.Since(t))
			if w.settle != nil {
				w.settle()
			}
		}
	}
	raw, floor := p50ms(lat[0]), p50ms(lat[3])
	for i, w := range ways {
		v := p50ms(lat[i])
		b.ReportMetric(v, w.name+"_p50_ms")
		if i > 0 && raw > 0 {
			b.ReportMetric(v/raw, w.name+"_x_raw")
		}
		if i > 3 && floor > 0 {
			b.ReportMetric(v/floor, w.name+"_x_minimal")
		}
	}
	b.ReportMetric(hitRate(d), "in_process_hit_rate")
}

// p50ms is the median of d in milliseconds.
func p50ms(d []time.Duration) float64 {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return float64(s[len(s)/2].Microseconds()) / 1000
}

// hitRate is the share of d's runs served by a prepared sandbox.
func hitRate(d *Driver) float64 {
	st := d.PreparedStats()
	if st.Hits+st.Misses == 0 {
		return 0
	}
	return float64(st.Hits) / float64(st.Hits+st.Misses)
}

// BenchmarkPreparedBackToBack runs /bin/true ten times back to back through
// the driver with prepared sandboxes (at most two per profile, the
// default), then ten times through the driver without them, through the
// smallest bwrap sandbox and directly; the batches alternate, so load
// touches all alike. The figures are each way's p50 (ms), the prepared
// driver's ratio to raw minimal bwrap and to direct exec, and its hit rate:
// back to back, a command arrives while the sandbox for the next is still
// being built, so a pool as large as the run would prove nothing.
func BenchmarkPreparedBackToBack(b *testing.B) {
	ctx := context.Background()
	d := benchDriver(b, options{}, false)
	du := benchDriver(b, options{Prepared: preparedOff}, false)
	spec, ws := benchSpec(b, d)
	minimal := minimalBwrapArgs(d, ws)
	ways := []struct {
		name string
		fn   func() error
	}{
		{"prepared", func() error { return runTrue(ctx, d, spec) }},
		{"unprepared", func() error { return runTrue(ctx, du, spec) }},
		{"raw_minimal", func() error { return exec.Command(d.probe().bwrap, minimal...).Run() }},
		{"direct", func() error { return exec.Command("/bin/true").Run() }},
	}
	lat := make([][]time.Duration, len(ways))
	for b.Loop() {
		for i, w := range ways {
			for range 10 {
				t := time.Now()
				if err := w.fn(); err != nil {
					b.Fatalf("%s: %v", w.name, err)
				}
				lat[i] = append(lat[i], time.Since(t))
			}
			// Untimed: the last sandboxes' teardown and the refill must not
			// land on the next batch.
			d.pool.WaitIdle()
		}
	}
	for i, w := range ways {
		b.ReportMetric(p50ms(lat[i]), w.name+"_p50_ms")
	}
	if m := p50ms(lat[2]); m > 0 {
		b.ReportMetric(p50ms(lat[0])/m, "prepared_x_minimal")
		b.ReportMetric(p50ms(lat[1])/m, "unprepared_x_minimal")
	}
	if de := p50ms(lat[3]); de > 0 {
		b.ReportMetric(p50ms(lat[0])/de, "prepared_x_direct")
	}
	b.ReportMetric(hitRate(d), "hit_rate")
}

// benchDriver is a driver in the installed layout (the small
// aleph-sandbox-init beside the driver binary) with opts; legacy restores
// the set-up before the /etc view and the precompiled programs.
func benchDriver(b *testing.B, opts options, legacy bool) *Driver {
	b.Helper()
	d, err := newDriver(config{Options: opts, InitBinary: chooseInit(driverBin), legacySetup: legacy})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.Close)
	return d
}

// benchSpec runs /bin/true in a fresh workspace with d's default profile.
func benchSpec(b *testing.B, d *Driver) (driverapi.RunSpec, string) {
	b.Helper()
	ws := newWorkspace(b)
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		b.Fatal(err)
	}
	return driverapi.RunSpec{Program: "/bin/true", Cwd: ws, Profile: prof, Timeout: 30 * time.Second,
		MaxOutputBytes: 1 << 20, Env: pathEnv()}, ws
}

// minimalBwrapArgs runs /bin/true in minimalSandboxArgs' sandbox.
func minimalBwrapArgs(_ *Driver, ws string) []string {
	return append(minimalSandboxArgs(ws, ws), "/bin/true")
}

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
	d := benchDriver(b, options{}, false)
	dl := benchDriver(b, options{Prepared: preparedOff}, true)
	du := benchDriver(b, options{Prepared: preparedOff}, false)
	spec, _ := benchSpec(b, d)
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
		{"driver_unprepared", func() error { return runTrue(ctx, du, spec) }},
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
	b.ReportMetric(rate(1)/rate(3), "driver_x_unprepared")
	b.ReportMetric(hitRate(d), "driver_hit_rate")
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

// BenchmarkSession runs /bin/true through a session sandbox, in batches
// that alternate with the smallest bwrap sandbox and direct exec, so load
// touches all alike. Each iteration opens a new session: its first command
// (first_p50: the session sandbox built for it), then 20 commands in it
// (warm_p50: a command's sandbox-init waiting ahead, the hand-over), then
// forgets it, untimed. CPU per command counts every process: the driver's
// own (RUSAGE_SELF) and its children's (RUSAGE_CHILDREN: the session's
// bwrap, reaped at the forget, includes the supervisor and every command's
// sandbox-init it reaped); the session's is over the first command and
// the 20 warm ones together, its build shared among them.
func BenchmarkSession(b *testing.B) {
	benchSession(b, options{SessionSandbox: sessionSandboxAlways, Prepared: preparedOff})
}

// BenchmarkSessionKept is BenchmarkSession with session_placeholders =
// "session": the protected entries and their placeholders kept for the
// session sandbox's life, a command checking the workspace unchanged.
func BenchmarkSessionKept(b *testing.B) {
	benchSession(b, options{SessionSandbox: sessionSandboxAlways, Prepared: preparedOff, SessionPlaceholders: sessionPlaceholdersSession})
}

// waitAheadBuilt waits (bounded) until a session sandbox built ahead
// waits, or none is being built.
func waitAheadBuilt(d *Driver) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_, waiting := d.AheadStats()
		d.sessions.mu.Lock()
		building := len(d.sessions.ahead.building)
		d.sessions.mu.Unlock()
		if waiting > 0 || building == 0 {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func benchSession(b *testing.B, opts options) {
	ctx := context.Background()
	d := benchDriver(b, opts, false)
	if why := d.sessionOffWhy(); why != "" {
		b.Skip("session sandboxes off here: " + why)
	}
	spec, ws := benchSpec(b, d)
	minimal := minimalBwrapArgs(d, ws)
	const warm = 20
	var first, inSession, rawMin, direct []time.Duration
	var cpuSession, cpuRaw time.Duration
	var nSession, nRaw int
	// Where a warm command's CPU goes, by process: this process (the
	// driver's side), the session's supervisor, and what the supervisor
	// reaped (each command's reaper and the command), read around the
	// warm commands of each session.
	var cpuDriver, cpuSup, cpuKids time.Duration
	var nSplit int
	timed := func(into *[]time.Duration, fn func() error) {
		t := time.Now()
		if err := fn(); err != nil {
			b.Fatal(err)
		}
		*into = append(*into, time.Since(t))
	}
	waitAhead := func(key poolKey) {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			d.sessions.mu.Lock()
			ss := d.sessions.m[key]
			d.sessions.mu.Unlock()
			if ss != nil {
				ss.mu.Lock()
				ok := ss.ahead != nil
				ss.mu.Unlock()
				if ok {
					return
				}
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	// A session that lives through the run, as a service's other sessions
	// do: the driver keeps sandboxes built ahead only while it holds a
	// session (dropAheadIfIdle), and each iteration forgets its own.
	resident := spec
	resident.SessionID = "bench-resident"
	if err := runTrue(ctx, d, resident); err != nil {
		b.Fatal(err)
	}
	n := 0
	for b.Loop() {
		n++
		s := spec
		s.SessionID = "bench-" + strconv.Itoa(n)
		key := keyFor(s)
		c0 := cpuAll()
		// Untimed: the session sandbox built ahead once the last session
		// started (sessionahead_linux.go), when one is.
		waitAheadBuilt(d)
		timed(&first, func() error { return runTrue(ctx, d, s) })
		sup := sessionSupervisor(d, key)
		var sup0, kids0, self0 time.Duration
		split := sup != ""
		if split {
			sup0, kids0 = procCPU(sup)
			self0 = cpuSelf()
		}
		for range warm {
			// Untimed: the next command's sandbox-init is started once
			// this one is answered; back to back it usually is ready.
			waitAhead(key)
			timed(&inSession, func() error { return runTrue(ctx, d, s) })
		}
		if split {
			self1 := cpuSelf()
			sup1, kids1 := procCPU(sup)
			if sup1 >= sup0 && kids1 >= kids0 {
				cpuDriver += self1 - self0
				cpuSup += sup1 - sup0
				cpuKids += kids1 - kids0
				nSplit += warm
			}
		}
		if err := d.ForgetSession(ctx, s.SessionID); err != nil {
			b.Fatal(err)
		}
		d.pool.WaitIdle()
		cpuSession += cpuAll() - c0
		nSession += warm + 1
		c0 = cpuAll()
		for range warm {
			timed(&rawMin, func() error { return exec.Command(d.probe().bwrap, minimal...).Run() })
		}
		cpuRaw += cpuAll() - c0
		nRaw += warm
		for range warm {
			timed(&direct, func() error { return exec.Command("/bin/true").Run() })
		}
	}
	m := p50ms(rawMin)
	b.ReportMetric(p50ms(first), "first_p50_ms")
	b.ReportMetric(p50ms(inSession), "warm_p50_ms")
	b.ReportMetric(m, "raw_minimal_p50_ms")
	b.ReportMetric(p50ms(direct), "direct_p50_ms")
	if m > 0 {
		b.ReportMetric(p50ms(first)/m, "first_x_minimal")
		b.ReportMetric(p50ms(inSession)/m, "warm_x_minimal")
	}
	st, _ := d.AheadStats()
	b.ReportMetric(float64(st.Taken), "first_built_ahead")
	cs := float64(cpuSession.Microseconds()) / 1000 / float64(nSession)
	cr := float64(cpuRaw.Microseconds()) / 1000 / float64(nRaw)
	b.ReportMetric(cs, "session_cpu_ms/cmd")
	b.ReportMetric(cr, "raw_minimal_cpu_ms/cmd")
	if cr > 0 {
		b.ReportMetric(cs/cr, "session_cpu_x_minimal")
	}
	if nSplit > 0 {
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(nSplit) }
		b.ReportMetric(per(cpuDriver), "warm_driver_cpu_ms/cmd")
		b.ReportMetric(per(cpuSup), "warm_supervisor_cpu_ms/cmd")
		b.ReportMetric(per(cpuKids), "warm_reaper_command_cpu_ms/cmd")
		// Every process of a warm command. session_cpu_ms/cmd above is
		// this process's usage and that of the children it reaped: the
		// session's supervisor (and what it reaped) reaches it only if
		// bwrap reaps the supervisor before the driver reaps bwrap, which
		// a session's end does not wait for, so that figure leaves most of
		// the supervisor's side out.
		all := per(cpuDriver + cpuSup + cpuKids)
		b.ReportMetric(all, "warm_all_cpu_ms/cmd")
		if cr > 0 {
			b.ReportMetric(all/cr, "warm_all_cpu_x_minimal")
		}
	}
}

// cpuSelf is this process's own CPU time (user and system).
func cpuSelf() time.Duration {
	var self syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano())
}

// procCPU is pid's own CPU time and that of its reaped children
// (/proc/<pid>/stat's utime+stime and cutime+cstime).
func procCPU(pid string) (own, kids time.Duration) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return 0, 0
	}
	tick := func(k int) time.Duration {
		v, _ := strconv.ParseInt(f[k], 10, 64)
		return time.Duration(v) * time.Second / 100 // USER_HZ
	}
	// utime, stime, cutime, cstime: fields 14-17, here 11-14.
	return tick(11) + tick(12), tick(13) + tick(14)
}

// sessionSupervisor is the host pid of the supervisor of key's session
// sandbox (bwrap's one child), "" when there is none.
func sessionSupervisor(d *Driver, key poolKey) string {
	d.sessions.mu.Lock()
	ss := d.sessions.m[key]
	d.sessions.mu.Unlock()
	if ss == nil || ss.sup == nil || ss.sup.sb == nil || ss.sup.sb.cmd.Process == nil {
		return ""
	}
	bw := strconv.Itoa(ss.sup.sb.cmd.Process.Pid)
	b, err := os.ReadFile("/proc/" + bw + "/task/" + bw + "/children")
	if err != nil {
		return ""
	}
	kids := strings.Fields(string(b))
	if len(kids) != 1 {
		return ""
	}
	return kids[0]
}

// cpuAll is the CPU time (user and system) of this process and of its
// reaped children so far.
func cpuAll() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// BenchmarkSessionIdleHeld opens many sessions (ALEPH_BENCH_IDLE_SESSIONS,
// 64 unless set; the full bench asks for 256), one command each, lets them
// go idle (their waiting sandbox-inits ended) and reports what they hold:
// the PSS of every session process, in all and per session. Run it with
// -benchtime 1x.
func BenchmarkSessionIdleHeld(b *testing.B) {
	ctx := context.Background()
	d := benchDriver(b, options{SessionSandbox: sessionSandboxAlways, Prepared: preparedOff}, false)
	if why := d.sessionOffWhy(); why != "" {
		b.Skip("session sandboxes off here: " + why)
	}
	d.sessions.aheadIdle = 200 * time.Millisecond
	n := 64
	if v, err := strconv.Atoi(os.Getenv("ALEPH_BENCH_IDLE_SESSIONS")); err == nil && v > 0 {
		n = v
	}
	spec, ws := benchSpec(b, d)
	var perSession, total float64
	for b.Loop() {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = "idle-" + strconv.Itoa(i)
			s := spec
			s.SessionID = ids[i]
			if err := runTrue(ctx, d, s); err != nil {
				b.Fatal(err)
			}
		}
		deadline := time.Now().Add(time.Minute)
		for {
			sup, all := sessionProcs(ws)
			// bwrap and its supervisor per session, nothing waiting ahead.
			if len(sup) == n && len(all) == 2*n {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d supervisors, %d processes; want %d and %d", len(sup), len(all), n, 2*n)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The processes report ready before their Go runtimes settle.
		time.Sleep(300 * time.Millisecond)
		_, all := sessionProcs(ws)
		var kb int
		for _, pid := range all {
			raw, err := os.ReadFile("/proc/" + pid + "/smaps_rollup")
			if err != nil {
				b.Skipf("no smaps_rollup here: %v", err)
			}
			for _, line := range strings.Split(string(raw), "\n") {
				if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
					v, _ := strconv.Atoi(f[1])
					kb += v
				}
			}
		}
		total = float64(kb) / 1024
		perSession = total / float64(n)
		for _, id := range ids {
			if err := d.ForgetSession(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
		d.pool.WaitIdle()
	}
	b.ReportMetric(float64(n), "sessions")
	b.ReportMetric(total, "pss_total_MiB")
	b.ReportMetric(perSession, "pss_per_session_MiB")
}
