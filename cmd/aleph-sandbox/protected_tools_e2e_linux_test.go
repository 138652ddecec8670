//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// TestToolConfigsProtectedEndToEnd: through the real CLI and sandbox, a
// default command cannot create the config files of agent and editor
// tools that make a host program start commands or servers (.gemini,
// .zed, .continue, .amazonq, .roo, .kiro, .opencode, opencode.json,
// .aider.conf.yml, .devcontainer), while the instruction prose agents edit
// (AGENTS.md, CLAUDE.md, GEMINI.md) and any other file stay writable: the
// command ran, and nothing of the protected names is on the host after it.
func TestToolConfigsProtectedEndToEnd(t *testing.T) {
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") == "1" {
		t.Skip("the Landlock tier does not claim protected_paths (docs/linux.md, TestTierProtectedRefused): a missing protected entry can be created there")
	}
	h := newInputsHarness(t)
	blocked := []string{".gemini/settings.json", ".zed/tasks.json", ".continue/config.yaml", ".amazonq/mcp.json",
		".roo/mcp.json", ".kiro/settings/mcp.json", ".opencode/plugin.js", "opencode.json", ".aider.conf.yml",
		".devcontainer/devcontainer.json"}
	var script []string
	for _, p := range blocked {
		script = append(script, `mkdir -p "$(dirname `+p+`)" 2>/dev/null; echo '{"x":1}' > `+p+` 2>/dev/null && echo "wrote `+p+`"`)
	}
	script = append(script, "echo prose > AGENTS.md && echo prose > CLAUDE.md && echo prose > GEMINI.md && echo ok > ok.txt && echo done")
	code, out, errOut := h.run(t, "exec", "--session", "p", "--spawn", "--yes", "--", "/bin/sh", "-c", strings.Join(script, "; "))
	if code != 0 || !strings.HasSuffix(out, "done\n") {
		t.Fatalf("the command did not run to its end: %d %q %q", code, out, errOut)
	}
	if strings.Contains(out, "wrote") {
		t.Errorf("protected tool configs were written: %q", out)
	}
	ws := filepath.Join(h.xdg, "data", "aleph-sandbox", "workspaces", core.SessionDirName("p"))
	for _, f := range []string{"AGENTS.md", "CLAUDE.md", "GEMINI.md", "ok.txt"} {
		if _, err := os.Stat(filepath.Join(ws, f)); err != nil {
			t.Errorf("control: %s was not written: %v", f, err)
		}
	}
	for _, p := range blocked {
		top := strings.SplitN(p, "/", 2)[0]
		if _, err := os.Lstat(filepath.Join(ws, top)); err == nil {
			t.Errorf("%s is on the host after the command", top)
		}
	}
}
