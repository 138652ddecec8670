//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hostPty opens a terminal pair on the host: the test plays the user's
// terminal emulator on the master; the CLI gets the slave.
func hostPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals on this host: %v", err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	sfd, err := unix.Open(fmt.Sprintf("/dev/pts/%d", n), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	master, slave = os.NewFile(uintptr(mfd), "ptmx"), os.NewFile(uintptr(sfd), "pts")
	t.Cleanup(func() { master.Close(); slave.Close() })
	return master, slave
}

type screen struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// watchScreen copies what the terminal's master side shows into a screen
// until the master is closed or the other side hangs up.
func watchScreen(master io.Reader) *screen {
	scr := &screen{}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			if n > 0 {
				_, _ = scr.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	return scr
}

func (s *screen) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *screen) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// waitScreen waits until the text after offset from contains want and
// returns the offset just past it.
// checkShellTerminal drives the sandbox's interactive shell (prompt
// "sbx$ ", started on a 30x90 terminal) through the user's terminal slave:
// its terminal is the sandbox's own (/dev/pts/0) with the size given, the
// user's terminal is raw meanwhile (the command's terminal echoes, not the
// user's), a line runs, and a resize of the user's terminal (the kernel
// sends SIGWINCH to the CLI, its foreground process) reaches the shell's.
// It returns the screen offset after the last prompt.
//
// It types a line only once the shell's prompt is on the screen after the
// previous line's output. The command's terminal echoes typed text as it
// arrives, whatever the shell is doing: a line typed before the prompt
// is echoed before it ("echo hi\r\nsbx$ hi\r\n"), a legal order that
// no fixed expectation matches. After the prompt, the shell is reading:
// echo, output, next prompt is then the only order there is.
func checkShellTerminal(t *testing.T, slave *os.File, scr *screen, at int, type_ func(string)) int {
	t.Helper()
	type_("tty; stty size\r")
	at = waitScreen(t, scr, at, "tty; stty size\r\n/dev/pts/0\r\n30 90\r\n")
	at = waitScreen(t, scr, at, "sbx$ ")
	if during, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS); err != nil || during.Lflag&unix.ECHO != 0 || during.Lflag&unix.ICANON != 0 {
		t.Fatalf("the user's terminal is not raw while the shell runs: %+v %v", during, err)
	}
	type_("echo hi\r")
	at = waitScreen(t, scr, at, "echo hi\r\nhi\r\n")
	at = waitScreen(t, scr, at, "sbx$ ")
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 41, Col: 133}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		type_("stty size\r")
		at = waitScreen(t, scr, at, "sbx$ ")
		if strings.Contains(scr.String()[:at], "41 133\r\n") {
			return at
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resize never reached the shell: %q", scr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitScreen(t *testing.T, s *screen, from int, want string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		all := s.String()
		if i := strings.Index(all[from:], want); i >= 0 {
			return from + i + len(want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("never saw %q; screen after offset %d: %q", want, from, all[from:])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestExecInteractiveShellInPty drives `exec -i -t -- /bin/sh` through
// the CLI on a real terminal: typed commands run and answer, the window
// size reaches the shell and follows a resize, `exit 3` is the exit
// status, and the user's terminal is raw while the shell runs and exactly
// as before once exec has ended.
func TestExecInteractiveShellInPty(t *testing.T) {
	h := newEscapeHarness(t)
	ws := h.workspace(t)
	master, slave := hostPty(t)
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 30, Col: 90}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(h.bin, "aleph-sandbox"), "exec", "--workspace-root", h.root, "--workspace", ws,
		"--session", "tty-"+t.Name(), "--spawn", "--yes", "--timeout", "50s", "--env", "PS1=sbx$ ", "-i", "-t", "--", "/bin/sh")
	cmd.Env = h.env()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// The CLI leads a session whose controlling terminal is the slave, as
	// a shell in a terminal emulator would start it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scr := watchScreen(master)
	type_ := func(s string) {
		if _, err := master.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	at := waitScreen(t, scr, 0, "sbx$ ")
	// The shell is interactive (a prompt) on a terminal of the sandbox's
	// own devpts, and the user's terminal is raw meanwhile: the command's
	// terminal echoes, not the user's.
	at = checkShellTerminal(t, slave, scr, at, type_)
	type_("exit 3\r")
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exec ended with %v, want exit status 3; screen %q", err, scr.String())
	}
	after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Fatalf("terminal mode not restored:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestExecInteractiveStreamsStdin: -i without a terminal feeds a pipe's
// data to the command as it arrives (the answer to the first line comes
// back before the second is written), and closing the pipe is EOF.
func TestExecInteractiveStreamsStdin(t *testing.T) {
	h := newEscapeHarness(t)
	ws := h.workspace(t)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(h.bin, "aleph-sandbox"), "exec", "--workspace-root", h.root, "--workspace", ws,
		"--session", "i-"+t.Name(), "--spawn", "--yes", "-i", "--", "/bin/sh", "-c", `while read l; do echo "got:$l"; done; echo eof`)
	cmd.Env = h.env()
	cmd.Stdin, cmd.Stdout = pr, outW
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pr.Close()
	outW.Close()
	var scr screen
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := outR.Read(buf)
			if n > 0 {
				_, _ = scr.Write(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	fmt.Fprintln(pw, "one")
	at := waitScreen(t, &scr, 0, "got:one\n")
	fmt.Fprintln(pw, "two")
	waitScreen(t, &scr, at, "got:two\n")
	pw.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	<-done
	if scr.String() != "got:one\ngot:two\neof\n" {
		t.Fatalf("stdout %q", scr.String())
	}
}

// TestExecInteractiveRefusals: the combinations that cannot work are
// refused with the reason, before anything runs.
func TestExecInteractiveRefusals(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-i", "--stdin"}, "one or the other"},
		{[]string{"-t", "--json"}, "one or the other"},
		// The same refusals with --host, before any service is reached.
		{[]string{"-i", "--stdin", "--host", "unix:/nonexistent.sock"}, "one or the other"},
		{[]string{"-t", "--json", "--host", "unix:/nonexistent.sock"}, "one or the other"},
	} {
		r := cli(t, "", false, append(append([]string{"exec"}, c.args...), "--", "true")...)
		if r.code != exitSandboxError || !strings.Contains(r.stderr+r.stdout, c.want) {
			t.Errorf("%v: exit %d, output %q %q; want 125 and %q", c.args, r.code, r.stdout, r.stderr, c.want)
		}
	}
}

// TestExecTtyAloneOnTerminalIsInteractive: `exec -t -- /bin/sh` from a
// terminal is an interactive shell, as a user expects: the keys reach it
// and `exit 4` ends it. Before, -t alone passed no input and the shell sat
// at its prompt until the command's timeout.
func TestExecTtyAloneOnTerminalIsInteractive(t *testing.T) {
	h := newEscapeHarness(t)
	ws := h.workspace(t)
	master, slave := hostPty(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(h.bin, "aleph-sandbox"), "exec", "--workspace-root", h.root, "--workspace", ws,
		"--session", "tty-"+t.Name(), "--spawn", "--yes", "--timeout", "50s", "--env", "PS1=sbx$ ", "-t", "--", "/bin/sh")
	cmd.Env = h.env()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scr := watchScreen(master)
	at := waitScreen(t, scr, 0, "sbx$ ")
	if _, err := master.Write([]byte("echo typed-$((6*7))\r")); err != nil {
		t.Fatal(err)
	}
	waitScreen(t, scr, at, "typed-42\r\n")
	if _, err := master.Write([]byte("exit 4\r")); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 {
		t.Fatalf("exec -t ended with %v, want exit status 4 from the typed exit; screen %q", err, scr.String())
	}
}

// TestExecPipedStdinNotPassedSaysSo: input piped to exec without --stdin
// or -i is not passed, and exec says so on stderr naming both flags; with
// --stdin it is passed, without the note. Before, it was dropped silently.
func TestExecPipedStdinNotPassedSaysSo(t *testing.T) {
	h := newEscapeHarness(t)
	ws := h.workspace(t)
	piped := func() *os.File {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteString("piped\n"); err != nil {
			t.Fatal(err)
		}
		w.Close()
		t.Cleanup(func() { r.Close() })
		return r
	}
	r := h.execOpts(t, ws, runOpts{stdin: piped()}, nil, "/bin/cat")
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "not passed to the command") ||
		!strings.Contains(r.stderr, "--stdin") || !strings.Contains(r.stderr, "-i") {
		t.Fatalf("piped stdin without --stdin: exit %d stdout %q stderr %q, want nothing passed and a note naming --stdin and -i", r.code, r.stdout, r.stderr)
	}
	r = h.execOpts(t, ws, runOpts{stdin: piped()}, []string{"--stdin"}, "/bin/cat")
	if r.code != 0 || r.stdout != "piped\n" || strings.Contains(r.stderr, "not passed") {
		t.Fatalf("piped stdin with --stdin: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestExecTerminalTimeoutTERM: a terminal command (exec -t) is warned at
// its timeout as any other: its TERM handler runs (its words reach the
// terminal) and the CLI says it timed out and how it ended; one that
// ignores SIGTERM is killed at the limit, and nothing of either is left.
func TestExecTerminalTimeoutTERM(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 for the TERM handler")
	}
	h := newEscapeHarness(t)
	ws := h.workspace(t)
	for _, c := range []struct {
		name, script, screen, says string
	}{
		{"handler runs", `import signal, sys, time
def bye(*a):
    print("handler-ran", flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
time.sleep(60)`, "handler-ran", "was sent SIGTERM before it and exited with status 3"},
		{"ignores TERM", `import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)`, "ready", "was killed (SIGKILL)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			master, slave := hostPty(t)
			marker := uniqueMarker("aleph-ttyterm")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(h.bin, "aleph-sandbox"), "exec", "--workspace-root", h.root, "--workspace", ws,
				"--session", "tty-"+t.Name(), "--timeout", "4s", "-t", "--", "python3", "-c", c.script, marker)
			cmd.Env = h.env()
			cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			scr := watchScreen(master)
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitTimedOut {
				t.Fatalf("exec ended with %v, want %d; screen %q", err, exitTimedOut, scr.String())
			}
			waitScreen(t, scr, 0, c.screen)
			waitScreen(t, scr, 0, c.says)
			if left := waitGone(marker, goneWithin); len(left) > 0 {
				t.Fatalf("escape: %d processes outlived the command: %v", len(left), left)
			}
		})
	}
}
