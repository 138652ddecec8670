package driverapi_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// openerDriver implements LayeredViewOpener: it answers a view, or
// refuses, or waits for its context when block is set.
type openerDriver struct {
	drivertest.FakeDriver
	layered bool
	refuse  error
	block   chan struct{}

	mu       sync.Mutex
	got      []driverapi.LayeredViewRequest
	released bool
}

func (d *openerDriver) LayeredWorkspaces() bool { return d.layered }

func (d *openerDriver) OpenLayeredView(ctx context.Context, req driverapi.LayeredViewRequest) (driverapi.LayeredView, error) {
	d.mu.Lock()
	d.got = append(d.got, req)
	d.mu.Unlock()
	if d.refuse != nil {
		return driverapi.LayeredView{}, d.refuse
	}
	if d.block != nil {
		close(d.block)
		<-ctx.Done()
		return driverapi.LayeredView{}, ctx.Err()
	}
	ended := make(chan struct{})
	go func() {
		<-ctx.Done()
		d.mu.Lock()
		d.released = true
		d.mu.Unlock()
		close(ended)
	}()
	return driverapi.LayeredView{Mounted: true, Path: "/proc/1/fd/9", Dev: 42, Ino: 7, Ended: ended}, nil
}

func (d *openerDriver) isReleased() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.released
}

var viewReq = driverapi.LayeredViewRequest{SessionID: "s1", Workspace: "/w",
	Layered: driverapi.LayeredWorkspace{Upper: "/l/upper", Work: "/l/work", Lock: "/l/lock", UserNS: true}}

// OpenLayeredView across go-plugin: listed only with layered workspaces;
// the request arrives as sent and the view as answered; the view lives
// until the host's context ends, and Ended closes only once the driver
// has released it; refusals arrive typed; a context ended before the
// answer cancels the call; a bad request is refused before the driver.
func TestOpenLayeredViewAcrossTheWire(t *testing.T) {
	ctx := context.Background()
	for _, on := range []bool{true, false} {
		caps, err := drivertest.Connect(t, &openerDriver{layered: on}).Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if caps.Supports(driverapi.CallLayeredViewOpen) != on {
			t.Fatalf("LayeredWorkspaces() = %v, calls %v", on, caps.Calls)
		}
	}

	impl := &openerDriver{layered: true}
	d := drivertest.Connect(t, impl).(driverapi.LayeredViewOpener)
	vctx, end := context.WithCancel(ctx)
	defer end()
	v, err := d.OpenLayeredView(vctx, viewReq)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Mounted || v.Path != "/proc/1/fd/9" || v.Dev != 42 || v.Ino != 7 || v.Ended == nil {
		t.Fatalf("view %+v", v)
	}
	if len(impl.got) != 1 || impl.got[0] != viewReq {
		t.Fatalf("the driver got %+v, want %+v", impl.got, viewReq)
	}
	select {
	case <-v.Ended:
		t.Fatal("the view ended while the host's context lives")
	default:
	}
	if impl.isReleased() {
		t.Fatal("the driver released the view while the host's context lives")
	}
	end()
	<-v.Ended
	if !impl.isReleased() {
		t.Fatal("Ended closed before the driver released the view")
	}

	refusal := &driverapi.UnavailableError{Feature: driverapi.FeatureLayeredWorkspace, Reason: "busy", Fix: "wait"}
	_, err = drivertest.Connect(t, &openerDriver{layered: true, refuse: refusal}).(driverapi.LayeredViewOpener).OpenLayeredView(ctx, viewReq)
	var u *driverapi.UnavailableError
	if !errors.As(err, &u) || *u != *refusal {
		t.Fatalf("refusal: %T %v", err, err)
	}

	blocked := &openerDriver{layered: true, block: make(chan struct{})}
	bctx, bend := context.WithCancel(ctx)
	go func() {
		<-blocked.block
		bend()
	}()
	if _, err := drivertest.Connect(t, blocked).(driverapi.LayeredViewOpener).OpenLayeredView(bctx, viewReq); !errors.Is(err, context.Canceled) {
		t.Fatalf("a context ended before the answer: %v", err)
	}

	bad := &openerDriver{layered: true}
	r := viewReq
	r.Workspace = "relative"
	var ie *driverapi.InvalidSpecError
	if _, err := drivertest.Connect(t, bad).(driverapi.LayeredViewOpener).OpenLayeredView(ctx, r); !errors.As(err, &ie) || ie.Field != "workspace" || len(bad.got) != 0 {
		t.Fatalf("a relative workspace: %v (the driver got %d)", err, len(bad.got))
	}

	// A driver without the call.
	var uc *driverapi.UnsupportedCallError
	if _, err := drivertest.Connect(t, &drivertest.FakeDriver{}).(driverapi.LayeredViewOpener).OpenLayeredView(ctx, viewReq); !errors.As(err, &uc) || uc.Call != driverapi.CallLayeredViewOpen {
		t.Fatalf("a driver without the call: %T %v", err, err)
	}
}
