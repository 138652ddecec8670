package main

import (
	"strings"
	"testing"
)

func TestVersionAndHelpSubcommand(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		r := cli(t, "", false, args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "aleph-sandbox "+cliVersion+" (driver protocol 1.7)") {
			t.Errorf("%v: exit %d, %q", args, r.code, r.stdout)
		}
	}
	r := cli(t, "", false, "help", "exec")
	if r.code != 0 || !strings.Contains(r.stdout, "usage: aleph-sandbox exec") || !strings.Contains(r.stdout, "-spawn") {
		t.Fatalf("help exec: exit %d, stdout %q", r.code, r.stdout)
	}
	// An unknown topic is the general usage, not a silent success of
	// something else.
	r = cli(t, "", false, "help", "nosuch")
	if r.code != 2 || !strings.Contains(r.stderr, `no command "nosuch"`) || !strings.Contains(r.stderr, "usage: aleph-sandbox COMMAND") {
		t.Fatalf("help nosuch: exit %d, %q", r.code, r.stderr)
	}
}
