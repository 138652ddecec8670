package appcontainer

import (
	"errors"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func TestWinPaths(t *testing.T) {
	clean := map[string]string{
		`C:\a\b\..\c\.\d\`:   `C:\a\c\d`,
		`c:/x/y`:             `C:\x\y`,
		`C:\`:                `C:\`,
		`C:\..\..`:           `C:\`,
		`\\srv\share\a\..\b`: `\\srv\share\b`,
		`\\srv\share`:        `\\srv\share\`,
		`relative\p`:         ``,
		`C:relative`:         ``,
		`\rooted-no-drive`:   ``,
		`\\?\C:\verbatim`:    ``,
		`\\.\pipe\x`:         ``,
		`\\onlyserver`:       ``,
	}
	for in, want := range clean {
		if got := WinClean(in); got != want {
			t.Errorf("WinClean(%q) = %q, want %q", in, got, want)
		}
	}
	within := []struct {
		p, root string
		want    bool
	}{
		{`C:\ws\a`, `C:\ws`, true},
		{`c:\WS\A`, `C:\ws`, true},
		{`C:\ws`, `C:\ws\`, true},
		{`C:\wsx`, `C:\ws`, false},
		{`C:\ws\..\other`, `C:\ws`, false},
		{`D:\ws`, `C:\ws`, false},
		{`C:\anything`, `C:\`, true},
		{`rel`, `C:\`, false},
	}
	for _, c := range within {
		if got := WinWithin(c.p, c.root); got != c.want {
			t.Errorf("WinWithin(%q, %q) = %v", c.p, c.root, got)
		}
	}
	if got := strings.Join(winComponents(`C:\a\b\c`), "|"); got != `C:\a|C:\a\b|C:\a\b\c` {
		t.Errorf("components %q", got)
	}
	if !winIsRoot(`C:\`) || !winIsRoot(`\\s\h`) || winIsRoot(`C:\a`) {
		t.Error("winIsRoot")
	}
}

// longFS is a MapFS that also expands 8.3 short names, as GetLongPathNameW
// does on Windows: long maps a lower-case short path to its long form.
type longFS struct {
	MapFS
	long map[string]string
}

func (l longFS) LongPath(p string) (string, error) {
	for short, long := range l.long {
		if WinWithin(p, short) {
			return long + p[len(short):], nil
		}
	}
	return p, nil
}

// TestCanonicalPathRefusesWhatWindowsRewrites: every spelling that Win32
// opens as another name is refused, so no check compares one string while
// Windows opens another.
func TestCanonicalPathRefusesWhatWindowsRewrites(t *testing.T) {
	bad := []string{
		wsPath + `\.git.`,                   // trailing dot: .git
		wsPath + `\.git `,                   // trailing space: .git
		wsPath + `\.git::$INDEX_ALLOCATION`, // stream type: the directory .git
		wsPath + `\.git:hooks`,              // alternate data stream
		wsPath + `\GIT~1`,                   // 8.3 alias, unresolved
		wsPath + `\.GIT~1\hooks`,            // same, deeper
		wsPath + `\sub\..\.git.\hooks`,      // dot segment then trailing dot
		wsPath + `\NUL`,                     // device
		wsPath + `\con.txt`,                 // device, whatever the extension
		wsPath + `\COM1`,                    // device
		wsPath + `\a*b`,                     // wildcard
		wsPath + "\\a\x01b",                 // control character
		`C:\tools\x.bat.`,                   // runs x.bat
		`C:\tools\x.cmd `,                   // runs x.cmd
		`C:\tools\x.bat::$DATA`,             // runs x.bat
		`C:\PROGRA~1\tool.exe`,              // alias
	}
	for _, p := range bad {
		_, err := CanonicalPath(MapFS{}, "fs_write[0]", p)
		var ise *driverapi.InvalidSpecError
		if !errors.As(err, &ise) {
			t.Errorf("CanonicalPath(%q) = %v, want a refusal", p, err)
		}
	}
	// Positive controls: ordinary names, including dots and tildes that
	// are not an alias's shape, pass and come out cleaned.
	good := map[string]string{
		wsPath + `\src\..\out`:     wsPath + `\out`,
		`c:/tools/x.bat.d/y`:       `C:\tools\x.bat.d\y`,
		wsPath + `\.gitignore`:     wsPath + `\.gitignore`,
		wsPath + `\a~b`:            wsPath + `\a~b`,
		wsPath + `\longname~1.go2`: wsPath + `\longname~1.go2`,
		wsPath + `\com10`:          wsPath + `\com10`,
		wsPath + `\console`:        wsPath + `\console`,
	}
	for in, want := range good {
		got, err := CanonicalPath(MapFS{}, "f", in)
		if err != nil || got != want {
			t.Errorf("CanonicalPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestShortNamesResolveOrAreRefused: with a file system that can expand
// short names, GIT~1 becomes .git and the plan treats it as the protected
// directory it is; without one, it is refused.
func TestShortNamesResolveOrAreRefused(t *testing.T) {
	fsys := longFS{MapFS: MapFS{wsPath: {IsDir: true}}, long: map[string]string{
		strings.ToLower(wsPath + `\GIT~1`): wsPath + `\.git`,
	}}
	got, err := CanonicalPath(fsys, "f", wsPath+`\GIT~1\hooks`)
	if err != nil || got != wsPath+`\.git\hooks` {
		t.Fatalf("resolved %q, %v", got, err)
	}
	// A grant given as GIT~1 is on the protected directory: dropped by
	// PlanSetup like a grant spelled .git.
	p, err := BuildPlan(t.Context(), winReq(driverapi.Capabilities{FSWrite: []string{wsPath + `\GIT~1`}}), Options{}, fsys, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Write) != 1 || p.Write[0] != wsPath+`\.git` {
		t.Fatalf("write grant %q", p.Write)
	}
	s := PlanSetup(TierAppContainer, p, "", func(string) bool { return true })
	for _, a := range s.ACEs {
		if !a.Deny && strings.EqualFold(a.Path, wsPath+`\.git`) {
			t.Errorf("grant ACE on the protected directory: %+v", a)
		}
	}
	// A short-name-shaped component that does not resolve stays refused.
	if _, err := CanonicalPath(fsys, "f", wsPath+`\OTHER~2`); err == nil {
		t.Error("unresolved alias accepted")
	}
	// BuildPlan refuses the forms Windows rewrites in every path field.
	for _, r := range []driverapi.ProfileRequest{
		{Workspace: wsPath + `.`, Cwd: ""},
		{Workspace: wsPath, Cwd: wsPath + `\sub.`},
		{Workspace: wsPath, Capabilities: driverapi.Capabilities{FSRead: []string{`D:\data::$DATA`}}},
		{Workspace: wsPath, Capabilities: driverapi.Capabilities{FSWrite: []string{wsPath + `\.git `}}},
	} {
		var ise *driverapi.InvalidSpecError
		if _, err := BuildPlan(t.Context(), r, Options{}, MapFS{}, nil); !errors.As(err, &ise) {
			t.Errorf("BuildPlan(%+v) = %v", r, err)
		}
	}
}

func TestBatchNamesAsWindowsReadsThem(t *testing.T) {
	files := map[string]bool{`c:\bin\x.bat.`: true, `c:\bin\y.cmd `: true, `c:\bin\z.exe`: true}
	isFile := func(p string) bool { return files[strings.ToLower(p)] }
	for _, prog := range []string{`C:\bin\x.bat.`, `C:\bin\y.cmd `, `C:\bin\x.bat::$DATA`} {
		var ise *driverapi.InvalidSpecError
		if got, err := ResolveProgram(prog, `C:\ws`, nil, isFile); !errors.As(err, &ise) {
			t.Errorf("ResolveProgram(%q) = %q, %v; want a refusal", prog, got, err)
		}
	}
	// PATHEXT cannot smuggle a batch extension in with a trailing dot.
	env := []driverapi.EnvVar{{Name: "PATH", Value: `C:\bin`}, {Name: "PATHEXT", Value: ".BAT.;.CMD "}}
	if got, err := ResolveProgram("x", `C:\ws`, env, isFile); err == nil {
		t.Errorf("PATHEXT .BAT. found %q", got)
	}
	// Positive control.
	if got, err := ResolveProgram(`C:\bin\z.exe`, `C:\ws`, nil, isFile); err != nil || got != `C:\bin\z.exe` {
		t.Errorf("plain exe: %q %v", got, err)
	}
}
