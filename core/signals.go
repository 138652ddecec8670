package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// ErrSignalEnded is wrapped by the error of a command that a signal ended
// through a driver that cannot forward signals (protocol 1.0): the tree was
// killed, as a cancel does, so there is no exit status of the command's own.
var ErrSignalEnded = errors.New("ended by a signal the driver cannot forward (the process tree was killed)")

// forwardSignals delivers what arrives on sigs to the running command until
// the returned stop is called. Through a driver with the signal call each
// signal goes to the command, which decides what it means; through one
// without, any signal but WINCH cancels the run (cancel's cause wraps
// ErrSignalEnded), WINCH is dropped. Errors of single deliveries are logged,
// not fatal: a command that has just exited is not running any more.
func (s *WorkspaceSandbox) forwardSignals(ctx context.Context, cancel context.CancelCauseFunc, hc driverapi.HostCapabilities,
	commandID string, sigs <-chan driverapi.Signal) (stop func()) {
	if sigs == nil {
		return func() {}
	}
	sg, canSignal := s.driver.(driverapi.Signaler)
	canSignal = canSignal && hc.Supports(driverapi.CallSignal)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case sig, ok := <-sigs:
				if !ok {
					return
				}
				if !canSignal {
					if sig != driverapi.SignalWINCH {
						cancel(fmt.Errorf("SIG%s: %w", sig, ErrSignalEnded))
						return
					}
					continue
				}
				if err := deliverSignal(ctx, done, sg, commandID, sig); err != nil {
					s.logger.Debug("signal not delivered", "command_id", commandID, "signal", string(sig), "error", err)
				}
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// deliverSignal sends sig to the command, trying again while the driver
// says it does not run it yet: Run has been called, but a driver knows the
// command only once it has set its sandbox up, and a signal that came in
// meanwhile (the user's Ctrl-C at start) would otherwise be lost. The tries
// end with the run (done, ctx).
func deliverSignal(ctx context.Context, done <-chan struct{}, sg driverapi.Signaler, commandID string, sig driverapi.Signal) error {
	wait := 5 * time.Millisecond
	for {
		err := sg.Signal(ctx, commandID, sig)
		var nr *driverapi.NotRunningError
		if !errors.As(err, &nr) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-done:
			t.Stop()
			return err
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// ErrSignalBeforeStart is wrapped by the error of a command that a signal
// stopped before it was handed to the driver (while its hooks ran or its
// approval was asked): nothing ran. A signal that comes while the user is
// being asked to approve means "stop", not "deliver this to the program
// once it starts".
var ErrSignalBeforeStart = errors.New("interrupted before the command started (nothing ran)")

// watchEarlySignals cancels the returned context (its cause wraps
// ErrSignalBeforeStart) at the first signal on sigs other than WINCH and
// PIPE, until stop is called. stop returns only once the watcher no
// longer reads sigs, so that a signal arriving afterwards is left for
// forwardSignals; it also ends pre, so callers test the cause
// (ErrSignalBeforeStart), not pre.Err().
func watchEarlySignals(ctx context.Context, sigs <-chan driverapi.Signal) (pre context.Context, stop func()) {
	pre, cancel := context.WithCancelCause(ctx)
	if sigs == nil {
		return pre, func() { cancel(nil) }
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-pre.Done():
				return
			case sig, ok := <-sigs:
				if !ok {
					return
				}
				if sig == driverapi.SignalWINCH || sig == driverapi.SignalPIPE {
					continue
				}
				cancel(fmt.Errorf("SIG%s: %w", sig, ErrSignalBeforeStart))
				return
			}
		}
	}()
	var once sync.Once
	return pre, func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			cancel(nil) // pre is done with; a signal's cause stays
		})
	}
}

// termGrace is how long before a command's timeout it is sent SIGTERM:
// sandbox.timeout_term_grace_ms, at most half the timeout (a short
// timeout keeps most of its time before the warning), nothing under a
// millisecond (the driver protocol's resolution).
func termGrace(configured, timeout time.Duration) time.Duration {
	g := min(configured, timeout/2)
	if g < time.Millisecond {
		return 0
	}
	return g.Truncate(time.Millisecond)
}

// termBeforeTimeout sends SIGTERM to the command grace before its timeout,
// through the driver's signal call: the command's TERM handler runs (a
// build tool removes its lock, a server closes its connections) and the
// command ends on its own. One that is still running at the timeout is
// killed by the driver (SIGKILL), as before: the grace is part of the
// timeout, so a command never runs longer than its timeout. Nothing is
// sent through a driver without the signal call (it could only kill the
// tree, which its own deadline does at the timeout), nor when the grace
// is 0. stop ends the timer and reports whether SIGTERM reached the
// command (then its end, however it came, is the timeout's doing).
func (s *WorkspaceSandbox) termBeforeTimeout(ctx context.Context, hc driverapi.HostCapabilities, commandID string,
	timeout time.Duration) (grace time.Duration, stop func() (sent bool)) {
	grace = termGrace(time.Duration(s.cfg.Sandbox.TimeoutTermGraceMS)*time.Millisecond, timeout)
	sg, ok := s.driver.(driverapi.Signaler)
	if grace <= 0 || !ok || !hc.Supports(driverapi.CallSignal) {
		return 0, func() bool { return false }
	}
	var sent atomic.Bool
	done := make(chan struct{})
	t := time.NewTimer(timeout - grace)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-t.C:
		case <-done:
			return
		case <-ctx.Done():
			return
		}
		// A command that has ended meanwhile is not running: the delivery
		// fails and it is not reported as ended by the timeout.
		if err := deliverSignal(ctx, done, sg, commandID, driverapi.SignalTERM); err != nil {
			s.logger.Debug("timeout SIGTERM not delivered", "command_id", commandID, "error", err)
			return
		}
		sent.Store(true)
	}()
	return grace, func() bool {
		t.Stop()
		close(done)
		wg.Wait()
		return sent.Load()
	}
}
