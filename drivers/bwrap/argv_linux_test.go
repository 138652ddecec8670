//go:build linux

package bwrap

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// oddArgs are arguments a command line must carry byte for byte: empty
// ones, spaces, newlines, bytes that are not UTF-8, shell and flag syntax.
func oddArgs() []string {
	return []string{"", "a b", " lead", "trail ", "line1\nline2", "\n", "\xff\xfe\x80", "tab\there", "--", "-c",
		"$HOME", "*", "=", "A=1", "ünïcödé", "''", `"`, `\`, ""}
}

// manyArgs is n short arguments.
func manyArgs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// argvShell runs /bin/sh -c script with args after it in ws and returns
// what it wrote (a budget of 8 MiB: 100000 arguments echoed back).
func argvShell(t *testing.T, d *Driver, ws string, spawn bool, script string, args []string) drvResult {
	t.Helper()
	ctx := context.Background()
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: driverapi.Capabilities{SpawnSubprocess: spawn}, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb lockedBuf
	exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: append([]string{"-c", script}, args...), Env: pathEnv(),
		Cwd: ws, Profile: prof, Timeout: 60 * time.Second, MaxOutputBytes: 8 << 20}, driverapi.Streams{Stdout: &out, Stderr: &errb})
	return drvResult{exit: exit, stdout: out.String(), stderr: errb.String(), err: err}
}

// checkArgvExact runs commands whose argv holds odd bytes and 100000
// arguments through d and fails unless each sees exactly the argv it was
// given. A command that may spawn reads its own argv as the kernel holds
// it (/proc/PID/cmdline, by a child) where it has a /proc; otherwise it
// prints its arguments with the shell's printf builtin, NUL after each.
func checkArgvExact(t *testing.T, d *Driver, wantPrepared, proc bool) {
	ws := newWorkspace(t)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"odd bytes", oddArgs()},
		{"100000 arguments", append(oddArgs(), manyArgs(100000)...)},
	} {
		for _, spawn := range []bool{true, false} {
			script := `printf '%s\000' "$0" "$@"`
			want := strings.Join(c.args, "\x00") + "\x00"
			if spawn && proc {
				script = `cat /proc/$$/cmdline`
				want = strings.Join(append([]string{"/bin/sh", "-c", script}, c.args...), "\x00") + "\x00"
			}
			r := argvShell(t, d, ws, spawn, script, c.args)
			if r.err != nil || r.exit.ExitCode != 0 {
				t.Fatalf("%s (spawn %v): err %v exit %+v stderr %q", c.name, spawn, r.err, r.exit, r.stderr)
			}
			if r.stdout != want {
				got, wnt := strings.Split(r.stdout, "\x00"), strings.Split(want, "\x00")
				i := 0
				for i < len(got) && i < len(wnt) && got[i] == wnt[i] {
					i++
				}
				t.Fatalf("%s (spawn %v): argv differs at element %d of %d/%d: got %q", c.name, spawn, i, len(got), len(wnt), got[i:min(i+3, len(got))])
			}
			if (r.exit.Details["prepared"] == "1") != wantPrepared {
				t.Fatalf("%s (spawn %v): prepared %q, want %v", c.name, spawn, r.exit.Details["prepared"], wantPrepared)
			}
		}
	}
}

// TestCommandArgvExact: the command's argv travels on the command
// record's descriptor, not on bwrap's command line (which bwrap caps at
// 9000 arguments): 100000 arguments run, and every argument arrives byte
// for byte, empty ones, newlines and bytes that are not UTF-8 included,
// in a sandbox built for the command and a prepared one, whether the
// command may spawn or not (a child forked straight, or the raw fork and
// the waiting child of a no-spawn command).
func TestCommandArgvExact(t *testing.T) {
	for _, mode := range []preparedMode{preparedOff, preparedAlways} {
		t.Run(string(mode), func(t *testing.T) {
			if mode == preparedAlways {
				needPreparable(t)
			}
			checkArgvExact(t, testDriver(t, preparedOpts(mode)), mode == preparedAlways, true)
		})
	}
}

// TestTierCommandArgvExact is TestCommandArgvExact in the Landlock tier,
// where the driver starts sandbox-init itself (and the command has no
// /proc to read).
func TestTierCommandArgvExact(t *testing.T) {
	checkArgvExact(t, tierDriver(t, options{}), false, false)
}

// TestBwrapArgvSmall: neither bwrap's nor sandbox-init's command line
// holds an argument of the command's, however many it has: only the
// command's own does. (The two are found by the workspace, which bwrap's
// mounts and sandbox-init's spec name.)
func TestBwrapArgvSmall(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	marker := "aleph-argv-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws,
		Capabilities: driverapi.Capabilities{SpawnSubprocess: true}})
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuf
	done := make(chan error, 1)
	go func() {
		_, err := d.Run(context.Background(), driverapi.RunSpec{Program: "/bin/sh", Args: append([]string{"-c", "echo ready; sleep 60", "sh"}, append(manyArgs(20000), marker)...),
			Env: pathEnv(), Cwd: ws, Profile: prof, Timeout: 60 * time.Second, MaxOutputBytes: 1 << 10, CommandID: t.Name()},
			driverapi.Streams{Stdout: &out})
		done <- err
	}()
	waitFor(t, &out, "ready")
	var launchers, commands []string
	for pid, argv := range hostCmdlines() {
		cl := strings.Join(argv, " ")
		switch {
		case strings.Contains(cl, marker):
			commands = append(commands, pid)
			if argv[0] != "/bin/sh" {
				t.Errorf("process %s (%s) carries the command's arguments", pid, argv[0])
			}
		case strings.Contains(cl, ws) && (filepath.Base(argv[0]) == "bwrap" || argv[0] == initPath):
			launchers = append(launchers, pid)
			if len(argv) > 200 {
				t.Errorf("process %s (%s) has %d arguments", pid, argv[0], len(argv))
			}
		}
	}
	if err := d.signalCommand(t.Name(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	// Controls: the command was found by its argv, bwrap and sandbox-init
	// by the workspace.
	if len(commands) == 0 || len(launchers) < 2 {
		t.Fatalf("command processes %v, bwrap and sandbox-init %v", commands, launchers)
	}
}

// checkExecSizeRefused runs, through d, the largest command the driver's
// exec-size check lets through (it runs, and sees all its arguments: the
// positive control), then the same one byte larger in its arguments, in
// its environment, and with one argument past MAX_ARG_STRLEN: each is an
// InvalidSpecError naming args or env and the sizes, and nothing of it
// runs. launches, when set, counts the sandboxes started so far: none is
// for a refused command.
func checkExecSizeRefused(t *testing.T, d *Driver, launches func() int) {
	t.Helper()
	ctx := context.Background()
	ws := newWorkspace(t)
	lim, err := execLimits()
	if err != nil {
		t.Fatal(err)
	}
	allowed := lim.Total - execHeadroom
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	run := func(spec driverapi.RunSpec) (driverapi.Exit, string, error) {
		spec.Cwd, spec.Profile, spec.Timeout, spec.MaxOutputBytes = ws, prof, 60*time.Second, 1<<20
		var out lockedBuf
		exit, err := d.Run(ctx, spec, driverapi.Streams{Stdout: &out, Stderr: &out})
		return exit, out.String(), err
	}
	env := pathEnv()
	script := "echo $# > ran; echo $#"
	fits := sizedSpec(t, allowed, env, "-c", script, "sh")
	started := 0
	if launches != nil {
		started = launches()
	}
	exit, out, err := run(fits)
	if launches != nil && launches() == started {
		t.Fatal("control: no sandbox was counted for the command that ran")
	}
	if want := strconv.Itoa(len(fits.Args)-3) + "\n"; err != nil || exit.ExitCode != 0 || out != want {
		t.Fatalf("control: the largest command allowed (%d bytes of %d): err %v exit %+v output %q, want %q", allowed, lim.Total, err, exit, out, want)
	}
	if err := os.Remove(filepath.Join(ws, "ran")); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("e", 100<<10)
	for _, c := range []struct {
		name, field, says string
		spec              driverapi.RunSpec
	}{
		{"arguments one byte over", "args", strconv.FormatUint(allowed, 10) + " bytes", sizedSpec(t, allowed+1, env, "-c", script, "sh")},
		{"environment one byte over", "env", "environment", func() driverapi.RunSpec {
			s := fits
			s.Args = []string{"-c", script}
			for i := 0; ; i++ {
				s.Env = append(s.Env, driverapi.EnvVar{Name: "E" + strconv.Itoa(i), Value: big})
				if checkExecSize(s, lim) != nil {
					return s
				}
			}
		}()},
		{"argument past MAX_ARG_STRLEN", "args", "MAX_ARG_STRLEN", driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", script, strings.Repeat("a", int(lim.String))}, Env: env}},
	} {
		before := 0
		if launches != nil {
			before = launches()
		}
		exit, out, err := run(c.spec)
		var ise *driverapi.InvalidSpecError
		if !errors.As(err, &ise) || ise.Field != c.field || !strings.Contains(ise.Reason, c.says) {
			t.Errorf("%s: err %v exit %+v output %q, want InvalidSpecError %s saying %q", c.name, err, exit, out, c.field, c.says)
		}
		if _, err := os.Stat(filepath.Join(ws, "ran")); err == nil {
			t.Errorf("%s: the command ran", c.name)
		}
		if launches != nil && launches() != before {
			t.Errorf("%s: a sandbox was started for a refused command", c.name)
		}
	}
}

// countingBwrap is a bwrap that counts its runs in a file before it execs
// the real one, and the count.
func countingBwrap(t *testing.T) (string, func() int) {
	t.Helper()
	real, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("no bwrap")
	}
	dir := t.TempDir()
	_ = os.Chmod(dir, 0o755)
	log, fake := filepath.Join(dir, "runs"), filepath.Join(dir, "bwrap")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho >> "+log+"\nexec "+real+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return fake, func() int {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "\n")
	}
}

// TestExecSizeRefused: a command the kernel would not take at its exec
// is refused by the driver before any sandbox is built for it, with the
// field to change; the largest it lets through runs.
func TestExecSizeRefused(t *testing.T) {
	fake, launches := countingBwrap(t)
	t.Run("built for the command", func(t *testing.T) {
		checkExecSizeRefused(t, testDriver(t, options{BwrapPath: fake, Prepared: preparedOff}), launches)
	})
	t.Run("prepared", func(t *testing.T) {
		needPreparable(t)
		checkExecSizeRefused(t, testDriver(t, options{Prepared: preparedAlways}), nil)
	})
}

// TestTierExecSizeRefused is TestExecSizeRefused in the Landlock tier.
func TestTierExecSizeRefused(t *testing.T) {
	checkExecSizeRefused(t, tierDriver(t, options{}), nil)
}
