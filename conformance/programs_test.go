package conformance

import (
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
)

func noEnv(string) string { return "" }

func TestProgramsPerOS(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "freebsd"} {
		p := programsFor(goos, noEnv)
		if !p.posix() || p.sh != "/bin/sh" || p.perl != "/usr/bin/perl" || p.probeName != probe.Magic {
			t.Errorf("%s: %+v", goos, p)
		}
		if len(p.env) == 0 || p.env[0].Name != "PATH" || strings.Contains(p.env[0].Value, `\`) {
			t.Errorf("%s: env %v", goos, p.env)
		}
	}
	w := programsFor("windows", noEnv)
	if w.posix() || w.sh != "" || w.perl != "" {
		t.Errorf("windows has POSIX programs: %+v", w)
	}
	if !strings.HasSuffix(w.probeName, ".exe") {
		t.Errorf("windows probe %q is not an .exe (CreateProcess runs nothing else directly)", w.probeName)
	}
	if got := envValue(w, "SystemRoot"); got != windowsSystemRoot {
		t.Errorf("SystemRoot default %q", got)
	}
	if got := envValue(programsFor("windows", func(k string) string {
		if k == "SystemRoot" {
			return `D:\Win`
		}
		return ""
	}), "PATH"); got != `D:\Win\System32;D:\Win` {
		t.Errorf("PATH from the host's SystemRoot: %q", got)
	}
	// The unusual workspace name must be creatable on the OS it is for.
	if strings.ContainsAny(w.unusualDir, `"<>:|?*/\`) {
		t.Errorf("windows unusual dir %q holds a character Windows refuses", w.unusualDir)
	}
	if !strings.ContainsAny(programsFor("linux", noEnv).unusualDir, `"'$;`) {
		t.Error("POSIX unusual dir lost its shell characters")
	}
}

func envValue(p programs, name string) string {
	for _, e := range p.env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func TestOSSkip(t *testing.T) {
	tests := []struct {
		os, goos string
		skip     bool
	}{
		{AllOS, "windows", false}, {AllOS, "linux", false},
		{POSIXOnly, "linux", false}, {POSIXOnly, "darwin", false}, {POSIXOnly, "windows", true},
		{LinuxOnly, "linux", false}, {LinuxOnly, "darwin", true}, {LinuxOnly, "windows", true},
		{WindowsOnly, "windows", false}, {WindowsOnly, "linux", true}, {WindowsOnly, "darwin", true},
	}
	for _, tt := range tests {
		why := osSkip(Case{ID: "x/y", OS: tt.os, OSReason: "because"}, tt.goos)
		if (why != "") != tt.skip {
			t.Errorf("OS %q on %s: skip reason %q", tt.os, tt.goos, why)
		}
		if why != "" && (!strings.Contains(why, "because") || !strings.Contains(why, tt.goos)) {
			t.Errorf("reason %q does not say the OS and why", why)
		}
	}
}

// Every case limited to some OSes says why, and only known scopes are used.
func TestCaseOSScopes(t *testing.T) {
	n := map[string]int{}
	for _, c := range Cases() {
		switch c.OS {
		case AllOS:
			if c.OSReason != "" {
				t.Errorf("%s: a reason but no OS limit", c.ID)
			}
		case POSIXOnly, LinuxOnly, WindowsOnly:
			if len(c.OSReason) < 20 {
				t.Errorf("%s: OS %s without a reason", c.ID, c.OS)
			}
		default:
			t.Errorf("%s: unknown OS scope %q", c.ID, c.OS)
		}
		n[c.OS]++
	}
	// On Windows most of the suite must still run.
	if runs := len(Cases()) - n[POSIXOnly] - n[LinuxOnly]; runs < 70 {
		t.Errorf("only %d cases run on Windows", runs)
	}
}

// On a host where a case does not apply it is skipped with the reason,
// before any driver is started (this suite has none to start).
func TestOSSkippedCaseIsReported(t *testing.T) {
	s := newSuite(Config{DriverPath: "/nonexistent/driver"})
	s.progs = programsFor("windows", noEnv)
	defer s.close()
	ran := 0
	for _, c := range Cases() {
		if c.OS != POSIXOnly {
			continue
		}
		ran++
		r := s.runCase(t.Context(), c)
		if r.Status != Skip || !strings.Contains(r.Detail, c.OSReason) {
			t.Errorf("%s on windows: %s %q", c.ID, r.Status, r.Detail)
		}
	}
	if ran == 0 {
		t.Fatal("no POSIX-only case")
	}
	// Positive control: a case for every OS reaches the driver, which
	// does not exist here, and fails.
	if r := s.runCase(t.Context(), Cases()[0]); r.Status != Fail {
		t.Errorf("%s: %s %q", Cases()[0].ID, r.Status, r.Detail)
	}
}

// Every case the lies table names exists.
func TestLiesTableNamesCases(t *testing.T) {
	ids := map[string]bool{}
	for _, c := range Cases() {
		ids[c.ID] = true
	}
	for _, l := range carelessLies() {
		for _, id := range l.cases {
			if !ids[id] {
				t.Errorf("the lies table names %s, which is no case", id)
			}
		}
	}
}
