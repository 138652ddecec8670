package driverapi

import (
	"slices"
	"strings"
	"testing"
)

// The protected list crosses the wire unchanged, and an absent one stays
// empty (the driver then applies DefaultProtectedEntries).
func TestProfileRequestProtectedRoundTrip(t *testing.T) {
	for _, want := range [][]string{nil, {".git", ".custom"}} {
		got, err := profileReqFromPB(profileReqToPB(ProfileRequest{Workspace: "/ws", Cwd: "/ws", Protected: want}))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Protected, want) {
			t.Errorf("protected %q after the round trip, want %q", got.Protected, want)
		}
	}
	d := DefaultProtectedEntries()
	for _, old := range ProtectedDirs() {
		if !slices.Contains(d, old) {
			t.Errorf("the default set lost %s", old)
		}
	}
}

func TestProtectedNameProblem(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{".git", true}, {"opencode.json", true}, {strings.Repeat("a", 255), true},
		{"", false}, {".", false}, {"..", false}, {"a/b", false}, {`a\b`, false}, {"a\x00", false},
		{strings.Repeat("a", 256), false},
	} {
		if got := ProtectedNameProblem(tc.name); (got == "") != tc.ok {
			t.Errorf("ProtectedNameProblem(%q) = %q, want ok=%v", tc.name, got, tc.ok)
		}
	}
	// Every default is a valid name.
	for _, n := range DefaultProtectedEntries() {
		if why := ProtectedNameProblem(n); why != "" {
			t.Errorf("default %q: %s", n, why)
		}
	}
}
