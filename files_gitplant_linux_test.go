//go:build linux

package alephsandbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/internal/gitplant"
)

// TestFilesWriteCannotPlantARepository: a bare repository written through
// the files API into a session's live workspace, file by file (objects,
// refs and a config whose core.fsmonitor, core.pager and alias run a
// program, then HEAD; or HEAD first), does not make the host's git run
// the program: the write that completes it has its HEAD renamed, as after
// a command, and the audit record says so. The control: the same files
// written by the host make a repository that runs it; an ordinary write
// reports nothing.
func TestFilesWriteCannotPlantARepository(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: the planted repository is tested against the host's git")
	}
	cfg := testConfig(t)
	rt, _ := newRuntime(t, cfg)
	ctx := context.Background()
	markers := t.TempDir()
	files := func(dir, marker string) [][2]string {
		conf := fmt.Sprintf("[core]\n\trepositoryformatversion = 0\n\tbare = true\n\tfsmonitor = \"touch %[1]s-fsmonitor; true\"\n\tpager = \"touch %[1]s-pager; cat\"\n[alias]\n\tpwn = \"!touch %[1]s-alias\"\n", marker)
		return [][2]string{
			{dir + "/objects/info/keep", ""},
			{dir + "/refs/heads/keep", ""},
			{dir + "/config", conf},
			{dir + "/HEAD", "ref: refs/heads/main\n"},
		}
	}
	for i, order := range []string{"HEAD last", "HEAD first"} {
		t.Run(order, func(t *testing.T) {
			m := filepath.Join(markers, fmt.Sprintf("m%d", i))
			fs := files("d", m)
			if order == "HEAD first" {
				fs = append(fs[3:], fs[:3]...)
			}
			// Control: written by the host, the repository runs the program.
			ctl := t.TempDir()
			for _, f := range fs {
				p := filepath.Join(ctl, f[0])
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(f[1]), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := gitplant.Fires(t, filepath.Join(ctl, "d"), m); len(got) == 0 {
				t.Fatal("control: the host-written repository runs nothing: the attack is not shown")
			}
			session := fmt.Sprintf("plant%d", i)
			for _, f := range fs {
				if _, err := rt.WriteFile(ctx, session, f[0], strings.NewReader(f[1]), alephsandbox.WriteFileOptions{Parents: true}); err != nil {
					t.Fatalf("write %s: %v", f[0], err)
				}
			}
			ws, err := rt.WorkspacePath(session)
			if err != nil {
				t.Fatal(err)
			}
			// The writes really landed (only HEAD was moved aside).
			if b, err := os.ReadFile(filepath.Join(ws, "d", "config")); err != nil || !strings.Contains(string(b), "fsmonitor") {
				t.Fatalf("the config was not written: %v", err)
			}
			if got := gitplant.Fires(t, filepath.Join(ws, "d"), m); len(got) > 0 {
				t.Fatalf("the host's git ran the program the files API planted (%v)", got)
			}
			if _, err := os.Stat(filepath.Join(ws, "d", "HEAD.aleph-quarantined")); err != nil {
				t.Fatalf("HEAD not renamed aside: %v", err)
			}
		})
	}
	log, err := os.ReadFile(cfg.Sandbox.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), `"git_quarantine":{"renamed":["d/HEAD -\u003e d/HEAD.aleph-quarantined"]`); n != 2 {
		t.Fatalf("the audit log names the rename %d times, want 2:\n%s", n, log)
	}
	// An ordinary write reports nothing.
	if _, err := rt.WriteFile(ctx, "plain", "notes/HEAD.md", strings.NewReader("# notes"), alephsandbox.WriteFileOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	log, _ = os.ReadFile(cfg.Sandbox.AuditLog)
	if n := strings.Count(string(log), `"git_quarantine"`); n != 2 {
		t.Fatalf("an ordinary write was reported as a planted repository (%d reports)", n)
	}
}
