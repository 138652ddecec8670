package core

import (
	"context"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// The pipeline asks for the session's sandbox only of a driver that lists
// the call and only when the configuration allows it; a "new" sandbox of
// a profile the session already had one for is reported "rebuilt" (the
// driver lost it: it died and was started again), and a forgotten session
// starts afresh.
func TestSessionSandboxRequestedAndRebuiltReported(t *testing.T) {
	listing := drivertest.FullCapabilities()
	listing.Calls = []string{driverapi.CallSessionSandbox, driverapi.CallForgetSession}
	for _, tc := range []struct {
		name   string
		caps   driverapi.HostCapabilities
		off    bool
		wantOn bool
	}{
		{"listed", listing, false, true},
		{"listed, configured off", listing, true, false},
		{"not listed", drivertest.FullCapabilities(), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			if tc.off {
				cfg.Sandbox.SessionSandboxes = SessionSandboxesOff
			}
			fake := &drivertest.FakeDriver{Caps: tc.caps,
				Details: map[string]string{driverapi.ExitDetailSessionSandbox: driverapi.SessionSandboxNew}}
			h := newHarness(t, cfg, fake)
			ctx := WithSession(context.Background(), "s1")
			run := func() string {
				t.Helper()
				out, err := h.sb.Execute(ctx, Command{Program: "echo", Args: []string{"x"}})
				if err != nil {
					t.Fatal(err)
				}
				if got := fake.LastSpec().SessionSandbox; got != tc.wantOn {
					t.Fatalf("RunSpec.SessionSandbox = %v, want %v", got, tc.wantOn)
				}
				return out.Exit.Details[driverapi.ExitDetailSessionSandbox]
			}
			if got := run(); got != driverapi.SessionSandboxNew {
				t.Fatalf("first command: %q", got)
			}
			if got := run(); got != driverapi.SessionSandboxRebuilt {
				t.Fatalf("a new sandbox of a profile the session had one for: %q, want rebuilt", got)
			}
			if r := h.sink.last(t); r.Details[driverapi.ExitDetailSessionSandbox] != driverapi.SessionSandboxRebuilt {
				t.Fatalf("the audit record says %q", r.Details[driverapi.ExitDetailSessionSandbox])
			}
			h.sb.ForgetSession("s1")
			if got := run(); got != driverapi.SessionSandboxNew {
				t.Fatalf("after forget: %q, want new", got)
			}
		})
	}
}
