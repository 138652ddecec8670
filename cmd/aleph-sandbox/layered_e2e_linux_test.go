//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	"github.com/aleph-sandbox/aleph-sandbox/internal/overlaytest"
)

// hostGit runs the host's git in dir with a fixed identity and no user
// config.
func hostGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=host", "-c", "user.email=host@example.com"}, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestLayeredEndToEnd: through the real CLI, driver and sandbox (as root:
// session sandboxes and overlayfs), a layered session's command edits a
// file, adds one, commits in the workspace's repository, and plants what
// the host must never get: a bare repository with core.pager, a hook,
// core.fsmonitor in .git/config, .vscode/tasks.json and a set-uid file.
// The host's directory is untouched before apply (control: changes lists
// what the command wrote, so it ran); apply brings the edit, the new file
// and the commit (the host's git log shows it), refuses each planted
// thing with its reason and exits 1; a later live command in the session
// is refused (the mode is fixed); a second session's layer, discarded,
// never reaches the host.
func TestLayeredEndToEnd(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	h := newInputsHarness(t)
	if os.Geteuid() != 0 {
		// Unprivileged, the one-shot CLI's driver keeps no session
		// sandbox unless asked (it runs one command); the supervisor of
		// the one it keeps mounts the overlay in the sandbox's user
		// namespace.
		cfg := filepath.Join(h.xdg, "config", "aleph-sandbox", "config.toml")
		if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfg, []byte("[sandbox.linux]\nsession_sandbox = \"always\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ws := t.TempDir()
	hostGit(t, ws, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("host\n"), 0o644)
	hostGit(t, ws, "add", "a.txt")
	hostGit(t, ws, "commit", "-qm", "host commit")
	script := `set -e
echo session > a.txt
echo new > new.txt
git -c user.name=s -c user.email=s@example.com commit -qam "session commit"
mkdir -p evil/objects evil/refs && echo 'ref: refs/heads/main' > evil/HEAD && printf '[core]\n\tpager = touch /tmp/pwned\n' > evil/config
printf '#!/bin/sh\ntouch /tmp/pwned\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit
git config core.fsmonitor 'touch /tmp/pwned'
mkdir .vscode && echo '{"tasks":[]}' > .vscode/tasks.json
cp /bin/true suid && { chmod 4755 suid 2>/dev/null || true; }
echo ran`
	code, out, errOut := h.run(t, "exec", "--layered", "--session", "lay", "--workspace", ws, "--spawn", "--yes", "--", "/bin/sh", "-c", script)
	if code != 0 || strings.TrimSpace(out) != "ran" {
		if strings.Contains(errOut, "unavailable") {
			t.Skipf("layered sessions unavailable here: %s", errOut)
		}
		t.Fatalf("layered exec: %d %q %q", code, out, errOut)
	}
	// Untouched host.
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "host\n" {
		t.Errorf("host a.txt before apply: %q", b)
	}
	for _, p := range []string{"new.txt", "evil", ".vscode", "suid", ".git/hooks/pre-commit"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("host has %s before apply", p)
		}
	}
	if got := hostGit(t, ws, "log", "--format=%s", "-1"); got != "host commit" {
		t.Errorf("host git log before apply: %q", got)
	}
	// Control: the command ran, and changes says what it wrote.
	code, out, errOut = h.run(t, "session", "changes", "--json", "lay")
	if code != 0 {
		t.Fatalf("changes: %d %s", code, errOut)
	}
	var ch struct{ Changes []layer.Change }
	if err := json.Unmarshal([]byte(out), &ch); err != nil {
		t.Fatalf("changes: %v: %s", err, out)
	}
	kinds := map[string]string{}
	for _, c := range ch.Changes {
		kinds[c.Path] = c.Kind
	}
	for p, k := range map[string]string{"a.txt": "modified", "new.txt": "added", ".git": "modified", "suid": "added"} {
		if kinds[p] != k {
			t.Errorf("changes: %s is %q, want %q (%v)", p, kinds[p], k, kinds)
		}
	}
	code, out, _ = h.run(t, "session", "diff", "lay", "a.txt")
	if code != 0 || !strings.Contains(out, "-host") || !strings.Contains(out, "+session") {
		t.Errorf("diff: %d %q", code, out)
	}
	// A live command in the layered session is refused.
	code, _, errOut = h.run(t, "exec", "--session", "lay", "--workspace", ws, "--", "/bin/true")
	if code == 0 || !strings.Contains(errOut, "layered") {
		t.Errorf("a live command in a layered session: %d %q", code, errOut)
	}
	// Apply.
	code, out, errOut = h.run(t, "session", "apply", "--json", "lay")
	if code != 1 {
		t.Fatalf("apply: exit %d (want 1: something refused) %q %q", code, out, errOut)
	}
	var res layer.ApplyResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("apply: %v: %s", err, out)
	}
	applied := strings.Join(res.Applied, " ")
	for _, p := range []string{"a.txt", "new.txt"} {
		if !strings.Contains(applied, p) {
			t.Errorf("apply did not bring %s: %+v", p, res)
		}
	}
	refused := map[string]string{}
	for _, r := range res.Refused {
		refused[r.Path] = r.Reason
	}
	// The sandbox's seccomp filter refuses making a set-id file; if it
	// was made all the same, apply refuses it.
	if st, err := os.Lstat(filepath.Join(h.xdg, "data", "aleph-sandbox", "workspaces", core.LayersDirName, core.SessionDirName("lay"), layer.UpperDir, "suid")); err == nil && st.Mode()&os.ModeSetuid != 0 && refused["suid"] != layer.RefusedSetID {
		t.Errorf("a set-uid file in the layer was not refused: %v", refused)
	}
	for p, why := range map[string]string{"evil": layer.RefusedGitShaped, ".vscode": layer.RefusedProtected} {
		if refused[p] != why {
			t.Errorf("apply: %s refused as %q, want %q (%v)", p, refused[p], why, refused)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "session\n" {
		t.Errorf("host a.txt after apply: %q", b)
	}
	if got := hostGit(t, ws, "log", "--format=%s", "-1"); got != "session commit" {
		t.Errorf("host git log after apply: %q (%+v)", got, res.Git)
	}
	for _, p := range []string{"evil", ".vscode", ".git/hooks/pre-commit"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("host has %s after apply", p)
		}
	}
	if st, err := os.Lstat(filepath.Join(ws, "suid")); err == nil && st.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("a set-id file reached the host: %v", st.Mode())
	}
	if cfg, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); strings.Contains(string(cfg), "fsmonitor") {
		t.Errorf("host .git/config got fsmonitor:\n%s", cfg)
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Errorf("a planted command ran on the host")
	}

	// Discard: another session's layer never reaches the host.
	code, _, errOut = h.run(t, "exec", "--layered", "--session", "gone", "--workspace", ws, "--spawn", "--yes", "--", "/bin/sh", "-c", "echo x > discarded.txt")
	if code != 0 {
		t.Fatalf("second layered session: %d %s", code, errOut)
	}
	if code, _, errOut = h.run(t, "session", "discard", "gone"); code != 0 {
		t.Fatalf("discard: %d %s", code, errOut)
	}
	if _, err := os.Lstat(filepath.Join(ws, "discarded.txt")); err == nil {
		t.Errorf("a discarded layer reached the host")
	}
	layers := filepath.Join(h.xdg, "data", "aleph-sandbox", "workspaces", core.LayersDirName, core.SessionDirName("gone"))
	if _, err := os.Lstat(layers); err == nil {
		t.Errorf("the discarded layer is still on disk: %s", layers)
	}
	if code, _, errOut = h.run(t, "session", "changes", "gone"); code != 125 || !strings.Contains(errOut, "no layer") {
		t.Errorf("changes after discard: %d %q", code, errOut)
	}
	// Forgetting a layered session discards its layer too.
	if code, _, errOut = h.run(t, "session", "forget", "lay"); code != 0 {
		t.Fatalf("forget: %d %s", code, errOut)
	}
	if _, err := os.Lstat(filepath.Join(h.xdg, "data", "aleph-sandbox", "workspaces", core.LayersDirName, core.SessionDirName("lay"))); err == nil {
		t.Errorf("the forgotten session's layer is still on disk")
	}
}

// TestLayeredRefusedThenLive: through the real CLI and driver (as root),
// a layered command whose layer would lie on a file system overlayfs
// refuses as an upper (the data directory on an overlay) is refused
// before it ran, and leaves no layer: the driver's fix ("run the session
// as a live one") works in the same session, whose live command runs and
// writes the host. (Within one process a command that started fixes the
// mode: core's TestSessionModeFixedByFirstStartedCommand.)
func TestLayeredRefusedThenLive(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unprivileged: a data directory on an overlay needs a mount; the pipeline's part is core's TestSessionModeFixedByFirstStartedCommand")
	}
	h := newInputsHarness(t)
	m := overlaytest.RefusedUpper(t)
	root := filepath.Join(m, "root")
	cfg := filepath.Join(h.xdg, "config", "aleph-sandbox", "config.toml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("[sandbox]\nworkspace_root = %q\n", root)), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	code, out, errOut := h.run(t, "exec", "--layered", "--session", "s", "--workspace", ws, "--spawn", "--yes", "--", "/bin/sh", "-c", "echo layered > b.txt; echo ran")
	if code == 0 || strings.Contains(out, "ran") || !strings.Contains(errOut, "overlayfs") || !strings.Contains(errOut, "live") {
		t.Fatalf("layered on an overlay: %d %q %q, want the driver's refusal before the command ran", code, out, errOut)
	}
	if left, _ := os.ReadDir(filepath.Join(root, core.LayersDirName)); len(left) != 0 {
		t.Fatalf("a layer is left after the refusal: %v", left)
	}
	code, out, errOut = h.run(t, "exec", "--session", "s", "--workspace", ws, "--spawn", "--yes", "--", "/bin/sh", "-c", "echo live > c.txt; echo ran")
	if code != 0 || strings.TrimSpace(out) != "ran" {
		t.Fatalf("live after the refusal: %d %q %q", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "c.txt")); err != nil || string(b) != "live\n" {
		t.Fatalf("the live command's file on the host: %q %v", b, err)
	}
}
