package seatbelt

import (
	"fmt"
	"strings"
	"testing"
)

// topLevelForms reads SBPL as the S-expression reader does (strings with
// backslash escapes, #"..." regex literals, ; comments) and returns the
// head symbol of every top-level form, or an error for unbalanced input.
func topLevelForms(src string) ([]string, error) {
	var heads []string
	depth := 0
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == ';':
			for i < len(src) && src[i] != '\n' {
				i++
			}
		case c == '"' || (c == '#' && i+1 < len(src) && src[i+1] == '"'):
			if c == '#' {
				i++
			}
			i++
			for i < len(src) && src[i] != '"' {
				if src[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(src) {
				return nil, fmt.Errorf("unterminated string")
			}
		case c == '(':
			if depth == 0 {
				j := i + 1
				for j < len(src) && !strings.ContainsRune(" \n\t()", rune(src[j])) {
					j++
				}
				heads = append(heads, src[i+1:j])
			}
			depth++
		case c == ')':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("unbalanced ) at byte %d", i)
			}
		case depth == 0 && !strings.ContainsRune(" \n\t", rune(c)):
			return nil, fmt.Errorf("stray %q at top level, byte %d", c, i)
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%d unclosed (", depth)
	}
	return heads, nil
}

// TestProfilesAreWellFormed checks every golden profile parses as
// S-expressions whose top-level forms are only version, deny and allow,
// with (version 1) and (deny default) first. sandbox-exec itself is only
// available on macOS; this catches the syntax slips it would reject.
func TestProfilesAreWellFormed(t *testing.T) {
	for name, r := range goldenCases() {
		p := mustPlan(t, r)
		heads, err := topLevelForms(p.SBPL)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(heads) < 3 || heads[0] != "version" || heads[1] != "deny" {
			t.Errorf("%s: starts with %v", name, heads[:min(3, len(heads))])
		}
		for _, h := range heads {
			if h != "version" && h != "deny" && h != "allow" {
				t.Errorf("%s: unexpected top-level form %q", name, h)
			}
		}
		if strings.Count(p.SBPL, "(deny default)") != 1 || strings.Contains(p.SBPL, "(allow default)") {
			t.Errorf("%s: default rule wrong", name)
		}
	}
	// The reader itself rejects what it should (positive controls).
	for _, bad := range []string{"(allow", "(allow))", `(allow "x)`, "(version 1) x"} {
		if _, err := topLevelForms(bad); err == nil {
			t.Errorf("reader accepted %q", bad)
		}
	}
}
