package alephsandbox_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

// knownLayerViolations are the imports (by a package or its tests) that
// break the layer table of docs/architecture.md today, as
// "importer -> imported" with paths relative to the module. The list may
// only shrink: TestPackageLayers fails on a violation missing here and on
// an entry here that no longer happens. None is left: a new import that
// breaks the table is fixed, not listed.
var knownLayerViolations = []string{}

// layerRule is one row of the table.
type layerRule struct {
	name     string
	patterns []string
	imports  []string
}

// readLayerTable parses the table after the "layers:" marker in
// docs/architecture.md, so the document and the check cannot differ.
func readLayerTable(t *testing.T) []layerRule {
	t.Helper()
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(doc, []byte("<!-- layers:"))
	if !ok {
		t.Fatal(`docs/architecture.md has no "<!-- layers:" marker before its layer table`)
	}
	var rules []layerRule
	sc := bufio.NewScanner(bytes.NewReader(rest))
	sc.Scan() // the rest of the marker line
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			if len(rules) > 0 {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("layer table row %q: want 3 cells", line)
		}
		name := strings.TrimSpace(cells[0])
		if name == "layer" || strings.HasPrefix(name, "---") {
			continue
		}
		r := layerRule{name: name}
		for _, p := range strings.Split(cells[1], ",") {
			r.patterns = append(r.patterns, strings.Trim(strings.TrimSpace(p), "`"))
		}
		for _, l := range strings.Split(cells[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				r.imports = append(r.imports, l)
			}
		}
		rules = append(rules, r)
	}
	if len(rules) == 0 {
		t.Fatal("docs/architecture.md: the layer table is empty")
	}
	names := map[string]bool{}
	for _, r := range rules {
		names[r.name] = true
	}
	for _, r := range rules {
		for _, l := range r.imports {
			if !names[l] {
				t.Fatalf("layer table: %s may import %q, which is no layer", r.name, l)
			}
		}
	}
	return rules
}

// layerOf is the layer of pkg (relative to the module; "." is the root):
// the rule with the longest matching pattern.
func layerOf(rules []layerRule, pkg string) (string, bool) {
	best, bestLen := "", -1
	for _, r := range rules {
		for _, p := range r.patterns {
			var ok bool
			if dir, sub := strings.CutSuffix(p, "/..."); sub {
				ok = pkg == dir || strings.HasPrefix(pkg, dir+"/")
			} else {
				ok, _ = path.Match(p, pkg)
			}
			if ok && len(p) > bestLen {
				best, bestLen = r.name, len(p)
			}
		}
	}
	return best, bestLen >= 0
}

// moduleImports lists, for GOOS, each package of the module and the
// module's packages it or its tests import directly.
func moduleImports(t *testing.T, goos string) map[string][]string {
	t.Helper()
	modOut, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	mod := strings.TrimSpace(string(modOut))
	cmd := exec.Command("go", "list", "-e", "-f",
		"{{.ImportPath}} {{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "./...")
	cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("GOOS=%s go list: %v\n%s", goos, err, stderr.Bytes())
	}
	rel := func(p string) (string, bool) {
		if p == mod {
			return ".", true
		}
		r, ok := strings.CutPrefix(p, mod+"/")
		return r, ok
	}
	res := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkg, ok := rel(f[0])
		if !ok {
			continue
		}
		res[pkg] = res[pkg][:0:0]
		for _, imp := range f[1:] {
			if r, ok := rel(imp); ok && r != pkg && !slices.Contains(res[pkg], r) {
				res[pkg] = append(res[pkg], r)
			}
		}
	}
	return res
}

// TestPackageLayers checks every import of the module (tests' included,
// for each OS we build) against the layer table of docs/architecture.md.
func TestPackageLayers(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	rules := readLayerTable(t)
	allowed := map[string][]string{}
	for _, r := range rules {
		allowed[r.name] = append([]string{r.name}, r.imports...)
	}
	seen := map[string]bool{}
	for _, goos := range []string{"linux", "darwin", "windows"} {
		for pkg, imps := range moduleImports(t, goos) {
			from, ok := layerOf(rules, pkg)
			if !ok {
				t.Errorf("package %s is in no layer of docs/architecture.md's table: add it to a row", pkg)
				continue
			}
			for _, imp := range imps {
				to, ok := layerOf(rules, imp)
				if !ok {
					continue // reported as an importer of its own
				}
				if !slices.Contains(allowed[from], to) {
					seen[pkg+" -> "+imp] = true
				}
			}
		}
	}
	for v := range seen {
		if !slices.Contains(knownLayerViolations, v) {
			from, to, _ := strings.Cut(v, " -> ")
			fl, _ := layerOf(rules, from)
			tl, _ := layerOf(rules, to)
			t.Errorf("new layer violation %s: the %s layer may not import the %s layer (docs/architecture.md, Layers)", v, fl, tl)
		}
	}
	for _, v := range knownLayerViolations {
		if !seen[v] {
			t.Errorf("%q is listed in knownLayerViolations but no longer happens: remove it from the list", v)
		}
	}
}

// The check itself: a violation is found, and a table row is what decides.
func TestLayerOfPatterns(t *testing.T) {
	rules := []layerRule{
		{name: "core", patterns: []string{"core/..."}},
		{name: "proxy", patterns: []string{"core/proxy"}},
		{name: "hooks", patterns: []string{"cmd/aleph-hook-*"}},
		{name: "assembly", patterns: []string{"."}},
	}
	for pkg, want := range map[string]string{
		"core": "core", "core/e2e": "core", "core/proxy": "proxy",
		"cmd/aleph-hook-ratelimit": "hooks", ".": "assembly", "corex": "",
	} {
		got, ok := layerOf(rules, pkg)
		if got != want || ok != (want != "") {
			t.Errorf("layerOf(%q) = %q, %v; want %q", pkg, got, ok, want)
		}
	}
}
