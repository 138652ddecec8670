//go:build linux

package gitimport

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/internal/gitplant"
)

// TestImportNeverRunsSessionConfig: a session's .git/config naming
// programs (core.fsmonitor, core.pager, a "!" alias, a clean filter with
// info/attributes, core.sshCommand) and hooks of every kind the import's
// git commands could trigger: nothing of it runs during Import, each is
// reported as not imported, and the session's ordinary commit still
// reaches the host (the positive control). The control that the attack
// is real: the host's git run in the session's repository fires the
// same config and hook.
func TestImportNeverRunsSessionConfig(t *testing.T) {
	requireGit(t)
	s := newScenario(t, hostRepo)
	m := filepath.Join(t.TempDir(), "marker")
	hooks := []string{"reference-transaction", "post-index-change", "post-checkout", "pre-commit", "post-commit", "pre-auto-gc", "post-rewrite"}
	script := fmt.Sprintf(`echo s >> a.txt && git commit -qam session &&
cat >> .git/config <<'CFG'
[core]
	fsmonitor = "touch %[1]s-fsmonitor; true"
	pager = "touch %[1]s-pager; cat"
	sshCommand = "touch %[1]s-ssh; true"
[alias]
	pwn = "!touch %[1]s-alias"
[filter "x"]
	clean = "touch %[1]s-filter; cat"
	smudge = "touch %[1]s-filter; cat"
CFG
mkdir -p .git/info && echo '* filter=x' > .git/info/attributes
`, m)
	for _, h := range hooks {
		script += fmt.Sprintf("printf '#!/bin/sh\\ntouch %s-hook-%s\\n' > .git/hooks/%s && chmod +x .git/hooks/%s\n", m, h, h, h)
	}
	s.session(t, script)
	markers := func() []string {
		got, _ := filepath.Glob(m + "-*")
		return got
	}
	if got := markers(); len(got) > 0 {
		t.Fatalf("markers before the import: %v", got)
	}
	res := s.run(t, nil)
	if got := markers(); len(got) > 0 {
		t.Fatalf("the session's config or hooks ran during Import: %v", got)
	}
	if !updated(res, "refs/heads/main") || !res.IndexReset {
		t.Fatalf("positive control: the ordinary commit was not imported: %+v", res)
	}
	for _, p := range []string{".git/config", ".git/info/attributes", ".git/hooks/reference-transaction"} {
		if !refused(res, p, ReasonGitControlNotImported) {
			t.Errorf("%s not reported: %+v", p, res.Refused)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(s.host, ".git/config")); bytes.Contains(b, []byte("fsmonitor")) {
		t.Fatal("the session's config reached the host's")
	}

	// Control: the host's git run in the session's repository fires it.
	ways := gitplant.Fires(t, s.merged, m)
	c := exec.Command("git", "update-ref", "refs/heads/ctl", "HEAD")
	c.Dir, c.Env = s.merged, gitEnv(t.TempDir())
	_ = c.Run()
	c = exec.Command("git", "add", "-A")
	c.Dir, c.Env = s.merged, gitEnv(t.TempDir())
	_ = os.WriteFile(filepath.Join(s.merged, "n.txt"), []byte("n"), 0o644)
	_ = c.Run()
	got := markers()
	if !slices.Contains(ways, "fsmonitor") || !slices.Contains(ways, "alias") || !slices.Contains(got, m+"-hook-reference-transaction") || !slices.Contains(got, m+"-filter") {
		t.Fatalf("control: the planted config did not fire where git runs in the session's repository: ways %v, markers %v", ways, got)
	}
}

// TestImportMalformedObjects: a loose object that does not hash to its
// name, one that is not zlib, a zlib bomb past the size limit: the branch
// that needs it is refused, the object never reaches the host, and a
// branch with sound objects in the same session is imported (the control).
func TestImportMalformedObjects(t *testing.T) {
	requireGit(t)
	bomb := func() []byte {
		var buf bytes.Buffer
		w, _ := zlib.NewWriterLevel(&buf, zlib.BestCompression)
		fmt.Fprintf(w, "blob %d\x00", 64<<20)
		zero := make([]byte, 1<<20)
		for i := 0; i < 64; i++ {
			w.Write(zero)
		}
		w.Close()
		return buf.Bytes()
	}()
	for _, tc := range []struct {
		name   string
		tamper func(orig []byte) []byte
		detail string
	}{
		{"content not matching its name", func([]byte) []byte { return zlibBytes([]byte("blob 5\x00evil\n")) }, "not to its name"},
		{"header size lying", func([]byte) []byte { return zlibBytes([]byte("blob 3\x00evil\n")) }, "header says 3"},
		{"not zlib", func([]byte) []byte { return []byte("garbage, not zlib at all") }, "zlib"},
		{"truncated zlib", func(o []byte) []byte { return o[:len(o)/2] }, "zlib"},
		{"zlib bomb", func([]byte) []byte { return bomb }, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, hostRepo)
			s.session(t, "git checkout -q -b good && echo g > g.txt && git add g.txt && git commit -qm good && git checkout -q main && echo bad-content > bad.txt && git add bad.txt && git commit -qm bad")
			blob := sh(t, s.merged, "git rev-parse HEAD:bad.txt")
			p := filepath.Join(s.upper, ".git/objects", blob[:2], blob[2:])
			orig, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			must(t, os.Remove(p)) // loose objects are read-only
			if err := os.WriteFile(p, tc.tamper(orig), 0o444); err != nil {
				t.Fatal(err)
			}
			res := s.run(t, &Importer{Limits: Limits{MaxObjectSize: 1 << 20}})
			if !refused(res, blob, ReasonInvalidObject) || !refused(res, "refs/heads/main", ReasonInvalidObject) {
				t.Fatalf("refused %+v", res.Refused)
			}
			for _, r := range res.Refused {
				if r.Path == blob && !strings.Contains(r.Detail, tc.detail) {
					t.Errorf("detail %q does not say %q", r.Detail, tc.detail)
				}
			}
			if updated(res, "refs/heads/main") || sh(t, s.host, "git rev-parse main") != s.base.Refs["refs/heads/main"] {
				t.Fatal("main moved")
			}
			if exec.Command("git", "--git-dir="+filepath.Join(s.host, ".git"), "cat-file", "-e", blob).Run() == nil {
				t.Fatal("the bad object reached the host")
			}
			if !updated(res, "refs/heads/good") {
				t.Fatalf("control: the sound branch was not imported: %+v", res)
			}
		})
	}
}

// TestImportBadRefs: refs whose names or values are attacks are refused
// while a sound ref of the same session is imported (the control).
func TestImportBadRefs(t *testing.T) {
	requireGit(t)
	outside := t.TempDir()
	for _, tc := range []struct {
		name   string
		plant  func(t *testing.T, s *scenario, id string)
		path   string
		reason string
	}{
		{"packed ref ../../x", func(t *testing.T, s *scenario, id string) {
			appendFile(t, filepath.Join(s.upper, ".git/packed-refs"), id+" refs/heads/../../x\n")
		}, "refs/heads/../../x", ReasonInvalidRefName},
		{"packed ref a..b", func(t *testing.T, s *scenario, id string) {
			appendFile(t, filepath.Join(s.upper, ".git/packed-refs"), id+" refs/heads/a..b\n")
		}, "refs/heads/a..b", ReasonInvalidRefName},
		{"loose ref a..b", func(t *testing.T, s *scenario, id string) {
			writeFile(t, filepath.Join(s.upper, ".git/refs/heads/a..b"), id+"\n")
		}, "refs/heads/a..b", ReasonInvalidRefName},
		{"loose ref x.lock", func(t *testing.T, s *scenario, id string) {
			writeFile(t, filepath.Join(s.upper, ".git/refs/heads/x.lock"), id+"\n")
		}, "refs/heads/x.lock", ReasonInvalidRefName},
		{"ref symlink to a host file", func(t *testing.T, s *scenario, id string) {
			writeFile(t, filepath.Join(outside, "secret"), id+"\n")
			must(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(s.upper, ".git/refs/heads/evil")))
		}, "refs/heads/evil", ReasonInvalidRefValue},
		{"ref directory symlink", func(t *testing.T, s *scenario, id string) {
			must(t, os.MkdirAll(filepath.Join(outside, "d"), 0o755))
			writeFile(t, filepath.Join(outside, "d/x"), id+"\n")
			must(t, os.Symlink(filepath.Join(outside, "d"), filepath.Join(s.upper, ".git/refs/heads/evil")))
		}, "refs/heads/evil", ReasonInvalidRefValue},
		{"symbolic ref", func(t *testing.T, s *scenario, id string) {
			writeFile(t, filepath.Join(s.upper, ".git/refs/heads/sym"), "ref: refs/heads/main\n")
		}, "refs/heads/sym", ReasonInvalidRefValue},
		{"HEAD symlink to /etc/passwd", func(t *testing.T, s *scenario, id string) {
			p := filepath.Join(s.upper, ".git/HEAD")
			_ = os.Remove(p)
			must(t, os.Symlink("/etc/passwd", p))
		}, "HEAD", ReasonInvalidRefValue},
		{"HEAD garbage", func(t *testing.T, s *scenario, id string) {
			writeFile(t, filepath.Join(s.upper, ".git/HEAD"), "ref: refs/heads/../../../etc\n")
		}, "HEAD", ReasonInvalidRefValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, hostRepo)
			s.session(t, "git pack-refs --all && git checkout -q -b good && echo g > g.txt && git add g.txt && git commit -qm good && git checkout -q main")
			id := sh(t, s.merged, "git rev-parse good")
			tc.plant(t, s, id)
			res := s.run(t, nil)
			if !refused(res, tc.path, tc.reason) {
				t.Fatalf("%s not refused with %s: %+v", tc.path, tc.reason, res.Refused)
			}
			if !updated(res, "refs/heads/good") {
				t.Fatalf("control: the sound branch was not imported: %+v", res)
			}
			refs := sh(t, s.host, "git for-each-ref --format='%(refname)'")
			if strings.Contains(refs, "..") || strings.Contains(refs, "evil") || strings.Contains(refs, "sym") || strings.Contains(refs, ".lock") {
				t.Fatalf("a bad ref reached the host:\n%s", refs)
			}
			for _, p := range []string{filepath.Join(s.host, ".git/x"), filepath.Join(s.host, "x"), filepath.Join(filepath.Dir(s.host), "x")} {
				if _, err := os.Lstat(p); err == nil {
					t.Fatalf("%s was written", p)
				}
			}
			if got := sh(t, s.host, "git symbolic-ref HEAD"); got != "refs/heads/main" {
				t.Fatalf("host HEAD %s", got)
			}
		})
	}
}

// TestImportSHA256Refused: a ref holding a 64-digit id marks a SHA-256
// repository: nothing is imported, with the reason. (The control is
// TestImportFastForward: the same commit without it imports.)
func TestImportSHA256Refused(t *testing.T) {
	requireGit(t)
	s := newScenario(t, hostRepo)
	s.session(t, "echo s >> a.txt && git commit -qam session")
	writeFile(t, filepath.Join(s.upper, ".git/refs/heads/wide"), strings.Repeat("ab", 32)+"\n")
	res := s.run(t, nil)
	if !refused(res, ".git", ReasonSHA256) || len(res.Updated) > 0 || res.Objects > 0 {
		t.Fatalf("result %+v", res)
	}
	if sh(t, s.host, "git rev-parse main") != s.base.Refs["refs/heads/main"] {
		t.Fatal("main moved")
	}
}

// TestImportAlternatesNeverRead: a session's objects/info/alternates
// pointing at a repository on the host: the objects only reachable
// through it are not taken (the ref needing them is refused as missing),
// while the host's git would use it (the control).
func TestImportAlternatesNeverRead(t *testing.T) {
	requireGit(t)
	other := filepath.Join(t.TempDir(), "other")
	must(t, os.MkdirAll(other, 0o755))
	sh(t, other, "git init -q -b main . && echo secret > s.txt && git add s.txt && git commit -qm secret")
	x := sh(t, other, "git rev-parse HEAD")
	s := newScenario(t, hostRepo)
	s.session(t, "git branch good HEAD~1 && mkdir -p .git/objects/info && echo "+other+"/.git/objects > .git/objects/info/alternates && git update-ref refs/heads/alt "+x)
	if out, err := exec.Command("git", "--git-dir="+filepath.Join(s.merged, ".git"), "cat-file", "-e", x).CombinedOutput(); err != nil {
		t.Fatalf("control: git does not read the alternates: %v %s", err, out)
	}
	res := s.run(t, nil)
	if !refused(res, "refs/heads/alt", ReasonMissingObjects) || !refused(res, ".git/objects/info/alternates", ReasonGitControlNotImported) {
		t.Fatalf("refused %+v", res.Refused)
	}
	if exec.Command("git", "--git-dir="+filepath.Join(s.host, ".git"), "cat-file", "-e", x).Run() == nil {
		t.Fatal("an object of the alternate reached the host")
	}
	if !updated(res, "refs/heads/good") {
		t.Fatalf("control: the sound branch was not imported: %+v", res)
	}
}

// TestImportCommondirNeverRead: a commondir file pointing at another
// repository: its refs are not taken (git would take them: the control).
func TestImportCommondirNeverRead(t *testing.T) {
	requireGit(t)
	other := filepath.Join(t.TempDir(), "other")
	must(t, os.MkdirAll(other, 0o755))
	sh(t, other, "git init -q -b main . && echo secret > s.txt && git add s.txt && git commit -qm secret && git branch evil")
	s := newScenario(t, hostRepo)
	s.session(t, "echo s >> a.txt && git commit -qam session")
	writeFile(t, filepath.Join(s.upper, ".git/commondir"), other+"/.git\n")
	writeFile(t, filepath.Join(s.merged, ".git/commondir"), other+"/.git\n")
	if out, err := exec.Command("git", "--git-dir="+filepath.Join(s.merged, ".git"), "rev-parse", "--verify", "refs/heads/evil").CombinedOutput(); err != nil {
		t.Fatalf("control: git does not follow commondir: %v %s", err, out)
	}
	res := s.run(t, nil)
	if !refused(res, ".git/commondir", ReasonGitControlNotImported) || !updated(res, "refs/heads/main") {
		t.Fatalf("result %+v", res)
	}
	if exec.Command("git", "--git-dir="+filepath.Join(s.host, ".git"), "rev-parse", "--verify", "-q", "refs/heads/evil").Run() == nil {
		t.Fatal("the other repository's ref reached the host")
	}
}

// TestImportSessionGitSymlink: the session replacing .git by a symlink to
// a host repository: nothing is read through it.
func TestImportSessionGitSymlink(t *testing.T) {
	requireGit(t)
	other := filepath.Join(t.TempDir(), "other")
	must(t, os.MkdirAll(other, 0o755))
	sh(t, other, "git init -q -b main . && echo secret > s.txt && git add s.txt && git commit -qm secret && git branch evil")
	s := newScenario(t, hostRepo)
	must(t, os.Symlink(filepath.Join(other, ".git"), filepath.Join(s.upper, ".git")))
	res := s.run(t, nil)
	if !refused(res, ".git", ReasonSessionGitNotDirectory) || len(res.Updated) > 0 {
		t.Fatalf("result %+v", res)
	}
}

// TestImportSubmodulesRefused: a pack bringing a tree with a gitlink, or a
// .gitmodules change, is refused; a plain branch of the same session is
// imported, and a gitlink the host already had does not stop a commit that
// leaves it as it was (the controls).
func TestImportSubmodulesRefused(t *testing.T) {
	requireGit(t)
	sub := "1111111111111111111111111111111111111111"
	s := newScenario(t, hostRepo)
	s.session(t, `git checkout -q -b sub && git update-index --add --cacheinfo 160000,`+sub+`,lib && git commit -qm gitlink &&
git checkout -q main && git checkout -q -b gm && printf '[submodule "x"]\n\tpath = x\n\turl = https://example.com/x\n' > .gitmodules && git add .gitmodules && git commit -qm gm &&
git checkout -q main && git checkout -q -b plain && echo p > p.txt && git add p.txt && git commit -qm plain && git checkout -q main && git gc -q`)
	if packs, _ := filepath.Glob(filepath.Join(s.upper, ".git/objects/pack/pack-*.pack")); len(packs) == 0 {
		t.Fatal("no pack in the upper layer")
	}
	res := s.run(t, nil)
	for _, ref := range []string{"refs/heads/sub", "refs/heads/gm"} {
		if !refused(res, ref, ReasonSubmodule) {
			t.Errorf("%s not refused: %+v", ref, res.Refused)
		}
		if exec.Command("git", "--git-dir="+filepath.Join(s.host, ".git"), "rev-parse", "--verify", "-q", ref).Run() == nil {
			t.Errorf("%s reached the host", ref)
		}
	}
	if !updated(res, "refs/heads/plain") {
		t.Fatalf("control: the plain branch was not imported: %+v", res)
	}

	// The host already has the gitlink: a session commit beside it imports.
	s2 := newScenario(t, hostRepo+" && git update-index --add --cacheinfo 160000,"+sub+",lib && git commit -qm gitlink")
	s2.session(t, "echo more >> a.txt && git commit -qam more")
	res = s2.run(t, nil)
	if !updated(res, "refs/heads/main") || len(res.Refused) > 0 {
		t.Fatalf("control: a commit keeping the host's gitlink was refused: %+v", res)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	_ = os.Remove(p)
	must(t, os.WriteFile(p, []byte(s), 0o644))
}

func appendFile(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString(s)
	must(t, err)
	must(t, f.Close())
}
