package core

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// waitingDriver runs every command until a signal ends it (or its context
// does), as a command that traps nothing would: TERM gives Signal 15, INT 2,
// WINCH is seen and ignored.
type waitingDriver struct {
	drivertest.FakeDriver
	mu      sync.Mutex
	running map[string]chan driverapi.Signal
	seen    []driverapi.Signal
	started chan string
}

func newWaitingDriver() *waitingDriver {
	return &waitingDriver{running: map[string]chan driverapi.Signal{}, started: make(chan string, 1)}
}

func (d *waitingDriver) Run(ctx context.Context, spec driverapi.RunSpec, _ driverapi.Streams) (driverapi.Exit, error) {
	ch := make(chan driverapi.Signal, 4)
	d.mu.Lock()
	d.running[spec.CommandID] = ch
	d.mu.Unlock()
	defer func() { d.mu.Lock(); delete(d.running, spec.CommandID); d.mu.Unlock() }()
	d.started <- spec.CommandID
	for {
		select {
		case <-ctx.Done():
			return driverapi.Exit{}, ctx.Err()
		case sig := <-ch:
			d.mu.Lock()
			d.seen = append(d.seen, sig)
			d.mu.Unlock()
			switch sig {
			case driverapi.SignalTERM:
				return driverapi.Exit{ExitCode: 143, Signal: 15}, nil
			case driverapi.SignalINT:
				return driverapi.Exit{ExitCode: 130, Signal: 2}, nil
			}
		}
	}
}

func (d *waitingDriver) Signal(_ context.Context, id string, sig driverapi.Signal) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch, ok := d.running[id]
	if !ok {
		return &driverapi.NotRunningError{CommandID: id}
	}
	ch <- sig
	return nil
}

// oldWaitingDriver is the same driver speaking protocol 1.0: no Signal.
type oldWaitingDriver struct{ d *waitingDriver }

func (o oldWaitingDriver) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	return o.d.Capabilities(ctx)
}
func (o oldWaitingDriver) ProfileFor(ctx context.Context, r driverapi.ProfileRequest) (driverapi.Profile, error) {
	return o.d.ProfileFor(ctx, r)
}
func (o oldWaitingDriver) Run(ctx context.Context, s driverapi.RunSpec, st driverapi.Streams) (driverapi.Exit, error) {
	return o.d.Run(ctx, s, st)
}

func TestSignalsReachTheRunningCommand(t *testing.T) {
	wd := newWaitingDriver()
	sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(drivertest.Connect(t, wd)), WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	sigs := make(chan driverapi.Signal, 2)
	go func() {
		<-wd.started
		sigs <- driverapi.SignalWINCH
		sigs <- driverapi.SignalTERM
	}()
	out, err := sb.Execute(context.Background(), Command{SessionID: "s", Program: "/bin/sleep", Args: []string{"60"}, Signals: sigs, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if out.Exit.Signal != 15 {
		t.Fatalf("exit = %+v, want death by TERM", out.Exit)
	}
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if len(wd.seen) != 2 || wd.seen[0] != driverapi.SignalWINCH || wd.seen[1] != driverapi.SignalTERM {
		t.Fatalf("the driver saw %v, want WINCH then TERM", wd.seen)
	}
}

func TestSignalsThroughAProtocol10DriverEndTheTree(t *testing.T) {
	wd := newWaitingDriver()
	sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(drivertest.Connect(t, oldWaitingDriver{wd})), WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	sigs := make(chan driverapi.Signal, 2)
	go func() {
		<-wd.started
		sigs <- driverapi.SignalWINCH // dropped: no way to deliver it
		sigs <- driverapi.SignalINT
	}()
	_, err = sb.Execute(context.Background(), Command{SessionID: "s", Program: "/bin/sleep", Args: []string{"60"}, Signals: sigs, Timeout: time.Minute})
	if !errors.Is(err, ErrSignalEnded) {
		t.Fatalf("want ErrSignalEnded, got %T %v", err, err)
	}
	wd.mu.Lock()
	defer wd.mu.Unlock()
	if len(wd.seen) != 0 {
		t.Fatalf("a 1.0 driver cannot have received signals, saw %v", wd.seen)
	}
}

// lateDriver registers its command only after a signal has been refused
// for it, as a real driver does not until it has set the sandbox up: a
// signal that arrives in that window must not be lost.
type lateDriver struct {
	*waitingDriver
	refused chan struct{}
	entered chan struct{}
	once    sync.Once
}

func (d *lateDriver) Run(ctx context.Context, spec driverapi.RunSpec, st driverapi.Streams) (driverapi.Exit, error) {
	close(d.entered)
	select {
	case <-d.refused:
	case <-ctx.Done():
		return driverapi.Exit{}, ctx.Err()
	}
	return d.waitingDriver.Run(ctx, spec, st)
}

func (d *lateDriver) Signal(ctx context.Context, id string, sig driverapi.Signal) error {
	err := d.waitingDriver.Signal(ctx, id, sig)
	var nr *driverapi.NotRunningError
	if errors.As(err, &nr) {
		d.once.Do(func() { close(d.refused) })
	}
	return err
}

func TestSignalBeforeTheDriverRegistersIsDelivered(t *testing.T) {
	wd := &lateDriver{waitingDriver: newWaitingDriver(), refused: make(chan struct{}), entered: make(chan struct{})}
	sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(drivertest.Connect(t, wd)), WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	sigs := make(chan driverapi.Signal, 1)
	go func() {
		<-wd.entered
		sigs <- driverapi.SignalTERM // handed to the driver, not yet running
	}()
	out, err := sb.Execute(context.Background(), Command{SessionID: "s", Program: "/bin/sleep", Args: []string{"60"}, Signals: sigs, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if out.Exit.Signal != 15 || out.Exit.TimedOut {
		t.Fatalf("exit = %+v, want death by TERM (the signal was lost)", out.Exit)
	}
}

// blockingApprover answers only when its context ends, as a user who has
// not typed anything yet; it says when it was asked.
type blockingApprover struct{ asked chan struct{} }

func (a blockingApprover) RequestApproval(ctx context.Context, _ driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error) {
	close(a.asked)
	<-ctx.Done()
	return driverapi.ApprovalDenied, ctx.Err()
}

// A signal while the approval is being asked (the user's Ctrl-C at the
// prompt) stops the command before it starts: the driver never runs it,
// and the error says so. Control: the same signal once the command runs
// is delivered to it (TestSignalsReachTheRunningCommand).
func TestSignalBeforeStartStopsTheCommand(t *testing.T) {
	wd := newWaitingDriver()
	ap := blockingApprover{asked: make(chan struct{})}
	sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(drivertest.Connect(t, wd)), WithAuditSink(&memSink{}),
		WithApprovalRequester(ap))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	sigs := make(chan driverapi.Signal, 2)
	go func() {
		<-ap.asked
		sigs <- driverapi.SignalWINCH // not a reason to stop
		sigs <- driverapi.SignalINT
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = sb.Execute(ctx, Command{SessionID: "s", Program: "/bin/sleep", Args: []string{"60"}, Signals: sigs,
		Capabilities: driverapi.Capabilities{SpawnSubprocess: true}, Timeout: time.Minute})
	if !errors.Is(err, ErrSignalBeforeStart) || ctx.Err() != nil {
		t.Fatalf("want ErrSignalBeforeStart promptly, got %T %v (ctx %v)", err, err, ctx.Err())
	}
	select {
	case id := <-wd.started:
		t.Fatalf("the driver ran command %s after the user interrupted its approval", id)
	default:
	}
}
