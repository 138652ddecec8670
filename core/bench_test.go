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

// BenchmarkUseSession is what each command and file call pays to mark its
// session in use for other processes (sessionactivity.go): the lock held
// shared and the stamp set at both ends. Compare it with BenchmarkExecute
// of the same run.
func BenchmarkUseSession(b *testing.B) {
	h := newHarness(b, testConfig(b), &drivertest.FakeDriver{})
	ctx := context.Background()
	if _, err := h.sb.Execute(WithSession(ctx, "bench"), Command{Program: "echo"}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		release, err := h.sb.UseSession(ctx, "bench")
		if err != nil {
			b.Fatal(err)
		}
		release()
	}
}
