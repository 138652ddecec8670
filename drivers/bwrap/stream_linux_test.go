//go:build linux

package bwrap

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// streamRun runs script under sh through RunStream with stdin from in.
func streamRun(t *testing.T, ctx context.Context, d *Driver, ws string, caps driverapi.Capabilities, tty *driverapi.WindowSize,
	in driverapi.StreamInput, out io.Writer, script string) (driverapi.Exit, error) {
	t.Helper()
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	return d.RunStream(ctx, driverapi.RunSpec{
		Program: "/bin/sh", Args: []string{"-c", script}, Env: pathEnv(), Cwd: ws, Profile: prof,
		Timeout: 20 * time.Second, MaxOutputBytes: 1 << 20, CommandID: t.Name(), Tty: tty,
	}, in, driverapi.Streams{Stdout: out, Stderr: out})
}

// waitOutput waits until buf holds want, or fails after the deadline.
func waitOutput(t *testing.T, buf *lockedBuf, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(buf.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("never saw %q; output so far %q", want, buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunStreamStdinAsItArrives(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	pr, pw := io.Pipe()
	var out lockedBuf
	done := make(chan error, 1)
	var exit driverapi.Exit
	go func() {
		var err error
		// Each line is answered before the next is written: stdin is
		// not gathered up front.
		exit, err = streamRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true}, nil,
			driverapi.StreamInput{Stdin: pr}, &out, `while read l; do echo "got:$l"; done; echo eof`)
		done <- err
	}()
	if _, err := pw.Write([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, &out, "got:one\n")
	if strings.Contains(out.String(), "eof") {
		t.Fatal("EOF before stdin was closed")
	}
	if _, err := pw.Write([]byte("two\n")); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, &out, "got:two\n")
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 0 || out.String() != "got:one\ngot:two\neof\n" {
		t.Fatalf("exit %+v output %q", exit, out.String())
	}
}

func TestRunStreamPty(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	resize := make(chan driverapi.WindowSize, 1)
	var out lockedBuf
	done := make(chan error, 1)
	var exit driverapi.Exit
	script := `test -t 0 && test -t 1 && test -t 2 && echo tty-yes; stty size; tty;
echo ready; while read l; do echo "line:$l"; stty size; done; exit 7`
	go func() {
		var err error
		exit, err = streamRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true},
			&driverapi.WindowSize{Rows: 30, Cols: 100}, driverapi.StreamInput{Stdin: pr, Resize: resize}, &out, script)
		done <- err
	}()
	waitOutput(t, &out, "ready")
	resize <- driverapi.WindowSize{Rows: 41, Cols: 132}
	// The size travels on the lifeline, the line on stdin: ask until the
	// new size shows. The echo of each line comes from the terminal itself.
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(out.String(), "41 132") {
		if time.Now().After(deadline) {
			t.Fatalf("the resize never showed: %q", out.String())
		}
		if _, err := pw.Write([]byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	o := strings.ReplaceAll(out.String(), "\r\n", "\n")
	for _, want := range []string{"tty-yes\n30 100\n/dev/pts/0\nready\n", "hello\n", "line:hello\n", "41 132\n"} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q: %q", want, o)
		}
	}
	// EOF on the stream ended the loop: the script's own status.
	if exit.ExitCode != 7 {
		t.Fatalf("exit %+v", exit)
	}
}

// A pty run without spawn: the no-spawn child of the supervisor inherits
// the terminal. EOF on the stream is EOF on the terminal.
func TestRunStreamPtyNoSpawnEOF(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	var out lockedBuf
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	exit, err := d.RunStream(context.Background(), driverapi.RunSpec{
		Program: "/bin/cat", Env: pathEnv(), Cwd: ws, Profile: prof, Tty: &driverapi.WindowSize{Rows: 24, Cols: 80},
		Timeout: 20 * time.Second, MaxOutputBytes: 1 << 20, CommandID: t.Name(),
	}, driverapi.StreamInput{Stdin: strings.NewReader("abc\npartial")}, driverapi.Streams{Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatal(err)
	}
	// Each line twice: the terminal's echo and cat's copy; cat ending
	// at all is the EOF (the partial line needs the EOF character twice).
	if o := out.String(); exit.ExitCode != 0 || strings.Count(o, "abc\r\n") != 2 || strings.Count(o, "partial") != 2 {
		t.Fatalf("exit %+v output %q", exit, out.String())
	}
}

func TestRunStreamPtyTIOCSTIDenied(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	var out lockedBuf
	// perl's ioctl: TIOCSTI (0x5412) must fail with EPERM, TIOCGWINSZ
	// (0x5413) on the same terminal must work (positive control), and
	// the command really ran (the marker).
	script := `echo ran; perl -e '
my $c = "x"; my $r = ioctl(STDIN, 0x5412, $c); print "sti:", (defined $r ? "ok" : "err=".($!+0)), "\n";
my $ws = "\0" x 8; $r = ioctl(STDIN, 0x5413, $ws); my ($rows, $cols) = unpack("S2", $ws); print "gwinsz:", (defined $r ? "$rows,$cols" : "err"), "\n";'`
	exit, err := streamRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true},
		&driverapi.WindowSize{Rows: 12, Cols: 34}, driverapi.StreamInput{}, &out, script)
	if err != nil {
		t.Fatal(err)
	}
	o := out.String()
	if exit.ExitCode != 0 || !strings.Contains(o, "ran") || !strings.Contains(o, "sti:err=1\r\n") || !strings.Contains(o, "gwinsz:12,34") {
		t.Fatalf("exit %+v output %q", exit, o)
	}
}

func TestRunRefusesTty(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.Run(context.Background(), driverapi.RunSpec{Program: "/bin/true", Cwd: ws, Profile: prof, Timeout: time.Second,
		Tty: &driverapi.WindowSize{Rows: 1, Cols: 1}}, driverapi.Streams{})
	var ie *driverapi.InvalidSpecError
	if !errors.As(err, &ie) || ie.Field != "tty" {
		t.Fatalf("Run with Tty: %v", err)
	}
}

func TestRunStreamSignal(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	var out lockedBuf
	done := make(chan error, 1)
	var exit driverapi.Exit
	go func() {
		var err error
		exit, err = streamRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true}, nil,
			driverapi.StreamInput{Stdin: pr}, &out, `trap 'echo got-term; exit 9' TERM; echo ready; while :; do sleep 0.05; done`)
		done <- err
	}()
	waitOutput(t, &out, "ready")
	if err := d.Signal(context.Background(), t.Name(), driverapi.SignalTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 9 || !strings.Contains(out.String(), "got-term") {
		t.Fatalf("exit %+v output %q", exit, out.String())
	}
}
