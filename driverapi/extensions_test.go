package driverapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

	// A Go driver with only the base calls speaks the protocol of the
	// driverapi it was built with (its error details, its refusal of a tty
	// through Run): it reports that minor version and no optional calls,
	// keeps working, and is reported as lacking the calls.
	base := drivertest.Connect(t, &drivertest.FakeDriver{})
	caps, err = base.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if caps.ProtocolMinor != driverapi.ProtocolMinor || len(caps.Calls) != 0 || caps.Supports(driverapi.CallSignal) {
		t.Fatalf("a driver with the base calls is reported as minor %d with calls %v", caps.ProtocolMinor, caps.Calls)
	}
	p := profileFor(t, base)
	if _, err := base.Run(ctx, spec(p, "echo", "still works"), driverapi.Streams{}); err != nil {
		t.Fatalf("a driver with the base calls no longer runs: %v", err)
	}
	var ue *driverapi.UnsupportedCallError
	if err := base.(driverapi.Signaler).Signal(ctx, "c1", driverapi.SignalTERM); !errors.As(err, &ue) || ue.Call != driverapi.CallSignal {
		t.Fatalf("Signal to a driver without it: want UnsupportedCallError, got %T %v", err, err)
	}
	if _, err := base.(driverapi.Configurable).ConfigSchema(ctx); !errors.As(err, &ue) || ue.Call != driverapi.CallConfig {
		t.Fatalf("ConfigSchema of a driver without it: want UnsupportedCallError, got %T %v", err, err)
	}

	// A driver that says which minor version it speaks is left alone.
	pinned := &drivertest.FakeDriver{}
	pinned.Caps, _ = pinned.Capabilities(ctx)
	pinned.Caps.ProtocolMinor = 1
	if caps, err := drivertest.Connect(t, pinned).Capabilities(ctx); err != nil || caps.ProtocolMinor != 1 {
		t.Fatalf("a driver's own minor version was replaced: %d, %v", caps.ProtocolMinor, err)
	}
}

// The host's minor version reaches a Go driver's Capabilities.
func TestHostProtocolMinorReachesTheDriver(t *testing.T) {
	d := &hostMinorDriver{}
	if _, err := drivertest.Connect(t, d).Capabilities(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !d.ok || d.minor != driverapi.ProtocolMinor {
		t.Fatalf("HostProtocolMinor = %d, %v; want %d, true", d.minor, d.ok, driverapi.ProtocolMinor)
	}
	// Control: outside a served Capabilities call there is none.
	if _, ok := driverapi.HostProtocolMinor(context.Background()); ok {
		t.Fatal("HostProtocolMinor outside a Capabilities call")
	}
}

type hostMinorDriver struct {
	drivertest.FakeDriver
	minor uint32
	ok    bool
}

func (d *hostMinorDriver) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	d.minor, d.ok = driverapi.HostProtocolMinor(ctx)
	return d.FakeDriver.Capabilities(ctx)
}

// An optional call a driver lacks is explained by the driver's own
// reason when it gives one, by the protocol version only when the driver
// is older than the call, and never by telling a driver of this version
// to upgrade to it.
func TestUnsupportedCallMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		caps driverapi.HostCapabilities
		want string
		not  string
	}{
		{"own reason", driverapi.HostCapabilities{ProtocolMinor: 2, Unavailable: []driverapi.Unavailable{
			{Feature: driverapi.FeatureStdinStream, Reason: "this backend runs batch jobs", Fix: "use bwrap"}}},
			"driver d cannot give stdin_stream: this backend runs batch jobs (fix: use bwrap)", "protocol"},
		{"current without reason", driverapi.HostCapabilities{ProtocolMinor: 2},
			`driver d cannot give stdin_stream: it does not implement the optional "run_stream" call`, "or newer"},
		{"older", driverapi.HostCapabilities{ProtocolMinor: 1},
			`driver d cannot give stdin_stream: it speaks protocol 1.1, and the "run_stream" call came with protocol 1.2: use a driver for protocol 1.2 or newer`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.caps.UnsupportedCall("d", driverapi.CallRunStream, driverapi.FeatureStdinStream).Error()
			if msg != tc.want || (tc.not != "" && strings.Contains(msg, tc.not)) {
				t.Fatalf("message %q, want %q", msg, tc.want)
			}
		})
	}
	// Each call names the version that brought it (the table the
	// message reads from).
	for _, c := range []struct {
		call  string
		since uint32
	}{
		{driverapi.CallSessionSandbox, 3}, {driverapi.CallLayeredWorkspace, 4},
		{driverapi.CallLayeredView, 6}, {driverapi.CallLayeredViewOpen, 7},
	} {
		caps := driverapi.HostCapabilities{ProtocolMinor: c.since - 1}
		msg := caps.UnsupportedCall("d", c.call, driverapi.FeatureLayeredWorkspace).Error()
		if want := fmt.Sprintf("came with protocol 1.%d:", c.since); !strings.Contains(msg, want) {
			t.Errorf("%s: %q, want %q", c.call, msg, want)
		}
	}
	// Without a feature: the call is named.
	e := &driverapi.UnsupportedCallError{Plugin: "d", Call: driverapi.CallSignal, Minor: 2}
	if got := e.Error(); got != `driver d: it does not implement the optional "signal" call` {
		t.Fatalf("message %q", got)
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
		t.Fatalf("ForgetSession to a driver without it: want UnsupportedCallError, got %T %v", err, err)
	}
}

// sessionDriver lists session_sandbox when on.
type sessionDriver struct {
	extDriver
	on bool
}

func (d *sessionDriver) SessionSandboxes() bool { return d.on }

func TestSessionSandboxCallAcrossTheWire(t *testing.T) {
	ctx := context.Background()
	for _, on := range []bool{true, false} {
		impl := &sessionDriver{on: on}
		impl.Caps = drivertest.FullCapabilities()
		d := drivertest.Connect(t, impl)
		caps, err := d.Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if caps.Supports(driverapi.CallSessionSandbox) != on {
			t.Fatalf("SessionSandboxes() = %v, calls %v", on, caps.Calls)
		}
		if !caps.Supports(driverapi.CallForgetSession) {
			t.Fatalf("a session sandboxer is a session forgetter: calls %v", caps.Calls)
		}
	}
	// The request's flag reaches the driver as sent.
	impl := &sessionDriver{on: true}
	impl.Caps = drivertest.FullCapabilities()
	d := drivertest.Connect(t, impl)
	prof := driverapi.NewProfile(drivertest.FakeBackend, []byte("{}"))
	for _, want := range []bool{true, false} {
		if _, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/true", Cwd: "/", Profile: prof, SessionID: "s", SessionSandbox: want, Timeout: time.Second, MaxOutputBytes: 1024},
			driverapi.Streams{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
			t.Fatal(err)
		}
		if got := impl.LastSpec().SessionSandbox; got != want {
			t.Fatalf("RunSpec.SessionSandbox sent %v, the driver got %v", want, got)
		}
	}
}
