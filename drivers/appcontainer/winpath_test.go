package appcontainer

import (
	"strings"
	"testing"
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
