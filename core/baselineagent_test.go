package core

import (
	"errors"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// sandbox.session.baseline = "agent" is accepted from the file and the
// environment, and gives spawn and nothing else: the network, host paths
// and limits stay as strict has them. An unknown name's refusal lists it.
func TestBaselinePresetAgent(t *testing.T) {
	want := driverapi.Capabilities{SpawnSubprocess: true}
	cfg, err := loadConfig(writeTOML(t, "[sandbox.session]\nbaseline = \"agent\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.SessionBaseline(); capsDigest(got) != capsDigest(want) {
		t.Fatalf("agent baseline from the file: %+v, want %+v", got, want)
	}
	cfg, err = loadConfig("", []string{"ALEPH_SANDBOX_SANDBOX__SESSION__BASELINE=agent"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.SessionBaseline(); capsDigest(got) != capsDigest(want) {
		t.Fatalf("agent baseline from the environment: %+v, want %+v", got, want)
	}
	// Strict beside it (control): nothing.
	if got := BaselinePresets()["strict"]; capsDigest(got) != capsDigest(driverapi.Capabilities{}) {
		t.Fatalf("strict: %+v", got)
	}
	_, err = loadConfig(writeTOML(t, "[sandbox.session]\nbaseline = \"lax\"\n"), nil)
	var ce *ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "agent") || !strings.Contains(err.Error(), "sandbox.session.baseline") {
		t.Fatalf("unknown baseline: %v", err)
	}
}
