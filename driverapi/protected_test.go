package driverapi

import (
	"slices"
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
