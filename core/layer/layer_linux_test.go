//go:build linux

package layer

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

var baseFiles = map[string]string{
	"keep.txt":      "same\n",
	"mod.txt":       "one\ntwo\nthree\n",
	"del.txt":       "bye\n",
	"chm.sh":        "#!/bin/sh\necho hi\n",
	"t2d":           "was a file\n",
	"olddir/x.txt":  "moved\n",
	"conflict.txt":  "base\n",
	"hostdel.txt":   "host deletes it\n",
	"deldir/a.txt":  "a\n",
	"deldir/s/b.tx": "b\n",
	".git/HEAD":     "ref: refs/heads/main\n",
	".git/config":   "[core]\n",
	"src/main.go":   "package main\n",
	"sub/keep":      "k\n",
}

// theCommand is what the session does: ordinary changes beside every trick
// apply must refuse.
const theCommand = `set -e
printf 'one\nTWO\nthree\n' > mod.txt
rm del.txt
echo new > new.txt
mkdir -p newd/sub && echo deep > newd/sub/f.txt
mv olddir renamed
chmod 755 chm.sh
rm t2d && mkdir t2d && echo in > t2d/f
rm -r deldir
ln -s mod.txt link-ok
ln -s ../../etc/passwd link-out
ln -s /etc/passwd link-abs
mkfifo fifo
python3 -c "import socket; s=socket.socket(socket.AF_UNIX); s.bind('sock')"
mknod dev c 1 3 || true # refused in a user namespace
printf 'x' > suid && chmod 4755 suid
mkdir sg && chmod 2755 sg && echo in-sg > sg/f
mkdir -p src/objects src/refs && echo 'ref: refs/heads/main' > src/HEAD && printf '[core]\n\tfsmonitor = touch /tmp/pwned\n' > src/config
mkdir -p .vscode && echo '{"tasks":[]}' > .vscode/tasks.json
mkdir -p sub/.VSCode && echo '{}' > sub/.VSCode/tasks.json
echo 'export X=1' > .envrc
printf 'gitdir: /tmp/elsewhere\n' > sub/.git
mkdir -p nested/.git && echo '[core]' > nested/.git/config
echo linked > hl1 && ln hl1 hl2
head -c 3000 /dev/zero | tr '\0' a > big.txt
printf 'bin\000ary' > bin.dat
echo edited-in-session > conflict.txt
rm hostdel.txt
mkdir -p .git/hooks && echo 'echo hook' > .git/hooks/post-checkout
echo done > src/main.go
`

func TestLayerApplyEndToEnd(t *testing.T) {
	requireOverlay(t, sessionUID())
	f := newFixture(t, baseFiles, sessionUID(), Policy{MaxFileBytes: 2000, Session: "s1"})
	// An absolute link to a file inside the workspace's host path.
	f.run(theCommand + "ln -s '" + f.ws + "/mod.txt' link-abs-in\n")
	ctx := context.Background()

	// The host changes two files after the session's base was taken.
	if err := os.WriteFile(filepath.Join(f.ws, "conflict.txt"), []byte("host edit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.ws, "hostdel.txt"), []byte("host edited before the delete\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	cs, err := f.l.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cm := changeMap(cs)
	for p, want := range map[string]string{
		"mod.txt": KindModified, "del.txt": KindDeleted, "new.txt": KindAdded, "newd": KindAdded,
		"newd/sub/f.txt": KindAdded, "renamed": KindAdded, "olddir": KindDeleted, "chm.sh": KindModified,
		"t2d": KindTypeChanged, "t2d/f": KindAdded, "deldir": KindDeleted, "link-ok": KindAdded, ".git": KindModified,
	} {
		if cm[p].Kind != want {
			t.Errorf("change %s: kind %q, want %q (%+v)", p, cm[p].Kind, want, cm[p])
		}
	}
	if c := cm["chm.sh"]; c.Mode != 0o755 || c.OldMode != 0o644 {
		t.Errorf("chm.sh modes: %+v", c)
	}
	if c := cm["t2d"]; c.Type != TypeDir || c.OldType != TypeFile {
		t.Errorf("t2d types: %+v", c)
	}
	for _, p := range []string{"keep.txt", "sub", "src", ".git/hooks", ".git/hooks/post-checkout"} {
		if _, ok := cm[p]; ok {
			t.Errorf("%s listed as a change: %+v", p, cm[p])
		}
	}

	diff, err := f.l.Diff(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"diff --git a/mod.txt b/mod.txt\n--- a/mod.txt\n+++ b/mod.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n",
		"diff --git a/del.txt b/del.txt\ndeleted file mode 100644\n--- a/del.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n",
		"diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+new\n",
		"diff --git a/chm.sh b/chm.sh\nold mode 100644\nnew mode 100755\n",
		"Binary files /dev/null and b/bin.dat differ\n",
		"diff --git a/link-ok b/link-ok\nnew file mode 120000\n",
		"diff --git a/deldir/s/b.tx b/deldir/s/b.tx\ndeleted file mode 100644\n",
	} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks:\n%s\n--- diff:\n%s", want, diff)
		}
	}
	if strings.Contains(diff, "a/.git/") {
		t.Errorf("diff shows .git:\n%s", diff)
	}
	// git apply takes the text diff on a copy of the host.
	gitApplyCheck(t, f, []string{"mod.txt", "del.txt", "new.txt", "chm.sh", "newd", "renamed", "olddir", "link-ok"})

	res, err := f.l.Apply(ctx, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rm := refusedMap(res)
	wantRefused := map[string]string{
		"link-out": RefusedSymlinkEscape, "link-abs": RefusedSymlinkEscape, "fifo": RefusedFIFO, "sock": RefusedSocket,
		"dev": RefusedDevice, "suid": RefusedSetID, "sg": RefusedSetID, "sg/f": RefusedParent,
		"src/HEAD": RefusedGitShaped, "src/config": RefusedGitShaped, "src/objects": RefusedGitShaped, "src/refs": RefusedGitShaped,
		".vscode": RefusedProtected, ".vscode/tasks.json": RefusedParent, "sub/.VSCode": RefusedProtected,
		".envrc": RefusedProtected, "sub/.git": RefusedGitShaped, "nested/.git": RefusedInsideGit, "big.txt": RefusedTooLarge,
	}
	if !exists(filepath.Join(f.l.dir, UpperDir, "dev")) {
		delete(wantRefused, "dev") // mknod is root's: a user namespace cannot make a device
		t.Log("no device made (unprivileged): the device refusal is not checked in this run")
	}
	for p, want := range wantRefused {
		if rm[p] != want {
			t.Errorf("refusal of %s: %q, want %q", p, rm[p], want)
		}
	}
	if len(f.git.imports) != 1 || f.git.imports[0].UpperGit != filepath.Join(f.l.dir, UpperDir, ".git") || f.git.imports[0].Session != "s1" {
		t.Errorf("git import calls: %+v", f.git.imports)
	}
	if strings.Join(res.Conflicts, ",") != "conflict.txt,hostdel.txt" {
		t.Errorf("conflicts: %v", res.Conflicts)
	}
	// Positive control: the ordinary changes are on the host, exactly.
	ws := f.ws
	if got := readFile(t, filepath.Join(ws, "mod.txt")); got != "one\nTWO\nthree\n" {
		t.Errorf("mod.txt on the host: %q", got)
	}
	if got := readFile(t, filepath.Join(ws, "newd/sub/f.txt")); got != "deep\n" {
		t.Errorf("newd/sub/f.txt: %q", got)
	}
	if got := readFile(t, filepath.Join(ws, "renamed/x.txt")); got != "moved\n" {
		t.Errorf("renamed/x.txt: %q", got)
	}
	if got := readFile(t, filepath.Join(ws, "t2d/f")); got != "in\n" {
		t.Errorf("t2d/f: %q", got)
	}
	// src/ became a repository: nothing in it is brought, not even an
	// ordinary file beside the planted one.
	if got := readFile(t, filepath.Join(ws, "src/main.go")); got != "package main\n" || rm["src/main.go"] != RefusedGitShaped {
		t.Errorf("src/main.go (in the planted repository): %q %q", got, rm["src/main.go"])
	}
	for _, p := range []string{"del.txt", "olddir", "deldir"} {
		if exists(filepath.Join(ws, p)) {
			t.Errorf("%s still on the host", p)
		}
	}
	if st, _ := os.Stat(filepath.Join(ws, "chm.sh")); st == nil || st.Mode().Perm() != 0o755 {
		t.Errorf("chm.sh mode on the host: %v", st)
	}
	if tgt, err := os.Readlink(filepath.Join(ws, "link-ok")); err != nil || tgt != "mod.txt" {
		t.Errorf("link-ok: %q %v", tgt, err)
	}
	if tgt, err := os.Readlink(filepath.Join(ws, "link-abs-in")); err != nil || tgt != ws+"/mod.txt" {
		t.Errorf("link-abs-in: %q %v", tgt, err)
	}
	for _, p := range []string{"hl1", "hl2"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(ws, p), &st); err != nil || st.Nlink != 1 || readFile(t, filepath.Join(ws, p)) != "linked\n" {
			t.Errorf("hard link %s applied as its own file: nlink %d, %v", p, st.Nlink, err)
		}
	}
	// Nothing refused reached the host; the host's versions kept.
	for p := range wantRefused {
		if exists(filepath.Join(ws, p)) {
			t.Errorf("refused %s is on the host", p)
		}
	}
	if got := readFile(t, filepath.Join(ws, "conflict.txt")); got != "host edit\n" {
		t.Errorf("conflict.txt: host's version not kept: %q", got)
	}
	if !exists(filepath.Join(ws, "hostdel.txt")) {
		t.Error("hostdel.txt: a conflicting delete was applied")
	}
	if exists(filepath.Join(ws, ".git/hooks")) || readFile(t, filepath.Join(ws, ".git/config")) != "[core]\n" {
		t.Error("a file inside .git was copied to the host")
	}
	if exists("/tmp/pwned") {
		t.Error("/tmp/pwned exists: something ran the planted config")
	}
	for _, p := range res.Applied {
		if _, ok := rm[p]; ok {
			t.Errorf("%s both applied and refused", p)
		}
	}
	for _, e := range mustReadDir(t, ws) {
		if strings.HasPrefix(e, ".aleph-apply-") {
			t.Errorf("temporary file left: %s", e)
		}
	}

	// What was applied is no longer a change; the refused and the
	// conflicts still are.
	cs2, err := f.l.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cm2 := changeMap(cs2)
	for _, p := range res.Applied {
		if _, ok := cm2[p]; ok {
			t.Errorf("applied %s still listed by Changes", p)
		}
	}
	for _, p := range []string{"conflict.txt", "fifo", "src/HEAD"} {
		if _, ok := cm2[p]; !ok {
			t.Errorf("%s no longer listed", p)
		}
	}
	// A later host edit of an applied file is a conflict for a later apply.
	if err := os.WriteFile(filepath.Join(ws, "new.txt"), []byte("host again\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res2, err := f.l.Apply(ctx, []string{"new.txt"}, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res2.Conflicts) != 1 || res2.Conflicts[0] != "new.txt" || readFile(t, filepath.Join(ws, "new.txt")) != "host again\n" {
		t.Errorf("re-apply over a host edit: %+v", res2)
	}
	// AllowLarge brings the large file.
	res3, err := f.l.Apply(ctx, []string{"big.txt"}, ApplyOptions{AllowLarge: true})
	if err != nil || len(res3.Applied) != 1 || len(readFile(t, filepath.Join(ws, "big.txt"))) != 3000 {
		t.Errorf("AllowLarge: %+v %v", res3, err)
	}
}

func mustReadDir(t *testing.T, d string) []string {
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// gitApplyCheck applies the diff of paths to a copy of the host's
// workspace with git apply and compares the result with the session's.
func gitApplyCheck(t *testing.T, f *fixture, paths []string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Log("git not installed: the diff is not checked with git apply")
		return
	}
	d, err := f.l.Diff(context.Background(), paths...)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", f.ws, cp).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	os.RemoveAll(filepath.Join(cp, ".git"))
	cmd := exec.Command("git", "apply", "-")
	cmd.Dir = cp
	cmd.Stdin = strings.NewReader(d)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git apply of the diff failed: %v\n%s\n--- diff:\n%s", err, out, d)
	}
	if got := readFile(t, filepath.Join(cp, "mod.txt")); got != "one\nTWO\nthree\n" {
		t.Errorf("git apply gave mod.txt %q", got)
	}
	if exists(filepath.Join(cp, "del.txt")) || !exists(filepath.Join(cp, "renamed/x.txt")) || exists(filepath.Join(cp, "olddir")) {
		t.Error("git apply did not delete del.txt / move olddir")
	}
	if st, err := os.Stat(filepath.Join(cp, "chm.sh")); err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Errorf("git apply: chm.sh not executable: %v", err)
	}
}

func TestLayerApplyRefusesWithoutImporterAndUnknownPaths(t *testing.T) {
	requireOverlay(t, sessionUID())
	f := newFixture(t, map[string]string{".git/HEAD": "ref: refs/heads/main\n", "a.txt": "a\n"}, sessionUID(), Policy{})
	f.l.git = nil
	f.run("echo b > a.txt; mkdir -p .git/refs/heads && echo 0000 > .git/refs/heads/x")
	res, err := f.l.Apply(context.Background(), []string{"a.txt", ".git", "nothing/here"}, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rm := refusedMap(res)
	if rm[".git"] != RefusedGitUnavailable || rm["nothing/here"] != RefusedNoChange {
		t.Errorf("refusals: %+v", res.Refused)
	}
	if len(res.Applied) != 1 || readFile(t, filepath.Join(f.ws, "a.txt")) != "b\n" {
		t.Errorf("a.txt not applied: %+v", res)
	}
	for _, bad := range []string{"../x", "/etc", "a/./b", ""} {
		if _, err := f.l.Apply(context.Background(), []string{bad}, ApplyOptions{}); !errors.Is(err, ErrBadPath) {
			t.Errorf("Apply(%q): %v, want ErrBadPath", bad, err)
		}
	}
}

func TestLayerUnobservedAndOverlayXattrs(t *testing.T) {
	requireOverlay(t, sessionUID())
	f := newFixture(t, map[string]string{"a.txt": "a\n", "d/x": "x\n"}, sessionUID(), Policy{})
	f.run("echo b > a.txt; echo y > d/x; echo n > n.txt; echo w > wh.txt")
	up := filepath.Join(f.l.dir, UpperDir)
	// An entry the upper layer got after the last Observe.
	if err := os.WriteFile(filepath.Join(up, "late.txt"), []byte("late\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Overlay metadata this engine does not read: a redirect on a
	// directory, metacopy on a file, an xattr whiteout, and a marker of the
	// other namespace (user.* on a trusted.* mount).
	own, foreign := "trusted.overlay.", "user.overlay."
	if f.l.st.Policy.UserNS {
		own, foreign = foreign, own
	}
	marks := []struct{ path, attr, val string }{
		{"d", own + "redirect", "/elsewhere"},
		{"a.txt", own + "metacopy", ""},
		{"wh.txt", own + "whiteout", ""},
		{"n.txt", foreign + "opaque", "y"},
	}
	if os.Geteuid() != 0 {
		// trusted.* is root's: the foreign marker cannot be set here.
		marks[3] = struct{ path, attr, val string }{"n.txt", own + "opaque", "y"} // on a file: not read either
	}
	for _, x := range marks {
		if err := unix.Setxattr(filepath.Join(up, x.path), x.attr, []byte(x.val), 0); err != nil {
			t.Fatalf("setxattr %s %s: %v", x.path, x.attr, err)
		}
	}
	res, err := f.l.Apply(context.Background(), nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rm := refusedMap(res)
	for p, want := range map[string]string{"late.txt": RefusedUnobserved, "d": RefusedOverlayXattr, "d/x": RefusedParent,
		"a.txt": RefusedOverlayXattr, "wh.txt": RefusedOverlayXattr, "n.txt": RefusedOverlayXattr} {
		if rm[p] != want {
			t.Errorf("%s: %q, want %q (%+v)", p, rm[p], want, res.Refused)
		}
	}
	if readFile(t, filepath.Join(f.ws, "a.txt")) != "a\n" || readFile(t, filepath.Join(f.ws, "d/x")) != "x\n" || exists(filepath.Join(f.ws, "late.txt")) {
		t.Error("a refused entry reached the host")
	}
	// Positive control: the same kind of change without the markers applies.
	f.l.Observe(context.Background())
	if res, err := f.l.Apply(context.Background(), []string{"late.txt"}, ApplyOptions{}); err != nil || len(res.Applied) != 1 {
		t.Errorf("late.txt after Observe: %+v %v", res, err)
	}
}

func TestLayerWorkspaceReplaced(t *testing.T) {
	requireOverlay(t, sessionUID())
	f := newFixture(t, map[string]string{"a.txt": "a\n"}, sessionUID(), Policy{})
	f.run("echo b > a.txt")
	moved := f.ws + ".moved"
	if err := os.Rename(f.ws, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(f.ws, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := f.l.Apply(context.Background(), nil, ApplyOptions{})
	var wr *WorkspaceReplacedError
	if !errors.As(err, &wr) || !errors.Is(err, ErrWorkspaceReplaced) {
		t.Fatalf("Apply over a replaced workspace: %v", err)
	}
	if exists(filepath.Join(f.ws, "a.txt")) || readFile(t, filepath.Join(moved, "a.txt")) != "a\n" {
		t.Error("something was written")
	}
	// A link to the old directory in its place is refused too (another inode).
	os.Remove(f.ws)
	outside := t.TempDir()
	if err := os.Symlink(outside, f.ws); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Apply(context.Background(), nil, ApplyOptions{}); !errors.Is(err, ErrWorkspaceReplaced) {
		t.Fatalf("Apply over a link: %v", err)
	}
	// Positive control: the directory back in place applies.
	os.Remove(f.ws)
	if err := os.Rename(moved, f.ws); err != nil {
		t.Fatal(err)
	}
	if res, err := f.l.Apply(context.Background(), nil, ApplyOptions{}); err != nil || readFile(t, filepath.Join(f.ws, "a.txt")) != "b\n" {
		t.Fatalf("Apply with the workspace back: %+v %v", res, err)
	}
}

// A host directory is swapped for a link to a directory outside while
// apply runs: nothing is written outside, at either moment of the swap.
func TestLayerApplySymlinkRace(t *testing.T) {
	requireOverlay(t, sessionUID())
	for _, stage := range []string{"parent", "write"} {
		t.Run(stage, func(t *testing.T) {
			f := newFixture(t, map[string]string{"dir/a.txt": "a\n", "other.txt": "o\n"}, sessionUID(), Policy{})
			f.run("echo b > dir/a.txt; echo n > dir/new.txt; echo p > other.txt")
			outside := filepath.Join(f.root, "outside")
			if err := os.Mkdir(outside, 0o755); err != nil {
				t.Fatal(err)
			}
			swapped := false
			f.l.hook = func(s, p string) {
				if s == stage && strings.HasPrefix(p, "dir/") && !swapped {
					swapped = true
					if err := os.Rename(filepath.Join(f.ws, "dir"), filepath.Join(f.ws, "dir.moved")); err != nil {
						t.Error(err)
					}
					if err := os.Symlink(outside, filepath.Join(f.ws, "dir")); err != nil {
						t.Error(err)
					}
				}
			}
			res, err := f.l.Apply(context.Background(), nil, ApplyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !swapped {
				t.Fatal("the swap did not happen: the test proves nothing")
			}
			if ents := mustReadDir(t, outside); len(ents) != 0 {
				t.Errorf("written outside the workspace: %v", ents)
			}
			// The unrelated file applied (positive control).
			if readFile(t, filepath.Join(f.ws, "other.txt")) != "p\n" {
				t.Errorf("other.txt not applied: %+v", res)
			}
			t.Logf("result: %+v", res)
		})
	}
}

func TestLayerDiscard(t *testing.T) {
	requireOverlay(t, sessionUID())
	f := newFixture(t, map[string]string{"a.txt": "a\n"}, sessionUID(), Policy{})
	f.run("echo b > a.txt; mkdir -p locked/in && echo x > locked/in/f && chmod 000 locked; ln -s / rootlink")
	release, err := f.l.HoldMounted()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.l.Discard(context.Background()); !errors.Is(err, ErrLayerMounted) {
		t.Fatalf("Discard while mounted: %v", err)
	}
	release()
	if err := f.l.Discard(context.Background()); err != nil {
		t.Fatal(err)
	}
	if exists(f.l.dir) {
		t.Error("layer directory left")
	}
	if readFile(t, filepath.Join(f.ws, "a.txt")) != "a\n" {
		t.Error("the host saw the session's change")
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Error("Discard followed a link out")
	}
}

// An opaque directory (the session removed a host directory and made one
// of the same name) deletes what it hides; the host's files there that the
// session did not recreate are deletions.
func TestLayerOpaqueDirectory(t *testing.T) {
	requireOverlay(t, sessionUID())
	f := newFixture(t, map[string]string{"d/a": "a\n", "d/b": "b\n", "d/s/c": "c\n"}, sessionUID(), Policy{})
	f.run("rm -r d && mkdir d && echo a > d/a")
	cm := changeMap(mustChanges(t, f.l))
	if cm["d/b"].Kind != KindDeleted || cm["d/s"].Kind != KindDeleted {
		t.Fatalf("hidden entries not deletions: %+v", cm)
	}
	if _, ok := cm["d/a"]; ok {
		t.Errorf("d/a recreated identical is listed: %+v", cm["d/a"])
	}
	res, err := f.l.Apply(context.Background(), nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(f.ws, "d/b")) || exists(filepath.Join(f.ws, "d/s")) || readFile(t, filepath.Join(f.ws, "d/a")) != "a\n" {
		t.Errorf("apply of the opaque directory: %+v", res)
	}
}

// Deleting a host directory whose content changed since the base is a
// conflict; the host keeps it all.
func TestLayerDeletedDirectoryConflict(t *testing.T) {
	requireOverlay(t, sessionUID())
	f := newFixture(t, map[string]string{"d/a": "a\n", "d/s/c": "c\n"}, sessionUID(), Policy{})
	f.run("rm -r d")
	if err := os.WriteFile(filepath.Join(f.ws, "d/s/c"), []byte("host edit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := f.l.Apply(context.Background(), nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Conflicts) != 1 || res.Conflicts[0] != "d" || readFile(t, filepath.Join(f.ws, "d/a")) != "a\n" {
		t.Fatalf("delete of a changed directory: %+v", res)
	}
}

func mustChanges(t *testing.T, l *Layer) []Change {
	t.Helper()
	cs, err := l.Changes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// A hard link to something outside the layer (made here directly in the
// upper layer: a session cannot reach outside it) is refused.
func TestLayerHardLinkOutside(t *testing.T) {
	requireOverlay(t, sessionUID())
	f := newFixture(t, map[string]string{"a": "a\n"}, sessionUID(), Policy{})
	f.run("echo in > inside")
	if err := os.Link(filepath.Join(f.l.dir, UpperDir, "inside"), filepath.Join(f.root, "outside-name")); err != nil {
		t.Fatal(err)
	}
	res, err := f.l.Apply(context.Background(), nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refusedMap(res)["inside"] != RefusedHardLink || exists(filepath.Join(f.ws, "inside")) {
		t.Fatalf("hard link outside: %+v", res)
	}
}

func TestLayerUnprivileged(t *testing.T) {
	uid := unprivUID()
	requireOverlay(t, uid)
	f := newFixture(t, map[string]string{"a.txt": "a\n", "d/x": "x\n", "gone.txt": "g\n"}, uid, Policy{})
	f.run("echo b > a.txt; rm gone.txt; rm -r d && mkdir d && echo y > d/y; mkfifo fifo; mkdir -p .vscode && echo '{}' > .vscode/tasks.json")
	up := filepath.Join(f.l.dir, UpperDir)
	if _, err := getXattrPath(filepath.Join(up, "d"), "user.overlay.opaque"); err != nil {
		t.Fatalf("control: the user-namespace mount did not mark d opaque with user.overlay.opaque: %v", err)
	}
	cm := changeMap(mustChanges(t, f.l))
	if cm["gone.txt"].Kind != KindDeleted || cm["d/x"].Kind != KindDeleted || cm["d/y"].Kind != KindAdded {
		t.Fatalf("changes: %+v", cm)
	}
	res, err := f.l.Apply(context.Background(), nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rm := refusedMap(res)
	if rm["fifo"] != RefusedFIFO || rm[".vscode"] != RefusedProtected {
		t.Errorf("refusals: %+v", res.Refused)
	}
	if readFile(t, filepath.Join(f.ws, "a.txt")) != "b\n" || exists(filepath.Join(f.ws, "gone.txt")) || exists(filepath.Join(f.ws, "d/x")) || readFile(t, filepath.Join(f.ws, "d/y")) != "y\n" {
		t.Errorf("applied: %+v", res)
	}
	if exists(filepath.Join(f.ws, ".vscode")) || exists(filepath.Join(f.ws, "fifo")) {
		t.Error("a refused entry reached the host")
	}
}

func getXattrPath(p, attr string) (string, error) {
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(p, attr, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

func TestCreateRefusals(t *testing.T) {
	ws := t.TempDir()
	if _, err := Create(context.Background(), filepath.Join(ws, "layer"), ws, nil, Policy{}); !errors.Is(err, ErrBadLayer) {
		t.Errorf("layer inside the workspace: %v", err)
	}
	if exists(filepath.Join(ws, "layer")) {
		t.Error("left behind")
	}
	if _, err := Create(context.Background(), "rel", ws, nil, Policy{}); !errors.Is(err, ErrBadLayer) {
		t.Errorf("relative dir: %v", err)
	}
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	if _, err := Create(context.Background(), full, ws, nil, Policy{}); !errors.Is(err, ErrBadLayer) {
		t.Errorf("non-empty dir: %v", err)
	}
	if _, err := Open(t.TempDir(), nil); !errors.Is(err, ErrBadLayer) {
		t.Errorf("Open of a non-layer: %v", err)
	}
	d := filepath.Join(t.TempDir(), "l")
	_, err := Create(context.Background(), d, ws, &fakeGit{snapshot: GitBase{Exists: true, Head: "ref: refs/heads/main"}}, Policy{})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := Open(d, nil)
	if err != nil || l2.GitBase().Head != "ref: refs/heads/main" || l2.Workspace() != ws {
		t.Fatalf("Open: %+v %v", l2, err)
	}
	data, err := l2.MountSpec().Data()
	if err != nil {
		t.Fatal(err)
	}
	want := "lowerdir=" + ws + ",upperdir=" + d + "/upper,workdir=" + d + "/work,redirect_dir=nofollow,metacopy=off,index=off,xino=off"
	if data != want {
		t.Errorf("mount data:\n%s\nwant\n%s", data, want)
	}
	if _, err := (MountSpec{Lower: "/a,b", Upper: "/u", Work: "/w"}).Data(); !errors.Is(err, ErrBadLayer) {
		t.Errorf("comma in a path: %v", err)
	}
}

// TestLayerUnprivilegedHostSide runs the whole cycle as an unprivileged
// user: the overlay mounted in a user namespace, and Observe, Changes and
// Apply in a process of the same user (this test binary, run again under
// setpriv), as a service running as that user would.
func TestLayerUnprivilegedHostSide(t *testing.T) {
	if dir := os.Getenv("LAYER_TEST_HELPER_DIR"); dir != "" {
		unprivilegedHelper(t, dir)
		return
	}
	uid := unprivUID()
	requireOverlay(t, uid)
	f := newFixture(t, map[string]string{"a.txt": "a\n", "d/x": "x\n"}, uid, Policy{})
	cmd, err := mountCmd(context.Background(), f.l, f.merged, uid, "echo b > a.txt; rm d/x; echo n > d/n; mkfifo fifo; mkdir sub && echo '{}' > sub/.mcp.json")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("command: %v %s", err, out)
	}
	helper := exec.Command(os.Args[0], "-test.run", "^TestLayerUnprivilegedHostSide$", "-test.count=1", "-test.v")
	if os.Geteuid() == 0 {
		u := strconv.Itoa(uid)
		helper = exec.Command("setpriv", append([]string{"--reuid=" + u, "--regid=" + u, "--clear-groups"}, helper.Args...)...)
	}
	helper.Env = []string{"PATH=/usr/bin:/bin", "LAYER_TEST_HELPER_DIR=" + f.l.dir}
	out, err := helper.CombinedOutput()
	if err != nil {
		t.Fatalf("host side as uid %d: %v\n%s", uid, err, out)
	}
	if !strings.Contains(string(out), "helper ran as uid "+strconv.Itoa(uid)) {
		t.Fatalf("the helper did not run (it proves nothing):\n%s", out)
	}
	if readFile(t, filepath.Join(f.ws, "a.txt")) != "b\n" || exists(filepath.Join(f.ws, "d/x")) || readFile(t, filepath.Join(f.ws, "d/n")) != "n\n" {
		t.Errorf("not applied by the unprivileged host side:\n%s", out)
	}
	if exists(filepath.Join(f.ws, "fifo")) || exists(filepath.Join(f.ws, "sub/.mcp.json")) {
		t.Errorf("a refused entry reached the host:\n%s", out)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(f.ws, "d/n"), &st); err != nil || int(st.Uid) != uid {
		t.Errorf("d/n not written by uid %d: %+v %v", uid, st.Uid, err)
	}
}

func unprivilegedHelper(t *testing.T, dir string) {
	if os.Geteuid() == 0 {
		t.Fatal("the helper runs as root")
	}
	t.Logf("helper ran as uid %d", os.Geteuid())
	l, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Observe(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := l.Apply(context.Background(), nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rm := refusedMap(res)
	if rm["fifo"] != RefusedFIFO || rm["sub/.mcp.json"] != RefusedProtected {
		t.Errorf("refusals as uid %d: %+v", os.Geteuid(), res.Refused)
	}
	t.Logf("result: %+v", res)
}

// A host directory first recorded as the parent of a change, then deleted
// by a later command: its deletion is judged against its content as the
// later Observe listed it, so a host edit after that is a conflict.
func TestLayerDeleteAfterParentRecorded(t *testing.T) {
	requireOverlay(t, sessionUID())
	f := newFixture(t, map[string]string{"d/a": "a\n", "d/b": "b\n", "e/a": "a\n", "e/b": "b\n"}, sessionUID(), Policy{})
	f.run("chmod 700 d; chmod 700 e")
	f.run("rm -r d e")
	if err := os.WriteFile(filepath.Join(f.ws, "d/b"), []byte("host edit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := f.l.Apply(context.Background(), nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Conflicts) != 1 || res.Conflicts[0] != "d" || readFile(t, filepath.Join(f.ws, "d/b")) != "host edit\n" {
		t.Fatalf("delete of an edited directory: %+v", res)
	}
	// Positive control: the unedited one is deleted.
	if exists(filepath.Join(f.ws, "e")) {
		t.Errorf("e not deleted: %+v", res)
	}
}
