package core

import (
	"context"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// BenchmarkExecute is one Execute round trip through the whole pipeline
// (session, cwd, capability and enforceability checks, profile, run, audit)
// with the fake driver behind in-memory gRPC: the core's own overhead.
func BenchmarkExecute(b *testing.B) {
	h := newHarness(b, testConfig(b), &drivertest.FakeDriver{})
	ctx := WithSession(context.Background(), "bench")
	cmd := Command{Program: "echo", Args: []string{"hi"}}
	if _, err := h.sb.Execute(ctx, cmd); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := h.sb.Execute(ctx, cmd); err != nil {
			b.Fatal(err)
		}
	}
}
