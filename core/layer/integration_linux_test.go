//go:build linux

package layer_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer/gitimport"
)

func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=host", "-c", "user.email=host@example.com"}, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// A session commits in its overlay and leaves an uncommitted file; Apply
// with the real git import brings the commit as objects and refs and the
// file as a file: the host's git log shows the commit, git status the
// file, and nothing of the session's .git was copied.
func TestApplyWithGitImport(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts an overlay as root (TestLayerUnprivileged* cover the user-namespace mount)")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	merged := filepath.Join(root, "m")
	os.Mkdir(ws, 0o755)
	os.Mkdir(merged, 0o755)
	gitIn(t, ws, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a\n"), 0o644)
	gitIn(t, ws, "add", "a.txt")
	gitIn(t, ws, "commit", "-qm", "host commit")
	ctx := context.Background()
	l, err := layer.Create(ctx, filepath.Join(root, "layer"), ws, gitimport.New(""), layer.Policy{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := l.MountSpec().Data()
	if err != nil {
		t.Fatal(err)
	}
	script := `git -c user.name=s -c user.email=s@example.com -c core.hooksPath=/dev/null commit -qam "session commit" && echo c > c.txt`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount -t overlay overlay -o "$D" "$M" && cd "$M" && echo b > a.txt && sh -c "$S"`)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "D=" + data, "M=" + merged, "S=" + script}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("control: the overlay could not be mounted or git failed in it: %v\n%s", err, out)
	}
	if err := l.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := l.Apply(ctx, nil, layer.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Git == nil {
		t.Fatalf("the git import did not run: %+v", res)
	}
	if got := strings.TrimSpace(gitIn(t, ws, "log", "--format=%s", "-1")); got != "session commit" {
		t.Errorf("host git log: %q (result %+v, git %+v)", got, res, *res.Git)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "b\n" {
		t.Errorf("a.txt: %q", b)
	}
	if got := strings.TrimSpace(gitIn(t, ws, "status", "--porcelain")); got != "?? c.txt" {
		t.Errorf("host git status: %q (result %+v)", got, res)
	}
}

// As root over a workspace another user owns, the host's git runs as that
// user: the import succeeds (root's git would refuse the repository as of
// "dubious ownership"), and the objects it wrote are the user's. Control:
// the same import run by root's git without switching is what fails.
func TestApplyWithGitImportAsOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switches to the workspace's owner, which only root can")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	const uid = 65534
	root := t.TempDir()
	// The owner must reach the workspace, as a user reaches their own.
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ws := filepath.Join(root, "ws")
	merged := filepath.Join(root, "m")
	os.Mkdir(ws, 0o755)
	os.Mkdir(merged, 0o755)
	gitIn(t, ws, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(ws, "a.txt"), []byte("a\n"), 0o644)
	gitIn(t, ws, "add", "a.txt")
	gitIn(t, ws, "commit", "-qm", "host commit")
	if out, err := exec.Command("chown", "-R", "65534:65534", ws).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	// Control: root's own git refuses the repository now.
	ctl := exec.Command("git", "log", "-1")
	ctl.Dir = ws
	ctl.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + root, "GIT_CONFIG_NOSYSTEM=1"}
	if out, err := ctl.CombinedOutput(); err == nil || !strings.Contains(string(out), "dubious ownership") {
		t.Skipf("control: root's git does not refuse another user's repository here (%v: %s)", err, out)
	}
	ctx := context.Background()
	l, err := layer.Create(ctx, filepath.Join(root, "layer"), ws, gitimport.New(""), layer.Policy{Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := l.MountSpec().Data()
	if err != nil {
		t.Fatal(err)
	}
	script := `git -c safe.directory=* -c user.name=s -c user.email=s@example.com -c core.hooksPath=/dev/null commit -qam "session commit"`
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount -t overlay overlay -o "$D" "$M" && cd "$M" && echo b > a.txt && sh -c "$S"`)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "D=" + data, "M=" + merged, "S=" + script}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("control: the overlay could not be mounted or git failed in it: %v\n%s", err, out)
	}
	if err := l.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := l.Apply(ctx, nil, layer.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Git == nil || len(res.Git.Updated) == 0 {
		t.Fatalf("the git import moved nothing: %+v", res)
	}
	if got := strings.TrimSpace(gitIn(t, ws, "-c", "safe.directory=*", "log", "--format=%s", "-1")); got != "session commit" {
		t.Errorf("host git log: %q", got)
	}
	// Every object and ref file is the owner's.
	filepath.WalkDir(filepath.Join(ws, ".git"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := os.Lstat(p)
		if err == nil && fi.Sys().(*syscall.Stat_t).Uid != uid {
			t.Errorf("%s is owned by uid %d, not the workspace's owner", p, fi.Sys().(*syscall.Stat_t).Uid)
		}
		return nil
	})
}
