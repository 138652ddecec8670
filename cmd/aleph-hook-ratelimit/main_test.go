package main

import (
	"context"
	"os"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/ratelimit"
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
	cfg, err := parseConfig(`{"enabled":true,"rate_per_second":2,"burst":1,"idle_forget_seconds":30}`)
	if err != nil || cfg.RatePerSecond != 2 || cfg.Burst != 1 || cfg.IdleForgetSeconds != 30 || cfg.MaxConcurrentGlobal != ratelimit.DefaultConfig().MaxConcurrentGlobal {
		t.Fatalf("%+v %v", cfg, err)
	}
	for _, bad := range []string{`{"rate":2}`, `{"idle_forget_seconds":-1}`, `{`} {
		if _, err := parseConfig(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func TestServesAsPlugin(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := driverapi.LaunchHook(context.Background(), driverapi.LaunchConfig{Path: exe,
		Env: []string{runMainEnv + "=1", `ALEPH_HOOK_CONFIG={"rate_per_second":0.001,"burst":1}`}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	ctx := context.Background()
	req := driverapi.HookRequest{SessionID: "s", CommandID: "c1", Program: "true"}
	if v, err := p.Hook().Before(ctx, req); err != nil || v.Action != driverapi.ActionAllow {
		t.Fatalf("first: %+v %v", v, err)
	}
	p.Hook().After(ctx, "s", "c1", true)
	req.CommandID = "c2"
	v, err := p.Hook().Before(ctx, req)
	if err != nil || v.Action != driverapi.ActionDeny || v.RetryAfter <= 0 {
		t.Fatalf("second: %+v %v", v, err)
	}
}
