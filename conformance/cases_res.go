package conformance

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func resourceCases() []Case {
	return []Case{
		{ID: "res/memory-limit", Level: Must, Feature: driverapi.FeatureMemoryLimit,
			Description: "Under max_memory_mb=128 a program cannot allocate 512 MiB (it fails or is killed), while allocating 16 MiB under the same limit works.",
			run:         caseMemory},
		{ID: "res/pid-limit", Level: Must, Feature: driverapi.FeaturePidLimit,
			OS: POSIXOnly, OSReason: "the fork loop is a perl program (Windows drivers enforce the process count with a Job Object, tested by proc/spawn-denied)",
			Description: "A program forking without end is stopped by the process limit before 1024 processes, while its first 8 children start.",
			run:         casePids},
		{ID: "res/cpu-limit", Level: Must, Feature: driverapi.FeatureCPULimit,
			Description: "Busy threads (as many as the host has cores, 2 to 4) spinning for 1 s in the sandbox, twice (before and after the baseline, the larger count taken), get less than 1.4 CPU-seconds per second and less than 85% of what the same program gets run unconfined on the host in between (the baseline, the smaller of two): what the command got, relative to what the host would have given it. When the baseline is below 1.6 the round cannot tell a cap from load and is measured again, up to three rounds; a host that never gives 1.6 fails the case as inconclusive (a claimed feature must be shown, so a driver that sets no cap never passes on a busy host).",
			run:         caseCPU},
	}
}

// memCmd allocates mb MiB. POSIX hosts run perl: a driver may enforce
// max_memory_mb with RLIMIT_AS (macOS does), under which the Go runtime
// cannot even start, since it reserves address space up front. Windows
// Job Objects limit committed memory, which the probe only commits as it
// allocates.
func (h *H) memCmd(caps *driverapi.Capabilities, mb string) Cmd {
	if perl := h.suite.progs.perl; perl != "" {
		// x= grows the string in place: "a" x N would build it twice
		// and need twice the memory.
		const script = `my $x = "a"; $x x= ($ARGV[0] * 1048576); print "allocated:", length($x) >> 20, "\n";`
		return Cmd{Program: perl, Args: []string{"-e", script, mb}, Caps: caps}
	}
	return h.ProbeCmd(Cmd{Caps: caps}, "alloc", mb)
}

func caseMemory(ctx context.Context, h *H) error {
	caps := &driverapi.Capabilities{MaxMemoryMB: 128}
	small := h.Exec(ctx, h.memCmd(caps, "16"))
	if err := ok("16 MiB under 128 MiB", small); err != nil {
		return err
	}
	if !bytes.Contains(small.Stdout, []byte("allocated:16")) {
		return fmt.Errorf("16 MiB allocation did not complete (positive control): %s", small)
	}
	big := h.Exec(ctx, h.memCmd(caps, "512"))
	if big.Err != nil {
		return nil // refused outright is a kill too
	}
	if bytes.Contains(big.Stdout, []byte("allocated:512")) {
		return fmt.Errorf("512 MiB allocated under max_memory_mb=128: %s", big)
	}
	if big.Exit.ExitCode == 0 && big.Exit.Signal == 0 {
		return fmt.Errorf("the over-limit allocation reported success: %s", big)
	}
	return nil
}

// casePids forks with perl: a limit on processes usually counts threads
// too (Linux pids cgroups), and a Go runtime that cannot start a thread
// dies, so a Go fork loop would measure the runtime, not the limit.
func casePids(ctx context.Context, h *H) error {
	tag := "aleph-conformance-pids-" + newToken()
	h.defer_(func() { killTagged(tag) })
	const script = `use POSIX (); my @k; for (1..1024) { my $p = fork; last unless defined $p; if ($p == 0) { sleep 3; POSIX::_exit(0) } push @k, $p }
print "forked=", scalar(@k), "\n"; kill "KILL", @k; waitpid($_, 0) for @k;`
	o := h.Exec(ctx, Cmd{Program: h.suite.progs.perl, Args: []string{"-e", script, tag}})
	if o.Err != nil {
		return o.Err
	}
	s := string(o.Stdout)
	i := strings.Index(s, "forked=")
	if i < 0 {
		return fmt.Errorf("the fork loop did not finish: %s", o)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(s[i+len("forked="):]))
	if n < 8 {
		return fmt.Errorf("only %d children started (positive control wants 8)", n)
	}
	if n >= 1024 {
		return fmt.Errorf("%d processes forked: no process limit below 1024", n)
	}
	return nil
}

// cpuFigure parses the probe's "cpu=SECONDS" figure.
func cpuFigure(o Out) (float64, error) {
	s := string(o.Stdout)
	i := strings.Index(s, "cpu=")
	if i < 0 {
		return 0, fmt.Errorf("no cpu figure: %s", o)
	}
	return strconv.ParseFloat(strings.TrimSpace(s[i+4:]), 64)
}

// cpuBaseline runs the same busy loops unconfined, as a host process.
func (h *H) cpuBaseline(ctx context.Context, secs, threads string) (float64, error) {
	p, err := h.suite.suiteProbe()
	if err != nil {
		return 0, err
	}
	out, err := exec.CommandContext(ctx, p, probe.Magic, "cpu", secs, threads).Output()
	if err != nil {
		return 0, fmt.Errorf("the unconfined baseline: %w", err)
	}
	return cpuFigure(Out{Stdout: out})
}

// cpuRounds bounds how often caseCPU measures before it calls the host
// inconclusive: each round takes about four seconds.
const cpuRounds = 3

func caseCPU(ctx context.Context, h *H) error {
	const secs = 1.0
	threads := fmt.Sprint(min(max(runtime.NumCPU(), 2), 4))
	sandboxed := func(what string) (float64, error) {
		o := h.Probe(ctx, nil, "cpu", fmt.Sprint(secs), threads)
		if err := ok(what, o); err != nil {
			return 0, err
		}
		return cpuFigure(o)
	}
	var seen []string
	for round := 1; round <= cpuRounds; round++ {
		// The sandboxed run comes first: it is the positive control, and a
		// driver that runs nothing fails before any host figure is taken.
		limited, err := sandboxed("busy loops")
		if err != nil {
			return err
		}
		if limited <= 0 {
			return fmt.Errorf("busy loops used no CPU (positive control)")
		}
		before, err := h.cpuBaseline(ctx, fmt.Sprint(secs), threads)
		if err != nil {
			return err
		}
		after, err := h.cpuBaseline(ctx, fmt.Sprint(secs), threads)
		if err != nil {
			return err
		}
		// A second sandboxed run after the baselines, and the larger of
		// the two counts: on a shared host a burst of load during one
		// sandboxed run must not make an uncapped driver look capped.
		again, err := sandboxed("busy loops (again)")
		if err != nil {
			return err
		}
		rate := max(limited, again) / secs
		base := min(before, after) / secs
		if rate >= 1.4 {
			return fmt.Errorf("busy loops used %.2f CPU-seconds per second: no cap below 1.4 cores (unconfined: %.2f)", rate, base)
		}
		// What the command got is only a cap when the host would have
		// given more: compared with the same program unconfined, measured
		// between the two sandboxed runs, a ratio and not an absolute rate.
		if base >= 1.6 {
			if rate >= 0.85*base {
				return fmt.Errorf("busy loops got %.2f CPU-seconds per second in the sandbox and %.2f unconfined (ratio %.2f): no CPU cap", rate, base, rate/base)
			}
			return nil
		}
		seen = append(seen, fmt.Sprintf("%.2f unconfined, %.2f sandboxed", base, rate))
		if ctx.Err() != nil {
			break
		}
	}
	// A claimed feature is always tested: a host too busy (or too small) to
	// show the cap proves nothing either way, and a driver that sets no cap
	// must not pass for it. Failing, not skipping, says so.
	return fmt.Errorf("inconclusive: in %d rounds this host never gave the unconfined busy loops 1.6 CPU-seconds per second (%s), so a cap could not be told from load; cpu_limit is claimed, so it must be shown: rerun on a host with at least two idle cores", len(seen), strings.Join(seen, "; "))
}
