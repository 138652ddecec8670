package conformance

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The cases of this file check that a limit is not only present but tight,
// and that an outcome is reported as what it was: a driver whose limit is
// several times too loose, or that reads an exit status as a signal,
// passes a check that only asks "is there a limit at all".

// timeoutSlack is how long after its timeout a command may still be
// running before Run returns: killing the tree and collecting the output
// take a moment, several seconds do not.
const timeoutSlack = 2 * time.Second

// memTightMB is the limit of res/memory-limit-tight: small, so the case
// is quick.
const memTightMB = 128

func tightCases() []Case {
	return []Case{
		{ID: "proc/spawn-denied-clone3", Level: Must, Feature: driverapi.FeatureSubprocessControl, OS: LinuxOnly, OSReason: "clone3 is a Linux system call",
			Description: "Without spawn_subprocess a child can be started neither with the clone3 system call (raw, as glibc's posix_spawn and pthread_create try first) nor with posix_spawn (python3's os.posix_spawn, where the host has /usr/bin/python3); with spawn_subprocess both start a child (clone3 may answer ENOSYS, after which clone must work, as libc expects).",
			run:         caseClone3},
		{ID: "proc/timeout-tight", Level: Must,
			Description: "A command with a 1 s timeout that would sleep 30 s has ended and been reported with timed_out within the timeout plus 2 s of slack (the command had started).",
			run:         caseTimeoutTight},
		{ID: "exec/exit-status-not-signal", Level: Must,
			Description: "Exit statuses 129, 130, 137, 143, 150, 160 and 192 that a program chooses itself are reported as those exit codes with signal 0 (not as death by signal N-128); on POSIX hosts a program that really dies of SIGHUP, SIGINT, SIGKILL, SIGUSR1 or SIGTERM is reported with that signal number.",
			run:         caseExitNotSignal},
		{ID: "res/memory-limit-tight", Level: Must, Feature: driverapi.FeatureMemoryLimit,
			Description: "Under max_memory_mb=128 allocating twice the limit (256 MiB) fails or is killed, and allocating half of it (64 MiB) succeeds: the limit is the one asked for, not a multiple of it.",
			run:         caseMemoryTight},
	}
}

// python3 is the interpreter whose os.posix_spawn goes through libc's
// posix_spawn; "" when the host has none at a path the sandbox's system
// read set holds.
func python3() string {
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"} {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

func caseClone3(ctx context.Context, h *H) error {
	deny, allow := &driverapi.Capabilities{}, &driverapi.Capabilities{SpawnSubprocess: true}
	steps := []string{"echo", "alive", sep, "try", "clone3"}
	o := h.Probe(ctx, deny, steps...)
	if err := ran("clone3 without spawn", o, "alive"); err != nil {
		return err
	}
	if bytes.Contains(o.Stdout, []byte("-child=")) {
		return fmt.Errorf("a child started through clone3 without spawn_subprocess: %s", o)
	}
	o = h.Probe(ctx, allow, steps...)
	if err := ok("clone3 with spawn", o); err != nil {
		return err
	}
	if !bytes.Contains(o.Stdout, []byte("-child=42")) {
		return fmt.Errorf("spawn_subprocess=true did not let clone3 (or clone after ENOSYS) start a child (positive control): %s", o)
	}
	py := python3()
	if py == "" {
		return nil
	}
	const script = `import os, sys
print("alive", flush=True)
try:
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", "raise SystemExit(7)"], {})
    print("spawned=%d" % os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
except OSError as e:
    print("refused: %s" % e, flush=True)
`
	o = h.Exec(ctx, Cmd{Program: py, Args: []string{"-c", script}, Caps: deny})
	if err := ran("posix_spawn without spawn", o, "alive"); err != nil {
		return err
	}
	if bytes.Contains(o.Stdout, []byte("spawned=")) {
		return fmt.Errorf("a child started through posix_spawn without spawn_subprocess: %s", o)
	}
	o = h.Exec(ctx, Cmd{Program: py, Args: []string{"-c", script}, Caps: allow})
	if err := ok("posix_spawn with spawn", o); err != nil {
		return err
	}
	if !bytes.Contains(o.Stdout, []byte("spawned=7")) {
		return fmt.Errorf("spawn_subprocess=true did not let posix_spawn start a child (positive control): %s", o)
	}
	return nil
}

func caseTimeoutTight(ctx context.Context, h *H) error {
	const timeout = time.Second
	start := time.Now()
	o := h.Exec(ctx, h.ProbeCmd(Cmd{Timeout: timeout}, "echo", "started", sep, "sleep", "30"))
	took := time.Since(start)
	if err := ran("sleep", o, "started"); err != nil {
		return err
	}
	if !o.Exit.TimedOut {
		return fmt.Errorf("timed_out not set: %s", o)
	}
	if took > timeout+timeoutSlack {
		return fmt.Errorf("Run returned %s after it started, for a %s timeout (allowed: %s more): the timeout is not the one asked for",
			took.Round(time.Millisecond), timeout, timeoutSlack)
	}
	return nil
}

func caseExitNotSignal(ctx context.Context, h *H) error {
	for _, code := range []int{129, 130, 137, 143, 150, 160, 192} {
		o := h.Probe(ctx, nil, "exit", fmt.Sprint(code))
		if o.Err != nil {
			return fmt.Errorf("exit %d: %v", code, o.Err)
		}
		if o.Exit.ExitCode != int32(code) || o.Exit.Signal != 0 {
			return fmt.Errorf("a program that exited %d by itself was reported as %s (want exit=%d signal=0)", code, o, code)
		}
	}
	if !h.suite.progs.posix() {
		return nil
	}
	// Perl, not the probe: the Go runtime catches most signals, and a
	// disposition the driver inherited as ignored (SIGINT and SIGHUP in a
	// background job) must not decide the case, so the script restores
	// the default before it signals itself.
	const script = `$| = 1; my $s = $ARGV[0]; $SIG{$s} = "DEFAULT"; print "before\n"; kill $s, $$; sleep 5; print "after\n";`
	for _, sig := range []struct {
		name string
		num  int32
	}{{"HUP", 1}, {"INT", 2}, {"KILL", 9}, {"USR1", 10}, {"TERM", 15}} {
		o := h.Exec(ctx, Cmd{Program: h.suite.progs.perl, Args: []string{"-e", script, sig.name}})
		if o.Err != nil {
			return fmt.Errorf("SIG%s: %v", sig.name, o.Err)
		}
		if err := ran("SIG"+sig.name, o, "before"); err != nil {
			return err
		}
		if o.Exit.Signal != sig.num || bytes.Contains(o.Stdout, []byte("after")) {
			return fmt.Errorf("death by SIG%s (%d) reported as %s", sig.name, sig.num, o)
		}
	}
	return nil
}

func caseMemoryTight(ctx context.Context, h *H) error {
	caps := &driverapi.Capabilities{MaxMemoryMB: memTightMB}
	half, twice := fmt.Sprint(memTightMB/2), fmt.Sprint(memTightMB*2)
	small := h.Exec(ctx, h.memCmd(caps, half))
	if err := ok(half+" MiB under "+fmt.Sprint(memTightMB)+" MiB", small); err != nil {
		return err
	}
	if !bytes.Contains(small.Stdout, []byte("allocated:"+half)) {
		return fmt.Errorf("allocating half the limit did not complete (positive control): %s", small)
	}
	big := h.Exec(ctx, h.memCmd(caps, twice))
	if big.Err != nil {
		return nil // refused outright is a kill too
	}
	if bytes.Contains(big.Stdout, []byte("allocated:"+twice)) || (big.Exit.ExitCode == 0 && big.Exit.Signal == 0) {
		return fmt.Errorf("%s MiB (twice the limit) allocated under max_memory_mb=%d: the limit is looser than asked: %s", twice, memTightMB, big)
	}
	return nil
}
