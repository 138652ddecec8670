package main

import (
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func TestExecNotes(t *testing.T) {
	drv := cliEnv(t)
	// A denied elevation: one refusal line that names the flags and how
	// to approve.
	r := cli(t, "", false, "exec", "--driver", drv, "--net", "all", "--spawn", "--", "echo", "x")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], "aleph-sandbox: denied") ||
		!strings.Contains(lines[0], "--net all") || !strings.Contains(lines[0], "--spawn") || !strings.Contains(lines[0], "--yes") {
		t.Fatalf("denial: exit %d, stderr %q", r.code, r.stderr)
	}
	// With --yes the same command runs, and no note is printed.
	r = cli(t, "", false, "exec", "--driver", drv, "--net", "all", "--spawn", "--yes", "--", "echo", "x")
	if r.code != 0 || r.stdout != "x\n" || r.stderr != "" {
		t.Fatalf("approved: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// Output past the budget is said, not lost in silence.
	r = cli(t, "", false, "exec", "--driver", drv, "--max-output", "100", "--", "flood", "1000")
	if r.code != 0 || len(r.stdout) != 50 || !strings.Contains(r.stderr, "output truncated") || !strings.Contains(r.stderr, "1000 bytes to stdout") {
		t.Fatalf("truncated: exit %d, %d bytes, stderr %q", r.code, len(r.stdout), r.stderr)
	}
	// --json carries it in its fields instead.
	r = cli(t, "", false, "exec", "--driver", drv, "--json", "--max-output", "100", "--", "flood", "1000")
	if !strings.Contains(r.stdout, `"truncated":true`) || r.stderr != "" {
		t.Fatalf("json: %q / %q", r.stdout, r.stderr)
	}
}

// A fork the driver refused and counted: the hint on stderr in text mode,
// reason_code spawn_refused, the count and the hint in --json; none of it
// with --spawn (the control).
func TestExecSpawnRefusedFromDriver(t *testing.T) {
	drv := cliEnv(t)
	r := cli(t, "", false, "exec", "--driver", drv, "--", "fork")
	if r.code != 1 || !strings.Contains(r.stderr, "subprocesses need --spawn") {
		t.Fatalf("text: exit %d, stderr %q", r.code, r.stderr)
	}
	r = cli(t, "", false, "exec", "--driver", drv, "--json", "--", "fork")
	if !strings.Contains(r.stdout, `"reason_code":"spawn_refused"`) || !strings.Contains(r.stdout, `"spawn_refused":1`) ||
		!strings.Contains(r.stdout, `"hint":"the command could not start a subprocess: subprocesses need --spawn`) || r.stderr != "" {
		t.Fatalf("json: %q / %q", r.stdout, r.stderr)
	}
	r = cli(t, "", false, "exec", "--driver", drv, "--json", "--spawn", "--yes", "--", "fork")
	if !strings.Contains(r.stdout, `"reason_code":"allowed"`) || !strings.Contains(r.stdout, `"spawn_refused":0`) || strings.Contains(r.stdout, `"hint"`) {
		t.Fatalf("control with --spawn: %q / %q", r.stdout, r.stderr)
	}
}

func TestForkDeniedRecognised(t *testing.T) {
	for _, s := range []string{"/bin/sh: 0: Cannot fork\n", "bash: fork: Operation not permitted\n", "python: posix_spawn failed",
		// python's subprocess, node's child_process, go's os/exec, as
		// each printed it in the sandbox without --spawn.
		"  File \"/usr/lib/python3.11/subprocess.py\", line 1901, in _execute_child\n    self.pid = _fork_exec(\n               ^^^^^^^^^^^\nPermissionError: [Errno 1] Operation not permitted\n",
		"Error: spawnSync /bin/true EPERM\n    at Object.spawnSync (node:internal/child_process:1124:20)\n",
		"fork/exec /bin/true: operation not permitted\n"} {
		if !looksLikeForkDenied([]byte(s)) {
			t.Errorf("not recognised: %q", s)
		}
	}
	for _, s := range []string{"ls: cannot access 'x': No such file or directory\n",
		"PermissionError: [Errno 13] Permission denied: '/etc/shadow'\n",
		"Error: EACCES: permission denied, open '/etc/shadow'\n"} {
		if looksLikeForkDenied([]byte(s)) {
			t.Errorf("an ordinary error taken for a refused fork: %q", s)
		}
	}
	if got := elevationFlags(&runFlags{net: "none"}); got != "the command" {
		t.Errorf("no elevation flags: %q", got)
	}
}

func TestViolationsNote(t *testing.T) {
	sys := func(target string, n int64) driverapi.Violation {
		return driverapi.Violation{Kind: "syscall", Operation: "syscall", Target: target, Count: n}
	}
	many := []driverapi.Violation{}
	for _, s := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		many = append(many, sys(s, 2))
	}
	for _, tc := range []struct {
		name    string
		vs      []driverapi.Violation
		dropped int64
		want    string
	}{
		{"nothing refused", nil, 0, ""},
		{"a fork alone is the spawn hint's", []driverapi.Violation{{Kind: "spawn", Operation: "fork", Count: 3}}, 0, ""},
		{"syscalls and a connection", []driverapi.Violation{sys("mount", 1), {Kind: "spawn", Operation: "fork", Count: 1},
			{Kind: "network", Operation: "connect", Target: "10.0.0.1:443", Count: 2}}, 0,
			"the sandbox refused the command: syscall mount, network connect 10.0.0.1:443 (2 times) (--json lists them)"},
		{"bounded, the rest counted", many, 5, "the sandbox refused the command: syscall a (2 times), syscall b (2 times), syscall c (2 times), syscall d (2 times), syscall e (2 times), syscall f (2 times), and 9 more refusals (--json lists them)"},
		{"a target cannot reach the terminal raw", []driverapi.Violation{{Kind: "network", Operation: "connect", Target: "x\x1b[2Jy", Count: 1}}, 0,
			"the sandbox refused the command: network connect x\\x1b[2Jy (--json lists them)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := violationsNote(tc.vs, tc.dropped); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}
