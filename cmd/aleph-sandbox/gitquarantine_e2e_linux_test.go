//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/internal/gitplant"
)

// TestGitQuarantineEndToEnd: through the real CLI, driver and sandbox, a
// command plants repositories whose config runs a program (a bare one at
// the workspace root of a workspace without .git; in a workspace with a
// real .git, a bare one in src/ and a nested sub/.git); after the command
// the host's git, run in each, runs nothing, the result names what was
// renamed, and the workspace's real .git still works. Control: the same
// repositories made by the host run the program under the same git
// invocations (the attack is real), and the command did run (it wrote
// ok.txt beside them).
func TestGitQuarantineEndToEnd(t *testing.T) {
	for _, tool := range []string{"git", "script"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the test runs the host's git (through script for a terminal)", tool)
		}
	}
	h := newInputsHarness(t)
	landlockTierUnderTest(t, h)
	markers := t.TempDir()
	if err := os.Chmod(markers, 0o777); err != nil {
		t.Fatal(err)
	}
	wsRoot := filepath.Join(h.xdg, "data", "aleph-sandbox", "workspaces")

	type repo struct {
		dir     string // workspace-relative
		bare    bool
		ways    int // how many of the three a host-made copy fires
		renamed string
	}
	for _, tc := range []struct {
		session string
		realGit bool
		repos   []repo
	}{
		{"bare-root", false, []repo{{".", true, 2, "HEAD -> HEAD.aleph-quarantined"}}},
		{"shadow", true, []repo{
			{"src", true, 2, "src/HEAD -> src/HEAD.aleph-quarantined"},
			{"sub/.git", false, 3, "sub/.git/HEAD -> sub/.git/HEAD.aleph-quarantined"},
		}},
	} {
		t.Run(tc.session, func(t *testing.T) {
			ws := filepath.Join(wsRoot, core.SessionDirName(tc.session))
			if err := os.MkdirAll(ws, 0o700); err != nil {
				t.Fatal(err)
			}
			ctl := t.TempDir()
			if tc.realGit && os.Getenv("ALEPH_TEST_NO_NAMESPACES") == "1" {
				// The Landlock tier refuses a workspace holding a
				// protected entry (it cannot keep it read-only): the
				// planted repositories are tested without the real one.
				tc.realGit = false
			}
			if tc.realGit {
				for _, d := range []string{ws, ctl} {
					if out, err := exec.Command("git", "init", "-q", d).CombinedOutput(); err != nil {
						t.Fatalf("git init: %v %s", err, out)
					}
				}
			}
			var script []string
			for i, r := range tc.repos {
				// Control: the host makes the same repository and its
				// git runs the program.
				cm := filepath.Join(markers, fmt.Sprintf("%s-ctl%d", tc.session, i))
				hp := exec.Command("/bin/sh", "-c", gitplant.Script(r.dir, r.bare, cm))
				hp.Dir = ctl
				if out, err := hp.CombinedOutput(); err != nil {
					t.Fatalf("host plant: %v %s", err, out)
				}
				gitDir := strings.TrimSuffix(r.dir, "/.git")
				if got := gitplant.Fires(t, filepath.Join(ctl, gitDir), cm); len(got) < r.ways {
					t.Fatalf("control %s: the host-made repository ran %v, want %d ways", r.dir, got, r.ways)
				}
				script = append(script, gitplant.Script(r.dir, r.bare, filepath.Join(markers, fmt.Sprintf("%s-cmd%d", tc.session, i))))
			}
			script = append(script, "echo ok > ok.txt")
			code, out, errOut := h.run(t, "exec", "--session", tc.session, "--spawn", "--yes", "--json", "--", "/bin/sh", "-c", strings.Join(script, " && "))
			var res execResult
			if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
				t.Fatalf("plant: %d %v %q %q", code, err, out, errOut)
			}
			if b, err := os.ReadFile(filepath.Join(ws, "ok.txt")); err != nil || string(b) != "ok\n" {
				t.Fatalf("the command did not run: %q %v", b, err)
			}
			for i, r := range tc.repos {
				gitDir := strings.TrimSuffix(r.dir, "/.git")
				if got := gitplant.Fires(t, filepath.Join(ws, gitDir), filepath.Join(markers, fmt.Sprintf("%s-cmd%d", tc.session, i))); len(got) > 0 {
					t.Errorf("%s: the host's git ran the planted program (%v)", r.dir, got)
				}
				if res.GitQuarantine == nil || !slices.Contains(res.GitQuarantine.Renamed, r.renamed) {
					t.Errorf("the result says %+v, want %q renamed", res.GitQuarantine, r.renamed)
				}
			}
			if tc.realGit {
				if b, err := exec.Command("git", "-C", ws, "rev-parse", "--git-dir").CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != ".git" {
					t.Fatalf("the workspace's real .git: %v %s", err, b)
				}
			}
		})
	}
}

// landlockTierUnderTest configures the harness's CLI for the Landlock
// tier when scripts/test-nonamespaces.sh runs the test (namespaces
// refused): there the tier must be asked for.
func landlockTierUnderTest(t *testing.T, h *inputsHarness) {
	t.Helper()
	if os.Getenv("ALEPH_TEST_NO_NAMESPACES") != "1" {
		return
	}
	cfgDir := filepath.Join(h.xdg, "config", "aleph-sandbox")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "config.toml"), []byte("[sandbox.linux]\nfallback = \"landlock\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}
