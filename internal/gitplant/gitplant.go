// Package gitplant is a test helper for the planted-repository tests (core
// and the CLI end to end): it writes a git directory whose config runs a
// program, and runs the host's real git the ways that config hooks.
package gitplant

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Script is a /bin/sh script that makes dir a git directory whose config
// runs a program three ways (core.fsmonitor, core.pager, a "!" alias),
// each creating marker-<way>. bare sets core.bare.
func Script(dir string, bare bool, marker string) string {
	return fmt.Sprintf(`mkdir -p %[1]s/objects %[1]s/refs/heads && echo 'ref: refs/heads/main' > %[1]s/HEAD &&
printf '[core]\n\trepositoryformatversion = 0\n\tbare = %[2]t\n\tfsmonitor = "touch %[3]s-fsmonitor; true"\n\tpager = "touch %[3]s-pager; cat"\n[alias]\n\tpwn = "!touch %[3]s-alias"\n' > %[1]s/config`,
		dir, bare, marker)
}

// Fires runs the host's git in dir the three ways Script's config hooks
// (status for fsmonitor, a paginated log through a terminal for the pager
// when script(1) is installed, the alias) with no system or user config,
// and returns which markers it created (removing them).
func Fires(t testing.TB, dir, marker string) []string {
	t.Helper()
	run := func(args ...string) {
		c := exec.Command(args[0], args[1:]...)
		c.Dir = dir
		c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+t.TempDir())
		_, _ = c.CombinedOutput()
	}
	run("git", "status")
	run("git", "pwn")
	if _, err := exec.LookPath("script"); err == nil {
		run("script", "-qec", "git -p log", "/dev/null")
	}
	var got []string
	for _, way := range []string{"fsmonitor", "pager", "alias"} {
		if _, err := os.Stat(marker + "-" + way); err == nil {
			got = append(got, way)
			_ = os.Remove(marker + "-" + way)
		}
	}
	return got
}
