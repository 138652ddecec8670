package commandpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Schema describes [sandbox.command_policy] for the configuration loader,
// its defaults taken from DefaultConfig so that the file's defaults cannot
// drift from the hook's. custom_rules is a list of tables whose keys
// ParseConfig judges (the loader checks only that each is a table).
func Schema() driverapi.ConfigSchema {
	d := DefaultConfig()
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	return driverapi.ConfigSchema{Section: Section, Fields: []driverapi.ConfigField{
		{Name: "enabled", Type: driverapi.ConfigBool, DefaultJSON: js(d.Enabled),
			Description: "run the command-policy hook in-process"},
		{Name: "enforcement", Type: driverapi.ConfigString, DefaultJSON: js(d.Enforcement),
			Description: `"block" (a matching command is refused), "warn" (run, the match logged and audited) or "off"; any letter case`},
		{Name: "use_default_rules", Type: driverapi.ConfigBool, DefaultJSON: js(d.UseDefaultRules),
			Description: "check the curated rules as well as custom_rules"},
		{Name: "custom_rules", Type: driverapi.ConfigTableList, DefaultJSON: "[]",
			Description: `rules of your own: tables with name, regex, action ("block" or "warn") and description`},
	}}
}

// ParseConfig reads the section as one JSON object, as the loader and the
// aleph-hook-commandpolicy plugin (its ALEPH_HOOK_CONFIG) both hand it
// over: keys it does not name keep DefaultConfig's values; an unknown key,
// a value of the wrong type and what CheckConfig refuses are a
// *driverapi.ConfigError whose Key names it relative to Section
// ("custom_rules[1].action"). Empty input is DefaultConfig.
func ParseConfig(sectionJSON []byte) (Config, error) {
	cfg := DefaultConfig()
	if len(bytes.TrimSpace(sectionJSON)) == 0 {
		return cfg, nil
	}
	// The rules are decoded one by one so that a refusal names the rule.
	var top struct {
		Enabled         *bool             `json:"enabled"`
		Enforcement     *string           `json:"enforcement"`
		UseDefaultRules *bool             `json:"use_default_rules"`
		CustomRules     []json.RawMessage `json:"custom_rules"`
	}
	if err := decodeStrict(sectionJSON, &top); err != nil {
		return Config{}, configError("", err)
	}
	if top.Enabled != nil {
		cfg.Enabled = *top.Enabled
	}
	if top.Enforcement != nil {
		cfg.Enforcement = *top.Enforcement
	}
	if top.UseDefaultRules != nil {
		cfg.UseDefaultRules = *top.UseDefaultRules
	}
	for i, raw := range top.CustomRules {
		var r Rule
		if err := decodeStrict(raw, &r); err != nil {
			return Config{}, configError(fmt.Sprintf("custom_rules[%d]", i), err)
		}
		cfg.CustomRules = append(cfg.CustomRules, r)
	}
	if err := CheckConfig(cfg); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// SectionJSON is cfg as the section ParseConfig reads: what an embedder
// that builds its configuration in Go puts in [sandbox.command_policy]
// (core.Config's Sandbox.CommandPolicy, a map) through SectionMap.
func (c Config) SectionJSON() []byte {
	rules := c.CustomRules
	if rules == nil {
		rules = []Rule{}
	}
	b, _ := json.Marshal(struct {
		Enabled         bool   `json:"enabled"`
		Enforcement     string `json:"enforcement"`
		UseDefaultRules bool   `json:"use_default_rules"`
		CustomRules     []Rule `json:"custom_rules"`
	}{c.Enabled, c.Enforcement, c.UseDefaultRules, rules})
	return b
}

// SectionMap is cfg as a configuration section: the map that
// core.Config's Sandbox.CommandPolicy holds (core.Section(c.SectionMap())).
func (c Config) SectionMap() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(c.SectionJSON(), &m)
	return m
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

// configError names the key a decoding error is about, under prefix (a
// rule's "custom_rules[N]", or "" for the section).
func configError(prefix string, err error) error {
	join := func(k string) string {
		switch {
		case prefix == "":
			return k
		case k == "":
			return prefix
		}
		return prefix + "." + k
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return &ConfigError{Section: Section, Key: join(te.Field), Reason: fmt.Sprintf("must be %s, got a JSON %s", jsonKind(te.Type.Kind().String()), te.Value)}
	}
	// encoding/json names an unknown key only in its message; it is this
	// package's own decoder, not a peer's text.
	if _, rest, ok := strings.Cut(err.Error(), `unknown field "`); ok {
		k, _, _ := strings.Cut(rest, `"`)
		return &ConfigError{Section: Section, Key: join(k), Reason: "unknown key"}
	}
	return &ConfigError{Section: Section, Key: join(""), Reason: err.Error()}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	}
	return goKind
}
