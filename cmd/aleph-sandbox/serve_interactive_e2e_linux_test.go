//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// `exec --host -i/-t`: the same interactive behaviour as in-process,
// through a real serve.

// TestServeHostInteractiveShellInPty drives `exec --host -i -t --
// /bin/sh` on a real terminal: the approval is asked and answered on the
// terminal in its ordinary mode, then typed commands run and answer on the
// sandbox's own terminal, the window size reaches the shell and follows a
// resize, `exit 3` is the exit status, and the user's terminal is raw
// while the shell runs and exactly as before once exec has ended. There is
// no --timeout: an interactive command has no default timeout.
func TestServeHostInteractiveShellInPty(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	srv := h.start(t, sock, "")
	ws := t.TempDir()
	master, slave := hostPty(t)
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 30, Col: 90}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// No --yes: --spawn is beyond the strict baseline, so the service asks
	// and this CLI asks the user.
	cmd := exec.CommandContext(ctx, filepath.Join(h.bin, "aleph-sandbox"), "exec", "--host", "unix:"+sock, "--workspace", ws,
		"--session", "hosttty", "--spawn", "--env", "PS1=sbx$ ", "-i", "-t", "--", "/bin/sh")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
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
	at := waitScreen(t, scr, 0, "allow? [y/N] ")
	// The question is asked with the terminal as it was (cooked, echoing).
	if during, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS); err != nil || *during != *before {
		t.Fatalf("the terminal changed before the approval was answered: %+v %v", during, err)
	}
	type_("y\r")
	at = waitScreen(t, scr, at, "sbx$ ")
	at = checkShellTerminal(t, slave, scr, at, type_)
	// Ctrl-C is a byte for the command's terminal: it interrupts the
	// shell's foreground job (sleep), not exec, and the shell carries on.
	type_("echo started-$((1+1)); sleep 30; echo after-sleep\r")
	at = waitScreen(t, scr, at, "started-2\r\n")
	// The shell forks sleep right after its echo; give it the moment.
	time.Sleep(300 * time.Millisecond)
	type_("\x03")
	// What the shell prints ("still-42"), not the terminal's echo of the
	// typed line.
	type_("echo still-$((40+2))\r")
	at = waitScreen(t, scr, at, "still-42\r\n")
	type_("exit 3\r")
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exec ended with %v, want exit status 3; screen %q\n%s", err, scr.String(), srv.stderr)
	}
	after, err := unix.IoctlGetTermios(int(slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if *after != *before {
		t.Fatalf("terminal mode not restored:\nbefore %+v\nafter  %+v", before, after)
	}
}

// execHost starts `exec --host` with args; stdin is a pipe the test
// writes, stdout and stderr are captured.
type hostRun struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	out, err *lockedBuffer
}

func startHostExec(t *testing.T, h *serveHarness, sock string, args ...string) *hostRun {
	t.Helper()
	cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), append([]string{"exec", "--host", "unix:" + sock}, args...)...)
	r := &hostRun{cmd: cmd, out: &lockedBuffer{}, err: &lockedBuffer{}}
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.stdin = w
	cmd.Stdout, cmd.Stderr = r.out, r.err
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return r
}

func (r *hostRun) wait(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		_ = r.cmd.Process.Kill()
		t.Fatalf("exec --host did not end; stdout %q stderr %q", r.out, r.err)
	}
	return r.cmd.ProcessState.ExitCode()
}

// TestServeHostInteractiveStdin: `exec --host -i` streams its stdin to the
// command as it arrives (the answer to a line comes back before the next
// is written), end of file closes it, the byte count of a large input is
// exact, a command that does not read holds the writer back (what is
// taken from the writer stays bounded: the CLI's chunk, the service's
// stdin_bytes, the pipes, not the whole input), a signal the CLI gets goes
// to the command, and --json and the exit status are in-process exec's.
func TestServeHostInteractiveStdin(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	// The byte-count case asks for 16 MiB of output, above the default
	// ceiling (serve.max_output_bytes, 1 MiB), so this server raises it.
	srv := h.start(t, sock, "[serve]\nmax_output_bytes = 16777216\n")

	t.Run("lines answered as they arrive, EOF ends", func(t *testing.T) {
		r := startHostExec(t, h, sock, "--workspace", t.TempDir(), "--spawn", "--yes", "-i", "--",
			"/bin/sh", "-c", `while read l; do echo "got:$l"; done; echo eof`)
		fmt.Fprintln(r.stdin, "one")
		waitFor(t, "the first answer", func() bool { return strings.Contains(r.out.String(), "got:one\n") })
		if strings.Contains(r.out.String(), "two") {
			t.Fatalf("answered before asked: %q", r.out)
		}
		fmt.Fprintln(r.stdin, "two")
		waitFor(t, "the second answer", func() bool { return strings.Contains(r.out.String(), "got:two\n") })
		r.stdin.Close()
		if code := r.wait(t); code != 0 || r.out.String() != "got:one\ngot:two\neof\n" {
			t.Fatalf("exit %d stdout %q stderr %q\n%s", code, r.out, r.err, srv.stderr)
		}
	})

	t.Run("byte counts through cat and wc", func(t *testing.T) {
		// Positive control of the count: an empty input is 0 bytes, 5 MiB
		// (not a multiple of any chunk) is every byte, in order (cat's
		// output hashes the same as the input).
		for _, n := range []int{0, 5<<20 + 7} {
			data := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
			r := startHostExec(t, h, sock, "--workspace", t.TempDir(), "--spawn", "--yes", "--max-output", "16777216", "-i", "--",
				"/bin/sh", "-c", `cat | tee /dev/stderr | wc -c`)
			go func() { _, _ = r.stdin.Write(data); r.stdin.Close() }()
			code := r.wait(t)
			if code != 0 || strings.TrimSpace(r.out.String()) != fmt.Sprint(n) {
				t.Fatalf("%d bytes in: exit %d, wc says %q; stderr %d bytes", n, code, r.out, len(r.err.String()))
			}
			if !bytes.Equal([]byte(r.err.String()), data) {
				t.Fatalf("%d bytes in: cat gave back %d bytes, not the same", n, len(r.err.String()))
			}
		}
	})

	t.Run("a command that does not read holds the writer back", func(t *testing.T) {
		const total = 16 << 20
		r := startHostExec(t, h, sock, "--workspace", t.TempDir(), "--spawn", "--yes", "-i", "--",
			"/bin/sh", "-c", `: > started; sleep 3; wc -c`)
		var taken atomic.Int64
		go func() {
			chunk := make([]byte, 4096)
			for taken.Load() < total {
				n, err := r.stdin.Write(chunk)
				taken.Add(int64(n))
				if err != nil {
					return
				}
			}
			r.stdin.Close()
		}()
		// While the command sleeps, nothing reads: the writer gets only
		// what the stages hold, each bounded: the pipe to the CLI (64
		// KiB), the CLI's chunk in flight (32 KiB), the service's
		// stdin_bytes (64 KiB), the driver stream's gRPC flow-control
		// windows and its pipe to the command (64 KiB). Measured about
		// 0.5 MiB here; 2 MiB leaves room for the gRPC windows growing,
		// and is an eighth of the input.
		time.Sleep(1500 * time.Millisecond)
		got := taken.Load()
		t.Logf("taken from the writer while nothing read: %d bytes of %d", got, total)
		if got >= 2<<20 {
			t.Fatalf("%d bytes taken from the writer while the command read nothing: unbounded buffering", got)
		}
		if code := r.wait(t); code != 0 || strings.TrimSpace(r.out.String()) != fmt.Sprint(total) {
			t.Fatalf("exit %d, wc says %q (want %d); stderr %q", code, r.out, total, r.err)
		}
	})

	t.Run("a signal to the CLI goes to the command", func(t *testing.T) {
		ws := t.TempDir()
		r := startHostExec(t, h, sock, "--workspace", ws, "--spawn", "--yes", "-i", "--",
			"/bin/sh", "-c", `trap 'echo got-term; exit 3' TERM; : > ready; while :; do sleep 0.05; done`)
		waitFor(t, "the command to start", func() bool { _, err := os.Stat(filepath.Join(ws, "ready")); return err == nil })
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		// The command's own status and output: it ran its trap.
		if code := r.wait(t); code != 3 || r.out.String() != "got-term\n" {
			t.Fatalf("exit %d stdout %q stderr %q, want 3 and got-term", code, r.out, r.err)
		}
	})

	t.Run("--json and the exit status as in-process", func(t *testing.T) {
		r := startHostExec(t, h, sock, "--workspace", t.TempDir(), "--spawn", "--yes", "--json", "-i", "--",
			"/bin/sh", "-c", `wc -c; echo oops >&2; exit 7`)
		_, _ = r.stdin.Write([]byte("abc"))
		r.stdin.Close()
		if code := r.wait(t); code != 0 {
			t.Fatalf("--json exit %d, stderr %q", code, r.err)
		}
		var res execResult
		if err := json.Unmarshal([]byte(r.out.String()), &res); err != nil {
			t.Fatalf("%v: %q", err, r.out)
		}
		if strings.TrimSpace(res.Stdout) != "3" || res.Stderr != "oops\n" || res.ExitCode == nil || *res.ExitCode != 7 {
			t.Fatalf("--json %+v", res)
		}
		r = startHostExec(t, h, sock, "--workspace", t.TempDir(), "--spawn", "--yes", "-i", "--", "/bin/sh", "-c", `cat; exit 5`)
		_, _ = r.stdin.Write([]byte("x"))
		r.stdin.Close()
		if code := r.wait(t); code != 5 || r.out.String() != "x" {
			t.Fatalf("exit %d stdout %q, want 5 and x", code, r.out)
		}
	})
}

// TestInteractiveNoDefaultTimeout: with -i (or -t) and no --timeout, the
// configured default timeout does not apply (an interactive command waits
// for a person), in-process and through serve; the same command without
// -i is ended by it, and --timeout still bounds an interactive one.
func TestInteractiveNoDefaultTimeout(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	h.start(t, sock, "[sandbox]\ndefault_timeout_seconds = 1\n")
	script := `sleep 2; echo alive`
	t.Run("host", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			code int
			out  string
		}{
			{[]string{"-i"}, 0, "alive\n"},
			{[]string{"-t"}, 0, "alive\r\n"},
			{nil, exitTimedOut, ""},
			{[]string{"-i", "--timeout", "1s"}, exitTimedOut, ""},
		} {
			args := append(append([]string{"--workspace", t.TempDir(), "--spawn", "--yes"}, c.args...), "--", "/bin/sh", "-c", script)
			r := startHostExec(t, h, sock, args...)
			r.stdin.Close()
			if code := r.wait(t); code != c.code || r.out.String() != c.out {
				t.Errorf("%v: exit %d stdout %q stderr %q; want %d %q", c.args, code, r.out, r.err, c.code, c.out)
			}
		}
	})
	t.Run("in-process", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "config.toml")
		data := t.TempDir()
		body := fmt.Sprintf("[sandbox]\ndefault_timeout_seconds = 1\nworkspace_root = %q\naudit_log = \"\"\n", filepath.Join(data, "ws"))
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			args []string
			code int
			out  string
		}{
			{[]string{"-i"}, 0, "alive\n"},
			{nil, exitTimedOut, ""},
		} {
			args := append(append([]string{"exec", "--config", cfg, "--spawn", "--yes"}, c.args...), "--", "/bin/sh", "-c", script)
			cmd := exec.Command(filepath.Join(h.bin, "aleph-sandbox"), args...)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "XDG_") && !strings.HasPrefix(kv, "ALEPH_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			cmd.Env = append(append(cmd.Env, "XDG_DATA_HOME="+data, "XDG_CONFIG_HOME="+t.TempDir()), h.env...)
			var out, errb bytes.Buffer
			cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(""), &out, &errb
			_ = cmd.Run()
			if code := cmd.ProcessState.ExitCode(); code != c.code || out.String() != c.out {
				t.Errorf("%v: exit %d stdout %q stderr %q; want %d %q", c.args, code, out.String(), errb.String(), c.code, c.out)
			}
		}
	})
}

// TestServeStreamedStdinOverHTTP1: the calls `exec --host -i` makes work
// for a Connect client on HTTP/1.1 (JSON): Execute with stdin_stream
// announces StdinOpen, WriteStdin's data reaches the command while it runs
// (its echo arrives before stdin is closed), CloseStdin is its EOF; and
// the calls refuse what cannot work, with their reason codes.
func TestServeStreamedStdinOverHTTP1(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	h.start(t, sock, "")
	c := client(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	key := newSignalKey()
	stream, err := c.Execute(ctx, connect.NewRequest(&hostv1.ExecuteRequest{Session: "http1-stdin", Argv: []string{"/bin/cat"},
		SignalKey: key, StdinStream: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	next := func() *hostv1.ExecuteResponse {
		t.Helper()
		if !stream.Receive() {
			t.Fatalf("stream ended: %v", stream.Err())
		}
		return stream.Msg()
	}
	if ev := next(); ev.GetStdinOpen() == nil {
		t.Fatalf("first event %v, want stdin_open", ev)
	}
	// A terminal call on a command without one, and a key nobody has.
	if _, err := c.ResizeTerminal(ctx, connect.NewRequest(&hostv1.ResizeTerminalRequest{SignalKey: key, Rows: 5, Cols: 5})); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Errorf("resize of a command without a terminal: %v", err)
	}
	if _, err := c.WriteStdin(ctx, connect.NewRequest(&hostv1.WriteStdinRequest{SignalKey: "sig-nobody", Data: []byte("x")})); connect.CodeOf(err) != connect.CodeNotFound || reasonOf(err) != "not_running" {
		t.Errorf("write to no command: %v", err)
	}
	resp, err := c.WriteStdin(ctx, connect.NewRequest(&hostv1.WriteStdinRequest{SignalKey: key, Data: []byte("ping\n")}))
	if err != nil || resp.Msg.GetWritten() != 5 {
		t.Fatalf("write: %v %v", resp, err)
	}
	if ev := next(); string(ev.GetOutput().GetData()) != "ping\n" {
		t.Fatalf("event %v, want the echo of ping", ev)
	}
	if _, err := c.CloseStdin(ctx, connect.NewRequest(&hostv1.CloseStdinRequest{SignalKey: key})); err != nil {
		t.Fatal(err)
	}
	// The result does not repeat the streamed output: it says it was
	// streamed, and how much.
	if ev := next(); ev.GetResult() == nil || ev.GetResult().GetExitCode() != 0 || len(ev.GetResult().GetStdout()) != 0 ||
		!ev.GetResult().GetOutputStreamed() || ev.GetResult().GetStreamedStdoutBytes() != 5 {
		t.Fatalf("event %v, want the result (streamed 5 bytes, none repeated)", ev)
	}
	// Once the call has ended its key is gone.
	if _, err := c.WriteStdin(ctx, connect.NewRequest(&hostv1.WriteStdinRequest{SignalKey: key, Data: []byte("x")})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("write after the end: %v", err)
	}
	for name, req := range map[string]*hostv1.ExecuteRequest{
		"signal_key": {Session: "s", Argv: []string{"/bin/cat"}, StdinStream: true},
		"stdin":      {Session: "s", Argv: []string{"/bin/cat"}, StdinStream: true, SignalKey: newSignalKey(), Stdin: []byte("x")},
		"rows":       {Session: "s", Argv: []string{"/bin/cat"}, Tty: true, SignalKey: newSignalKey()},
	} {
		s, err := c.Execute(ctx, connect.NewRequest(req))
		if err == nil {
			for s.Receive() {
			}
			err = s.Err()
			s.Close()
		}
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.Contains(ce.Message(), name) {
			t.Errorf("%s: %v, want InvalidArgument naming it", name, err)
		}
	}
	if _, err := c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{Command: &hostv1.ExecuteRequest{Session: "s", Argv: []string{"/bin/cat"}, StdinStream: true}})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("StartProcess with stdin_stream: %v", err)
	}
}

// TestServeProcessMetrics: /metrics, scraped and parsed, counts the
// processes running and held, those started and ended by outcome (a
// denial, a kill by forgetting the session), and the output their rings
// hold.
func TestServeProcessMetrics(t *testing.T) {
	h := newServeHarness(t)
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	p := h.start(t, sock, "", "--metrics", "tcp:127.0.0.1:0")
	maddr := tcpAddrOf(t, p, "metrics")
	c := client(sock)
	ctx := context.Background()
	check := func(when string, want map[string]float64) {
		t.Helper()
		m := scrape(t, maddr)
		for k, v := range want {
			if got, ok := m[k]; !ok || got != v {
				t.Errorf("%s: %s = %v (present %v), want %v", when, k, got, ok, v)
			}
		}
	}
	check("at start", map[string]float64{
		`aleph_sandbox_processes_running`: 0, `aleph_sandbox_processes_started_total`: 0,
		`aleph_sandbox_processes_exited_total{outcome="killed"}`: 0, `aleph_sandbox_process_output_bytes`: 0,
	})
	st, err := c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{
		Command: &hostv1.ExecuteRequest{Session: "pm", Argv: []string{"/bin/cat"}}}))
	if err != nil {
		t.Fatalf("%v\n%s", err, p.stderr)
	}
	if _, err := c.WriteProcess(ctx, connect.NewRequest(&hostv1.WriteProcessRequest{Id: st.Msg.GetId(), Data: []byte("twelve bytes")})); err != nil {
		t.Fatal(err)
	}
	readProc(t, c, st.Msg.GetId(), "twelve bytes")
	// A process the command policy refuses: its refusal is its result.
	den, err := c.StartProcess(ctx, connect.NewRequest(&hostv1.StartProcessRequest{
		Command: &hostv1.ExecuteRequest{Session: "pm", Argv: []string{"/bin/sh", "-c", "rm -rf /"}}}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.WaitProcess(ctx, connect.NewRequest(&hostv1.WaitProcessRequest{Id: den.Msg.GetId()}))
	if err != nil || !w.Msg.GetResult().GetDenied() {
		t.Fatalf("the denied process: %v %v", w, err)
	}
	check("one running, one denied", map[string]float64{
		`aleph_sandbox_processes_running`: 1, `aleph_sandbox_processes_held`: 1, `aleph_sandbox_processes_started_total`: 2,
		`aleph_sandbox_processes_exited_total{outcome="denied"}`: 1, `aleph_sandbox_processes_exited_total{outcome="ok"}`: 0,
		`aleph_sandbox_process_output_bytes`: 12,
	})
	if _, err := c.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_Forget{
		Forget: &hostv1.ForgetSession{Session: "pm"}}})); err != nil {
		t.Fatal(err)
	}
	check("after the session is forgotten", map[string]float64{
		`aleph_sandbox_processes_running`: 0, `aleph_sandbox_processes_held`: 0, `aleph_sandbox_processes_started_total`: 2,
		`aleph_sandbox_processes_exited_total{outcome="killed"}`: 1, `aleph_sandbox_processes_exited_total{outcome="denied"}`: 1,
		`aleph_sandbox_process_output_bytes`: 0,
	})
}
