package core

import "testing"

func TestGrantHostShape(t *testing.T) {
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"api.example.com", true},
		{"*.example.com", true},
		{"localhost", true},
		{"10.0.0.1", true},
		{"2001:db8::1", true},
		{"bücher.example", true},
		{"my_host.internal", true},
		{"", false},
		{"*.com", false},
		{"*", false},
		{"a,b", false},
		{"exa mple.com", false},
		{"example.com/path", false},
		{"user@example.com", false},
		{"example..com", false},
		{"-bad.example", false},
		{"*.*.example.com", false},
		{"ex*ample.com", false},
	} {
		if got := grantHostProblem(tc.host) == ""; got != tc.ok {
			t.Errorf("grantHostProblem(%q) = %q, want ok=%v", tc.host, grantHostProblem(tc.host), tc.ok)
		}
	}
}
