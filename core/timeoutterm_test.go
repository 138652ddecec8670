package core

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// deadlineDriver is waitingDriver with a driver's own timeout: a command
// still running at spec.Timeout is killed (SIGKILL), as the real drivers
// do. ignoreTERM makes its command ignore SIGTERM (as trap "" TERM does); exitAfter,
// when set, makes it end by itself, exit 0, that soon.
type deadlineDriver struct {
	*waitingDriver
	ignoreTERM bool
	exitAfter  time.Duration
}

func (d *deadlineDriver) Run(ctx context.Context, spec driverapi.RunSpec, _ driverapi.Streams) (driverapi.Exit, error) {
	ch := make(chan driverapi.Signal, 4)
	d.mu.Lock()
	d.running[spec.CommandID] = ch
	d.mu.Unlock()
	defer func() { d.mu.Lock(); delete(d.running, spec.CommandID); d.mu.Unlock() }()
	kill := time.NewTimer(spec.Timeout)
	defer kill.Stop()
	var own <-chan time.Time
	if d.exitAfter > 0 {
		own = time.After(d.exitAfter)
	}
	for {
		select {
		case <-ctx.Done():
			return driverapi.Exit{}, ctx.Err()
		case <-own:
			return driverapi.Exit{}, nil
		case <-kill.C:
			return driverapi.Exit{TimedOut: true, ExitCode: 137, Signal: 9}, nil
		case sig := <-ch:
			d.mu.Lock()
			d.seen = append(d.seen, sig)
			d.mu.Unlock()
			if sig == driverapi.SignalTERM && !d.ignoreTERM {
				return driverapi.Exit{ExitCode: 143, Signal: 15}, nil
			}
		}
	}
}

// oldDeadlineDriver is the same driver speaking protocol 1.0: no Signal.
type oldDeadlineDriver struct{ d *deadlineDriver }

func (o oldDeadlineDriver) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	return o.d.Capabilities(ctx)
}
func (o oldDeadlineDriver) ProfileFor(ctx context.Context, r driverapi.ProfileRequest) (driverapi.Profile, error) {
	return o.d.ProfileFor(ctx, r)
}
func (o oldDeadlineDriver) Run(ctx context.Context, s driverapi.RunSpec, st driverapi.Streams) (driverapi.Exit, error) {
	return o.d.Run(ctx, s, st)
}

func (d *deadlineDriver) signalsSeen() []driverapi.Signal {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.seen)
}

// At its timeout a command is warned first: SIGTERM grace before the
// timeout (sandbox.timeout_term_grace_ms, at most half the timeout), and
// killed (SIGKILL) at the timeout only if it is still running. The result
// says timed out and which signal ended it: 15 for a command that died of
// the TERM, 9 for one that ignored it. Controls: with the grace 0 only the
// kill comes; a command that ends before the warning is neither signalled
// nor timed out; a driver without the signal call gets no TERM (the kill
// at its deadline is all it can do).
func TestTimeoutSendsTERMThenKILL(t *testing.T) {
	run := func(t *testing.T, graceMS int64, d *deadlineDriver, old bool) (*Output, []driverapi.Signal) {
		t.Helper()
		cfg := testConfig(t)
		cfg.Sandbox.TimeoutTermGraceMS = graceMS
		var drv driverapi.Driver = d
		if old {
			drv = oldDeadlineDriver{d: d}
		}
		sb, err := NewWorkspaceSandbox(cfg, WithDriver(drivertest.Connect(t, drv)), WithAuditSink(&memSink{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sb.Close() })
		out, err := sb.Execute(context.Background(), Command{SessionID: "s", Program: "/bin/sleep", Args: []string{"60"}, Timeout: 600 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return out, d.signalsSeen()
	}
	newDriver := func() *deadlineDriver { return &deadlineDriver{waitingDriver: newWaitingDriver()} }

	t.Run("dies of TERM", func(t *testing.T) {
		out, seen := run(t, 2000, newDriver(), false)
		e := out.Exit
		if !e.TimedOut || e.Signal != 15 || e.ExitCode != 143 || !slices.Equal(seen, []driverapi.Signal{driverapi.SignalTERM}) {
			t.Fatalf("exit %+v, signals %v: want timed out by SIGTERM (15)", e, seen)
		}
		// The grace is capped at half the 600 ms timeout.
		if g := e.Details["timeout_term_grace_ms"]; g != "300" {
			t.Fatalf("timeout_term_grace_ms = %q, want 300 (half the timeout)", g)
		}
		if out.Reason() != ReasonTimeout {
			t.Fatalf("reason %s, want timeout", out.Reason())
		}
	})
	t.Run("ignores TERM, killed", func(t *testing.T) {
		d := newDriver()
		d.ignoreTERM = true
		out, seen := run(t, 100, d, false)
		if e := out.Exit; !e.TimedOut || e.Signal != 9 || !slices.Equal(seen, []driverapi.Signal{driverapi.SignalTERM}) || e.Details["timeout_term_grace_ms"] != "100" {
			t.Fatalf("exit %+v, signals %v: want TERM, then timed out by SIGKILL (9)", e, seen)
		}
	})
	t.Run("grace 0: killed without warning", func(t *testing.T) {
		out, seen := run(t, 0, newDriver(), false)
		if e := out.Exit; !e.TimedOut || e.Signal != 9 || len(seen) != 0 {
			t.Fatalf("exit %+v, signals %v: want SIGKILL alone", e, seen)
		}
	})
	t.Run("ends before the warning", func(t *testing.T) {
		d := newDriver()
		d.exitAfter = 10 * time.Millisecond
		out, seen := run(t, 100, d, false)
		if e := out.Exit; e.TimedOut || e.Signal != 0 || len(seen) != 0 {
			t.Fatalf("exit %+v, signals %v: want its own exit, no signal", e, seen)
		}
	})
	t.Run("driver without the signal call", func(t *testing.T) {
		out, seen := run(t, 2000, newDriver(), true)
		if e := out.Exit; !e.TimedOut || e.Signal != 9 || len(seen) != 0 {
			t.Fatalf("exit %+v, signals %v: want SIGKILL alone", e, seen)
		}
	})
}

func TestTermGrace(t *testing.T) {
	for _, c := range []struct{ cfg, timeout, want time.Duration }{
		{2 * time.Second, time.Minute, 2 * time.Second},
		{2 * time.Second, time.Second, 500 * time.Millisecond},
		{0, time.Minute, 0},
		{2 * time.Second, time.Millisecond, 0},
	} {
		if got := termGrace(c.cfg, c.timeout); got != c.want {
			t.Errorf("termGrace(%s, %s) = %s, want %s", c.cfg, c.timeout, got, c.want)
		}
	}
}
