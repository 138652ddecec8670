package probe

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	steps, err := Parse([]string{"echo", "a", "b", Sep, "try", "write", "f", "x", Sep, "args", "1", Sep, "", "try"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{
		{Name: "echo", Args: []string{"a", "b"}},
		{Name: "write", Args: []string{"f", "x"}, Try: true},
		// args keeps separators and everything after it verbatim.
		{Name: "args", Args: []string{"1", Sep, "", "try"}},
	}
	if !reflect.DeepEqual(steps, want) {
		t.Errorf("got %+v\nwant %+v", steps, want)
	}
	for name, args := range map[string][]string{
		"empty":        nil,
		"unknown step": {"format-disk"},
		"wrong arity":  {"write", "only-path"},
		"bare try":     {"echo", "x", Sep, "try"},
		"empty step":   {"echo", Sep, Sep, "echo"},
	} {
		if _, err := Parse(args); !errors.Is(err, errUsage) {
			t.Errorf("%s: want a usage error, got %v", name, err)
		}
	}
}

func run(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = Run(args, strings.NewReader(stdin), &o, &e)
	return o.String(), e.String(), code
}

func TestSteps(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	out, errOut, code := run(t, "in", "echo", "a", "b", Sep, "eecho", "e", Sep, "print", "p", Sep, "hex", "00ff0a", Sep,
		"cat", Sep, "write", f, "one\n", Sep, "append", f, "two\n", Sep, "read", f, Sep, "flood", "out", "3", "97", Sep,
		"threads", "4", Sep, "exit", "7", Sep, "echo", "not reached")
	if want := "a b\np\x00\xff\nin" + "one\ntwo\n" + "aaa" + "sum=20\n"; out != want || errOut != "e\n" || code != 7 {
		t.Errorf("got %q %q %d, want %q", out, errOut, code, want)
	}
	out, _, code = run(t, "", "args", "", "two words", `"q"`, Sep)
	if out != `[][two words]["q"][;;]` || code != 0 {
		t.Errorf("args: %q %d", out, code)
	}
}

// A failing step stops the probe unless tried; the host sees the outcome.
func TestTryAndFailure(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "such", "dir", "f")
	out, _, code := run(t, "", "try", "write", missing, "x", Sep, "echo", "went-on")
	if out != "went-on\n" || code != 0 {
		t.Errorf("try: %q %d", out, code)
	}
	out, errOut, code := run(t, "", "write", missing, "x", Sep, "echo", "went-on")
	if out != "" || code != 1 || errOut == "" {
		t.Errorf("untried failure: %q %q %d", out, errOut, code)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("the failed write created the file")
	}
}

func TestBadNumbers(t *testing.T) {
	for _, args := range [][]string{{"exit", "256"}, {"exit", "-1"}, {"sleep", "x"}, {"flood", "sideways", "1", "0"}, {"hex", "0"}} {
		_, errOut, code := run(t, "", args...)
		if code != ExitUsage || !strings.Contains(errOut, "usage") {
			t.Errorf("%v: %d %q", args, code, errOut)
		}
	}
}

// The magic word may lead (as the suite passes it) or not.
func TestRunSkipsMagic(t *testing.T) {
	if out, _, code := run(t, "", Magic, "echo", "x"); out != "x\n" || code != 0 {
		t.Errorf("%q %d", out, code)
	}
	if _, _, code := run(t, ""); code != ExitUsage {
		t.Errorf("no steps: %d", code)
	}
}

func TestChmodStep(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, "", "chmod", "755", f); code != 0 {
		t.Fatalf("chmod 755: %s", errOut)
	}
	// Windows keeps only the read-only attribute of a mode.
	if st, err := os.Stat(f); err != nil || (runtime.GOOS != "windows" && st.Mode().Perm() != 0o755) {
		t.Errorf("after chmod 755: %v %v", st, err)
	}
	for _, bad := range []string{"9", "17777", "-1", "rwx"} {
		if _, _, code := run(t, "", "chmod", bad, f); code != ExitUsage {
			t.Errorf("chmod %q: status %d, want a usage error", bad, code)
		}
	}
}
