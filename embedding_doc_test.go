package alephsandbox_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestEmbeddingDocProgram builds the program docs/embedding.md opens with,
// exactly as written, and runs it against the real platform driver: an
// allowed command, a child's own exit status, and a command-policy denial.
func TestEmbeddingDocProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries and runs the real sandbox; skipped with -short")
	}
	if runtime.GOOS != "linux" {
		t.Skip("the program is run against the Linux driver here")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	doc, err := os.ReadFile("docs/embedding.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```go\n(package main\n.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/embedding.md has no complete program (a ```go block starting with package main)")
	}
	repo, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// As the page says: the module, replaced by the checkout, and the
	// checkout's own require blocks, so that the build list is the
	// checkout's and needs no go.mod beyond those its build has fetched
	// (GOPROXY=off: a module cache filled by building the checkout).
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	requires := regexp.MustCompile(`(?ms)^require \(\n.*?^\)\n`).FindAll(gomod, -1)
	if len(requires) == 0 {
		t.Fatal("go.mod has no require block")
	}
	mod := "module embedexample\n\ngo 1.26\n\nrequire github.com/aleph-sandbox/aleph-sandbox v0.0.0\n\n" + string(bytes.Join(requires, []byte("\n"))) +
		"\nreplace github.com/aleph-sandbox/aleph-sandbox => " + repo + "\n"
	sum, err := os.ReadFile("go.sum")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(mod), "go.sum": sum, "main.go": m[1]} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "bin")
	build := func(d string, args ...string) {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = d
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	build(dir, "build", "-o", filepath.Join(bin, "embed"), ".")
	// The driver beside the host program, as an installer would put it.
	build(repo, "build", "-o", bin+"/", "./cmd/aleph-driver-bwrap", "./cmd/aleph-sandbox-init")

	conf := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(conf, []byte("[sandbox]\nworkspace_root = \""+filepath.Join(dir, "ws")+"\"\naudit_log = \"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(filepath.Join(bin, "embed"), append([]string{conf}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		code := 0
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}
	if code, out, errs := run("/bin/echo", "hello", "from", "the", "sandbox"); code != 0 || out != "hello from the sandbox\n" {
		t.Fatalf("echo: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := run("/bin/sh", "-c", "exit 7"); code != 7 {
		t.Fatalf("exit 7: got %d, stderr %q", code, errs)
	}
	if code, out, errs := run("/bin/sh", "-c", "rm -rf /"); code != 125 || out != "" || !strings.Contains(errs, "denied") {
		t.Fatalf("rm -rf /: exit %d, stdout %q, stderr %q", code, out, errs)
	}
}
