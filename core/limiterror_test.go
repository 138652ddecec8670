package core

import (
	"context"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// limitDriver refuses commands of session "full" at a capacity limit, as
// the bwrap driver does past max_session_networks.
type limitDriver struct{ drivertest.FakeDriver }

func (d *limitDriver) Run(ctx context.Context, spec driverapi.RunSpec, st driverapi.Streams) (driverapi.Exit, error) {
	if spec.SessionID == "full" {
		return driverapi.Exit{}, &driverapi.LimitError{Limit: "sandbox.linux.max_session_networks", Value: 64, Reason: "64 sessions hold a network namespace already"}
	}
	return d.FakeDriver.Run(ctx, spec, st)
}

// A driver's capacity limit crosses the plugin boundary typed and is
// resource_exhausted naming the limit's key (it read as driver_failed);
// the audit record says so too. Control: another session runs.
func TestDriverLimitIsResourceExhausted(t *testing.T) {
	d := &limitDriver{}
	sink := &memSink{}
	sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(drivertest.Connect(t, d)), WithAuditSink(sink))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	_, err = sb.Execute(context.Background(), Command{SessionID: "full", Program: "/bin/echo"})
	code, field := FailureReason(err)
	if code != ReasonResourceExhausted || field != "sandbox.linux.max_session_networks" || LimitOf(err) != field {
		t.Fatalf("want resource_exhausted naming the limit, got %q %q: %v", code, field, err)
	}
	if r := sink.last(t); r.Reason != ReasonResourceExhausted {
		t.Fatalf("audit reason %q", r.Reason)
	}
	if _, err := sb.Execute(context.Background(), Command{SessionID: "other", Program: "echo", Args: []string{"x"}}); err != nil {
		t.Fatalf("control: %v", err)
	}
}
