package driverapi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// extDriver is a protocol-1.1 driver: the fake driver plus the optional
// calls, recording what reaches it.
type extDriver struct {
	drivertest.FakeDriver
	mu      sync.Mutex
	signals []string
	applied []byte
	capsErr error
	forgot  []string
}

func (d *extDriver) ForgetSession(_ context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.forgot = append(d.forgot, id)
	return nil
}

func (d *extDriver) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	if d.capsErr != nil {
		return driverapi.HostCapabilities{}, d.capsErr
	}
	return d.FakeDriver.Capabilities(ctx)
}

func (d *extDriver) Signal(_ context.Context, id string, sig driverapi.Signal) error {
	if id == "gone" {
		return &driverapi.NotRunningError{CommandID: id}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.signals = append(d.signals, id+":"+string(sig))
	return nil
}

func (d *extDriver) ConfigSchema(context.Context) (driverapi.ConfigSchema, error) {
	return driverapi.ConfigSchema{Section: "fake", Fields: []driverapi.ConfigField{
		{Name: "level", Type: driverapi.ConfigString, DefaultJSON: `"low"`, Enum: []string{"low", "high"}, Description: "how much"},
	}}, nil
}

func (d *extDriver) SetConfig(_ context.Context, b []byte) error {
	if string(b) == `{"level":"max"}` {
		return fmt.Errorf("wrapped: %w", &driverapi.ConfigError{Section: "fake", Key: "level", Reason: `"max" is not low or high`})
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applied = append([]byte(nil), b...)
	return nil
}

func TestNegotiatedMinorVersionAndCalls(t *testing.T) {
	ctx := context.Background()
	newer := drivertest.Connect(t, &extDriver{})
	caps, err := newer.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if caps.ProtocolMinor != driverapi.ProtocolMinor || !caps.Supports(driverapi.CallSignal) || !caps.Supports(driverapi.CallConfig) {
		t.Fatalf("a 1.1 driver is reported as minor %d with calls %v", caps.ProtocolMinor, caps.Calls)
	}

	// A driver of protocol 1.0 implements none of the optional calls: it
	// keeps working, and is reported as lacking them.
	older := drivertest.Connect(t, &drivertest.FakeDriver{})
	caps, err = older.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if caps.ProtocolMinor != 0 || len(caps.Calls) != 0 || caps.Supports(driverapi.CallSignal) {
		t.Fatalf("a 1.0 driver is reported as minor %d with calls %v", caps.ProtocolMinor, caps.Calls)
	}
	p := profileFor(t, older)
	if _, err := older.Run(ctx, spec(p, "echo", "still works"), driverapi.Streams{}); err != nil {
		t.Fatalf("a 1.0 driver no longer runs: %v", err)
	}
	var ue *driverapi.UnsupportedCallError
	if err := older.(driverapi.Signaler).Signal(ctx, "c1", driverapi.SignalTERM); !errors.As(err, &ue) || ue.Call != driverapi.CallSignal {
		t.Fatalf("Signal to a 1.0 driver: want UnsupportedCallError, got %T %v", err, err)
	}
	if _, err := older.(driverapi.Configurable).ConfigSchema(ctx); !errors.As(err, &ue) || ue.Call != driverapi.CallConfig {
		t.Fatalf("ConfigSchema of a 1.0 driver: want UnsupportedCallError, got %T %v", err, err)
	}
}

func TestSignalAcrossTheWire(t *testing.T) {
	ctx := context.Background()
	impl := &extDriver{}
	d := drivertest.Connect(t, impl).(driverapi.Signaler)
	if err := d.Signal(ctx, "c1", driverapi.SignalTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.Signal(ctx, "c1", driverapi.SignalWINCH); err != nil {
		t.Fatal(err)
	}
	if want := []string{"c1:TERM", "c1:WINCH"}; !slices.Equal(impl.signals, want) {
		t.Fatalf("the driver got %v, want %v", impl.signals, want)
	}
	var nr *driverapi.NotRunningError
	if err := d.Signal(ctx, "gone", driverapi.SignalINT); !errors.As(err, &nr) || nr.CommandID != "gone" {
		t.Fatalf("want NotRunningError naming the command, got %T %v", err, err)
	}
	// The server refuses what the contract does not define before the
	// driver sees it.
	var ie *driverapi.InvalidSpecError
	for _, bad := range []driverapi.Signal{"STOP", "9", ""} {
		if err := d.Signal(ctx, "c1", bad); !errors.As(err, &ie) || ie.Field != "signal" {
			t.Fatalf("signal %q: want InvalidSpecError on signal, got %T %v", bad, err, err)
		}
	}
	if err := d.Signal(ctx, "", driverapi.SignalTERM); !errors.As(err, &ie) || ie.Field != "command_id" {
		t.Fatalf("empty command id: want InvalidSpecError, got %T %v", err, err)
	}
	if len(impl.signals) != 2 {
		t.Fatalf("refused signals reached the driver: %v", impl.signals)
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]driverapi.Signal{"TERM": "TERM", "sigint": "INT", " SIGHUP ": "HUP", "winch": "WINCH"} {
		if got, err := driverapi.ParseSignal(in); err != nil || got != want {
			t.Errorf("ParseSignal(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"SIGSTOP", "15", "TERMX", ""} {
		if _, err := driverapi.ParseSignal(in); err == nil {
			t.Errorf("ParseSignal(%q) accepted", in)
		}
	}
}

func TestConfigAcrossTheWire(t *testing.T) {
	ctx := context.Background()
	impl := &extDriver{}
	d := drivertest.Connect(t, impl).(driverapi.Configurable)
	sc, err := d.ConfigSchema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := sc.Field("level")
	if sc.Section != "fake" || !ok || f.Type != driverapi.ConfigString || f.DefaultJSON != `"low"` || !slices.Equal(f.Enum, []string{"low", "high"}) {
		t.Fatalf("schema did not survive the wire: %+v", sc)
	}
	if err := d.SetConfig(ctx, []byte(`{"level":"high"}`)); err != nil || string(impl.applied) != `{"level":"high"}` {
		t.Fatalf("SetConfig: %v, applied %q", err, impl.applied)
	}
	err = d.SetConfig(ctx, []byte(`{"level":"max"}`))
	var ce *driverapi.ConfigError
	if !errors.As(err, &ce) || ce.Section != "fake" || ce.Key != "level" {
		t.Fatalf("want ConfigError on sandbox.fake.level, got %T %v", err, err)
	}
	if got := ce.Error(); got != `invalid sandbox.fake.level: "max" is not low or high` {
		t.Fatalf("message = %q", got)
	}
}

// TestErrorsAreTypedByDetailNotText: the typed form comes from the status
// detail; a message that merely looks like a typed error stays what it is.
func TestErrorsAreTypedByDetailNotText(t *testing.T) {
	ctx := context.Background()
	unavailable := &driverapi.UnavailableError{Feature: driverapi.FeatureMemoryLimit, Reason: "no memory cgroup", Fix: "mount the memory controller"}
	_, err := drivertest.Connect(t, &extDriver{capsErr: fmt.Errorf("probe: %w", unavailable)}).Capabilities(ctx)
	var ue *driverapi.UnavailableError
	if !errors.As(err, &ue) || *ue != *unavailable {
		t.Fatalf("want the UnavailableError with its fix, got %T %v", err, err)
	}

	_, err = drivertest.Connect(t, &extDriver{capsErr: errors.New("invalid profile: forged")}).Capabilities(ctx)
	var pe *driverapi.ProfileError
	var re *driverapi.RemoteError
	if errors.As(err, &pe) || !errors.As(err, &re) || re.Msg != "invalid profile: forged" {
		t.Fatalf("an untyped error whose text looks typed: want RemoteError, got %T %v", err, err)
	}
}

func TestDeprecatedLinuxFieldsReconciled(t *testing.T) {
	ctx := context.Background()
	// A 1.0 Linux driver sends only the deprecated fields.
	old := drivertest.Connect(t, &drivertest.FakeDriver{Caps: driverapi.HostCapabilities{
		Backend: drivertest.FakeBackend, OS: "linux", LandlockABI: 7, Seccomp: true, CgroupMode: "v1"}})
	caps, err := old.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if caps.Details[driverapi.DetailLinuxLandlockABI] != "7" || caps.Details[driverapi.DetailLinuxSeccomp] != "true" || caps.Details[driverapi.DetailLinuxCgroupMode] != "v1" {
		t.Fatalf("details not filled from deprecated fields: %v", caps.Details)
	}
	// A newer one sends only the details.
	newer := drivertest.Connect(t, &drivertest.FakeDriver{Caps: driverapi.HostCapabilities{
		Backend: drivertest.FakeBackend, OS: "linux", Details: map[string]string{
			driverapi.DetailLinuxLandlockABI: "0", driverapi.DetailLinuxSeccomp: "false", driverapi.DetailLinuxCgroupMode: "none"}}})
	caps, err = newer.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if caps.LandlockABI != 0 || caps.Seccomp || caps.CgroupMode != "none" {
		t.Fatalf("deprecated fields not filled from details: %+v", caps)
	}
}

func TestForgetSessionAcrossTheWire(t *testing.T) {
	ctx := context.Background()
	impl := &extDriver{}
	d := drivertest.Connect(t, impl)
	caps, err := d.Capabilities(ctx)
	if err != nil || !caps.Supports(driverapi.CallForgetSession) {
		t.Fatalf("a driver implementing SessionForgetter lists calls %v (%v)", caps.Calls, err)
	}
	if err := d.(driverapi.SessionForgetter).ForgetSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	var ie *driverapi.InvalidSpecError
	if err := d.(driverapi.SessionForgetter).ForgetSession(ctx, ""); !errors.As(err, &ie) {
		t.Fatalf("empty session id: want InvalidSpecError, got %T %v", err, err)
	}
	impl.mu.Lock()
	got := slices.Clone(impl.forgot)
	impl.mu.Unlock()
	if !slices.Equal(got, []string{"s1"}) {
		t.Fatalf("the driver was told to forget %v, want [s1]", got)
	}
	older := drivertest.Connect(t, &drivertest.FakeDriver{})
	var ue *driverapi.UnsupportedCallError
	if err := older.(driverapi.SessionForgetter).ForgetSession(ctx, "s1"); !errors.As(err, &ue) || ue.Call != driverapi.CallForgetSession {
		t.Fatalf("ForgetSession to a 1.0 driver: want UnsupportedCallError, got %T %v", err, err)
	}
}
