//go:build linux

package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goTestLine finds a `go test` (or `$(GO) test`, `"$GO" test`) invocation.
var goTestLine = regexp.MustCompile(`(^|[\s"'(])(go|\$\(GO\)|"\$GO"|\$GO)\s+test\s`)

// TestEveryGoTestHasATimeout: every `go test` that `make test`, `make
// test-stress`, `make bench` and the scripts run names its own -timeout.
// go's default (10 minutes per test binary) cut the CLI package off under
// load and is wrong both ways: too short for the CLI's end-to-end tests,
// far too long for a small package that hangs.
func TestEveryGoTestHasATimeout(t *testing.T) {
	files, err := filepath.Glob("*.sh")
	if err != nil {
		t.Fatal(err)
	}
	texts := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		texts[f] = b
	}
	// The Makefile's recipes as make would run them (variables expanded).
	if _, err := exec.LookPath("make"); err == nil {
		out, err := exec.Command("make", "-s", "-n", "-C", "..", "-o", "build", "test-go", "fuzz-short", "test-serve-load").CombinedOutput()
		if err != nil {
			t.Fatalf("make -n: %v\n%s", err, out)
		}
		texts["make -n"] = out
	}
	checked := 0
	for f, b := range texts {
		// Join continued lines so a command's flags are on one line.
		text := strings.ReplaceAll(string(b), "\\\n", " ")
		for i, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") || !goTestLine.MatchString(line) {
				continue
			}
			checked++
			if !strings.Contains(line, "-timeout") {
				t.Errorf("%s:%d: go test without -timeout: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
	// The positive control: the scan found the invocations (the Makefile's
	// groups and the scripts' runs), so a changed spelling cannot make this
	// pass vacuously.
	if checked < 10 {
		t.Fatalf("found only %d go test invocations; the pattern no longer matches how they are written", checked)
	}
}

// TestGoTestGroupsCoverEveryPackage: make test-go runs every package of
// the module exactly once, in one of its groups.
func TestGoTestGroupsCoverEveryPackage(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	out, err := exec.Command("make", "-s", "-n", "-C", "..", "-o", "build", "test-go").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n test-go: %v\n%s", err, out)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(string(out), "\n") {
		if !goTestLine.MatchString(line) {
			continue
		}
		if !strings.Contains(line, "-timeout") {
			t.Errorf("without -timeout: %s", line)
		}
		// The rest group lists its packages through the shell: expand it.
		sh := exec.Command("bash", "-c", "set -f; for a in "+strings.Replace(line, "go test", "", 1)+"; do echo \"$a\"; done")
		sh.Dir = ".."
		words, err := sh.Output()
		if err != nil {
			t.Fatalf("expanding %q: %v", line, err)
		}
		for _, w := range strings.Fields(string(words)) {
			if strings.HasPrefix(w, "-") || regexp.MustCompile(`^\d+m$|^\d+$`).MatchString(w) {
				continue
			}
			w = strings.TrimSuffix(strings.TrimPrefix(w, "./"), "/")
			w = strings.TrimPrefix(strings.TrimPrefix(w, "github.com/aleph-sandbox/aleph-sandbox"), "/")
			seen[w]++
		}
	}
	list, err := exec.Command("go", "list", "-C", "..", "./...").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range strings.Fields(string(list)) {
		p = strings.TrimPrefix(strings.TrimPrefix(p, "github.com/aleph-sandbox/aleph-sandbox"), "/")
		if seen[p] != 1 {
			t.Errorf("package %q runs %d times in make test-go, want once", p, seen[p])
		}
	}
}

// TestCIRunsTheStressTarget: the soak and stress runs left out of `make
// test` still run in CI.
func TestCIRunsTheStressTarget(t *testing.T) {
	b, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"make test\n", "make test-stress\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf(".ci/run does not run %q", strings.TrimSpace(want))
		}
	}
}
