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
		code.Sandbox.CommandPolicy.Enforcement = c.enforcement
		code.Sandbox.CommandPolicy.CustomRules = nil
		if c.rule != nil {
			body += fmt.Sprintf("[[sandbox.command_policy.custom_rules]]\nname = %q\nregex = %q\naction = %q\n", c.rule.name, c.rule.regex, c.rule.action)
			code.Sandbox.CommandPolicy.CustomRules = []core.CustomRule{{Name: c.rule.name, Regex: c.rule.regex, Action: c.rule.action}}
		}
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
		if loaded.Sandbox.CommandPolicy.Enforcement != c.enforcement {
			t.Errorf("%s: loaded enforcement %q", name, loaded.Sandbox.CommandPolicy.Enforcement)
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
