//go:build linux

package gitimport

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
)

// TestImportFastForward: commits made in the session (some packed by a
// gc, some loose after it) reach the host's branch, which was still at the
// base; the host's index is reset, so that once the working tree is
// written (as Apply does) git status shows exactly the session's
// uncommitted changes, the staged one unstaged.
func TestImportFastForward(t *testing.T) {
	requireGit(t)
	s := newScenario(t, hostRepo)
	s.session(t, `echo three >> a.txt && git commit -qam three && mkdir d && echo new > d/n.txt && git add d && git commit -qm four &&
git gc -q && echo five > e.txt && git add e.txt && git commit -qm five &&
echo staged > b.txt && git add b.txt && echo wt >> a.txt && echo u > untracked.txt`)
	want := sh(t, s.merged, "git rev-parse HEAD")
	// The layer holds both a pack (the gc) and loose objects.
	if packs, _ := filepath.Glob(filepath.Join(s.upper, ".git/objects/pack/pack-*.pack")); len(packs) == 0 {
		t.Fatal("the session's gc left no pack in the upper layer")
	}
	if loose, _ := filepath.Glob(filepath.Join(s.upper, ".git/objects/??/*")); len(loose) == 0 {
		t.Fatal("no loose objects in the upper layer")
	}
	res := s.run(t, nil)
	if len(res.Conflicts) > 0 || len(res.Refused) > 0 {
		t.Fatalf("conflicts %v refused %v", res.Conflicts, res.Refused)
	}
	if !updated(res, "refs/heads/main") || !res.IndexReset || res.Objects == 0 {
		t.Fatalf("result %+v", res)
	}
	if got := sh(t, s.host, "git rev-parse main"); got != want {
		t.Fatalf("host main %s, want %s", got, want)
	}
	if got := sh(t, s.host, "git log --format=%s"); got != "five\nfour\nthree\ntwo\none" {
		t.Fatalf("host log:\n%s", got)
	}
	sh(t, s.host, "git fsck --strict --no-dangling")
	s.applyWorktree(t)
	if got, want := sh(t, s.host, "git status --porcelain"), " M a.txt\n M b.txt\n?? untracked.txt"; got != want {
		t.Fatalf("host status:\n%s\nwant:\n%s", got, want)
	}
	// In the session b.txt was staged: it comes back unstaged.
	if got := sh(t, s.merged, "git status --porcelain"); got != " M a.txt\nM  b.txt\n?? untracked.txt" {
		t.Fatalf("session status:\n%s", got)
	}
}

// TestImportConflicts: a branch the host moved meanwhile, or one the
// session rewrote, is not moved; the session's commit is kept under
// SessionRef and the conflict says why.
func TestImportConflicts(t *testing.T) {
	requireGit(t)
	for _, tc := range []struct {
		name, session, host, reason string
	}{
		{"host moved", "echo s >> a.txt && git commit -qam session", "echo h >> a.txt && git commit -qam host", ConflictHostMoved},
		{"session rewrote", "git commit -q --amend -m rewritten", "", ConflictNotFastForward},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, hostRepo)
			s.session(t, tc.session)
			if tc.host != "" {
				sh(t, s.host, tc.host)
			}
			hostMain := sh(t, s.host, "git rev-parse main")
			want := sh(t, s.merged, "git rev-parse main")
			res := s.run(t, nil)
			if len(res.Conflicts) != 1 || res.Conflicts[0].Ref != "refs/heads/main" || res.Conflicts[0].Reason != tc.reason {
				t.Fatalf("conflicts %+v", res.Conflicts)
			}
			sr := res.Conflicts[0].SessionRef
			if sr != layer.SessionRef("s1", "refs/heads/main") {
				t.Fatalf("session ref %s", sr)
			}
			if got := sh(t, s.host, "git rev-parse "+sr); got != want {
				t.Fatalf("%s is %s, want %s", sr, got, want)
			}
			if got := sh(t, s.host, "git rev-parse main"); got != hostMain {
				t.Fatalf("host main moved to %s", got)
			}
			if res.IndexReset || updated(res, "refs/heads/main") {
				t.Fatalf("result %+v", res)
			}
		})
	}
}

// TestImportBranchesAndTags: a new branch and a new tag are created; a tag
// the session moved is not; deleted branches (a loose one: a whiteout; a
// packed one: packed-refs rewritten) are reported, not deleted.
func TestImportBranchesAndTags(t *testing.T) {
	requireGit(t)
	s := newScenario(t, hostRepo+" && git branch packed && git pack-refs --all && git branch loose")
	s.session(t, `git checkout -q -b feature && echo f > f.txt && git add f.txt && git commit -qm feature && git tag v1 && git tag -a -m annotated v2 &&
git tag -f v0 HEAD && git checkout -q main && git branch -D packed loose >/dev/null`)
	whiteouts := false
	if _, err := os.Lstat(filepath.Join(s.upper, ".git/refs/heads/loose")); err == nil {
		whiteouts = true
	}
	res := s.run(t, nil)
	for _, ref := range []string{"refs/heads/feature", "refs/tags/v1", "refs/tags/v2"} {
		if !updated(res, ref) {
			t.Errorf("%s not created: %+v", ref, res)
		}
		if got, want := sh(t, s.host, "git rev-parse "+ref), sh(t, s.merged, "git rev-parse "+ref); got != want {
			t.Errorf("host %s = %s, want %s", ref, got, want)
		}
	}
	if len(res.Conflicts) != 1 || res.Conflicts[0].Ref != "refs/tags/v0" || res.Conflicts[0].Reason != ConflictTagNotMoved {
		t.Errorf("conflicts %+v", res.Conflicts)
	}
	if got := sh(t, s.host, "git rev-parse v0"); got != s.base.Refs["refs/tags/v0"] {
		t.Errorf("tag v0 moved")
	}
	if !refused(res, "refs/heads/packed", ReasonRefNotDeleted) {
		t.Errorf("packed branch deletion not reported: %+v", res.Refused)
	}
	sh(t, s.host, "git rev-parse --verify -q packed")
	if whiteouts {
		if !refused(res, "refs/heads/loose", ReasonRefNotDeleted) {
			t.Errorf("loose branch deletion not reported: %+v", res.Refused)
		}
		sh(t, s.host, "git rev-parse --verify -q loose")
	} else {
		t.Log("no whiteouts (needs CAP_MKNOD): the loose branch's deletion was not exercised")
	}
	if res.IndexReset {
		t.Errorf("index reset though main did not move")
	}
}

// TestImportCreatesRepository: with no repository on the host, the one the
// session made is created with its branch name and imported.
func TestImportCreatesRepository(t *testing.T) {
	requireGit(t)
	s := newScenario(t, "echo a > a.txt")
	if s.base.Exists {
		t.Fatal("base has a repository")
	}
	s.session(t, "git init -q -b trunk && git add a.txt && git commit -qm first && echo b > b.txt && git add b.txt && git commit -qm second && echo c > c.txt")
	res := s.run(t, nil)
	if !res.CreatedRepository || !updated(res, "refs/heads/trunk") || !res.IndexReset || len(res.Refused) > 0 {
		t.Fatalf("result %+v", res)
	}
	if got := sh(t, s.host, "git symbolic-ref HEAD"); got != "refs/heads/trunk" {
		t.Fatalf("host HEAD %s", got)
	}
	if got := sh(t, s.host, "git log --format=%s"); got != "second\nfirst" {
		t.Fatalf("host log %q", got)
	}
	s.applyWorktree(t)
	if got := sh(t, s.host, "git status --porcelain"); got != "?? c.txt" {
		t.Fatalf("host status %q", got)
	}
}

// TestImportHeadSwitched: the session checking out another branch, or
// detaching HEAD, does not switch the host's HEAD; a detached commit is
// kept under the session ref.
func TestImportHeadSwitched(t *testing.T) {
	requireGit(t)
	s := newScenario(t, hostRepo)
	s.session(t, "git checkout -q old && git checkout -q --detach && echo d >> a.txt && git commit -qam detached")
	res := s.run(t, nil)
	if !refused(res, "HEAD", ReasonHeadNotSwitched) {
		t.Fatalf("refused %+v", res.Refused)
	}
	if got := sh(t, s.host, "git symbolic-ref HEAD"); got != "refs/heads/main" {
		t.Fatalf("host HEAD %s", got)
	}
	sr := layer.SessionRef("s1", "HEAD")
	if got, want := sh(t, s.host, "git rev-parse "+sr), sh(t, s.merged, "git rev-parse HEAD"); got != want {
		t.Fatalf("%s = %s, want %s", sr, got, want)
	}

	s2 := newScenario(t, hostRepo)
	s2.session(t, "git checkout -q -b other")
	res = s2.run(t, nil)
	if !refused(res, "HEAD", ReasonHeadNotSwitched) || !updated(res, "refs/heads/other") {
		t.Fatalf("result %+v", res)
	}
	if got := sh(t, s2.host, "git symbolic-ref HEAD"); got != "refs/heads/main" {
		t.Fatalf("host HEAD %s", got)
	}
}

// TestImportHostIndexKept: changes staged on the host meanwhile are not
// dropped by the index reset.
func TestImportHostIndexKept(t *testing.T) {
	requireGit(t)
	s := newScenario(t, hostRepo)
	s.session(t, "echo s >> a.txt && git commit -qam session")
	sh(t, s.host, "echo hoststaged > h.txt && git add h.txt")
	res := s.run(t, nil)
	if !updated(res, "refs/heads/main") || res.IndexReset || !refused(res, "HEAD", ReasonIndexNotReset) {
		t.Fatalf("result %+v", res)
	}
	if got := sh(t, s.host, "git diff --cached --name-only HEAD~1"); !strings.Contains(got, "h.txt") {
		t.Fatalf("host's staged file lost: %q", got)
	}
}

// TestImportHostGitNotDirectory: a host .git that is a gitfile or a
// symlink is refused, nothing imported.
func TestImportHostGitNotDirectory(t *testing.T) {
	requireGit(t)
	s := newScenario(t, hostRepo)
	s.session(t, "echo s >> a.txt && git commit -qam session")
	real := filepath.Join(t.TempDir(), "real.git")
	if err := os.Rename(filepath.Join(s.host, ".git"), real); err != nil {
		t.Fatal(err)
	}
	for _, mk := range []func() error{
		func() error { return os.WriteFile(filepath.Join(s.host, ".git"), []byte("gitdir: "+real+"\n"), 0o644) },
		func() error { return os.Symlink(real, filepath.Join(s.host, ".git")) },
	} {
		_ = os.Remove(filepath.Join(s.host, ".git"))
		if err := mk(); err != nil {
			t.Fatal(err)
		}
		res := s.run(t, nil)
		if !refused(res, ".git", ReasonHostGitNotDirectory) || len(res.Updated) > 0 || res.Objects > 0 {
			t.Fatalf("result %+v", res)
		}
	}
	if got := sh(t, s.host, "git log --format=%s -1"); got != "two" {
		t.Fatalf("host main moved: %s", got)
	}
	_ = context.Background
}

// TestImportHostFailureIsError: a host branch locked by another git (a
// stale main.lock) makes the import fail with the host git's error, not a
// conflict blamed on the session; nothing is moved.
func TestImportHostFailureIsError(t *testing.T) {
	requireGit(t)
	s := newScenario(t, hostRepo)
	s.session(t, "echo s >> a.txt && git commit -qam session")
	writeFile(t, filepath.Join(s.host, ".git/refs/heads/main.lock"), "")
	_, err := (&Importer{}).Import(context.Background(), s.importReq("s1"))
	var ge *GitError
	if !errors.As(err, &ge) || !strings.Contains(ge.Stderr, "main.lock") {
		t.Fatalf("err %v", err)
	}
	if sh(t, s.host, "git rev-parse main") != s.base.Refs["refs/heads/main"] {
		t.Fatal("main moved")
	}
}

// TestImportIgnoresCallerGitEnvironment: GIT_DIR, GIT_WORK_TREE,
// GIT_INDEX_FILE, GIT_OBJECT_DIRECTORY and GIT_CONFIG_* in the calling
// process's environment do not redirect the host's git: the snapshot and
// the import are of the workspace's repository, and the repository those
// variables name is untouched.
func TestImportIgnoresCallerGitEnvironment(t *testing.T) {
	requireGit(t)
	other := filepath.Join(t.TempDir(), "other")
	must(t, os.MkdirAll(other, 0o755))
	sh(t, other, "git init -q -b main . && echo o > o.txt && git add o.txt && git commit -qm other")
	otherMain := sh(t, other, "git rev-parse main")
	s := newScenario(t, hostRepo)
	s.session(t, "echo s >> a.txt && git commit -qam session")
	marker := filepath.Join(t.TempDir(), "marker")
	t.Setenv("GIT_DIR", filepath.Join(other, ".git"))
	t.Setenv("GIT_WORK_TREE", other)
	t.Setenv("GIT_INDEX_FILE", filepath.Join(other, ".git/index"))
	t.Setenv("GIT_OBJECT_DIRECTORY", filepath.Join(other, ".git/objects"))
	t.Setenv("GIT_CONFIG_COUNT", "1")
	t.Setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
	t.Setenv("GIT_CONFIG_VALUE_0", "touch "+marker+"; true")
	base, err := (&Importer{}).Snapshot(context.Background(), s.host)
	if err != nil || base.Refs["refs/heads/main"] != s.base.Refs["refs/heads/main"] || base.Head != "ref: refs/heads/main" {
		t.Fatalf("snapshot %+v %v, want %+v", base, err, s.base)
	}
	res := s.run(t, nil)
	if !updated(res, "refs/heads/main") || !res.IndexReset {
		t.Fatalf("result %+v", res)
	}
	for _, k := range []string{"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_CONFIG_COUNT"} {
		os.Unsetenv(k)
	}
	if got := sh(t, other, "git rev-parse main"); got != otherMain {
		t.Fatal("the other repository moved")
	}
	if got, want := sh(t, s.host, "git rev-parse main"), sh(t, s.merged, "git rev-parse main"); got != want {
		t.Fatalf("host main %s, want %s", got, want)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("config from the caller's environment ran")
	}
}
