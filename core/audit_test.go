package core

import (
	"context"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// TestAuditRecordsDriverDetails: what the driver reports about how it ran a
// command (the Windows tier chosen and why, the cgroup mode) reaches the
// ledger; a driver that reports nothing leaves the field empty.
func TestAuditRecordsDriverDetails(t *testing.T) {
	for _, details := range []map[string]string{
		{"tier": "restricted_token", "tier_fallback_reason": "CreateAppContainerProfile: access denied"},
		nil,
	} {
		h := newHarness(t, testConfig(t), &drivertest.FakeDriver{Details: details})
		ctx := WithSession(context.Background(), "details")
		if _, err := h.sb.Execute(ctx, Command{Program: "echo", Args: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
		r := h.sink.last(t)
		if len(r.Details) != len(details) || r.Details["tier"] != details["tier"] || r.Details["tier_fallback_reason"] != details["tier_fallback_reason"] {
			t.Fatalf("ledger details %v, want %v", r.Details, details)
		}
	}
}

// TestAuditRecordsUsage: what the driver measured a command consumed is in
// its audit record (CPU as user plus system); a denied command, which ran
// nothing, has none.
func TestAuditRecordsUsage(t *testing.T) {
	h := newHarness(t, testConfig(t), &drivertest.FakeDriver{Usage: driverapi.ResourceUsage{MaxRSSKB: 2048, UserMS: 30, SystemMS: 12}})
	ctx := WithSession(context.Background(), "usage")
	out, err := h.sb.Execute(ctx, Command{Program: "echo", Args: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	r := h.sink.last(t)
	if r.Usage == nil || *r.Usage != (AuditUsage{CPUMS: 42, UserMS: 30, SystemMS: 12, MaxRSSKB: 2048}) || out.Exit.Usage.MaxRSSKB != 2048 {
		t.Fatalf("ledger usage %+v", r.Usage)
	}
	if _, err := h.sb.Execute(ctx, Command{Program: "echo", Args: []string{"x"}, Capabilities: driverapi.Capabilities{SpawnSubprocess: true}}); err == nil {
		t.Fatal("an elevation with no approver ran")
	}
	if r := h.sink.last(t); r.Decision == DecisionAllow || r.Usage != nil {
		t.Fatalf("denied command's record: %+v", r)
	}
}

// TestRecordNetwork: a proxy decision becomes a ledger record of its own,
// allow or deny by the proxy's verdict, with the proxy's reason and the
// summary count kept.
func TestRecordNetwork(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	ctx := context.Background()
	for _, tc := range []struct {
		n        NetworkAudit
		decision Decision
		reason   ReasonCode
	}{
		{NetworkAudit{Host: "api.example", Port: 443, Protocol: "http_connect", Allowed: true, Reason: "policy_allow"}, DecisionAllow, ReasonNetworkAllowed},
		{NetworkAudit{Host: "169.254.169.254", Port: 80, Protocol: "http", Reason: "ip_literal_not_allowed", Detail: "not listed"}, DecisionDeny, ReasonNetworkDenied},
		{NetworkAudit{Host: "evil.example", Port: 443, Protocol: "socks5", Reason: "host_not_allowed", Suppressed: 99}, DecisionDeny, ReasonNetworkDenied},
	} {
		h.sb.RecordNetwork(ctx, "s1", "c1", tc.n)
		r := h.sink.last(t)
		if r.Decision != tc.decision || r.Reason != tc.reason || r.SessionID != "s1" || r.CommandID != "c1" || r.Network == nil || *r.Network != tc.n {
			t.Fatalf("record %+v (network %+v), want %s/%s with %+v", r, r.Network, tc.decision, tc.reason, tc.n)
		}
	}
}

// TestAuditSpawnRefused: a command whose start of a process the driver
// refused and counted is recorded (and reported) as spawn_refused, with
// the hint; one that starts none is allowed, without a hint (the control).
func TestAuditSpawnRefused(t *testing.T) {
	h := newHarness(t, testConfig(t), &drivertest.FakeDriver{})
	ctx := WithSession(context.Background(), "spawn")
	out, err := h.sb.Execute(ctx, Command{Program: "fork"})
	if err != nil {
		t.Fatal(err)
	}
	if r := h.sink.last(t); r.Reason != ReasonSpawnRefused || out.Reason() != ReasonSpawnRefused || out.Hint() != SpawnRefusedHint || !out.SpawnReported {
		t.Fatalf("ledger reason %s, output %s %q reported %v", r.Reason, out.Reason(), out.Hint(), out.SpawnReported)
	}
	out, err = h.sb.Execute(ctx, Command{Program: "echo", Args: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	if r := h.sink.last(t); r.Reason != ReasonAllowed || out.Reason() != ReasonAllowed || out.Hint() != "" {
		t.Fatalf("control: ledger reason %s, output %s %q", r.Reason, out.Reason(), out.Hint())
	}
}
