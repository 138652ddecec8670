package winnames

import "testing"

// TestRules: what Windows reads as something else is refused, with the
// names read as their text beside them (the positive controls).
func TestRules(t *testing.T) {
	for _, tc := range []struct {
		name           string
		problem, short bool
	}{
		// Read as their text.
		{"file.txt", false, false},
		{".git", false, false},
		{"console", false, false},
		{"COM10", false, false},
		{"LPT", false, false},
		{"a~b", false, false},
		{"longname~1.txt", false, false}, // base over 8: not an 8.3 alias
		{"x~1.text", false, false},       // extension over 3
		{"~1", false, false},             // nothing before the ~
		{"über", false, false},
		// Stripped by Win32: another entry.
		{".git.", true, false},
		{".git ", true, false},
		{"a...", true, false},
		// Streams and stream types.
		{".git::$INDEX_ALLOCATION", true, false},
		{"f:stream", true, false},
		// Not valid in a name.
		{"a*b", true, false},
		{"a?b", true, false},
		{`a"b`, true, false},
		{"a<b", true, false},
		{"a|b", true, false},
		{"a\x01b", true, false},
		// Devices, in any case and with any extension.
		{"CON", true, false},
		{"CON.d", true, false},
		{"nul", true, false},
		{"nul.txt", true, false},
		{"Aux ", true, false},
		{"COM1", true, false},
		{"lpt9.log", true, false},
		{"COM¹", true, false},
		{"CONIN$", true, false},
		// 8.3 shapes.
		{"GIT~1", false, true},
		{"PROGRA~1", false, true},
		{"SCRIPT~2.BAT", false, true},
		{"a~12", false, true},
	} {
		if got := Problem(tc.name) != ""; got != tc.problem {
			t.Errorf("Problem(%q) = %q, want a problem: %v", tc.name, Problem(tc.name), tc.problem)
		}
		if got := IsShortName(tc.name); got != tc.short {
			t.Errorf("IsShortName(%q) = %v, want %v", tc.name, got, tc.short)
		}
	}
}
