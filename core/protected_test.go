package core

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// [sandbox.protected] adds entries and removes defaults explicitly; the
// effective set reaches the driver in the profile request.
func TestProtectedConfigReachesDriver(t *testing.T) {
	cfg, err := loadConfig(writeTOML(t, "[sandbox.protected]\nadd = [\".secret-tool\"]\nremove = [\".idea\"]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{}
	for _, d := range driverapi.DefaultProtectedEntries() {
		if d != ".idea" {
			want = append(want, d)
		}
	}
	want = append(want, ".secret-tool")
	if got := cfg.ProtectedEntries(); !slices.Equal(got, want) {
		t.Fatalf("effective set %q, want %q", got, want)
	}
	cfg.Sandbox.WorkspaceRoot = testConfig(t).Sandbox.WorkspaceRoot
	h := newHarness(t, cfg, nil)
	if _, err := h.sb.Execute(context.Background(), Command{SessionID: "s", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	if got := h.fake.LastProfileRequest().Protected; !slices.Equal(got, want) {
		t.Fatalf("driver got protected %q, want %q", got, want)
	}
	// Control: nothing configured sends the full default set.
	h2 := newHarness(t, testConfig(t), nil)
	if _, err := h2.sb.Execute(context.Background(), Command{SessionID: "s", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	if got := h2.fake.LastProfileRequest().Protected; !slices.Equal(got, driverapi.DefaultProtectedEntries()) {
		t.Fatalf("default config sent %q", got)
	}
	// The environment override takes comma-separated lists.
	cfg, err = loadConfig("", []string{"ALEPH_SANDBOX_SANDBOX__PROTECTED__ADD=.a,.b"})
	if err != nil || !slices.Contains(cfg.ProtectedEntries(), ".b") {
		t.Fatalf("env add: %v %q", err, cfg.ProtectedEntries())
	}
}

func TestProtectedConfigRefusesBadEntries(t *testing.T) {
	all := `"` + strings.Join(driverapi.DefaultProtectedEntries(), `","`) + `"`
	for body, key := range map[string]string{
		"add = [\"a/b\"]\n":                     "sandbox.protected.add[0]",
		"add = [\"..\"]\n":                      "sandbox.protected.add[0]",
		"add = [\"\"]\n":                        "sandbox.protected.add[0]",
		"remove = [\".gti\"]\n":                 "sandbox.protected.remove[0]",
		"add = [\".git\"]\nremove = [\".git\"]": "sandbox.protected.remove[0]",
		"remove = [" + all + "]\n":              "sandbox.protected.remove",
	} {
		_, err := loadConfig(writeTOML(t, "[sandbox.protected]\n"+body), nil)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != key {
			t.Errorf("%q: got %v, want a ConfigError for %s", body, err, key)
		}
	}
}
