//go:build linux

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// TestServeHostSignals: SIGTERM, SIGINT and SIGHUP reaching `exec --host`
// go to the command through the service, which may handle them (exit
// status and output are the command's own, so the command ran on and was
// not cancelled); one it does not handle ends it with 128+N; one it
// ignores gets it killed after --grace, as in-process.
func TestServeHostSignals(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	srv := h.start(t, sock, "")
	cases := []struct {
		name   string
		sig    syscall.Signal
		script string
		grace  string
		code   int
		stdout string
		stderr string
	}{
		{"TERM handled by the command", syscall.SIGTERM, `trap 'echo got-term; exit 3' TERM`, "10s", 3, "got-term\n", ""},
		{"INT handled by the command", syscall.SIGINT, `trap 'echo got-int; exit 4' INT`, "10s", 4, "got-int\n", ""},
		{"HUP handled by the command", syscall.SIGHUP, `trap 'echo got-hup; exit 5' HUP`, "10s", 5, "got-hup\n", ""},
		{"TERM not handled: 143", syscall.SIGTERM, `:`, "10s", 143, "", ""},
		{"TERM ignored: killed after the grace period", syscall.SIGTERM, `trap '' TERM`, "1s", 137, "", "did not end within 1s of SIGTERM"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws := t.TempDir()
			ready := filepath.Join(ws, "ready")
			script := c.script + `; : > ready; while :; do sleep 0.05; done`
			cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), "exec", "--host", "unix:"+sock, "--workspace", ws,
				"--spawn", "--yes", "--grace", c.grace, "--", "/bin/sh", "-c", script)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the command to start", func() bool { _, err := os.Stat(ready); return err == nil })
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("exec --host did not end after the signal\n%s", srv.stderr)
			}
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			code := cmd.ProcessState.ExitCode()
			if code != c.code || out.String() != c.stdout || !strings.Contains(errb.String(), c.stderr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr containing %q",
					code, out.String(), errb.String(), c.code, c.stdout, c.stderr)
			}
		})
	}
	t.Run("Signal for no running command is NotFound", func(t *testing.T) {
		_, err := client(sock).Signal(context.Background(), connectRequestSignal("sig-none", "TERM"))
		if d := errDetail(t, err); d.GetReasonCode() != "not_running" {
			t.Errorf("%v %+v", err, d)
		}
		_, err = client(sock).Signal(context.Background(), connectRequestSignal("sig-none", "SEGV"))
		if d := errDetail(t, err); d.GetField() != "signal" {
			t.Errorf("unknown signal: %v %+v", err, d)
		}
	})
}

// TestServeHostTerminalOutput: the command's output, reaching a terminal
// through `exec --host`, passes the terminal filter of in-process exec;
// --raw-output opts out; a pipe gets the bytes unchanged.
func TestServeHostTerminalOutput(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	h.start(t, sock, "")
	cli := filepath.Join(h.bin, "aleph-sandbox")
	for _, c := range []struct {
		name    string
		args    []string
		stderr  bool
		want    string
		wantNot string
	}{
		{"stdout on a terminal", []string{"--", "/bin/echo", ttyPayload}, false, ttyNeutralised, "\x1b]"},
		{"stderr on a terminal", []string{"--", "/bin/sh", "-c", `echo "$1" >&2`, "sh", ttyPayload}, true, ttyNeutralised, "\x1b]"},
		{"--raw-output opts out", []string{"--raw-output", "--", "/bin/echo", ttyPayload}, false, ttyPayload, `\x1b`},
	} {
		t.Run(c.name, func(t *testing.T) {
			master, slave := openPTY(t)
			done := make(chan struct{})
			got := readPTY(master, done)
			other, err := os.CreateTemp(t.TempDir(), "other")
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(cli, append([]string{"exec", "--host", "unix:" + sock}, c.args...)...)
			cmd.Stdout, cmd.Stderr = slave, other
			if c.stderr {
				cmd.Stdout, cmd.Stderr = other, slave
			}
			err = cmd.Run()
			slave.Close()
			close(done)
			s := <-got
			if err != nil {
				t.Fatalf("%v, terminal got %q", err, s)
			}
			if !strings.Contains(s, c.want) || strings.Contains(s, c.wantNot) {
				t.Fatalf("terminal got %q\nwant it to hold %q and not %q", s, c.want, c.wantNot)
			}
		})
	}
	t.Run("a pipe gets the raw bytes", func(t *testing.T) {
		out, err := exec.Command(cli, "exec", "--host", "unix:"+sock, "--", "/bin/echo", ttyPayload).Output()
		if err != nil || string(out) != ttyPayload+"\n" {
			t.Fatalf("%v %q", err, out)
		}
	})
}

func connectRequestSignal(key, sig string) *connect.Request[hostv1.SignalRequest] {
	return connect.NewRequest(&hostv1.SignalRequest{SignalKey: key, Signal: sig})
}
