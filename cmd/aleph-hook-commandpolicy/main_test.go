package main

import (
	"context"
	"os"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// runMainEnv makes the test binary run main(), so the plugin is tested as
// the process it ships as.
const runMainEnv = "ALEPH_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseConfig(t *testing.T) {
	cfg, err := parseConfig(`{"enforcement":"warn"}`)
	if err != nil || cfg.Enforcement != "warn" || !cfg.Enabled || !cfg.UseDefaultRules {
		t.Fatalf("%+v %v", cfg, err)
	}
	if _, err := parseConfig(`{"enforcment":"warn"}`); err == nil {
		t.Fatal("unknown key accepted")
	}
	if cfg, err := parseConfig(""); err != nil || cfg.Enforcement != "block" {
		t.Fatalf("empty: %+v %v", cfg, err)
	}
}

func TestServesAsPlugin(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := driverapi.LaunchHook(context.Background(), driverapi.LaunchConfig{Path: exe,
		Env: []string{runMainEnv + "=1", `ALEPH_HOOK_CONFIG={"custom_rules":[{"name":"no-terraform-destroy","regex":"terraform destroy","action":"block"}]}`}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		want driverapi.Action
		rule string
	}{
		{[]string{"-c", "rm -rf /"}, driverapi.ActionDeny, "rm-root"},
		{[]string{"-c", "terraform destroy"}, driverapi.ActionDeny, "no-terraform-destroy"},
		{[]string{"-c", "go test ./..."}, driverapi.ActionAllow, ""},
	} {
		v, err := p.Hook().Before(ctx, driverapi.HookRequest{SessionID: "s", CommandID: "c", Program: "sh", Args: c.args})
		if err != nil || v.Action != c.want || v.Rule != c.rule {
			t.Errorf("%q: %+v %v", c.args, v, err)
		}
	}
}
