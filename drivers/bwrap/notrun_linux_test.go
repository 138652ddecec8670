//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// notRunCase is a program that cannot be run, and what the error says.
type notRunCase struct {
	name, program, says string
}

// notRunPrograms makes in ws the programs of the not-run cases: one that
// is not there, one not on PATH, one not executable, a directory, one the
// kernel cannot run, a script whose interpreter is missing.
func notRunPrograms(t *testing.T, ws string) []notRunCase {
	t.Helper()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(ws, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return []notRunCase{
		{"missing", "/nonexistent/prog", "does not exist in the sandbox"},
		{"not on PATH", "aleph-no-such-program", "not found in the command's PATH (/usr/bin:/bin)"},
		{"not executable", write("plain.txt", "echo never\n", 0o644), "permission denied"},
		{"a directory", mkdir(t, ws, "adir"), "is a directory"},
		{"exec format", write("junk", "\x7fnot a program\n", 0o755), "exec format error"},
		{"missing interpreter", write("orphan", "#!/nonexistent/sh\necho never\n", 0o755), "interpreter"},
	}
}

// checkNotRun runs each not-run case through d, with and without
// subprocesses (which start the program on different paths: forked
// straight by the supervisor, or by a child that confines itself first),
// through RunStream with a terminal when tty, and in the session sandbox
// named session (every run of one spawn setting in one session, which
// must still be live after each refusal) when it is not empty: each must end the run
// with an InvalidSpecError for the program saying why, no exit status and
// nothing on the command's output. The control is a script in the same
// place that runs.
func checkNotRun(t *testing.T, d *Driver, tty bool, session string) {
	ws := newWorkspace(t)
	good := filepath.Join(ws, "good")
	if err := os.WriteFile(good, []byte("#!/bin/sh\necho ran \"$@\"\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, spawn := range []bool{true, false} {
		prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws,
			Capabilities: driverapi.Capabilities{SpawnSubprocess: spawn}})
		if err != nil {
			t.Fatal(err)
		}
		run := func(program string) (driverapi.Exit, string, error) {
			var out lockedBuf
			spec := driverapi.RunSpec{Program: program, Args: []string{"x"}, Env: pathEnv(), Cwd: ws, Profile: prof,
				Timeout: 20 * time.Second, MaxOutputBytes: 1 << 16}
			if session != "" {
				spec.SessionID = fmt.Sprintf("%s-%v", session, spawn)
				setSessionSandbox(&spec)
			}
			if tty {
				spec.Tty = &driverapi.WindowSize{Rows: 24, Cols: 80}
				exit, err := d.RunStream(context.Background(), spec, driverapi.StreamInput{}, driverapi.Streams{Stdout: &out, Stderr: &out})
				return exit, out.String(), err
			}
			exit, err := d.Run(context.Background(), spec, driverapi.Streams{Stdout: &out, Stderr: &out})
			return exit, out.String(), err
		}
		control := func(when string) {
			t.Helper()
			exit, out, err := run(good)
			if err != nil || exit.ExitCode != 3 || strings.TrimSpace(out) != "ran x" {
				t.Fatalf("spawn %v: control %s: err %v exit %+v output %q", spawn, when, err, exit, out)
			}
			if session != "" && exit.Details[driverapi.ExitDetailSessionSandbox] == "" {
				t.Fatalf("spawn %v: control %s: not run in a session sandbox: %v", spawn, when, exit.Details)
			}
		}
		control("first")
		for _, c := range notRunPrograms(t, ws) {
			exit, out, err := run(c.program)
			var ise *driverapi.InvalidSpecError
			if !errors.As(err, &ise) || ise.Field != "program" || !strings.Contains(ise.Reason, c.says) || !strings.Contains(ise.Reason, c.program) {
				t.Errorf("spawn %v: %s: err %v, want an InvalidSpecError for the program saying %q", spawn, c.name, err, c.says)
				continue
			}
			if exit.ExitCode != 0 || exit.Duration != 0 || out != "" {
				t.Errorf("spawn %v: %s: exit %+v, output %q beside the error", spawn, c.name, exit, out)
			}
		}
		// The session sandbox outlived every refusal.
		control("after the refusals")
	}
}

// TestProgramNotRun: a program that cannot be run is the run's typed
// error (Field program, the errno's meaning), never exit status 125 with
// sandbox-init's line on the command's stderr: in a sandbox built for the
// command, a prepared one (the waiting child), and with a terminal (the
// plain sandbox-init child of a no-spawn command).
func TestProgramNotRun(t *testing.T) {
	for _, mode := range []preparedMode{preparedOff, preparedAlways} {
		t.Run(string(mode), func(t *testing.T) {
			if mode == preparedAlways {
				needPreparable(t)
			}
			checkNotRun(t, testDriver(t, preparedOpts(mode)), false, "")
		})
	}
	t.Run("tty", func(t *testing.T) { checkNotRun(t, testDriver(t, options{}), true, "") })
}

// TestSessionProgramNotRun is TestProgramNotRun in a session sandbox: the
// program refused by the lookup or by exec is the same typed error (the
// supervisor's record, not the session's end, however quickly the
// command's reaper goes after it), and the session lives on.
func TestSessionProgramNotRun(t *testing.T) {
	d := testDriver(t, options{})
	needSessions(t, d)
	checkNotRun(t, d, false, "notrun")
}

// TestTierProgramNotRun is TestProgramNotRun in the Landlock tier.
func TestTierProgramNotRun(t *testing.T) {
	checkNotRun(t, tierDriver(t, options{}), false, "")
}

// TestAllowHostsProgramNotRun: in the allow_hosts chain (sandbox-init a
// subreaper below sandbox-net, the lifeline passed through) a program
// that cannot be run is the same typed error; one that exists runs.
func TestAllowHostsProgramNotRun(t *testing.T) {
	d, ws, prof := allowHostsProfile(t)
	run := func(program string) (driverapi.Exit, string, error) {
		var out lockedBuf
		exit, err := d.Run(context.Background(), driverapi.RunSpec{Program: program, Args: []string{"-c", "echo ran"}, Env: pathEnv(),
			Cwd: ws, Profile: prof, Timeout: 30 * time.Second, MaxOutputBytes: 1 << 16}, driverapi.Streams{Stdout: &out, Stderr: &out})
		return exit, out.String(), err
	}
	if exit, out, err := run("/bin/sh"); err != nil || exit.ExitCode != 0 || out != "ran\n" {
		t.Fatalf("control: err %v exit %+v output %q", err, exit, out)
	}
	for _, c := range notRunPrograms(t, ws) {
		_, out, err := run(c.program)
		var ise *driverapi.InvalidSpecError
		if !errors.As(err, &ise) || ise.Field != "program" || !strings.Contains(ise.Reason, c.says) || out != "" {
			t.Errorf("%s: err %v output %q, want an InvalidSpecError for the program saying %q", c.name, err, out, c.says)
		}
	}
}
