//go:build linux

package scripts

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// modeLists are the packages whose mode passes leave some tests to the
// main pass: each has a testdata/modes.txt naming them.
var modeLists = []string{"../cmd/aleph-sandbox", "../conformance", "../drivers/bwrap"}

// modePasses are the scripts that read the lists, by the mode name they
// give scripts/mode-skip.sh.
var modePasses = map[string]string{"unprivileged": "test-unprivileged.sh", "nolandlock": "test-nolandlock.sh"}

// modeMarkers in a test's body say that its outcome depends on the mode:
// it reads which mode it runs in.
var modeMarkers = regexp.MustCompile(`ALEPH_TEST_(NO_LANDLOCK|NO_NAMESPACES|PREPARED)|expectedTier\(|landlockTierUnderTest\(`)

type modeEntry struct {
	name  string
	modes []string // the mode passes that still run it
	why   string
	line  int
}

// readModeList parses a testdata/modes.txt.
func readModeList(path string) ([]modeEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []modeEntry
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want \"TestName MODES WHY\", got %q", path, n, line)
		}
		e := modeEntry{name: fields[0], why: strings.Join(fields[2:], " "), line: n}
		if fields[1] != "-" {
			e.modes = strings.Split(fields[1], ",")
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// testFuncs maps each top-level test of the package in dir to its body's
// source text.
func testFuncs(dir string) (map[string]string, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range files {
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, p, src, 0)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !strings.HasPrefix(fd.Name.Name, "Test") || fd.Name.Name == "TestMain" || fd.Body == nil {
				continue
			}
			out[fd.Name.Name] = string(src[fset.Position(fd.Body.Pos()).Offset:fset.Position(fd.Body.End()).Offset])
		}
	}
	return out, nil
}

// checkModeList returns what is wrong with the list of the package in
// dir: a name that is not a test of the package (a renamed test would
// otherwise drop out of the lists' meaning), a name twice, an unknown
// mode, no reason, or a listed test that reads the mode it runs in.
func checkModeList(dir string) []string {
	entries, err := readModeList(filepath.Join(dir, "testdata", "modes.txt"))
	if err != nil {
		return []string{err.Error()}
	}
	tests, err := testFuncs(dir)
	if err != nil {
		return []string{err.Error()}
	}
	var bad []string
	seen := map[string]bool{}
	for _, e := range entries {
		where := fmt.Sprintf("%s/testdata/modes.txt:%d: %s", dir, e.line, e.name)
		body, ok := tests[e.name]
		switch {
		case !ok:
			bad = append(bad, where+": no such test in the package")
		case seen[e.name]:
			bad = append(bad, where+": listed twice")
		case modeMarkers.MatchString(body):
			bad = append(bad, where+": the test reads the mode it runs in (ALEPH_TEST_*), so its outcome depends on it: it must run in every mode pass")
		}
		seen[e.name] = true
		for _, m := range e.modes {
			if _, ok := modePasses[m]; !ok {
				bad = append(bad, fmt.Sprintf("%s: unknown mode %q (want - or a comma list of unprivileged, nolandlock)", where, m))
			}
		}
		if strings.TrimSpace(e.why) == "" {
			bad = append(bad, where+": no reason given")
		}
	}
	return bad
}

// TestModeListsAreExact: the lists of tests the mode passes leave to the
// main pass name only real tests of their package, each once with a
// reason, and none that reads the mode it runs in.
func TestModeListsAreExact(t *testing.T) {
	for _, dir := range modeLists {
		for _, b := range checkModeList(dir) {
			t.Error(b)
		}
	}
}

// TestModeListCheckCatchesMistakes is the check's control: on a package
// made for it, a listed test that reads the mode, a name that is no test
// and a missing reason are each reported, and a correct line is not.
func TestModeListCheckCatchesMistakes(t *testing.T) {
	dir := t.TempDir()
	src := `package p

import ("os"; "testing")

func TestHelp(t *testing.T) {}

func TestEscapeNew(t *testing.T) {
	if os.Getenv("ALEPH_TEST_NO_LANDLOCK") == "1" {
		t.Log("without Landlock")
	}
}
`
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "testdata"), 0o700); err != nil {
		t.Fatal(err)
	}
	list := "# comment\nTestHelp - help text\nTestEscapeNew - wrongly listed\nTestGone - renamed since\nTestHelp nolandlock,sideways twice\n"
	if err := os.WriteFile(filepath.Join(dir, "testdata", "modes.txt"), []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(checkModeList(dir), "\n")
	for _, want := range []string{"TestEscapeNew: the test reads the mode", "TestGone: no such test", "TestHelp: listed twice", `unknown mode "sideways"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the check did not report %q; it said:\n%s", want, got)
		}
	}
	if strings.Contains(got, ":2: TestHelp") {
		t.Errorf("the check reported the correct line:\n%s", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "testdata", "modes.txt"), []byte("TestHelp -\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := checkModeList(dir); len(got) != 1 || !strings.Contains(got[0], `want "TestName MODES WHY"`) {
		t.Errorf("a line without a reason: %q", got)
	}
}

// TestModeScriptsSkipExactlyTheLists: each mode pass's script gives go
// test the -skip that scripts/mode-skip.sh makes of the lists, and that
// pattern matches exactly the listed tests not kept for the mode: every
// other test of the packages runs in the mode pass. The listed names are
// no test's name in the other packages the pass runs (drivers/bwrap/...),
// where the same -skip applies.
func TestModeScriptsSkipExactlyTheLists(t *testing.T) {
	var lists []string
	for _, dir := range modeLists {
		lists = append(lists, strings.TrimPrefix(dir, "../")+"/testdata/modes.txt")
	}
	// The other packages of the passes: the rest of ./drivers/bwrap/...
	others := map[string]string{}
	err := filepath.WalkDir("../drivers/bwrap", func(pkg string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if slices.Contains(modeLists, pkg) {
			return nil // a listed package: checked with its list below
		}
		tests, err := testFuncs(pkg)
		if err != nil {
			return err
		}
		for n := range tests {
			others[n] = pkg
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(others) < 40 {
		t.Fatalf("found only %d tests in ./drivers/bwrap/...'s unlisted packages", len(others))
	}
	// The module root, which the unprivileged pass runs too.
	root, err := testFuncs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := root["TestFilesAPILayeredUnprivileged"]; !ok {
		t.Fatalf("the module root's tests were not found (%d)", len(root))
	}
	for n := range root {
		others[n] = "."
	}
	for mode, script := range modePasses {
		b, err := os.ReadFile(script)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, l := range lists {
			if !strings.Contains(text, l) {
				t.Errorf("%s does not read %s", script, l)
			}
		}
		if !regexp.MustCompile(`mode-skip\.sh `+mode+` `).MatchString(text) || !strings.Contains(text, "-skip ") {
			t.Errorf("%s does not pass mode-skip.sh %s's pattern to go test -skip", script, mode)
		}
		cmd := exec.Command("./mode-skip.sh", append([]string{mode}, lists...)...)
		cmd.Dir = "."
		for i := range cmd.Args[2:] {
			cmd.Args[2+i] = "../" + cmd.Args[2+i]
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("mode-skip.sh %s: %v", mode, err)
		}
		re, err := regexp.Compile(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("mode-skip.sh %s printed %q: %v", mode, out, err)
		}
		var skipped, kept []string
		for _, dir := range modeLists {
			entries, err := readModeList(filepath.Join(dir, "testdata", "modes.txt"))
			if err != nil {
				t.Fatal(err)
			}
			listed := map[string]bool{}
			for _, e := range entries {
				if !slices.Contains(e.modes, mode) {
					listed[e.name] = true
				}
			}
			tests, err := testFuncs(dir)
			if err != nil {
				t.Fatal(err)
			}
			for name := range tests {
				if re.MatchString(name) != listed[name] {
					t.Errorf("%s: %s: skipped = %v, listed for the main pass only = %v", mode, name, re.MatchString(name), listed[name])
				}
				if listed[name] {
					skipped = append(skipped, name)
				} else {
					kept = append(kept, name)
				}
			}
		}
		for n, pkg := range others {
			if re.MatchString(n) {
				t.Errorf("%s: %s of %s would be skipped too (the same -skip applies to every package of the pass): rename one", mode, n, pkg)
			}
		}
		sort.Strings(kept)
		// The control: the pass still runs the escape battery and the
		// real driver's conformance suite, and leaves something out.
		for _, want := range []string{"TestEscapeBattery", "TestBwrapDriver"} {
			if !slices.Contains(kept, want) {
				t.Errorf("%s: %s is not run", mode, want)
			}
		}
		if len(skipped) == 0 {
			t.Errorf("%s: nothing is skipped: the pattern matches no listed test", mode)
		}
		t.Logf("%s: %d tests left to the main pass; runs %v", mode, len(skipped), kept)
	}
}

// TestUnprivilegedPassRunsTheModuleRoot: the unprivileged pass runs the
// module root's tests (TestFilesAPILayeredUnprivileged and the runtime's
// other end-to-end tests live there), not only the driver's and the
// CLI's; its packages are go test's arguments, not shell text, so a
// targeted UNPRIV_PKGS='-run ^(A|B)$ .' keeps its pattern.
func TestUnprivilegedPassRunsTheModuleRoot(t *testing.T) {
	b, err := os.ReadFile("test-unprivileged.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^pkgs=\$\{UNPRIV_PKGS:-([^}]*)\}$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("test-unprivileged.sh sets no pkgs=${UNPRIV_PKGS:-...}")
	}
	if !slices.Contains(strings.Fields(string(m[1])), ".") {
		t.Errorf("the unprivileged pass's packages %q leave out the module root (.)", m[1])
	}
	if !strings.Contains(string(b), `"$@"`) || !strings.Contains(string(b), "set -f") {
		t.Errorf("test-unprivileged.sh does not hand UNPRIV_PKGS to go test as unglobbed arguments")
	}
}
