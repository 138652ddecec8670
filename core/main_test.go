package core

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// memSink keeps audit records in memory.
type memSink struct {
	mu   sync.Mutex
	recs []AuditRecord
}

func (m *memSink) Record(_ context.Context, r AuditRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs = append(m.recs, r)
	return nil
}

func (m *memSink) all() []AuditRecord {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]AuditRecord(nil), m.recs...)
}

func (m *memSink) last(t *testing.T) AuditRecord {
	t.Helper()
	all := m.all()
	if len(all) == 0 {
		t.Fatal("no audit record")
	}
	return all[len(all)-1]
}

func testConfig(t testing.TB) Config {
	cfg := DefaultConfig()
	cfg.Sandbox.WorkspaceRoot = t.TempDir()
	cfg.Sandbox.AuditLog = ""
	return cfg
}

type harness struct {
	sb   *WorkspaceSandbox
	fake *drivertest.FakeDriver
	sink *memSink
}

// newHarness builds a WorkspaceSandbox over the fake driver behind real
// (in-memory) gRPC.
func newHarness(t testing.TB, cfg Config, fake *drivertest.FakeDriver, opts ...Option) *harness {
	t.Helper()
	if fake == nil {
		fake = &drivertest.FakeDriver{}
	}
	sink := &memSink{}
	all := append([]Option{WithDriver(drivertest.Connect(t, fake)), WithAuditSink(sink)}, opts...)
	sb, err := NewWorkspaceSandbox(cfg, all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return &harness{sb: sb, fake: fake, sink: sink}
}

func wantDenied(t *testing.T, err error, code ReasonCode) *DeniedError {
	t.Helper()
	var de *DeniedError
	if !errors.As(err, &de) {
		t.Fatalf("want DeniedError %s, got %T %v", code, err, err)
	}
	if de.Code != code {
		t.Fatalf("want code %s, got %s (%v)", code, de.Code, de)
	}
	return de
}

func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var ie *InvalidCommandError
	if !errors.As(err, &ie) {
		t.Fatalf("want InvalidCommandError on %s, got %T %v", field, err, err)
	}
	if ie.Field != field {
		t.Fatalf("want field %q, got %q (%v)", field, ie.Field, ie)
	}
}
