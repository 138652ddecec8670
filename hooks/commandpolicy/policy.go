// Package commandpolicy is the command-content hard filter that runs in
// front of the OS sandbox: a curated set of named rules (fork bombs, rm of
// the root, writes onto disks, Windows drive and hive destruction, ...) that
// block, and risky patterns that are only recorded. It is a hard filter for
// commands with essentially no legitimate use in a workspace, not an intent
// classifier: the OS sandbox remains the real enforcer.
//
// A command is scanned as one text (program, space-joined arguments and up to
// 256 KiB of UTF-8 stdin), normalised first (see Normalize) whatever the
// enforcement mode, then matched in one pass against the whole rule set.
package commandpolicy

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// HookName is the name the hook reports and the log target of its records.
const HookName = "command_policy"

// Enforcement modes.
const (
	// EnforceBlock denies Block rules and warns on Warn rules.
	EnforceBlock = "block"
	// EnforceWarn turns every match into a warning.
	EnforceWarn = "warn"
	// EnforceOff lets everything through; matches are still logged.
	EnforceOff = "off"
)

// MaxScanStdin is the most stdin scanned, in bytes.
const MaxScanStdin = driverapi.MaxHookStdinBytes

// Config is the [sandbox.command_policy] section.
type Config struct {
	Enabled         bool   `json:"enabled" koanf:"enabled" toml:"enabled"`
	Enforcement     string `json:"enforcement" koanf:"enforcement" toml:"enforcement"`
	UseDefaultRules bool   `json:"use_default_rules" koanf:"use_default_rules" toml:"use_default_rules"`
	CustomRules     []Rule `json:"custom_rules" koanf:"custom_rules" toml:"custom_rules"`
}

// DefaultConfig is the policy on by default: curated rules, blocking.
func DefaultConfig() Config {
	return Config{Enabled: true, Enforcement: EnforceBlock, UseDefaultRules: true}
}

// Section is the configuration section the hook owns, [sandbox.command_policy].
const Section = "command_policy"

// ConfigError is a configuration value that cannot be used: the project's
// one configuration error type, driverapi.ConfigError, with Section set to
// Section, so a caller catches it with the same errors.As as core's and a
// driver's refusals.
type ConfigError = driverapi.ConfigError

// Hit is one rule that matched.
type Hit struct {
	Rule        string `json:"rule"`
	Action      string `json:"action"`
	Description string `json:"description"`
	// Excerpt is the normalised text the rule matched (at most 200 bytes).
	Excerpt string `json:"excerpt,omitempty"`
}

// Match is the result of checking one text, independent of enforcement.
type Match struct {
	// Action is "block", "warn" or "allow" (nothing matched): the
	// strongest action among the hits.
	Action string `json:"action"`
	// Rule and Description name the deciding hit: the first block rule in
	// rule order, else the first warn rule.
	Rule        string `json:"rule,omitempty"`
	Description string `json:"description,omitempty"`
	// Hits lists every matching rule, in rule order.
	Hits []Hit `json:"hits,omitempty"`
}

// Allow is the Action of a Match with no hits.
const Allow = "allow"

// Hook is the command policy as a driverapi.Hook. It is safe for
// concurrent use and holds no per-command state.
type Hook struct {
	enabled     bool
	enforcement string
	m           *matcher
	log         hclog.Logger
}

var _ driverapi.Hook = (*Hook)(nil)

// ParseEnforcement is the one reading of [sandbox.command_policy]
// enforcement, for the hook and the configuration loader alike: "block",
// "warn" or "off" in any letter case and with surrounding blanks; empty is
// "block". ok is false for anything else (New then uses "block", the
// loader refuses it).
func ParseEnforcement(s string) (mode string, ok bool) {
	switch m := strings.ToLower(strings.TrimSpace(s)); m {
	case EnforceBlock, EnforceWarn, EnforceOff:
		return m, true
	case "":
		return EnforceBlock, true
	}
	return EnforceBlock, false
}

// CheckConfig refuses what New would not use as given, with a
// *ConfigError whose Key is relative to Section ("enforcement",
// "custom_rules[1].action"): an enforcement mode ParseEnforcement does not
// read, and a custom rule without a name, with a name used twice, with no
// regex or with an action ruleAction does not read. It uses the same
// definitions as New, so the loader and the hook cannot disagree on a
// value; a regex that does not compile is left to New, which logs it and
// keeps the curated rules in force.
func CheckConfig(cfg Config) error {
	if _, ok := ParseEnforcement(cfg.Enforcement); !ok {
		return &ConfigError{Section: Section, Key: "enforcement", Reason: fmt.Sprintf("must be %q, %q or %q (any letter case), got %q", EnforceBlock, EnforceWarn, EnforceOff, cfg.Enforcement)}
	}
	seen := map[string]bool{}
	for i, r := range cfg.CustomRules {
		key := fmt.Sprintf("custom_rules[%d]", i)
		_, actionOK := ruleAction(r.Action)
		switch {
		case strings.TrimSpace(r.Name) == "":
			return &ConfigError{Section: Section, Key: key + ".name", Reason: "must not be empty"}
		case seen[r.Name]:
			return &ConfigError{Section: Section, Key: key + ".name", Reason: fmt.Sprintf("%q is used by another rule", r.Name)}
		case r.Regex == "":
			return &ConfigError{Section: Section, Key: key + ".regex", Reason: "must not be empty"}
		case !actionOK:
			return &ConfigError{Section: Section, Key: key + ".action", Reason: fmt.Sprintf("must be %q or %q, got %q", Block, Warn, r.Action)}
		}
		seen[r.Name] = true
	}
	return nil
}

// New builds the hook. It never returns a hook without the filter the
// configuration asks for, or weaker: a custom rule that does not compile
// (bad regex, unknown action, no name) is logged by name and the hook falls
// back to the curated defaults alone; an unknown enforcement mode falls back
// to "block". The returned errors say what was ignored; the hook is usable
// in every case.
func New(cfg Config, logger hclog.Logger) (*Hook, []error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	log := logger.ResetNamed(HookName)
	var errs []error
	enf, ok := ParseEnforcement(cfg.Enforcement)
	if !ok {
		err := &ConfigError{Section: Section, Key: "enforcement", Reason: fmt.Sprintf("%q is not block, warn or off; using block", cfg.Enforcement)}
		log.Error("invalid enforcement mode, using block", "value", cfg.Enforcement)
		errs = append(errs, err)
		enf = EnforceBlock
	}
	var custom []compiledRule
	customOK := true
	seen := map[string]bool{}
	for _, r := range cfg.CustomRules {
		cr, err := compileRule(r, false)
		if err == nil && seen[r.Name] {
			err = &RuleError{Rule: r.Name, Reason: "name used twice"}
		}
		if err != nil {
			log.Error("custom rule rejected; falling back to the curated default rules", "rule", r.Name, "error", err)
			errs = append(errs, err)
			customOK = false
			continue
		}
		seen[r.Name] = true
		custom = append(custom, cr)
	}
	var rules []compiledRule
	if cfg.UseDefaultRules || !customOK {
		for _, r := range DefaultRules() {
			cr, err := compileRule(r, true)
			if err != nil {
				// A curated rule that does not compile is a bug caught by
				// the tests; never drop the rest because of it.
				log.Error("curated rule does not compile", "rule", r.Name, "error", err)
				errs = append(errs, err)
				continue
			}
			if seen[r.Name] && customOK {
				// A custom rule of the same name replaces the curated one.
				continue
			}
			rules = append(rules, cr)
		}
	}
	if customOK {
		rules = append(rules, custom...)
	}
	if cfg.Enabled && len(rules) == 0 {
		log.Warn("command policy enabled with no rules: use_default_rules is false and there are no custom rules")
	}
	return &Hook{enabled: cfg.Enabled, enforcement: enf, m: newMatcher(rules), log: log}, errs
}

// Enforcement is the effective enforcement mode.
func (h *Hook) Enforcement() string { return h.enforcement }

// Rules lists the rules in force, in evaluation order.
func (h *Hook) Rules() []Rule {
	out := make([]Rule, len(h.m.rules))
	for i, r := range h.m.rules {
		out[i] = r.Rule
	}
	return out
}

// Describe names the hook.
func (h *Hook) Describe(context.Context) (driverapi.HookInfo, error) {
	return driverapi.HookInfo{
		Name:        HookName,
		Version:     "1",
		Description: fmt.Sprintf("command-content hard filter (%d rules, enforcement %s)", len(h.m.rules), h.enforcement),
	}, nil
}

// ScanTarget is the text a command is judged by: program, space-joined
// arguments and, on a new line, stdin (at most MaxScanStdin bytes; bytes
// that are not UTF-8 count as spaces).
func ScanTarget(program string, args []string, stdin []byte) string {
	var b strings.Builder
	n := len(program) + 1
	for _, a := range args {
		n += len(a) + 1
	}
	if len(stdin) > MaxScanStdin {
		stdin = stdin[:MaxScanStdin]
	}
	withStdin := len(stdin) > 0
	text := ""
	if withStdin {
		// Invalid sequences (including a character cut by the bound) become
		// a space rather than hiding the rest of the payload.
		text = strings.ToValidUTF8(string(stdin), " ")
		n += len(text)
	}
	b.Grow(n)
	b.WriteString(program)
	for _, a := range args {
		b.WriteByte(' ')
		b.WriteString(a)
	}
	if withStdin {
		b.WriteByte('\n')
		b.WriteString(text)
	}
	return b.String()
}

// Check normalises text and matches it against the rules, whatever the
// enforcement mode and even when the policy is disabled.
func (h *Hook) Check(text string) Match {
	return h.checkNormalised(Normalize(text))
}

func (h *Hook) checkNormalised(norm string) Match {
	m := Match{Action: Allow}
	firstWarn := -1
	for _, rh := range h.m.scan(norm) {
		r := h.m.rules[rh.rule]
		hit := Hit{Rule: r.Name, Action: r.Action, Description: r.Description}
		// The excerpt is searched in the window the rule matched in only.
		window := norm[rh.start:rh.end]
		search := window
		if r.curated {
			search = lowerASCII(window)
		}
		if loc := r.re.FindStringIndex(search); loc != nil {
			hit.Excerpt = excerpt(window[loc[0]:loc[1]])
		}
		m.Hits = append(m.Hits, hit)
		if r.Action == Block && m.Action != Block {
			m.Action, m.Rule, m.Description = Block, r.Name, r.Description
		}
		if r.Action == Warn && firstWarn < 0 {
			firstWarn = len(m.Hits) - 1
		}
	}
	if m.Action == Allow && firstWarn >= 0 {
		m.Action, m.Rule, m.Description = Warn, m.Hits[firstWarn].Rule, m.Hits[firstWarn].Description
	}
	return m
}

func excerpt(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= 200 {
		return s
	}
	cut := 200
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// Before judges a command. Block rules deny in block mode and warn in warn
// mode; in off mode every command is allowed, but the text is still
// normalised and matched and every match logged, so the audit trail sees
// through the same evasions in every mode.
func (h *Hook) Before(_ context.Context, req driverapi.HookRequest) (driverapi.Verdict, error) {
	if !h.enabled {
		return driverapi.Verdict{Action: driverapi.ActionAllow}, nil
	}
	m := h.Check(ScanTarget(req.Program, req.Args, req.Stdin))
	if m.Action == Allow {
		return driverapi.Verdict{Action: driverapi.ActionAllow}, nil
	}
	for _, hit := range m.Hits {
		h.log.Warn("command policy match", "rule", hit.Rule, "action", hit.Action,
			"enforcement", h.enforcement, "session_id", req.SessionID, "command_id", req.CommandID,
			"program", req.Program, "excerpt", hit.Excerpt)
	}
	v := driverapi.Verdict{Rule: m.Rule, Hook: HookName}
	switch {
	case h.enforcement == EnforceOff:
		v.Action = driverapi.ActionAllow
		v.Reason = fmt.Sprintf("command policy (enforcement off) would %s: %s", m.Action, m.Description)
	case m.Action == Block && h.enforcement == EnforceBlock:
		v.Action = driverapi.ActionDeny
		v.Reason = "command policy: " + m.Description
	default:
		v.Action = driverapi.ActionWarn
		v.Reason = "command policy: " + m.Description
	}
	return v, nil
}
