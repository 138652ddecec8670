package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `mcp --workspace` takes an existing directory: a missing one, or a
// file, is refused at start with the reason, before any serving, and
// nothing is made.
func TestMCPWorkspaceFlag(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for name, ws := range map[string]string{"missing": missing, "file": file} {
		r := cli(t, "", false, "mcp", "--workspace", ws)
		if r.code == 0 || !strings.Contains(r.stderr, "--workspace") || !strings.Contains(r.stderr, "not an existing directory") || r.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", name, r.code, r.stdout, r.stderr)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("the missing workspace was made: %v", err)
	}
}
