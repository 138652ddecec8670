package driverapi_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func TestCheckWorkspaceCwd(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws, sub, out := filepath.Join(root, "ws"), filepath.Join(root, "ws", "sub"), filepath.Join(root, "out")
	for _, d := range []string{sub, out, ws + "x"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ws, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	links := runtime.GOOS != "windows" // creating links needs a privilege there
	if links {
		for link, target := range map[string]string{filepath.Join(root, "wslink"): ws, filepath.Join(ws, "inlink"): sub, filepath.Join(ws, "outlink"): out} {
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := string(filepath.Separator)
	type tc struct {
		name, ws, cwd, field, why string
	}
	cases := []tc{
		{"empty workspace", "", "", "workspace", "empty"},
		{"relative workspace", "ws", "", "workspace", "not an absolute path"},
		{"workspace with .", ws + s + ".", "", "workspace", "not canonical"},
		{"workspace with ..", sub + s + "..", "", "workspace", "not canonical"},
		{"workspace with a trailing separator", ws + s, "", "workspace", "not canonical"},
		{"workspace with a doubled separator", root + s + s + "ws", "", "workspace", "not canonical"},
		{"missing workspace", filepath.Join(root, "nope"), "", "workspace", "cannot be resolved"},
		{"workspace a file", filepath.Join(ws, "file"), "", "workspace", "not a directory"},
		{"cwd outside", ws, out, "cwd", "outside the workspace"},
		{"cwd beside, sharing the prefix", ws, ws + "x", "cwd", "outside the workspace"},
		{"cwd with ..", ws, sub + s + "..", "cwd", "not canonical"},
		{"cwd climbing out with ..", ws, ws + s + ".." + s + "out", "cwd", "not canonical"},
		{"cwd with .", ws, ws + s + "." + s + "sub", "cwd", "not canonical"},
		{"cwd with a trailing separator", ws, sub + s, "cwd", "not canonical"},
		{"relative cwd", ws, "sub", "cwd", "not an absolute path"},
	}
	if links {
		cases = append(cases,
			tc{"workspace through a link", filepath.Join(root, "wslink"), "", "workspace", "symbolic link"},
			tc{"cwd through a link inside", ws, filepath.Join(ws, "inlink"), "cwd", "symbolic link"},
			tc{"cwd through a link out", ws, filepath.Join(ws, "outlink"), "cwd", "symbolic link"})
	}
	for _, c := range cases {
		err := driverapi.CheckWorkspaceCwd(c.ws, c.cwd)
		var ise *driverapi.InvalidSpecError
		if !errors.As(err, &ise) || ise.Field != c.field || !strings.Contains(ise.Reason, c.why) {
			t.Errorf("%s: got %v, want an InvalidSpecError for %s saying %q", c.name, err, c.field, c.why)
		}
	}
	// Controls: canonical paths pass, the cwd may be left out or be the
	// workspace itself.
	for _, cwd := range []string{"", ws, sub} {
		if err := driverapi.CheckWorkspaceCwd(ws, cwd); err != nil {
			t.Errorf("canonical workspace and cwd %q: %v", cwd, err)
		}
	}
}
