package gitimport

import (
	"os/exec"
	"testing"
)

// TestCheckRefFormat: the Go rules agree with git's own check-ref-format
// (run when git is installed) on names good and bad.
func TestCheckRefFormat(t *testing.T) {
	cases := []struct {
		name string
		ok   bool
	}{
		{"refs/heads/main", true},
		{"refs/heads/feature/x-1", true},
		{"refs/tags/v1.0", true},
		{"refs/heads/a.b", true},
		{"refs/heads/ünï", true},
		{"refs/heads/a@b", true},
		{"refs/heads/a..b", false},
		{"refs/heads/../../x", false},
		{"refs/heads/.hidden", false},
		{"refs/heads/x.lock", false},
		{"refs/heads/x.lock/y", false},
		{"refs/heads/a/", false},
		{"/refs/heads/a", false},
		{"refs//heads/a", false},
		{"refs/heads/a.", false},
		{"refs/heads/a b", false},
		{"refs/heads/a~1", false},
		{"refs/heads/a^", false},
		{"refs/heads/a:b", false},
		{"refs/heads/a?", false},
		{"refs/heads/a*", false},
		{"refs/heads/a[", false},
		{"refs/heads/a\\b", false},
		{"refs/heads/a@{1}", false},
		{"refs/heads/a\x01", false},
		{"refs/heads/a\x7f", false},
		{"refs/heads/a\nb", false},
		{"main", false},
		{"@", false},
		{"", false},
	}
	_, gitErr := exec.LookPath("git")
	for _, c := range cases {
		err := CheckRefFormat(c.name)
		if (err == nil) != c.ok {
			t.Errorf("CheckRefFormat(%q) = %v, want ok=%v", c.name, err, c.ok)
		}
		if gitErr == nil && c.name != "" {
			gitOK := exec.Command("git", "check-ref-format", c.name).Run() == nil
			if gitOK != c.ok {
				t.Errorf("git check-ref-format %q ok=%v, the table says %v", c.name, gitOK, c.ok)
			}
		}
	}
}
