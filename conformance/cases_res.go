package conformance

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func resourceCases() []Case {
	return []Case{
		{ID: "res/memory-limit", Level: Must, Feature: driverapi.FeatureMemoryLimit,
			Description: "Under max_memory_mb=128 a program cannot allocate 512 MiB (it fails or is killed), while allocating 16 MiB under the same limit works.",
			run:         caseMemory},
		{ID: "res/pid-limit", Level: Must, Feature: driverapi.FeaturePidLimit,
			Description: "A program forking without end is stopped by the process limit before 1024 processes, while its first 8 children start.",
			run:         casePids},
		{ID: "res/cpu-limit", Level: Should, Feature: driverapi.FeatureCPULimit,
			Description: "Two busy processes spinning for 1.5 s of wall time get less than 1.4 CPU-seconds in total per second (the CPU share is capped below about one and a half cores).",
			run:         caseCPU},
	}
}

func caseMemory(ctx context.Context, h *H) error {
	const script = `my $x = "a" x ($ARGV[0] * 1048576); print "allocated:", length($x) >> 20, "\n";`
	caps := &driverapi.Capabilities{MaxMemoryMB: 128}
	small := h.Exec(ctx, Cmd{Program: progPerl, Args: []string{"-e", script, "16"}, Caps: caps})
	if err := ok("16 MiB under 128 MiB", small); err != nil {
		return err
	}
	if !bytes.Contains(small.Stdout, []byte("allocated:16")) {
		return fmt.Errorf("16 MiB allocation did not complete (positive control): %s", small)
	}
	big := h.Exec(ctx, Cmd{Program: progPerl, Args: []string{"-e", script, "512"}, Caps: caps})
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

func casePids(ctx context.Context, h *H) error {
	tag := "aleph-conformance-pids-" + newToken()
	h.defer_(func() { killTagged(tag) })
	const script = `use POSIX (); my @k; for (1..1024) { my $p = fork; last unless defined $p; if ($p == 0) { sleep 3; POSIX::_exit(0) } push @k, $p }
print "forked=", scalar(@k), "\n"; kill "KILL", @k; waitpid($_, 0) for @k;`
	o := h.Exec(ctx, Cmd{Program: progPerl, Args: []string{"-e", script, tag}})
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

func caseCPU(ctx context.Context, h *H) error {
	const script = `for (1..2) { my $p = fork; die "fork: $!" unless defined $p; if (!$p) { my $e = time + 1.5; 1 while time < $e; exit 0 } }
1 while wait > 0; my @t = times; printf "cpu=%.3f\n", $t[2] + $t[3];`
	o := h.Exec(ctx, Cmd{Program: progPerl, Args: []string{"-MTime::HiRes=time", "-e", script}})
	if err := ok("busy loops", o); err != nil {
		return err
	}
	s := string(o.Stdout)
	i := strings.Index(s, "cpu=")
	if i < 0 {
		return fmt.Errorf("no cpu figure: %s", o)
	}
	cpu, err := strconv.ParseFloat(strings.TrimSpace(s[i+4:]), 64)
	if err != nil {
		return err
	}
	if cpu <= 0 {
		return fmt.Errorf("busy loops used no CPU (positive control): %s", o)
	}
	if cpu >= 1.4*1.5 {
		return fmt.Errorf("busy loops used %.2f CPU-seconds in 1.5 s: no cap below 1.4 cores", cpu)
	}
	return nil
}
