//go:build linux

package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// TestPrivateHomeEndToEnd: through the real CLI, driver and sandbox-init,
// a command's HOME is the session's own: what it writes there stays out of
// the workspace, a later command of the session finds it, another session
// does not (nor can it reach the first one's, nor the grants or the audit
// log through its HOME), and `session forget` removes it.
func TestPrivateHomeEndToEnd(t *testing.T) {
	h := newInputsHarness(t)
	data := filepath.Join(h.xdg, "data", "aleph-sandbox")
	wsRoot := filepath.Join(data, "workspaces")
	homeA := filepath.Join(wsRoot, core.HomesDirName, core.SessionDirName("a"))
	wsA := filepath.Join(wsRoot, core.SessionDirName("a"))
	sh := func(session, script string) (int, string, string) {
		return h.run(t, "exec", "--session", session, "--spawn", "--yes", "--", "/bin/sh", "-c", script)
	}

	code, out, errOut := sh("a", `echo x > "$HOME/.gitconfig" && mkdir -p "$HOME/.cache/tool" && echo "$HOME"`)
	if code != 0 || strings.TrimSpace(out) != homeA {
		t.Fatalf("write in HOME: %d %q %q (want HOME %s)", code, out, errOut, homeA)
	}
	if b, err := os.ReadFile(filepath.Join(homeA, ".gitconfig")); err != nil || string(b) != "x\n" {
		t.Fatalf("the file is not in the session's HOME on the host: %q %v", b, err)
	}
	ents, err := os.ReadDir(wsA)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("the workspace holds %s", e.Name())
	}

	// A later command of the session sees it (a new CLI process).
	if code, out, errOut := sh("a", `cat "$HOME/.gitconfig"`); code != 0 || out != "x\n" {
		t.Fatalf("second command of the session: %d %q %q", code, out, errOut)
	}

	// Another session does not: its HOME is another, empty directory, and
	// the first one's is not in its sandbox. The command ran (it printed
	// its HOME and cat's complaint).
	code, out, errOut = sh("b", `echo "$HOME"; ls -A "$HOME"; cat "$HOME/.gitconfig"; cat `+homeA+`/.gitconfig`)
	// (ls shows nothing: the Linux driver takes the HOME as
	// ProfileRequest.home, with no protected-entry placeholders in it.)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code == 0 || lines[0] != filepath.Join(wsRoot, core.HomesDirName, core.SessionDirName("b")) ||
		strings.Count(errOut, "No such file") != 2 {
		t.Fatalf("session b: %d %q %q", code, out, errOut)
	}
	if len(lines) != 1 {
		t.Errorf("session b's HOME holds %q", lines[1:])
	}
	// Nor can it be granted: the homes are the sandbox's own state.
	if code, _, errOut := h.run(t, "exec", "--session", "b", "--read", homeA, "--yes", "--", "/bin/cat", homeA+"/.gitconfig"); code != 125 || !strings.Contains(errOut, "own state") {
		t.Fatalf("granting a's HOME to b: %d %q", code, errOut)
	}

	// Through its HOME a command reaches neither the grants nor the audit
	// log (both exist on the host: the control).
	for _, p := range []string{filepath.Join(data, "audit.jsonl"), filepath.Join(data, "sessions")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("control: %s: %v", p, err)
		}
	}
	// The last command (the homes seen from inside: this session's alone)
	// succeeds, so the script does.
	code, out, errOut = sh("a", `cat "$HOME/../../../audit.jsonl"; ls "$HOME/../../../sessions"; ls -A "$HOME/.."`)
	if code != 0 || strings.Contains(out, "command_id") || strings.TrimSpace(out) != core.SessionDirName("a") ||
		strings.Count(errOut, "No such file") != 2 {
		t.Fatalf("own state through HOME: %d %q %q", code, out, errOut)
	}

	// session forget removes it; the workspace stays.
	if code, out, errOut := h.run(t, "session", "forget", "a"); code != 0 || !strings.Contains(out, "private HOME removed") {
		t.Fatalf("session forget: %d %q %q", code, out, errOut)
	}
	if _, err := os.Lstat(homeA); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("HOME after forget: %v", err)
	}
	if _, err := os.Stat(wsA); err != nil {
		t.Fatalf("workspace after forget: %v", err)
	}
	if code, _, errOut := sh("a", `cat "$HOME/.gitconfig"`); code == 0 || !strings.Contains(errOut, "No such file") {
		t.Fatalf("after forget the session starts with an empty HOME: %d %q", code, errOut)
	}

	// home = "workspace": the old layout, HOME is the workspace.
	cfg := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(cfg, []byte("[sandbox.session]\nhome = \"workspace\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wsC := filepath.Join(wsRoot, core.SessionDirName("c"))
	code, out, errOut = h.run(t, "exec", "--config", cfg, "--session", "c", "--spawn", "--yes", "--", "/bin/sh", "-c", `echo y > "$HOME/.gitconfig"; echo "$HOME"`)
	if code != 0 || strings.TrimSpace(out) != wsC {
		t.Fatalf("home = workspace: %d %q %q", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(wsC, ".gitconfig")); err != nil || string(b) != "y\n" {
		t.Fatalf("home = workspace: %q %v", b, err)
	}
}

// TestConfiguredBaselineEndToEnd: sandbox.session.baseline = "spawn" lets
// a shell line with a pipe run without --spawn and without approval; the
// default, strict, refuses it without asking (no terminal, no --yes).
func TestConfiguredBaselineEndToEnd(t *testing.T) {
	h := newInputsHarness(t)
	// strict: the pipe needs a subprocess the command was not given.
	code, out, errOut := h.run(t, "exec", "--session", "s", "--", "/bin/sh", "-c", "echo a | tr a b")
	if code == 0 || out == "b\n" {
		t.Fatalf("strict baseline: %d %q %q", code, out, errOut)
	}
	cfg := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(cfg, []byte("[sandbox.session]\nbaseline = \"spawn\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = h.run(t, "exec", "--config", cfg, "--session", "s", "--", "/bin/sh", "-c", "echo a | tr a b")
	if code != 0 || out != "b\n" {
		t.Fatalf("spawn baseline: %d %q %q", code, out, errOut)
	}
	// Within the baseline nothing is approved, so nothing is kept.
	if code, out, _ := h.run(t, "session", "show", "s"); code != 0 || !strings.Contains(out, "holds no grants") {
		t.Fatalf("grants after a baseline command: %d %q", code, out)
	}
	// A bad preset is refused by its full name.
	if err := os.WriteFile(cfg, []byte("[sandbox.session]\nbaseline = \"lax\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := h.run(t, "exec", "--config", cfg, "--", "/bin/true"); code != 125 || !strings.Contains(errOut, "sandbox.session.baseline") {
		t.Fatalf("bad preset: %d %q", code, errOut)
	}
}

// TestComponentSectionsRefuseUnknownKeys: a mistyped key in a section a
// component owns is refused by its full name, whether the loader checks it
// against the component's schema ([sandbox.rate_limit]) or the driver does
// when it is handed the section ([sandbox.linux]); the same sections with
// known keys run (the control).
func TestComponentSectionsRefuseUnknownKeys(t *testing.T) {
	h := newInputsHarness(t)
	dir := t.TempDir()
	for i, c := range []struct{ body, refused string }{
		{"[sandbox.rate_limit]\nper_sesion = 2\n", "sandbox.rate_limit.per_sesion: unknown key"},
		{"[sandbox.linux]\nmax_pidz = 50\n", "sandbox.linux.max_pidz: unknown key"},
		{"[sandbox.rate_limit]\nmax_concurrent_per_session = 2\n[sandbox.linux]\nmax_pids = 50\n", ""},
	} {
		cfg := filepath.Join(dir, strings.Repeat("c", i+1)+".toml")
		if err := os.WriteFile(cfg, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := h.run(t, "exec", "--config", cfg, "--", "/bin/echo", "ran")
		if c.refused == "" {
			if code != 0 || out != "ran\n" {
				t.Errorf("%q: %d %q %q", c.body, code, out, errOut)
			}
			continue
		}
		if code != 125 || out != "" || !strings.Contains(errOut, c.refused) {
			t.Errorf("%q: %d %q %q, want %q", c.body, code, out, errOut, c.refused)
		}
	}
}
