package core

import (
	"context"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// TestViolationsBoundedAndAudited: the driver's violations cross the wire
// into the result and the audit record, bounded by sandbox.max_violations
// with the counts past it in violations_dropped; a command refused
// nothing (the control) has none, and its watched kinds still say so.
func TestViolationsBoundedAndAudited(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.MaxViolations = 2
	fake := &drivertest.FakeDriver{Violations: []driverapi.Violation{
		{Kind: driverapi.ViolationSyscall, Operation: "syscall", Target: "mount", Count: 2},
		{Kind: driverapi.ViolationNetwork, Operation: "connect", Target: "192.0.2.1:80", Count: 1},
		{Kind: driverapi.ViolationSyscall, Operation: "syscall", Target: "ptrace", Count: 5},
	}}
	h := newHarness(t, cfg, fake)
	ctx := WithSession(context.Background(), "violations")
	out, err := h.sb.Execute(ctx, Command{Program: "echo", Args: []string{"x"}})
	if err != nil {
		t.Fatal(err)
	}
	e := out.Exit
	if len(e.Violations) != 2 || e.Violations[0].Target != "mount" || e.Violations[0].Count != 2 || e.ViolationsDropped != 5 {
		t.Fatalf("result: %+v dropped %d", e.Violations, e.ViolationsDropped)
	}
	if len(e.ViolationKinds) != 2 {
		t.Fatalf("kinds %v", e.ViolationKinds)
	}
	r := h.sink.last(t)
	if len(r.Violations) != 2 || r.Violations[1].Target != "192.0.2.1:80" || r.ViolationsDropped != 5 {
		t.Fatalf("audit: %+v dropped %d", r.Violations, r.ViolationsDropped)
	}
	// Control: nothing refused, nothing listed.
	fake.Violations = nil
	out, err = h.sb.Execute(ctx, Command{Program: "echo", Args: []string{"x"}})
	if err != nil || len(out.Exit.Violations) != 0 || out.Exit.ViolationsDropped != 0 || string(out.Stdout) != "x\n" {
		t.Fatalf("control: %v %+v", err, out)
	}
	if r := h.sink.last(t); r.Violations != nil {
		t.Fatalf("control audit: %+v", r.Violations)
	}
}

// TestProxyRefusalsMerged: the managed proxy's refusals of a running
// command are its network violations (a summary counts for the decisions
// it stands for); its allowed connections, and the refusals of a command
// not running, are not.
func TestProxyRefusalsMerged(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	s := h.sb
	log := s.refusals.open("cmd-1")
	s.RecordNetwork(context.Background(), "sess", "cmd-1", NetworkAudit{Host: "evil.example", Port: 443, Reason: "host_not_allowed"})
	s.RecordNetwork(context.Background(), "sess", "cmd-1", NetworkAudit{Host: "evil.example", Port: 443, Reason: "host_not_allowed", Suppressed: 4})
	s.RecordNetwork(context.Background(), "sess", "cmd-1", NetworkAudit{Host: "ok.example", Port: 443, Allowed: true})
	s.RecordNetwork(context.Background(), "sess", "cmd-2", NetworkAudit{Host: "other.example", Port: 80})
	s.refusals.close("cmd-1")
	s.RecordNetwork(context.Background(), "sess", "cmd-1", NetworkAudit{Host: "late.example", Port: 80})
	exit := driverapi.Exit{Violations: []driverapi.Violation{{Kind: driverapi.ViolationSyscall, Operation: "syscall", Target: "bpf", Count: 1}}}
	s.mergeViolations(&exit, log)
	want := []driverapi.Violation{
		{Kind: driverapi.ViolationSyscall, Operation: "syscall", Target: "bpf", Count: 1},
		{Kind: driverapi.ViolationNetwork, Operation: "connect", Target: "evil.example:443", Count: 5},
	}
	if len(exit.Violations) != len(want) || exit.Violations[0] != want[0] || exit.Violations[1] != want[1] || exit.ViolationsDropped != 0 {
		t.Fatalf("merged %+v dropped %d", exit.Violations, exit.ViolationsDropped)
	}
}
