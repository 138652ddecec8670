package bwrap

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// allowedExports are the only names the package exports, each with the
// reason a package outside it needs the name. Everything else the driver
// is (its options, plans, init specs, errors, hidden modes) is reached
// through these or through the driverapi contract.
var allowedExports = map[string]string{
	"Driver":     "the driver cmd/aleph-driver-bwrap serves (driverapi.Serve) and marks (MarkTrace)",
	"NewFromEnv": "how cmd/aleph-driver-bwrap makes the driver from the section the host passed",
	"Main":       "cmd/aleph-driver-bwrap runs the binary's hidden modes (network supervisor and holder, janitor, raw runs) through it",
	"BridgeMain": "testdata/bridgemain runs the bridge alone, outside any sandbox, for the bridge's end-to-end test",
}

// packageExports are the exported package-level names declared in the
// package's non-test files, whatever their build tags.
func packageExports(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	out := map[string]string{}
	note := func(id *ast.Ident, file string) {
		if id.IsExported() {
			out[id.Name] = file
		}
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					note(d.Name, f)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						note(s.Name, f)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							note(n, f)
						}
					}
				}
			}
		}
	}
	return out
}

// The package exports only what other packages use: a name added to the
// API fails here until it is either unexported or listed with its reason.
func TestPackageExports(t *testing.T) {
	got := packageExports(t)
	// Control: the parse sees the names the binaries call, so an empty
	// result cannot pass for a small API.
	for _, n := range []string{"Driver", "NewFromEnv", "Main"} {
		if got[n] == "" {
			t.Fatalf("control: %s not found among the package's exports %v", n, got)
		}
	}
	var extra []string
	for n, file := range got {
		if _, ok := allowedExports[n]; !ok {
			extra = append(extra, n+" ("+file+")")
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("drivers/bwrap exports names not in allowedExports: %s.\n"+
			"Unexport each name no package outside drivers/bwrap uses (its tests are inside the package); "+
			"if another package needs it, add it to allowedExports in exports_test.go with the reason.",
			strings.Join(extra, ", "))
	}
	for n := range allowedExports {
		if got[n] == "" {
			t.Errorf("allowedExports lists %s, which the package no longer exports: remove it from the list", n)
		}
	}
}
