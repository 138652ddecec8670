package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// tree sets up the marker children for a tree-kill case: probe children
// that keep appending to a marker file, ignoring the polite signals, either
// as a plain background child ("bg") or double-started into a session of
// their own ("daemon"; on Windows a detached process that asks to break away
// from the Job Object). Their tag argument lets the suite find and kill
// survivors; they also end themselves after a while so even an
// unmeasurable host is cleaned up.
type tree struct {
	h       *H
	tag     string
	markers []string
}

func newTree(h *H) (*tree, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	t := &tree{h: h, tag: "aleph-conformance-tree-" + hex.EncodeToString(b[:])}
	t.markers = []string{filepath.Join(h.Work, "marker-bg"), filepath.Join(h.Work, "marker-daemon")}
	h.defer_(func() { killTagged(t.tag) })
	return t, nil
}

// start are the probe steps that launch both children and wait for their
// first marker lines, followed by then (e.g. "sleep", "30").
func (t *tree) start(then ...string) []string {
	return append([]string{
		"bg", "marker-bg", t.tag, sep,
		"daemon", "marker-daemon", t.tag, sep,
		"waitmarkers", "marker-bg", "marker-daemon", sep,
		"echo", "started", sep}, then...)
}

func (t *tree) markersStarted() bool {
	for _, m := range t.markers {
		if st, err := os.Stat(m); err != nil || st.Size() == 0 {
			return false
		}
	}
	return true
}

// check: both children ran (positive control) and neither still runs.
// o is the command that started them, shown when they never ran.
func (t *tree) check(ctx context.Context, o Out) error {
	if !t.markersStarted() {
		return fmt.Errorf("the background children never ran (positive control): can the probe start children with spawn_subprocess? The command: %s", o)
	}
	for _, m := range t.markers {
		if growing, size := stillGrowing(ctx, m, 600*time.Millisecond); growing {
			return fmt.Errorf("%s still growing after the command ended (%d bytes): a descendant survived", filepath.Base(m), size)
		}
	}
	return nil
}

func procCases() []Case {
	tk := driverapi.FeatureProcessTreeKill
	return []Case{
		{ID: "proc/spawn-allowed", Level: Must,
			Description: "With spawn_subprocess the program starts child processes and sees their exit status.",
			run: func(ctx context.Context, h *H) error {
				o := h.Probe(ctx, nil, "spawn", "3")
				if err := ok("probe", o); err != nil {
					return err
				}
				if string(o.Stdout) != "child=3\n" {
					return fmt.Errorf("got %q, want child=3", o.Stdout)
				}
				return nil
			}},
		{ID: "proc/spawn-denied", Level: Must, Feature: driverapi.FeatureSubprocessControl,
			Description: "Without spawn_subprocess the program runs but cannot start a child process (and, on POSIX, a shell can neither start a program nor fork a subshell); the same commands with spawn_subprocess can.",
			run:         caseSpawnDenied},
		{ID: "proc/spawn-refused-reported", Level: Must, Feature: driverapi.FeatureSpawnRefusedReport,
			Description: "Without spawn_subprocess a program that tries to start a child runs, is refused, and the exit reports it (spawn_refused >= 1); the same program with spawn_subprocess starts its child and reports 0, and a program that starts none reports 0 without spawn_subprocess.",
			run:         caseSpawnRefusedReported},
		{ID: "proc/violations-reported", Level: Must, Feature: driverapi.FeatureViolationReport,
			Description: "A driver claiming violation_report names the kinds it watched (known kinds only) and lists, for a program that ran and was refused a child without spawn_subprocess, a spawn violation (operation process_start) when spawn is watched; a program that was refused nothing lists none, and every listed violation is of a watched kind.",
			run:         caseViolationsReported},
		{ID: "proc/timeout-reported", Level: Must,
			Description: "A command that outlives its timeout is stopped and reported with timed_out, well before it would have ended.",
			run: func(ctx context.Context, h *H) error {
				start := time.Now()
				o := h.Exec(ctx, h.ProbeCmd(Cmd{Timeout: time.Second}, "echo", "started", sep, "sleep", "30"))
				if err := ran("sleep", o, "started"); err != nil {
					return err
				}
				if !o.Exit.TimedOut {
					return fmt.Errorf("timed_out not set: %s", o)
				}
				if d := time.Since(start); d > 15*time.Second {
					return fmt.Errorf("Run returned after %s for a 1s timeout", d.Round(time.Millisecond))
				}
				return nil
			}},
		{ID: "proc/timeout-kills-tree", Level: Must, Feature: tk,
			Description: "When the timeout fires, every descendant dies, including a background child and a double-started daemon in its own session (on Windows: detached, asking to break away from the job) that ignore SIGTERM and SIGHUP (their marker files stop growing).",
			run: func(ctx context.Context, h *H) error {
				t, err := newTree(h)
				if err != nil {
					return err
				}
				// The timeout leaves the children a few seconds to start on a busy host.
				o := h.Exec(ctx, h.ProbeCmd(Cmd{Timeout: 3 * time.Second}, t.start("sleep", "30")...))
				if o.Err == nil && !o.Exit.TimedOut {
					return fmt.Errorf("command did not time out: %s", o)
				}
				return t.check(ctx, o)
			}},
		{ID: "proc/cancel-kills-tree", Level: Must, Feature: tk,
			Description: "Cancelling a running command kills every descendant, daemonised ones included.",
			run: func(ctx context.Context, h *H) error {
				t, err := newTree(h)
				if err != nil {
					return err
				}
				runCtx, cancel := context.WithCancel(ctx)
				defer cancel()
				var once sync.Once
				go func() {
					waitFor(runCtx, 10*time.Second, t.markersStarted)
					once.Do(cancel)
				}()
				o := h.Exec(runCtx, h.ProbeCmd(Cmd{}, t.start("sleep", "30")...))
				return t.check(ctx, o)
			}},
		{ID: "proc/cancel-kills-command", Level: Must,
			Description: "Whatever the driver claims (the Driver contract, not a feature): cancelling a running command kills it and, on POSIX hosts, a plain background child it started (same session and process group): both had run (their marker files grew) and neither grows once Run returned. A driver that returns on cancel and leaves the command running fails. Daemonised descendants are process_tree_kill's (proc/cancel-kills-tree).",
			run:         func(ctx context.Context, h *H) error { return caseKillsCommand(ctx, h, false) }},
		{ID: "proc/timeout-kills-command", Level: Must,
			Description: "Whatever the driver claims (the Driver contract, not a feature): when the timeout fires the command is killed and, on POSIX hosts, so is a plain background child it started (same session and process group): both had run (their marker files grew), the run is reported timed_out, and neither marker grows once Run returned. Reporting timed_out while the command runs on fails. Daemonised descendants are process_tree_kill's (proc/timeout-kills-tree).",
			run:         func(ctx context.Context, h *H) error { return caseKillsCommand(ctx, h, true) }},
		{ID: "proc/no-survivors-after-exit", Level: Must, Feature: tk,
			Description: "When the main program exits on its own, background children and setsid daemons it left behind are killed.",
			run: func(ctx context.Context, h *H) error {
				t, err := newTree(h)
				if err != nil {
					return err
				}
				o := h.Exec(ctx, h.ProbeCmd(Cmd{}, t.start("exit", "0")...))
				if err := ok("main program", o); err != nil {
					return err
				}
				return t.check(ctx, o)
			}},
		{ID: "proc/output-budget-stdout", Level: Must,
			Description: "A program writing 4 MiB to stdout under a 64 KiB budget runs to completion (not killed by SIGPIPE); exactly the first 32 KiB arrive and truncated is set.",
			run: func(ctx context.Context, h *H) error {
				return budgetCase(ctx, h, false, "flood", "out", "4194304", "0", sep, "eecho", "done")
			}},
		{ID: "proc/output-budget-stderr", Level: Must,
			Description: "Flooding stderr past its half of the budget truncates stderr only; stdout is delivered whole.",
			run: func(ctx context.Context, h *H) error {
				return budgetCase(ctx, h, true, "flood", "err", "4194304", "0", sep, "echo", "done")
			}},
		{ID: "proc/huge-single-line", Level: Must,
			Description: "A 3 MiB line without a newline arrives intact when the budget allows it.",
			run: func(ctx context.Context, h *H) error {
				const n = 3 << 20
				o := h.Exec(ctx, h.ProbeCmd(Cmd{MaxOutput: 8 << 20}, "flood", "out", fmt.Sprint(n), "97"))
				if err := ok("flood", o); err != nil {
					return err
				}
				if len(o.Stdout) != n || !bytes.Equal(o.Stdout, bytes.Repeat([]byte("a"), n)) || o.Exit.Truncated {
					return fmt.Errorf("got %d bytes (truncated=%v), want %d bytes of 'a'", len(o.Stdout), o.Exit.Truncated, n)
				}
				return nil
			}},
		{ID: "proc/output-flood-bounded-memory", Level: Should, fresh: true, OS: LinuxOnly, OSReason: "the driver's peak memory is read from /proc",
			Description: "A program writing 128 MiB under a 64 KiB budget does not grow the driver process's peak memory by more than 48 MiB (the driver drains, it does not buffer). Linux only.",
			run:         caseFloodMemory},
	}
}

func caseSpawnDenied(ctx context.Context, h *H) error {
	steps := []string{"echo", "alive", sep, "try", "spawn", "0"}
	o := h.Probe(ctx, &driverapi.Capabilities{}, steps...)
	if err := ran("probe without spawn", o, "alive"); err != nil {
		return err
	}
	if bytes.Contains(o.Stdout, []byte("child=0")) {
		return fmt.Errorf("a child process started without spawn_subprocess: %s", o)
	}
	o = h.Probe(ctx, &driverapi.Capabilities{SpawnSubprocess: true}, steps...)
	if err := ok("with spawn", o); err != nil {
		return err
	}
	if !bytes.Contains(o.Stdout, []byte("child=0")) {
		return fmt.Errorf("spawn_subprocess=true did not allow a child (positive control): %s", o)
	}
	if !h.suite.progs.posix() {
		return nil
	}
	// Both a fork+exec and a bare fork (a subshell) are new processes; a
	// Go program never forks without exec, so the shell covers that.
	const script = `echo alive; /bin/sh -c 'exit 0' 2>/dev/null; echo "spawn=$?"; (echo forked-subshell) 2>/dev/null; true`
	o = h.Sh(ctx, &driverapi.Capabilities{}, script)
	if err := ran("builtins without spawn", o, "alive"); err != nil {
		return err
	}
	if bytes.Contains(o.Stdout, []byte("spawn=0")) || bytes.Contains(o.Stdout, []byte("forked-subshell")) {
		return fmt.Errorf("a child process started without spawn_subprocess: %s", o)
	}
	o = h.Sh(ctx, &driverapi.Capabilities{SpawnSubprocess: true}, script)
	if err := ok("with spawn", o); err != nil {
		return err
	}
	if !bytes.Contains(o.Stdout, []byte("spawn=0")) || !bytes.Contains(o.Stdout, []byte("forked-subshell")) {
		return fmt.Errorf("spawn_subprocess=true did not allow a child (positive control): %s", o)
	}
	return nil
}

func caseSpawnRefusedReported(ctx context.Context, h *H) error {
	steps := []string{"echo", "alive", sep, "try", "spawn", "0"}
	o := h.Probe(ctx, &driverapi.Capabilities{}, steps...)
	if err := ran("probe without spawn", o, "alive"); err != nil {
		return err
	}
	if bytes.Contains(o.Stdout, []byte("child=0")) {
		return fmt.Errorf("a child process started without spawn_subprocess: %s", o)
	}
	if o.Exit.SpawnRefused < 1 {
		return fmt.Errorf("the refused child was not reported (spawn_refused %d): %s", o.Exit.SpawnRefused, o)
	}
	o = h.Probe(ctx, &driverapi.Capabilities{SpawnSubprocess: true}, steps...)
	if err := ok("with spawn", o); err != nil {
		return err
	}
	if !bytes.Contains(o.Stdout, []byte("child=0")) || o.Exit.SpawnRefused != 0 {
		return fmt.Errorf("with spawn_subprocess: want a child and spawn_refused 0 (positive control), got spawn_refused %d: %s", o.Exit.SpawnRefused, o)
	}
	o = h.Probe(ctx, &driverapi.Capabilities{}, "echo", "alive")
	if err := ok("a program that starts nothing", o); err != nil {
		return err
	}
	if o.Exit.SpawnRefused != 0 {
		return fmt.Errorf("spawn_refused %d for a program that started no process: %s", o.Exit.SpawnRefused, o)
	}
	return nil
}

func budgetCase(ctx context.Context, h *H, onStderr bool, steps ...string) error {
	const budget = 64 << 10
	o := h.Exec(ctx, h.ProbeCmd(Cmd{MaxOutput: budget}, steps...))
	if err := ok("flood", o); err != nil {
		return err
	}
	flood, other := o.Stdout, o.Stderr
	if onStderr {
		flood, other = o.Stderr, o.Stdout
	}
	if len(flood) != budget/2 || !bytes.Equal(flood, make([]byte, budget/2)) {
		return fmt.Errorf("flooded stream delivered %d bytes, want exactly the first %d", len(flood), budget/2)
	}
	if string(other) != "done\n" {
		return fmt.Errorf("other stream got %q, want %q", clip(other), "done\n")
	}
	if !o.Exit.Truncated {
		return errors.New("truncated not set")
	}
	return nil
}

func caseFloodMemory(ctx context.Context, h *H) error {
	if !leakMeasurable {
		return skipf("measuring the driver's memory needs /proc (Linux only)")
	}
	if err := h.useFresh(ctx); err != nil {
		return err
	}
	// Warm up so the runtime's ordinary growth is in the baseline.
	if err := ok("warm-up", h.Probe(ctx, nil, "flood", "out", "1048576", "0")); err != nil {
		return err
	}
	before, err := memKB(h.Proc.Pid(), "VmHWM")
	if err != nil {
		return skipf("%v", err)
	}
	o := h.Exec(ctx, h.ProbeCmd(Cmd{MaxOutput: 64 << 10}, "flood", "out", "134217728", "0"))
	if err := ok("flood", o); err != nil {
		return err
	}
	if len(o.Stdout) != 32<<10 {
		return fmt.Errorf("flood delivered %d bytes, want %d", len(o.Stdout), 32<<10)
	}
	after, err := memKB(h.Proc.Pid(), "VmHWM")
	if err != nil {
		return err
	}
	if grew := after - before; grew > 48<<10 {
		return fmt.Errorf("driver peak memory grew by %d KiB while discarding 128 MiB of output", grew)
	}
	return nil
}

// caseKillsCommand: the command itself is the marker ("mark" in the
// foreground), with a plain background child marking beside it on POSIX
// hosts. The Driver contract has Run kill the tree on cancel and timeout
// for every driver; process_tree_kill only adds the descendants that left
// the command's session (the tree cases). On Windows a plain driver has no
// process group to kill (a Job Object is the tool, process_tree_kill's), so
// only the command itself is required there.
func caseKillsCommand(ctx context.Context, h *H, timeout bool) error {
	t, err := newTree(h)
	if err != nil {
		return err
	}
	t.markers = []string{filepath.Join(h.Work, "marker-main")}
	var steps []string
	if h.suite.progs.posix() {
		t.markers = append(t.markers, filepath.Join(h.Work, "marker-bg"))
		steps = append(steps, "bg", "marker-bg", t.tag, sep, "waitmarkers", "marker-bg", sep)
	}
	// The probe marks for 25 s in the foreground: far beyond the timeout
	// and the cancel below, so only a kill ends it in time.
	steps = append(steps, "echo", "started", sep, "mark", "marker-main", t.tag)
	c := h.ProbeCmd(Cmd{}, steps...)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if timeout {
		// Time for the child to start on a busy host.
		c.Timeout = 4 * time.Second
	} else {
		var once sync.Once
		go func() {
			waitFor(runCtx, 10*time.Second, t.markersStarted)
			once.Do(cancel)
		}()
	}
	o := h.Exec(runCtx, c)
	if timeout && o.Err == nil && !o.Exit.TimedOut {
		return fmt.Errorf("the command outlived its 4s timeout but was not reported timed_out: %s", o)
	}
	if !t.markersStarted() {
		return fmt.Errorf("the command (and its background child) never marked (positive control): %s", o)
	}
	for _, m := range t.markers {
		if growing, size := stillGrowing(ctx, m, 600*time.Millisecond); growing {
			what := "the command itself"
			if filepath.Base(m) == "marker-bg" {
				what = "its plain background child"
			}
			return fmt.Errorf("%s still runs after Run returned (%s at %d bytes and growing): the driver did not kill it", what, filepath.Base(m), size)
		}
	}
	return nil
}

// watchedKinds checks that o's kinds are known ones and that each listed
// violation is of one of them, and returns them.
func watchedKinds(what string, o Out) ([]string, error) {
	kinds := o.Exit.ViolationKinds
	if len(kinds) == 0 {
		return nil, fmt.Errorf("%s: the driver claims violation_report and names no watched kind: %s", what, o)
	}
	for _, k := range kinds {
		if !slices.Contains(driverapi.ViolationKinds(), k) {
			return nil, fmt.Errorf("%s: unknown violation kind %q watched: %s", what, k, o)
		}
	}
	for _, v := range o.Exit.Violations {
		if !slices.Contains(kinds, v.Kind) || v.Count < 1 {
			return nil, fmt.Errorf("%s: violation %+v is not of a watched kind %v or counts nothing: %s", what, v, kinds, o)
		}
	}
	return kinds, nil
}

func caseViolationsReported(ctx context.Context, h *H) error {
	// Positive control: the program ran, nothing was refused, nothing is
	// listed.
	o := h.Probe(ctx, &driverapi.Capabilities{}, "echo", "alive")
	if err := ok("a program refused nothing", o); err != nil {
		return err
	}
	if _, err := watchedKinds("a program refused nothing", o); err != nil {
		return err
	}
	if len(o.Exit.Violations) != 0 || o.Exit.ViolationsDropped != 0 {
		return fmt.Errorf("violations listed for a program that was refused nothing: %+v (dropped %d): %s", o.Exit.Violations, o.Exit.ViolationsDropped, o)
	}
	o = h.Probe(ctx, &driverapi.Capabilities{}, "echo", "alive", sep, "try", "spawn", "0")
	if err := ran("probe without spawn", o, "alive"); err != nil {
		return err
	}
	kinds, err := watchedKinds("probe without spawn", o)
	if err != nil {
		return err
	}
	if !slices.Contains(kinds, driverapi.ViolationSpawn) {
		return nil
	}
	for _, v := range o.Exit.Violations {
		if v.Kind == driverapi.ViolationSpawn && v.Operation == "process_start" {
			return nil
		}
	}
	return fmt.Errorf("the refused child was not listed as a spawn violation (kinds %v, violations %+v): %s", kinds, o.Exit.Violations, o)
}
