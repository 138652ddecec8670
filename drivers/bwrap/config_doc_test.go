package bwrap

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestConfigDocMatchesSchema: the driver owns [sandbox.linux], and
// docs/configuration.md lists its keys and defaults; the two must agree (a
// default changed in the driver only, or in the docs only, fails here).
func TestConfigDocMatchesSchema(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "## `[sandbox.linux]`")
	if !ok {
		t.Fatal("docs/configuration.md has no [sandbox.linux] section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	rows := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| `([^`]*)` \\|").FindAllStringSubmatch(table, -1)
	if len(rows) != len(schema().Fields) {
		t.Fatalf("the docs list %d keys, the schema %d", len(rows), len(schema().Fields))
	}
	for _, r := range rows {
		f, ok := schema().Field(r[1])
		if !ok {
			t.Errorf("the docs list %s, not a key of the driver", r[1])
			continue
		}
		if r[2] != f.DefaultJSON {
			t.Errorf("the docs give %s the default %s, the driver %s", r[1], r[2], f.DefaultJSON)
		}
	}
}
