//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A fenced code block of README.md or docs/*.md, with the HTML comments
// right before it (blank lines between are allowed):
//
//	<!-- not run: REASON -->   not meant to run (a synopsis, a diagram, another OS)
//	<!-- run by: TestName -->  run by that test, which exists in this repository
//
// Any other block is run by TestDocBlocksRun, by its language: sh (through
// sh -e), python (with the doc's earlier python blocks before it, as one
// program), ts (likewise, as an ES module), toml (loaded with `aleph-sandbox
// config --config`). A block of another language must say which of the
// two markers applies.
type docBlock struct {
	doc     string // README.md, docs/serve.md
	line    int    // of the opening fence
	lang    string
	body    string
	notRun  string // the reason, when marked not to run
	runBy   string // the test that runs it
	markers []string
}

func (b docBlock) where() string { return fmt.Sprintf("%s:%d", b.doc, b.line) }

var docMarker = regexp.MustCompile(`^<!--\s*(.*?)\s*-->$`)

// docBlocks reads every fenced block of README.md and docs/*.md.
func docBlocks(t *testing.T, repo string) []docBlock {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{filepath.Join(repo, "README.md")}, docs...)
	var out []docBlock
	for _, path := range docs {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repo, path)
		lines := strings.Split(string(data), "\n")
		for i := 0; i < len(lines); i++ {
			if !strings.HasPrefix(lines[i], "```") {
				continue
			}
			b := docBlock{doc: rel, line: i + 1, lang: strings.TrimSpace(strings.TrimPrefix(lines[i], "```"))}
			for j := i - 1; j >= 0; j-- {
				l := strings.TrimSpace(lines[j])
				if l == "" {
					continue
				}
				m := docMarker.FindStringSubmatch(l)
				if m == nil {
					break
				}
				b.markers = append(b.markers, m[1])
				if r, ok := strings.CutPrefix(m[1], "not run:"); ok {
					b.notRun = strings.TrimSpace(r)
				}
				if r, ok := strings.CutPrefix(m[1], "run by:"); ok {
					b.runBy = strings.TrimSpace(r)
				}
			}
			var body []string
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				body = append(body, lines[i])
			}
			b.body = strings.Join(body, "\n") + "\n"
			out = append(out, b)
		}
	}
	return out
}

// TestDocBlocksMarked: every block is runnable by TestDocBlocksRun or says
// why not, and a "run by" names a test that exists.
func TestDocBlocksMarked(t *testing.T) {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	blocks := docBlocks(t, repo)
	if len(blocks) < 30 {
		t.Fatalf("found only %d blocks: the extraction is broken", len(blocks))
	}
	tests := map[string]bool{}
	out, err := exec.Command("git", "-C", repo, "grep", "-h", "-o", "-E", `^func Test[A-Za-z0-9_]+\(`, "--", "*_test.go").Output()
	if err != nil {
		t.Fatalf("git grep: %v", err)
	}
	for _, l := range strings.Fields(string(out)) {
		tests[strings.TrimSuffix(strings.TrimPrefix(l, "func "), "(")] = true
	}
	if l := len(tests); l < 100 {
		t.Fatalf("found only %d tests in the repository: the listing is broken", l)
	}
	for _, b := range blocks {
		switch {
		case b.notRun == "" && b.runBy == "" && (strings.Contains(strings.Join(b.markers, " "), "not run") || strings.Contains(strings.Join(b.markers, " "), "run by")):
			t.Errorf("%s: a marker without its reason or test name: %q", b.where(), b.markers)
		case b.runBy != "" && !tests[b.runBy]:
			t.Errorf("%s: run by %s, which does not exist", b.where(), b.runBy)
		case b.notRun != "" || b.runBy != "":
		case runnableLang(b.lang):
		default:
			t.Errorf("%s: a ```%s block nothing runs: mark it <!-- not run: why --> or <!-- run by: TestName -->", b.where(), b.lang)
		}
	}
}

func runnableLang(lang string) bool {
	switch lang {
	case "sh", "python", "ts", "toml":
		return true
	}
	return false
}

// TestDocBlocksRun runs every block that is meant to run and that no
// dedicated test runs, doc by doc, in the doc's order, from a directory
// laid out as the checkout (bin/ holds this build): what an earlier block
// starts in the background (a serve) lives until the doc's end, so a later
// block can use it. A placeholder /path/to/aleph-sandbox is the checkout.
func TestDocBlocksRun(t *testing.T) {
	h := newEscapeHarness(t)
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	byDoc := map[string][]docBlock{}
	var order []string
	for _, b := range docBlocks(t, repo) {
		if b.notRun != "" || b.runBy != "" || !runnableLang(b.lang) {
			continue
		}
		if byDoc[b.doc] == nil {
			order = append(order, b.doc)
		}
		byDoc[b.doc] = append(byDoc[b.doc], b)
	}
	if len(order) == 0 {
		t.Fatal("no runnable block found: the extraction is broken")
	}
	for _, doc := range order {
		t.Run(doc, func(t *testing.T) { runDocBlocks(t, h, repo, byDoc[doc]) })
	}
}

func runDocBlocks(t *testing.T, h *escapeHarness, repo string, blocks []docBlock) {
	// The checkout's layout, bin/ excepted: a block may build (go build
	// ./conformance/example) or install (npm install ./clients/typescript)
	// without touching the real checkout.
	root := t.TempDir()
	entries, err := os.ReadDir(repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "bin" || e.Name() == ".git" || e.Name() == "node_modules" {
			continue
		}
		if err := os.Symlink(filepath.Join(repo, e.Name()), filepath.Join(root, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(root, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	binEntries, err := os.ReadDir(h.bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range binEntries {
		if err := os.Symlink(filepath.Join(h.bin, e.Name()), filepath.Join(bin, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	runtimeDir, tmp, home := t.TempDir(), t.TempDir(), t.TempDir()
	// A block that builds Go (go build ./conformance/example) uses this
	// machine's build and module caches, not a cold cache in the private
	// HOME: the caches are what a user's checkout would have after make
	// build, and a cold build of the dependencies would be most of the run.
	var goEnv []string
	for _, v := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatalf("go env %s: %v", v, err)
		}
		goEnv = append(goEnv, v+"="+strings.TrimSpace(string(out)))
	}
	env := append(h.env(), "XDG_RUNTIME_DIR="+runtimeDir, "TMPDIR="+tmp, "HOME="+home, "PWD="+root,
		"ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+h.root, "npm_config_cache="+filepath.Join(home, ".npm"),
		// The python blocks import the checkout's client, as the doc's
		// first (sh) example shows with PYTHONPATH=clients/python.
		"PYTHONPATH="+filepath.Join(root, "clients", "python"))
	env = append(env, goEnv...)
	// Everything the doc's blocks start shares one process group, ended
	// when the doc is done (a `serve &` included). A sleeping leader keeps
	// the group alive between blocks: a process can join only a group
	// that still has a member.
	leader := exec.Command("sleep", "3600")
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := leader.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		_ = leader.Wait() // reaped, so only the blocks' processes count below
		for i := 0; i < 50 && syscall.Kill(-pgid, 0) == nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
	run := func(t *testing.T, b docBlock, argv ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir, cmd.Env = root, env
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		// A background job keeps the output pipe open: Wait returns
		// anyway once the block's own shell has ended.
		cmd.WaitDelay = 2 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		if err != nil && !isWaitDelay(err) {
			t.Fatalf("%s (```%s): %v\n--- block ---\n%s--- output ---\n%s", b.where(), b.lang, err, b.body, out.String())
		}
		t.Logf("%s: ok\n%s", b.where(), out.String())
	}
	var python, ts []string
	for i, b := range blocks {
		body := strings.ReplaceAll(b.body, "/path/to/aleph-sandbox", repo)
		switch b.lang {
		case "sh":
			run(t, b, "/bin/sh", "-ec", body)
		case "python":
			python = append(python, body)
			run(t, b, "python3", "-c", strings.Join(python, "\n"))
		case "ts":
			ts = append(ts, body)
			file := filepath.Join(root, fmt.Sprintf("doc-block-%d.mjs", i))
			if err := os.WriteFile(file, []byte(strings.Join(ts, "\n")+"\nprocess.exit(0);\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			run(t, b, "node", file)
		case "toml":
			file := filepath.Join(tmp, fmt.Sprintf("doc-block-%d.toml", i))
			if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			run(t, b, filepath.Join(bin, "aleph-sandbox"), "config", "--config", file)
		}
	}
}

// isWaitDelay reports the error Wait gives when the block's shell ended but
// a background job it started still holds the output pipe.
func isWaitDelay(err error) bool {
	return errors.Is(err, exec.ErrWaitDelay)
}
