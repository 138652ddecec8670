package core

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A configuration nested past maxConfigNesting is refused with a typed
// error naming the bound before it is parsed, by any of the four ways TOML
// nests; a normal configuration of nested tables still loads.
func TestConfigNestingBounded(t *testing.T) {
	const n = 5000 // the parser alone takes seconds at this depth
	cases := map[string]string{
		"arrays":        "[sandbox]\nx = " + strings.Repeat("[", n) + strings.Repeat("]", n) + "\n",
		"inline tables": "[sandbox]\nx = " + strings.Repeat("{a=", n) + "1" + strings.Repeat("}", n) + "\n",
		"dotted key":    "[sandbox]\n" + strings.Repeat("a.", n) + "b = 1\n",
		"table header":  "[" + strings.Repeat("a.", n) + "b]\n",
		"just past":     "[sandbox]\nx = " + strings.Repeat("[", maxConfigNesting+1) + strings.Repeat("]", maxConfigNesting+1) + "\n",
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.toml")
			if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := loadConfig(p, nil)
			var ce *ConfigError
			if !errors.As(err, &ce) || !strings.Contains(ce.Reason, "nested more than 64 levels") || ce.Source != p {
				t.Fatalf("want a ConfigError naming the nesting bound, got %v", err)
			}
		})
	}
	// Positive control: real nesting, strings and comments holding
	// brackets and dots, floats in arrays, and a depth at the bound.
	ok := `# a comment with [[[ and {{{ and a.b.c.d
[sandbox]
default_timeout_seconds = 30
[sandbox.command_policy]
custom_rules = [ { name = "x.y.z", regex = "[[[{{{...", action = "warn", description = """
multi [ line { . """ } ]
[sandbox.rate_limit]
rate_per_second = 1.5
`
	p := filepath.Join(t.TempDir(), "ok.toml")
	if err := os.WriteFile(p, []byte(ok), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(p, nil)
	if err != nil {
		t.Fatalf("a normal configuration was refused: %v", err)
	}
	if cfg.Sandbox.DefaultTimeoutSeconds != 30 || customRuleName(cfg.Sandbox.CommandPolicy, 0) == "" || customRuleName(cfg.Sandbox.CommandPolicy, 1) != "" {
		t.Fatalf("the configuration did not load as written: %+v", cfg.Sandbox)
	}
	if err := checkConfigNesting([]byte("x = " + strings.Repeat("[", maxConfigNesting) + strings.Repeat("]", maxConfigNesting))); err != nil {
		t.Fatalf("a depth at the bound was refused: %v", err)
	}
}
