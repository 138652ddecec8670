package alephsandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/commandpolicy"
)

// TestCommandPolicyOneReading: [sandbox.command_policy] is read by one
// definition, the hook's. Core used to refuse enforcement = "Block" and a
// rule action "deny", both of which the hook reads (as "block"); now the
// loader and New accept what the hook uses, and the hook then enforces
// it; what the hook cannot read is refused at load and by New under its
// full key.
func TestCommandPolicyOneReading(t *testing.T) {
	base := testConfig(t)
	ctx := context.Background()
	type rule struct{ name, regex, action string }
	for _, c := range []struct {
		enforcement string
		rule        *rule
		badKey      string // "" when accepted
		cmd         string // run through the policy when accepted
		want        driverapi.Action
	}{
		{"Block", nil, "", "rm -rf /", driverapi.ActionDeny},
		{" WARN ", nil, "", "rm -rf /", driverapi.ActionWarn},
		{"block", &rule{"no-curl", `\bcurl\b`, "deny"}, "", "curl https://example.com", driverapi.ActionDeny},
		// Controls: what both readings always accepted.
		{"block", &rule{"no-curl", `\bcurl\b`, "warn"}, "", "curl https://example.com", driverapi.ActionWarn},
		{"block", nil, "", "ls", driverapi.ActionAllow},
		// What the hook cannot read is refused.
		{"maybe", nil, "sandbox.command_policy.enforcement", "", 0},
		{"block", &rule{"no-curl", `\bcurl\b`, "kill"}, "sandbox.command_policy.custom_rules[0].action", "", 0},
		{"block", &rule{"", `\bcurl\b`, "block"}, "sandbox.command_policy.custom_rules[0].name", "", 0},
	} {
		name := fmt.Sprintf("enforcement %q rule %+v", c.enforcement, c.rule)
		body := fmt.Sprintf("[sandbox]\nworkspace_root = %q\naudit_log = %q\n[sandbox.command_policy]\nenforcement = %q\n",
			base.Sandbox.WorkspaceRoot, base.Sandbox.AuditLog, c.enforcement)
		code := base
		pc := commandpolicy.DefaultConfig()
		pc.Enforcement = c.enforcement
		if c.rule != nil {
			body += fmt.Sprintf("[[sandbox.command_policy.custom_rules]]\nname = %q\nregex = %q\naction = %q\n", c.rule.name, c.rule.regex, c.rule.action)
			pc.CustomRules = []commandpolicy.Rule{{Name: c.rule.name, Regex: c.rule.regex, Action: c.rule.action}}
		}
		code.Sandbox.CommandPolicy = core.Section(pc.SectionMap())
		path := filepath.Join(t.TempDir(), "config.toml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		loaded, loadErr := alephsandbox.LoadConfig(path)
		var warn strings.Builder
		rt, newErr := alephsandbox.New(code, alephsandbox.WithDriver(drivertest.Connect(t, &drivertest.FakeDriver{})), alephsandbox.WithWarnings(&warn))
		if rt != nil {
			t.Cleanup(func() { _ = rt.Close() })
		}
		if c.badKey != "" {
			for how, err := range map[string]error{"load": loadErr, "New": newErr} {
				var ce *core.ConfigError
				if !errors.As(err, &ce) || ce.Key != c.badKey || !strings.Contains(err.Error(), c.badKey) {
					t.Errorf("%s: %s: got %v, want a ConfigError on %s", name, how, err, c.badKey)
				}
			}
			continue
		}
		if loadErr != nil || newErr != nil {
			t.Errorf("%s: load %v, New %v: want both accepted, as the hook reads it", name, loadErr, newErr)
			continue
		}
		if got, err := alephsandbox.CommandPolicyConfig(loaded); err != nil || got.Enforcement != c.enforcement {
			t.Errorf("%s: loaded enforcement %q (%v)", name, got.Enforcement, err)
		}
		// The hook used the value as given: no fallback warning.
		if warn.Len() != 0 {
			t.Errorf("%s: the hook fell back: %q", name, warn.String())
		}
		if v, err := rt.Policy().Check(ctx, c.cmd, nil); err != nil || v.Action != c.want {
			t.Errorf("%s: Check(%q) = %+v %v, want %s", name, c.cmd, v, err, c.want)
		}
	}
}

// TestCommandPolicySectionRefusals: the loader refuses what the hook's
// schema and parser refuse in [sandbox.command_policy], by full key, from
// the file and from the environment; the hook's defaults fill what the
// file leaves out (positive control: a rule of one's own loads and is
// read back by the hook's parser).
func TestCommandPolicySectionRefusals(t *testing.T) {
	base := testConfig(t)
	head := fmt.Sprintf("[sandbox]\nworkspace_root = %q\naudit_log = %q\n", base.Sandbox.WorkspaceRoot, base.Sandbox.AuditLog)
	for _, c := range []struct {
		toml, env, key, why string
	}{
		{"[[sandbox.command_policy.custom_rules]]\nname = \"a\"\nregex = \"b\"\naction = \"block\"\nseverity = 3\n", "", "sandbox.command_policy.custom_rules[0].severity", "unknown key"},
		{"[sandbox.command_policy]\nenforce = \"warn\"\n", "", "sandbox.command_policy.enforce", "unknown key"},
		{"[sandbox.command_policy]\nenabled = \"yes\"\n", "", "sandbox.command_policy.enabled", "must be a boolean"},
		{"[sandbox.command_policy]\ncustom_rules = [1]\n", "", "sandbox.command_policy.custom_rules[0]", "must be a table"},
		{"[[sandbox.command_policy.custom_rules]]\nname = 3\nregex = \"b\"\n", "", "sandbox.command_policy.custom_rules[0].name", "must be a string"},
		{"", "ALEPH_SANDBOX_SANDBOX__COMMAND_POLICY__CUSTOM_RULES=x", "sandbox.command_policy.custom_rules", "config file"},
		{"", "ALEPH_SANDBOX_SANDBOX__COMMAND_POLICY__ENABLED=maybe", "sandbox.command_policy.enabled", "true or false"},
	} {
		if c.env != "" {
			k, v, _ := strings.Cut(c.env, "=")
			t.Setenv(k, v)
		}
		path := filepath.Join(t.TempDir(), "config.toml")
		if err := os.WriteFile(path, []byte(head+c.toml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := alephsandbox.LoadConfig(path)
		var ce *core.ConfigError
		if !errors.As(err, &ce) || ce.Key != c.key || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%q %s: got %v, want a ConfigError on %s (%s)", c.toml, c.env, err, c.key, c.why)
		}
		if c.env != "" {
			k, _, _ := strings.Cut(c.env, "=")
			os.Unsetenv(k)
		}
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	body := head + "[sandbox.command_policy]\nenforcement = \"warn\"\n[[sandbox.command_policy.custom_rules]]\nname = \"no-curl\"\nregex = \"curl\"\naction = \"block\"\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := alephsandbox.LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := alephsandbox.CommandPolicyConfig(cfg)
	if err != nil || !pc.Enabled || pc.Enforcement != "warn" || !pc.UseDefaultRules || len(pc.CustomRules) != 1 || pc.CustomRules[0].Name != "no-curl" {
		t.Fatalf("loaded %+v (%v): want the rule, warn, and the hook's defaults for the rest", pc, err)
	}
}
