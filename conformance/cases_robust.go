package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func robustCases() []Case {
	return []Case{
		{ID: "robust/sequential-200", Level: Must, fresh: true, scaled: true,
			Description: "200 commands one after another all succeed with their own output (within the suite's case budget plus four times the driver's own per-command cost, measured in three warm-up commands, for each command: a slow driver is not failed for its speed), and afterwards the driver process holds no more file descriptors than before and has no child processes left (measured in /proc; Linux only for the measurement). A driver with forget_session is measured once the session is forgotten: it may keep sandboxes prepared for a session until then.",
			run: func(ctx context.Context, h *H) error {
				return leakRun(ctx, h, 200, 1)
			}},
		{ID: "robust/concurrent-16", Level: Must, fresh: true, scaled: true,
			Description: "16 commands at a time, four rounds, all succeed with their own output (within a budget scaled as robust/sequential-200's), without leaking descriptors or processes in the driver process (measured as robust/sequential-200 is).",
			run: func(ctx context.Context, h *H) error {
				return leakRun(ctx, h, 64, 16)
			}},
		{ID: "robust/driver-death-kills-tree", Level: Should, Feature: driverapi.FeatureProcessTreeKill, fresh: true,
			Description: "When the driver process is killed (SIGKILL) mid-command, the command's whole tree dies with it; nothing keeps running unsupervised.",
			run:         caseDriverDeath},
	}
}

func leakRun(ctx context.Context, h *H, n, par int) error {
	if err := h.useFresh(ctx); err != nil {
		return err
	}
	one := func(i int) error {
		o := h.Probe(ctx, nil, "echo", fmt.Sprintf("n=%d", i))
		if err := ok(fmt.Sprintf("command %d", i), o); err != nil {
			return err
		}
		if string(o.Stdout) != fmt.Sprintf("n=%d\n", i) {
			return fmt.Errorf("command %d got %q", i, o.Stdout)
		}
		return nil
	}
	// Warm up: lazily opened descriptors (logs, pools) belong in the
	// baseline, and the warm-up's pace sets the case's budget.
	const warm = 3
	start := time.Now()
	for i := range warm {
		if err := one(i); err != nil {
			return err
		}
	}
	cost := time.Since(start) / warm
	budget := h.suite.scaledBudget(n, cost)
	bctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	outer := ctx
	ctx = bctx
	over := func(err error) error {
		if bctx.Err() != nil && outer.Err() == nil {
			return fmt.Errorf("%d commands did not finish within %s, the case's budget (the suite's %s plus 4 x %s, the driver's own per-command cost in the warm-up, per command): the driver slowed down or hung: %w",
				n, budget.Round(time.Second), h.suite.cfg.CaseTimeout, cost.Round(time.Millisecond), err)
		}
		return err
	}
	pid := h.Proc.Pid()
	base, merr := measureProc(pid)
	for start := 0; start < n; start += par {
		var wg sync.WaitGroup
		errs := make([]error, par)
		for j := range par {
			wg.Add(1)
			go func() { defer wg.Done(); errs[j] = one(start + j) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return over(err)
		}
	}
	if merr != nil || !leakMeasurable {
		return skipf("%d commands ran, but measuring the driver process needs /proc (Linux only)", n)
	}
	if f, ok := h.Driver.(driverapi.SessionForgetter); ok && h.Caps.Supports(driverapi.CallForgetSession) {
		// What a driver keeps for a session (prepared sandboxes, its
		// network namespace) is bounded and ends here; what it leaked
		// does not.
		if err := f.ForgetSession(ctx, probeSession); err != nil {
			return fmt.Errorf("forget_session: %w", err)
		}
	}
	var now procStats
	settled := waitFor(ctx, 3*time.Second, func() bool {
		now, merr = measureProc(pid)
		return merr == nil && now.fds <= base.fds+2 && len(now.descendants) == 0
	})
	if merr != nil {
		return merr
	}
	if !settled {
		return fmt.Errorf("after %d commands the driver holds %d fds (baseline %d) and %d descendant processes %v", n, now.fds, base.fds, len(now.descendants), now.descendants)
	}
	return nil
}

func caseDriverDeath(ctx context.Context, h *H) error {
	if err := h.useFresh(ctx); err != nil {
		return err
	}
	t, err := newTree(h)
	if err != nil {
		return err
	}
	done := make(chan Out, 1)
	go func() {
		done <- h.Exec(ctx, h.ProbeCmd(Cmd{}, t.start("sleep", "30")...))
	}()
	var early *Out
	if !waitFor(ctx, 10*time.Second, func() bool {
		select {
		case o := <-done:
			early = &o
			return true
		default:
			return t.markersStarted()
		}
	}) || early != nil {
		if early != nil {
			return fmt.Errorf("the command ended before its background children ran (positive control): %s", *early)
		}
		return fmt.Errorf("the background children never ran (positive control)")
	}
	proc, err := os.FindProcess(h.Proc.Pid())
	if err != nil {
		return err
	}
	if err := proc.Kill(); err != nil {
		return fmt.Errorf("killing the driver: %w", err)
	}
	var o Out
	select {
	case o = <-done:
	case <-time.After(10 * time.Second):
		return errors.New("Run did not return after the driver process died")
	}
	return t.check(ctx, o)
}
