//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// docExamples are the shell example lines of README.md and docs/cli.md:
// each line of a ```sh block that runs bin/aleph-sandbox, with the exit
// status a trailing "# exit N" comment promises (0 when it says none).
func docExamples(t *testing.T) []docExample {
	t.Helper()
	exitRE := regexp.MustCompile(`#\s*exit (\d+)`)
	var out []docExample
	for _, doc := range []string{"README.md", "docs/cli.md"} {
		data, err := os.ReadFile(filepath.Join("..", "..", doc))
		if err != nil {
			t.Fatal(err)
		}
		in := false
		sc := bufio.NewScanner(bytes.NewReader(data))
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "```sh"):
				in = true
			case strings.HasPrefix(line, "```"):
				in = false
			case in && strings.HasPrefix(line, "bin/aleph-sandbox ") && strings.HasSuffix(strings.TrimSpace(stripComment(line)), "&"):
				// A service started in the background belongs to the
				// block around it (README's Python quick start), which
				// TestReadmePythonQuickStart runs whole.
			case in && strings.HasPrefix(line, "bin/aleph-sandbox "):
				ex := docExample{where: doc + ":" + strconv.Itoa(n), line: line}
				if m := exitRE.FindStringSubmatch(line); m != nil {
					ex.code, _ = strconv.Atoi(m[1])
				}
				out = append(out, ex)
			}
		}
	}
	return out
}

type docExample struct {
	where, line string
	code        int
}

// TestDocExamplesRunAsWritten runs every example line of README.md and
// docs/cli.md from the repository root, through sh, with bin/ holding
// freshly built binaries, and holds each to the status it promises.
func TestDocExamplesRunAsWritten(t *testing.T) {
	h := newEscapeHarness(t)
	examples := docExamples(t)
	if len(examples) < 10 {
		t.Fatalf("found only %d examples: the extraction is broken", len(examples))
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// The examples say bin/aleph-sandbox; a private directory of that name
	// holds this build, so the test does not depend on a `make build`.
	root := t.TempDir()
	if err := os.Symlink(h.bin, filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	// A private TMPDIR: an example may make a directory with mktemp.
	env := append(h.env(), "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+h.root, "TMPDIR="+t.TempDir())
	for _, ex := range examples {
		t.Run(ex.where, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			line := strings.Replace(ex.line, "bin/aleph-sandbox", filepath.Join(root, "bin", "aleph-sandbox"), 1)
			cmd := exec.CommandContext(ctx, "/bin/sh", "-c", line)
			cmd.Dir = repo
			cmd.Env = append(env, "PWD="+repo)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != ex.code {
				t.Fatalf("%s\nexit %d, want %d\nstdout: %s\nstderr: %s", ex.line, code, ex.code, out.String(), errb.String())
			}
		})
	}
}

// stripComment drops a trailing shell comment (" # ...").
func stripComment(line string) string {
	if i := strings.Index(line, " #"); i >= 0 {
		return line[:i]
	}
	return line
}

// TestReadmePythonQuickStart runs README's "From Python" block as written,
// as one shell script (the service in the background, then the client),
// with a private runtime directory, and stops the service afterwards.
func TestReadmePythonQuickStart(t *testing.T) {
	h := newEscapeHarness(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## From Python[^\n]*\n+(?:<!--[^\n]*-->\n+)?```sh\n(.*?)```").FindSubmatch(data)
	if m == nil {
		t.Fatal("README.md has no \"From Python\" sh block")
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.Symlink(h.bin, filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(repo, "clients"), filepath.Join(root, "clients")); err != nil {
		t.Fatal(err)
	}
	runtimeDir := t.TempDir()
	// The block's own status is the client's; the service is stopped after.
	script := string(m[1]) + "rc=$?\nkill $! 2>/dev/null\nwait 2>/dev/null\nexit $rc\n"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Dir = root
	cmd.Env = append(h.env(), "XDG_RUNTIME_DIR="+runtimeDir, "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+h.root)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hi\n 0") {
		t.Fatalf("the README's Python quick start: %v\n%s", err, out)
	}
}

// TestReadmeTypeScriptQuickStart runs README's "From TypeScript" block as
// written, as TestReadmePythonQuickStart runs the Python one: the service in
// the background, then node importing the committed clients/typescript/dist.
func TestReadmeTypeScriptQuickStart(t *testing.T) {
	h := newEscapeHarness(t)
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the TypeScript quick start needs Node >= 18")
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## From TypeScript[^\n]*\n+(?:<!--[^\n]*-->\n+)?```sh\n(.*?)```").FindSubmatch(data)
	if m == nil {
		t.Fatal("README.md has no \"From TypeScript\" sh block")
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.Symlink(h.bin, filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(repo, "clients"), filepath.Join(root, "clients")); err != nil {
		t.Fatal(err)
	}
	runtimeDir := t.TempDir()
	// The block's own status is the client's; the service is stopped after.
	script := string(m[1]) + "rc=$?\nkill $! 2>/dev/null\nwait 2>/dev/null\nexit $rc\n"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Dir = root
	cmd.Env = append(h.env(), "XDG_RUNTIME_DIR="+runtimeDir, "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+h.root)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "hi\n 0") {
		t.Fatalf("the README's TypeScript quick start: %v\n%s", err, out)
	}
}
