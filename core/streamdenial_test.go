package core

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// A driver without the run_stream call that says why it cannot stream is
// quoted, instead of being told to upgrade to the protocol it speaks.
func TestStreamDenialQuotesTheDriver(t *testing.T) {
	caps := drivertest.FullCapabilities()
	caps.Features = slices.DeleteFunc(caps.Features, func(f string) bool { return f == driverapi.FeatureStdinStream })
	caps.Unavailable = append(caps.Unavailable, driverapi.Unavailable{Feature: driverapi.FeatureStdinStream, Reason: "this backend runs batch jobs", Fix: "drop -i"})
	h := newHarness(t, testConfig(t), &drivertest.FakeDriver{Caps: caps})
	_, err := h.sb.Execute(context.Background(), streamCmd(strings.NewReader("x"), nil))
	de := wantDenied(t, err, ReasonUnenforceable)
	if de.Feature != driverapi.FeatureStdinStream || !strings.Contains(de.Reason, "cannot give stdin_stream: this backend runs batch jobs (fix: drop -i)") || strings.Contains(de.Reason, "protocol 1.") {
		t.Fatalf("refusal %+v", de)
	}
}
