package core

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// setupFailDriver fails Run the way a driver whose own deadline cut its
// setup short does: after the timeout, with an error, the command never
// started. With fast set it fails at once instead.
type setupFailDriver struct {
	*drivertest.FakeDriver
	err  error
	fast bool
}

func (d setupFailDriver) Run(ctx context.Context, spec driverapi.RunSpec, _ driverapi.Streams) (driverapi.Exit, error) {
	if !d.fast {
		select {
		case <-time.After(spec.Timeout + 2*time.Millisecond):
		case <-ctx.Done():
			return driverapi.Exit{}, ctx.Err()
		}
	}
	return driverapi.Exit{}, d.err
}

func TestTimeoutDuringSetupIsATimeout(t *testing.T) {
	setupErr := errors.New("bwrap driver: the sandbox could not be set up (signal: killed)")
	run := func(d driverapi.Driver, timeout time.Duration) (*Output, error, AuditRecord) {
		t.Helper()
		sink := &memSink{}
		sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(d), WithAuditSink(sink))
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close()
		out, err := sb.Execute(WithSession(context.Background(), "s"), Command{Program: "echo", Timeout: timeout})
		return out, err, sink.last(t)
	}
	// The timeout fired during setup: timed out, not a sandbox failure.
	out, err, rec := run(setupFailDriver{FakeDriver: &drivertest.FakeDriver{}, err: setupErr}, 3*time.Millisecond)
	if err != nil || !out.Exit.TimedOut || out.Exit.Details["timed_out_during"] != "setup" ||
		!strings.Contains(out.Exit.Details["setup_error"], "could not be set up") {
		t.Fatalf("setup cut short by the timeout: %v %+v", err, out)
	}
	if rec.Reason != ReasonTimeout || !rec.TimedOut || rec.Decision != DecisionAllow {
		t.Fatalf("audit %+v", rec)
	}
	// Controls: a setup failure well within the timeout stays a failure...
	_, err, rec = run(setupFailDriver{FakeDriver: &drivertest.FakeDriver{}, err: setupErr, fast: true}, 10*time.Second)
	var de *DriverError
	if !errors.As(err, &de) || rec.Reason != ReasonDriverFailed {
		t.Fatalf("early setup failure: %v, audit %+v", err, rec)
	}
	// ...and so does a refusal (bad input: an InvalidCommandError naming
	// the field) or a dead plugin, whatever the clock says.
	var ie *InvalidCommandError
	if _, err, _ := run(setupFailDriver{FakeDriver: &drivertest.FakeDriver{}, err: &driverapi.InvalidSpecError{Field: "cwd", Reason: "bad"}}, time.Millisecond); !errors.As(err, &ie) || ie.Field != "cwd" {
		t.Fatalf("a refusal after the timeout: got %v, want an InvalidCommandError naming cwd", err)
	}
	for _, died := range []error{
		&driverapi.PluginError{Plugin: "p", Op: "Run", Err: driverapi.ErrPluginDied},
		&driverapi.PluginDiedError{LastWords: "panic: boom"}, // as DriverHost reports it
	} {
		if _, err, _ := run(setupFailDriver{FakeDriver: &drivertest.FakeDriver{}, err: died}, time.Millisecond); !errors.As(err, &de) {
			t.Fatalf("a dead plugin (%T) after the timeout: got %v, want a DriverError", died, err)
		}
	}
}

// The driver protocol counts whole milliseconds: a timeout below or between
// them is rounded up, so the driver never sees zero (999µs used to reach
// it as 0 and be refused as "must be greater than zero").
func TestTimeoutRoundsUpToMilliseconds(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	ctx := WithSession(context.Background(), "t")
	for in, want := range map[time.Duration]time.Duration{
		time.Nanosecond:         time.Millisecond,
		999 * time.Microsecond:  time.Millisecond,
		1500 * time.Microsecond: 2 * time.Millisecond,
		3 * time.Millisecond:    3 * time.Millisecond,
	} {
		out, err := h.sb.Execute(ctx, Command{Program: "echo", Timeout: in})
		if err != nil {
			t.Fatalf("timeout %v: %v", in, err)
		}
		if got := h.fake.LastSpec().Timeout; got != want {
			t.Fatalf("timeout %v reached the driver as %v, want %v", in, got, want)
		}
		if out.Exit.ExitCode != 0 {
			t.Fatalf("timeout %v: %+v", in, out.Exit)
		}
	}
}
