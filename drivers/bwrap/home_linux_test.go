//go:build linux

package bwrap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// homeScript runs in the sandbox with HOME set to the home: the home
// holds nothing (no placeholder was made in it) while the command runs,
// and entries that are protected in the workspace can be made there.
const homeScript = `test -z "$(ls -A "$HOME")" || { echo "home not empty:"; ls -lA "$HOME"; exit 9; }
mkdir "$HOME/.vscode" && echo x > "$HOME/.vscode/x" && echo c > "$HOME/.gitconfig" && mkdir "$HOME/.git" && echo ran`

// TestHomeWithoutProtectedEntries: ProfileRequest.Home is writable with no
// protected entries (a command may write $HOME/.vscode/x, and no
// placeholder appears in the home on the host, during or after), while
// the workspace's entries stay protected in the same profile.
func TestHomeWithoutProtectedEntries(t *testing.T) {
	d := testDriver(t, options{})
	hc, err := d.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if hc.Details[driverapi.DetailProfileHome] != "1" {
		t.Fatalf("details %v do not report %s", hc.Details, driverapi.DetailProfileHome)
	}
	checkHomeUnprotected(t, d)
}

// In the Landlock tier, which refuses a writable root holding a protected
// entry (protectedRefusal), the home is no such root: a command may make
// $HOME/.git and $HOME/.vscode, and the next command still runs (as one
// more fs_write path the home would have it refused), while a workspace
// holding .vscode is still refused.
func TestTierHomeWithoutProtectedEntries(t *testing.T) {
	d := tierDriver(t, options{})
	ws, home := newWorkspace(t), newWorkspace(t)
	req := driverapi.ProfileRequest{Workspace: ws, Home: home}
	env := []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "HOME", Value: home}}
	r := reqRun(t, d, req, env, homeScript)
	expectOK(t, r)
	r = reqRun(t, d, req, env, `cat "$HOME/.vscode/x" && echo w > written && rm written && echo ran`)
	expectOK(t, r)
	if r.stdout != "x\nran\n" {
		t.Fatalf("second command: %q", r.stdout)
	}
	// Control: the same home as an fs_write path is refused now.
	old := driverapi.ProfileRequest{Workspace: ws, Capabilities: driverapi.Capabilities{FSWrite: []string{home}}}
	var ue *unavailableError
	if r := reqRun(t, d, old, env, "echo ran"); !errors.As(r.err, &ue) {
		t.Fatalf("home as fs_write holding .git: %+v, want the tier's refusal", r)
	}
	mkfile(t, filepath.Join(ws, ".vscode", "settings.json"), "{}\n")
	if r := reqRun(t, d, req, env, "echo ran"); !errors.As(r.err, &ue) {
		t.Fatalf("workspace holding .vscode: %+v, want the tier's refusal", r)
	}
}

func checkHomeUnprotected(t *testing.T, d *Driver) {
	ws, home := newWorkspace(t), newWorkspace(t)
	mkfile(t, filepath.Join(ws, ".vscode", "settings.json"), "{}\n")
	before := listing(t, ws)
	req := driverapi.ProfileRequest{Workspace: ws, Home: home}
	env := []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "HOME", Value: home}}
	r := reqRun(t, d, req, env, homeScript)
	expectOK(t, r)
	if r.stdout != "ran\n" {
		t.Fatalf("stdout %q", r.stdout)
	}
	var got []string
	for _, l := range listing(t, home) {
		got = append(got, strings.Fields(l)[0])
	}
	if want := []string{".", ".git", ".gitconfig", ".vscode", ".vscode/x"}; !slices.Equal(got, want) {
		t.Fatalf("home after the command holds %q, want %q", got, want)
	}
	for _, name := range driverapi.DefaultProtectedEntries() {
		if name == ".git" || name == ".vscode" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(home, name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s in the home after the command: %v", name, err)
		}
	}
	// Positive control and denial in the workspace, same profile: it is
	// writable, its .vscode is not, and its missing entries cannot be made.
	r = reqRun(t, d, req, env, "echo w > written && rm written && echo ran")
	expectOK(t, r)
	if r.stdout != "ran\n" {
		t.Fatalf("workspace control: %q", r.stdout)
	}
	for _, script := range []string{
		"echo x > .vscode/x",
		"echo '{\"task\":1}' > .vscode/settings.json",
		"mkdir .claude",
		"echo x > " + ws + "/.envrc",
	} {
		expectFail(t, reqRun(t, d, req, env, script))
	}
	sameListing(t, "workspace after the commands", before, listing(t, ws))
}

// A home that would take protection away, or is not a directory, is
// refused with a typed error naming the field.
func TestHomeRefusedWhereItOverlaps(t *testing.T) {
	ws, grant, ro := newWorkspace(t), newWorkspace(t), newWorkspace(t)
	for _, sub := range []string{"sub", ".git"} {
		if err := os.Mkdir(filepath.Join(ws, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(grant, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(grant, "file")
	mkfile(t, file, "x")
	caps := driverapi.Capabilities{FSWrite: []string{grant}, FSRead: []string{ro}}
	for name, home := range map[string]string{
		"the workspace":        ws,
		"containing it":        filepath.Dir(ws),
		"inside it":            filepath.Join(ws, "sub"),
		"its .git":             filepath.Join(ws, ".git"),
		"a write grant":        grant,
		"inside a write grant": filepath.Join(grant, "in"),
		"a read grant":         ro,
		"containing a grant":   filepath.Dir(ro),
		"a file":               file,
		"missing":              filepath.Join(ro, "missing"),
		"relative":             "home",
		"the root":             "/",
	} {
		_, err := buildPlan(driverapi.ProfileRequest{Workspace: ws, Capabilities: caps, Home: home})
		var ie *driverapi.InvalidSpecError
		if !errors.As(err, &ie) || ie.Field != "home" {
			t.Errorf("home %s (%q): %v, want an InvalidSpecError for home", name, home, err)
		}
	}
	// The control: a home apart from everything is accepted and kept.
	home := newWorkspace(t)
	p, err := buildPlan(driverapi.ProfileRequest{Workspace: ws, Capabilities: caps, Home: home})
	if err != nil || p.Home != home || slices.Contains(p.FSWrite, home) {
		t.Fatalf("plan %+v, %v", p, err)
	}
	// A decoded plan is checked again: a tampered one with the workspace
	// as its home is refused.
	p.Home = ws
	data, err := p.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var pe *driverapi.ProfileError
	if _, err := decodePlan(data); !errors.As(err, &pe) {
		t.Fatalf("decoded plan with home = workspace: %v, want a ProfileError", err)
	}
}
