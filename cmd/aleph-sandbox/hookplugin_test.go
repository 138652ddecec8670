package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestHookPluginsGetTheirConfig: the shipped hooks run as plugins with their
// section of the configuration. The command policy runs only as a plugin
// here (in-process off), so only a plugin that received the custom rule can
// block the command; the rate-limit plugin refuses unknown keys, so a
// command that runs at all shows its configuration was accepted.
func TestHookPluginsGetTheirConfig(t *testing.T) {
	drv := cliEnv(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator),
		"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-hook-commandpolicy",
		"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-hook-ratelimit")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	cfg := filepath.Join(t.TempDir(), "c.toml")
	body := `[sandbox]
hook_plugins = ["` + filepath.Join(bin, "aleph-hook-commandpolicy") + `", "` + filepath.Join(bin, "aleph-hook-ratelimit") + `"]
[sandbox.command_policy]
enabled = false
custom_rules = [
  { name = "no-terraform-destroy", regex = "terraform\\s+destroy", action = "block", description = "not here" },
]
[sandbox.rate_limit]
enabled = false
rate_per_second = 5
burst = 3
max_concurrent_per_session = 2
`
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "", false, "exec", "--driver", drv, "--config", cfg, "--", "echo", "terraform", "destroy")
	if r.code != 125 || !strings.Contains(r.stderr, "no-terraform-destroy") {
		t.Fatalf("custom rule in the plugin: %+v", r)
	}
	// Control: the curated rules are in force in the plugin too, and an
	// ordinary command runs through both plugins.
	if r := cli(t, "", false, "exec", "--driver", drv, "--config", cfg, "--", "rm", "-rf", "/"); r.code != 125 || !strings.Contains(r.stderr, "rm-root") {
		t.Fatalf("curated rule in the plugin: %+v", r)
	}
	if r := cli(t, "", false, "exec", "--driver", drv, "--config", cfg, "--", "echo", "terraform", "plan"); r.code != 0 || r.stdout != "terraform plan\n" {
		t.Fatalf("ordinary command through both plugins: %+v", r)
	}
}
