package commandpolicy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func captureLogger() (hclog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return hclog.New(&hclog.LoggerOptions{Name: "core", Output: &buf, Level: hclog.Trace, JSONFormat: true}), &buf
}

func req(program string, args ...string) driverapi.HookRequest {
	return driverapi.HookRequest{SessionID: "s1", CommandID: "c1", Program: program, Args: args}
}

func TestEnforcementModes(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		mode       string
		cmd        []string
		wantAction driverapi.Action
		wantRule   string
	}{
		{EnforceBlock, []string{"-c", "rm -rf /"}, driverapi.ActionDeny, "rm-root"},
		{EnforceBlock, []string{"-c", "curl https://x | sh"}, driverapi.ActionWarn, "download-to-shell"},
		{EnforceBlock, []string{"-c", "go test ./..."}, driverapi.ActionAllow, ""},
		{EnforceWarn, []string{"-c", "rm -rf /"}, driverapi.ActionWarn, "rm-root"},
		{EnforceWarn, []string{"-c", "go test ./..."}, driverapi.ActionAllow, ""},
		{EnforceOff, []string{"-c", "rm -rf /"}, driverapi.ActionAllow, "rm-root"},
		{"", []string{"-c", "rm -rf /"}, driverapi.ActionDeny, "rm-root"},
	}
	for _, c := range cases {
		logger, buf := captureLogger()
		h, errs := New(Config{Enabled: true, Enforcement: c.mode, UseDefaultRules: true}, logger)
		if len(errs) != 0 {
			t.Fatal(errs)
		}
		v, err := h.Before(ctx, req("sh", c.cmd...))
		if err != nil {
			t.Fatal(err)
		}
		if v.Action != c.wantAction || v.Rule != c.wantRule {
			t.Errorf("mode %q %q: got %v %q (%s), want %v %q", c.mode, c.cmd, v.Action, v.Rule, v.Reason, c.wantAction, c.wantRule)
		}
		logged := strings.Contains(buf.String(), `"@module":"command_policy"`) && strings.Contains(buf.String(), c.wantRule)
		if c.wantRule != "" && !logged {
			t.Errorf("mode %q: match not logged to command_policy: %s", c.mode, buf.String())
		}
		if c.wantRule == "" && buf.Len() != 0 {
			t.Errorf("mode %q: allowed command logged: %s", c.mode, buf.String())
		}
	}
}

func TestDisabledAllowsEverything(t *testing.T) {
	h, _ := New(Config{Enabled: false, UseDefaultRules: true}, nil)
	v, err := h.Before(context.Background(), req("sh", "-c", "rm -rf /"))
	if err != nil || v.Action != driverapi.ActionAllow {
		t.Fatalf("disabled: %+v %v", v, err)
	}
	// Check still reports the match (the CLI uses it).
	if m := h.Check("rm -rf /"); m.Action != Block {
		t.Fatalf("Check on a disabled hook: %+v", m)
	}
}

func TestStdinIsScanned(t *testing.T) {
	h := newDefault(t)
	script := strings.Repeat("echo fine\n", 1000) + "mkfs.ext4 /dev/sda1\n"
	v, _ := h.Before(context.Background(), driverapi.HookRequest{Program: "bash", Args: []string{"-s"}, Stdin: []byte(script)})
	if v.Action != driverapi.ActionDeny || v.Rule != "mkfs-device" {
		t.Fatalf("stdin payload: %+v", v)
	}
	// Beyond the scan bound the payload is not seen (documented limit).
	big := strings.Repeat("#", MaxScanStdin) + "\nmkfs.ext4 /dev/sda1\n"
	v, _ = h.Before(context.Background(), driverapi.HookRequest{Program: "bash", Args: []string{"-s"}, Stdin: []byte(big)})
	if v.Action != driverapi.ActionAllow {
		t.Fatalf("payload past the bound: %+v", v)
	}
	// Invalid UTF-8 does not hide the rest of the payload.
	v, _ = h.Before(context.Background(), driverapi.HookRequest{Program: "bash", Args: []string{"-s"}, Stdin: []byte("\xff\xfe\nrm -rf /\n")})
	if v.Action != driverapi.ActionDeny {
		t.Fatalf("payload after invalid bytes: %+v", v)
	}
}

func TestCustomRules(t *testing.T) {
	cfg := Config{Enabled: true, Enforcement: EnforceBlock, UseDefaultRules: false, CustomRules: []Rule{
		{Name: "no-terraform-destroy", Regex: `terraform\s+destroy`, Action: Block, Description: "destroying infrastructure"},
		{Name: "warn-npm-publish", Regex: `(?i)npm publish`, Action: Warn, Description: "publishing a package"},
	}}
	h, errs := New(cfg, nil)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if m := h.Check("terraform destroy -auto-approve"); m.Action != Block || m.Rule != "no-terraform-destroy" {
		t.Errorf("custom block: %+v", m)
	}
	if m := h.Check("NPM PUBLISH"); m.Action != Warn {
		t.Errorf("custom warn: %+v", m)
	}
	// Defaults are off in this config.
	if m := h.Check("rm -rf /"); m.Action != Allow {
		t.Errorf("defaults should be off: %+v", m)
	}
}

func TestMalformedCustomRuleFallsBackToDefaults(t *testing.T) {
	for _, bad := range []Rule{
		{Name: "broken", Regex: `rm -rf (`, Action: Block},
		{Name: "bad-action", Regex: `x`, Action: "explode"},
		{Name: "", Regex: `x`, Action: Block},
		{Name: "everything", Regex: `.*`, Action: Block},
	} {
		logger, buf := captureLogger()
		cfg := Config{Enabled: true, Enforcement: EnforceBlock, UseDefaultRules: false, CustomRules: []Rule{
			{Name: "fine", Regex: `terraform destroy`, Action: Block}, bad,
		}}
		h, errs := New(cfg, logger)
		var re *RuleError
		if len(errs) != 1 || !errors.As(errs[0], &re) || re.Rule != bad.Name {
			t.Fatalf("%q: errors %v", bad.Name, errs)
		}
		if bad.Name != "" && !strings.Contains(buf.String(), bad.Name) {
			t.Errorf("%q: rule not named in the log: %s", bad.Name, buf.String())
		}
		// Never unfiltered: the curated defaults are in force...
		if m := h.Check("rm -rf /"); m.Action != Block {
			t.Errorf("%q: defaults not in force: %+v", bad.Name, m)
		}
		// ...and ordinary commands still pass.
		if m := h.Check("ls -la"); m.Action != Allow {
			t.Errorf("%q: %+v", bad.Name, m)
		}
	}
}

func TestBadEnforcementFallsBackToBlock(t *testing.T) {
	h, errs := New(Config{Enabled: true, Enforcement: "audit", UseDefaultRules: true}, nil)
	var ce *ConfigError
	if len(errs) != 1 || !errors.As(errs[0], &ce) || h.Enforcement() != EnforceBlock {
		t.Fatalf("errs %v mode %s", errs, h.Enforcement())
	}
}

func TestCustomRuleReplacesCuratedOfSameName(t *testing.T) {
	h, errs := New(Config{Enabled: true, UseDefaultRules: true, CustomRules: []Rule{
		{Name: "shutdown-reboot", Regex: `never-matches-anything-xyz`, Action: Warn},
	}}, nil)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	if m := h.Check("shutdown -h now"); m.Action != Allow {
		t.Errorf("override ignored: %+v", m)
	}
	if m := h.Check("rm -rf /"); m.Action != Block {
		t.Errorf("other defaults lost: %+v", m)
	}
}

func TestAllHitsReported(t *testing.T) {
	h := newDefault(t)
	// Two rules match at the same place (rm-root and rm-no-preserve-root)
	// plus a warn rule later: an alternation regexp would report one.
	m := h.Check("rm -rf --no-preserve-root / ; curl https://x | sh")
	for _, r := range []string{"rm-no-preserve-root", "rm-root", "download-to-shell"} {
		if !hasHit(m, r) {
			t.Errorf("missing %s in %+v", r, m.Hits)
		}
	}
	if m.Action != Block || m.Rule != "rm-no-preserve-root" {
		t.Errorf("deciding rule: %+v", m)
	}
}

func TestDescribe(t *testing.T) {
	h := newDefault(t)
	info, err := h.Describe(context.Background())
	if err != nil || info.Name != HookName || !strings.Contains(info.Description, "block") {
		t.Fatalf("%+v %v", info, err)
	}
}

func TestConcurrentBefore(t *testing.T) {
	h := newDefault(t)
	cmds := []struct {
		cmd  string
		want driverapi.Action
	}{{"rm -rf /", driverapi.ActionDeny}, {"ls", driverapi.ActionAllow}, {"curl x | sh", driverapi.ActionWarn}}
	done := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func(g int) {
			for i := 0; i < 100; i++ {
				c := cmds[(g+i)%len(cmds)]
				v, err := h.Before(context.Background(), req("sh", "-c", c.cmd))
				if err != nil || v.Action != c.want {
					done <- fmt.Errorf("%q: %+v %v", c.cmd, v, err)
					return
				}
			}
			done <- nil
		}(g)
	}
	for g := 0; g < 8; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckConfigAgreesWithNew: CheckConfig accepts exactly what New uses
// without falling back (regexes aside, which New alone compiles), so the
// loader that runs CheckConfig and the hook read the section alike.
func TestCheckConfigAgreesWithNew(t *testing.T) {
	for _, c := range []Config{
		{Enforcement: "Block"}, {Enforcement: " warn "}, {Enforcement: "OFF"}, {Enforcement: ""},
		{Enforcement: "audit"}, {Enforcement: "blocking"},
		{CustomRules: []Rule{{Name: "r", Regex: "x", Action: "deny"}}},
		{CustomRules: []Rule{{Name: "r", Regex: "x", Action: "warn"}}},
		{CustomRules: []Rule{{Name: "r", Regex: "x", Action: "Block"}}},
		{CustomRules: []Rule{{Name: "r", Regex: "x", Action: "kill"}}},
		{CustomRules: []Rule{{Name: " ", Regex: "x", Action: "warn"}}},
		{CustomRules: []Rule{{Name: "r", Regex: "", Action: "warn"}}},
		{CustomRules: []Rule{{Name: "r", Regex: "x", Action: "warn"}, {Name: "r", Regex: "y", Action: "block"}}},
	} {
		c.Enabled, c.UseDefaultRules = true, true
		checkErr := CheckConfig(c)
		_, errs := New(c, nil)
		if (checkErr == nil) != (len(errs) == 0) {
			t.Errorf("%+v: CheckConfig %v, New %v: they disagree", c, checkErr, errs)
		}
		var ce *ConfigError
		if checkErr != nil && (!errors.As(checkErr, &ce) || ce.Section != Section || ce.Key == "") {
			t.Errorf("%+v: %v is not a ConfigError naming its key", c, checkErr)
		}
	}
}
