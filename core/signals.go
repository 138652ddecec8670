package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
