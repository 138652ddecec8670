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
	env := append(h.env(), "ALEPH_SANDBOX_SANDBOX__WORKSPACE_ROOT="+h.root)
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
