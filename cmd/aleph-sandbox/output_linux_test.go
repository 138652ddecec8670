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
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair through /dev/ptmx.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("open pts %d: %v", n, err)
	}
	// Raw mode: no \n -> \r\n, so what the CLI wrote is what is read.
	if tio, err := unix.IoctlGetTermios(int(s.Fd()), unix.TCGETS); err == nil {
		tio.Oflag &^= unix.OPOST
		_ = unix.IoctlSetTermios(int(s.Fd()), unix.TCSETS, tio)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// cliProcess runs the test binary as the CLI (TestMain's
// ALEPH_CLI_TEST_MAIN) with the given stdout and stderr; the driver is the
// fake one. It returns the exit status.
func cliProcess(t *testing.T, stdout, stderr *os.File, args ...string) int {
	t.Helper()
	drv := cliEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	full := append([]string{args[0], "--driver", drv}, args[1:]...)
	cmd := exec.CommandContext(ctx, drv, full...)
	cmd.Env = append(os.Environ(), "ALEPH_CLI_TEST_MAIN=1")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("the CLI did not finish: %v", err)
	case errors.As(err, &ee):
		return ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return 0
}

// readAll reads the master side until the slave side is closed everywhere.
func readPTY(master *os.File, done <-chan struct{}) <-chan string {
	res := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for {
			_ = master.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			n, err := master.Read(buf)
			b.Write(buf[:n])
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if n == 0 && err != nil {
				select {
				case <-done:
					res <- b.String()
					return
				default:
				}
			}
		}
		res <- b.String()
	}()
	return res
}

// The payload: a colour (kept), then an OSC 52 clipboard write, a title
// change, a DCS string and a cursor move (all neutralised).
const (
	ttyPayload     = "\x1b[31mred\x1b[0m \x1b]52;c;cHduZWQ=\x07 \x1b]0;title\x07 \x1bP+q544e\x1b\\ \x1b[2J"
	ttyNeutralised = "\x1b[31mred\x1b[0m " + `\x1b]52;c;cHduZWQ=\x07 \x1b]0;title\x07 \x1bP+q544e\x1b\ \x1b[2J`
)

func TestExecTerminalOutputIsNeutralised(t *testing.T) {
	for _, c := range []struct {
		name    string
		args    []string
		stream  string // "stdout" or "stderr" carries the payload
		want    string
		wantNot string
	}{
		{"stdout on a terminal", []string{"exec", "--", "echo", ttyPayload}, "stdout", ttyNeutralised, "\x1b]"},
		{"stderr on a terminal", []string{"exec", "--", "stderr", ttyPayload}, "stderr", ttyNeutralised, "\x1b]"},
		{"--raw-output opts out", []string{"exec", "--raw-output", "--", "echo", ttyPayload}, "stdout", ttyPayload, `\x1b`},
	} {
		t.Run(c.name, func(t *testing.T) {
			master, slave := openPTY(t)
			done := make(chan struct{})
			got := readPTY(master, done)
			other, err := os.CreateTemp(t.TempDir(), "other")
			if err != nil {
				t.Fatal(err)
			}
			out, errf := slave, other
			if c.stream == "stderr" {
				out, errf = other, slave
			}
			code := cliProcess(t, out, errf, c.args...)
			slave.Close()
			close(done)
			s := <-got
			if code != 0 {
				t.Fatalf("exit %d, terminal got %q", code, s)
			}
			if !strings.Contains(s, c.want) || strings.Contains(s, c.wantNot) {
				t.Fatalf("terminal got %q\nwant it to hold %q and not %q", s, c.want, c.wantNot)
			}
		})
	}
}

// A pipe (or a file) gets the child's bytes unchanged: scripts see what the
// command wrote.
func TestExecPipeOutputIsRaw(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(r); got <- b }()
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	code := cliProcess(t, w, errf, "exec", "--", "echo", ttyPayload)
	w.Close()
	if b := <-got; code != 0 || string(b) != ttyPayload+"\n" {
		t.Fatalf("exit %d, pipe got %q, want the raw %q", code, b, ttyPayload+"\n")
	}
}

// --json on a terminal is unchanged: the object carries the bytes (JSON
// escapes them, so nothing raw reaches the terminal anyway).
func TestExecJSONOnTerminalUnchanged(t *testing.T) {
	master, slave := openPTY(t)
	done := make(chan struct{})
	got := readPTY(master, done)
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	code := cliProcess(t, slave, errf, "exec", "--json", "--", "echo", "\x1b]52;c;QQ==\x07")
	slave.Close()
	close(done)
	s := <-got
	if code != 0 || !strings.Contains(s, `"stdout":"\u001b]52;c;QQ==\u0007\n"`) {
		t.Fatalf("exit %d, terminal got %q", code, s)
	}
}

// SIGPIPE: a reader that goes away ends the command; the CLI exits 141 as
// a shell reports a writer killed by SIGPIPE, promptly and without an
// error line. The fake driver's flood writes 64 MiB unless stopped.
func TestExecBrokenPipeExits141(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // nobody will ever read
	errf, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	code := cliProcess(t, w, errf, "exec", "--max-output", "100000000", "--", "flood", "67108864")
	w.Close()
	msg, _ := os.ReadFile(errf.Name())
	if code != exitBrokenPipe {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitBrokenPipe, msg)
	}
	if len(bytes.TrimSpace(msg)) != 0 {
		t.Fatalf("a closed pipe is not an error to report: stderr %q", msg)
	}
}
