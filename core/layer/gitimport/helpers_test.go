//go:build linux

package gitimport

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
)

func requireGit(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		tb.Skip("git is not installed: the import is tested against the host's real git")
	}
}

// gitEnv is a git with no system or user config, so that the tests do not
// depend on the machine's.
func gitEnv(home string) []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GIT_") && !strings.HasPrefix(e, "HOME=") {
			env = append(env, e)
		}
	}
	return append(env, "GIT_CONFIG_NOSYSTEM=1", "HOME="+home,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
}

// sh runs a shell script in dir with a clean git environment.
func sh(tb testing.TB, dir, script string) string {
	tb.Helper()
	c := exec.Command("/bin/sh", "-ec", script)
	c.Dir = dir
	c.Env = gitEnv(tb.TempDir())
	out, err := c.CombinedOutput()
	if err != nil {
		tb.Fatalf("in %s: %s: %v\n%s", dir, script, err, out)
	}
	return strings.TrimRight(string(out), "\n")
}

// scenario is a host workspace and a session made from it the way a
// layered session makes one: the session works in a copy (the merged
// view), and only what differs from the host is kept as the upper layer.
type scenario struct {
	host, merged, upper string
	base                layer.GitBase
}

// newScenario makes a host repository with a few commits (setup runs in
// it first), snapshots it, and copies it for the session.
func newScenario(t testing.TB, setup string) *scenario {
	t.Helper()
	root := t.TempDir()
	s := &scenario{host: filepath.Join(root, "ws"), merged: filepath.Join(root, "merged"), upper: filepath.Join(root, "upper")}
	for _, d := range []string{s.host, s.upper} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if setup != "" {
		sh(t, s.host, setup)
	}
	if _, err := os.Lstat(filepath.Join(s.host, ".git")); err == nil {
		b, err := (&Importer{}).Snapshot(context.Background(), s.host)
		if err != nil {
			t.Fatal(err)
		}
		s.base = b
	}
	sh(t, root, "cp -a ws merged")
	return s
}

const hostRepo = `git init -q -b main . && echo one > a.txt && echo x > b.txt && git add . && git commit -qm one &&
echo two >> a.txt && git commit -qam two && git branch old && git tag v0`

// session runs script in the session's view, then makes the upper layer
// from what differs from the host.
func (s *scenario) session(t testing.TB, script string) {
	t.Helper()
	sh(t, s.merged, script)
	s.makeUpper(t)
}

// makeUpper keeps in upper what differs between host and merged: new or
// changed files whole, directories as needed, and a whiteout (0/0
// character device) for each entry deleted, which needs root (CAP_MKNOD);
// without it the deletion is left out and whiteouts reports false.
func (s *scenario) makeUpper(t testing.TB) (whiteouts bool) {
	t.Helper()
	whiteouts = true
	err := filepath.WalkDir(s.merged, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.merged, p)
		if rel == "." {
			return nil
		}
		lower := filepath.Join(s.host, rel)
		up := filepath.Join(s.upper, rel)
		li, lerr := os.Lstat(lower)
		mi, _ := os.Lstat(p)
		switch {
		case mi.IsDir():
			if lerr != nil || !li.IsDir() {
				return os.MkdirAll(up, mi.Mode().Perm())
			}
			return nil
		case lerr == nil && sameFile(t, lower, p, li, mi):
			return nil
		}
		if err := os.MkdirAll(filepath.Dir(up), 0o755); err != nil {
			return err
		}
		return copyEntry(p, up, mi)
	})
	if err != nil {
		t.Fatal(err)
	}
	// Deletions.
	err = filepath.WalkDir(s.host, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.host, p)
		if rel == "." {
			return nil
		}
		if _, err := os.Lstat(filepath.Join(s.merged, rel)); errors.Is(err, os.ErrNotExist) {
			up := filepath.Join(s.upper, rel)
			if err := os.MkdirAll(filepath.Dir(up), 0o755); err != nil {
				return err
			}
			if err := unix.Mknod(up, unix.S_IFCHR|0o000, 0); err != nil {
				whiteouts = false
			}
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return whiteouts
}

func sameFile(t testing.TB, a, b string, ai, bi os.FileInfo) bool {
	if ai.Mode() != bi.Mode() {
		return false
	}
	if ai.Mode()&os.ModeSymlink != 0 {
		x, _ := os.Readlink(a)
		y, _ := os.Readlink(b)
		return x == y
	}
	x, err1 := os.ReadFile(a)
	y, err2 := os.ReadFile(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

func copyEntry(from, to string, fi os.FileInfo) error {
	_ = os.RemoveAll(to)
	if fi.Mode()&os.ModeSymlink != 0 {
		l, err := os.Readlink(from)
		if err != nil {
			return err
		}
		return os.Symlink(l, to)
	}
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, fi.Mode().Perm())
}

// applyWorktree writes the session's working-tree files to the host, as
// Apply would (everything but .git).
func (s *scenario) applyWorktree(t testing.TB) {
	t.Helper()
	sh(t, filepath.Dir(s.host), "cd merged && find . -path ./.git -prune -o -type f -print | while read f; do mkdir -p ../ws/$(dirname $f) && cp -p $f ../ws/$f; done")
}

func (s *scenario) importReq(session string) layer.GitImportRequest {
	return layer.GitImportRequest{Workspace: s.host, UpperGit: filepath.Join(s.upper, ".git"), Base: s.base, Session: session}
}

func (s *scenario) run(t testing.TB, im *Importer) layer.GitImportResult {
	t.Helper()
	if im == nil {
		im = &Importer{}
	}
	res, err := im.Import(context.Background(), s.importReq("s1"))
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	return res
}

func refused(res layer.GitImportResult, path, reason string) bool {
	for _, r := range res.Refused {
		if r.Path == path && r.Reason == reason {
			return true
		}
	}
	return false
}

func hasReason(res layer.GitImportResult, reason string) bool {
	for _, r := range res.Refused {
		if r.Reason == reason {
			return true
		}
	}
	return false
}

func updated(res layer.GitImportResult, ref string) bool {
	for _, u := range res.Updated {
		if u.Ref == ref {
			return true
		}
	}
	return false
}
