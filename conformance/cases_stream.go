package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Streamed runs (protocol 1.2): stdin as a stream, the pseudo-terminal, and
// signals reaching a streamed run. Each feature's cases are gated on the
// driver claiming it; a driver that claims one must also list the
// run_stream call.

// errnoEPERM is EPERM on Linux and macOS alike.
const errnoEPERM = 1

const whyStreamShell = "the command is a POSIX shell script (stty, test -t, /dev/tty)"

func streamCases() []Case {
	return []Case{
		{ID: "stream/stdin-as-it-arrives", Level: Must, Feature: driverapi.FeatureStdinStream,
			Description: "A streamed run gets stdin as the host sends it: the program answers the first line before the second exists, and ends only when stdin is closed.",
			run:         caseStreamArrives},
		{ID: "stream/stdin-eof", Level: Must, Feature: driverapi.FeatureStdinStream,
			Description: "Closing a streamed run's stdin is end-of-file for the program (cat ends, exit 0, with every byte sent); a stream closed at once is EOF at once.",
			run:         caseStreamEOF},
		{ID: "stream/signal", Level: Must, Feature: driverapi.FeatureSignals, OS: POSIXOnly, OSReason: whyStreamShell,
			Description: "Signal reaches a streamed run whose stdin is still open: a program trapping TERM runs its handler and reports its own exit status.",
			run:         caseStreamSignal},
		{ID: "pty/isatty", Level: Must, Feature: driverapi.FeaturePTY, OS: POSIXOnly, OSReason: whyStreamShell,
			Description: "With RunSpec.Tty the program's stdin, stdout and stderr are a terminal; without it (the control) they are not.",
			run:         casePtyIsatty},
		{ID: "pty/echo", Level: Must, Feature: driverapi.FeaturePTY, OS: POSIXOnly, OSReason: whyStreamShell,
			Description: "A line typed into the pty is echoed by the terminal and read by the program; the output arrives as one stream, on stdout.",
			run:         casePtyEcho},
		{ID: "pty/resize", Level: Must, Feature: driverapi.FeaturePTY, OS: POSIXOnly, OSReason: whyStreamShell,
			Description: "The program sees the initial window size, and a resize sent while it runs (stty size), with SIGWINCH delivered to it.",
			run:         casePtyResize},
		{ID: "pty/stdin-eof", Level: Must, Feature: driverapi.FeaturePTY, OS: POSIXOnly, OSReason: whyStreamShell,
			Description: "Closing the stdin of a pty run is end-of-file for a program reading the terminal (cat ends, exit 0).",
			run:         casePtyEOF},
		{ID: "pty/host-terminal-unreachable", Level: Must, Feature: driverapi.FeaturePTY, OS: LinuxOnly, OSReason: "compares devpts instances (st_dev of /dev/pts)",
			Description: "Nothing of the host's terminals is reachable: without a pty the program has no controlling terminal (/dev/tty does not open); with one, its terminal belongs to a devpts instance other than the host's, while /dev/tty opens (the control).",
			run:         casePtyHostTerminal},
		{ID: "pty/tiocsti-denied", Level: Must, Feature: driverapi.FeaturePTY, OS: POSIXOnly, OSReason: "the check is a perl program issuing ioctls",
			Description: "TIOCSTI (pushing input into the terminal) fails with EPERM on the pty, while TIOCGWINSZ on the same terminal works (the control) and reports the size given.",
			run:         casePtyTIOCSTI},
	}
}

// streamRun is a streamed run in progress.
type streamRun struct {
	stdout *capBuffer
	stdin  *io.PipeWriter
	resize chan driverapi.WindowSize
	done   chan Out
	id     string
}

// startStream starts c through RunStream, with a pty of size tty when set.
func (h *H) startStream(ctx context.Context, c Cmd, tty *driverapi.WindowSize) (*streamRun, error) {
	sr, isStream := h.Driver.(driverapi.StreamRunner)
	if !isStream || !h.Caps.Supports(driverapi.CallRunStream) {
		return nil, fmt.Errorf("the driver claims a streaming feature but does not list the %q call", driverapi.CallRunStream)
	}
	c, err := h.resolve(c)
	if err != nil {
		return nil, err
	}
	caps := defaultCaps()
	if c.Caps != nil {
		caps = *c.Caps
	}
	p, err := h.profile(ctx, h.Driver, caps, c.Cwd, nil)
	if err != nil {
		return nil, fmt.Errorf("ProfileFor: %w", err)
	}
	spec := h.spec(c, p)
	spec.Tty = tty
	pr, pw := io.Pipe()
	s := &streamRun{stdout: &capBuffer{limit: 1 << 20}, stdin: pw, resize: make(chan driverapi.WindowSize, 1), done: make(chan Out, 1), id: spec.CommandID}
	stderr := &capBuffer{limit: 1 << 20}
	in := driverapi.StreamInput{Stdin: pr}
	if tty != nil {
		in.Resize = s.resize
	}
	go func() {
		exit, err := sr.RunStream(ctx, spec, in, driverapi.Streams{Stdout: s.stdout, Stderr: stderr})
		pr.CloseWithError(io.ErrClosedPipe)
		s.done <- Out{Stdout: s.stdout.bytes(), Stderr: stderr.bytes(), Exit: exit, Err: err, Profile: p}
	}()
	h.defer_(func() { pw.Close() })
	return s, nil
}

// errEnded: the run ended before the awaited output.
var errEnded = errors.New("the run ended")

// waitOut waits until stdout contains want; it fails when the run ends
// first or after 20 seconds.
func (s *streamRun) waitOut(ctx context.Context, want string) error {
	deadline := time.Now().Add(20 * time.Second)
	for !bytes.Contains(s.stdout.bytes(), []byte(want)) {
		select {
		case o := <-s.done:
			s.done <- o
			if bytes.Contains(o.Stdout, []byte(want)) {
				return nil
			}
			return fmt.Errorf("waiting for %q: %w: %s", want, errEnded, o)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("never saw %q; stdout so far %q", want, s.stdout.bytes())
		}
	}
	return nil
}

// running reports whether the run has not ended.
func (s *streamRun) running() bool {
	select {
	case o := <-s.done:
		s.done <- o
		return false
	default:
		return true
	}
}

// end waits for the run's outcome.
func (s *streamRun) end(ctx context.Context) Out {
	select {
	case o := <-s.done:
		return o
	case <-ctx.Done():
		return Out{Err: ctx.Err()}
	case <-time.After(30 * time.Second):
		return Out{Err: errors.New("the run did not end within 30s")}
	}
}

func (s *streamRun) write(text string) error {
	_, err := s.stdin.Write([]byte(text))
	return err
}

// crlf turns a terminal's line ends into plain ones.
func crlf(b []byte) string { return strings.ReplaceAll(string(b), "\r\n", "\n") }

func caseStreamArrives(ctx context.Context, h *H) error {
	s, err := h.startStream(ctx, h.ProbeCmd(Cmd{}, "cat"), nil)
	if err != nil {
		return err
	}
	if err := s.write("one\n"); err != nil {
		return err
	}
	if err := s.waitOut(ctx, "one\n"); err != nil {
		return fmt.Errorf("the first line did not come back before the second was sent: %w", err)
	}
	if !s.running() {
		return fmt.Errorf("the program ended while its stdin was open: %s", s.end(ctx))
	}
	if err := s.write("two\n"); err != nil {
		return err
	}
	if err := s.waitOut(ctx, "one\ntwo\n"); err != nil {
		return err
	}
	s.stdin.Close()
	o := s.end(ctx)
	if err := ok("cat", o); err != nil {
		return err
	}
	if string(o.Stdout) != "one\ntwo\n" {
		return fmt.Errorf("stdout %q, want %q", o.Stdout, "one\ntwo\n")
	}
	return nil
}

func caseStreamEOF(ctx context.Context, h *H) error {
	s, err := h.startStream(ctx, h.ProbeCmd(Cmd{}, "cat"), nil)
	if err != nil {
		return err
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB: several chunks
	go func() {
		_, _ = s.stdin.Write(data)
		s.stdin.Close()
	}()
	o := s.end(ctx)
	if err := ok("cat of a closed stream", o); err != nil {
		return err
	}
	if !bytes.Equal(o.Stdout, data) {
		return fmt.Errorf("cat returned %d bytes of %d (or different)", len(o.Stdout), len(data))
	}
	s, err = h.startStream(ctx, h.ProbeCmd(Cmd{}, "cat"), nil)
	if err != nil {
		return err
	}
	s.stdin.Close()
	if o := s.end(ctx); ok("cat of a stream closed at once", o) != nil || len(o.Stdout) != 0 {
		return fmt.Errorf("cat of a stream closed at once: %s", o)
	}
	return nil
}

func caseStreamSignal(ctx context.Context, h *H) error {
	sg, isSig := h.Driver.(driverapi.Signaler)
	if !isSig || !h.Caps.Supports(driverapi.CallSignal) {
		return fmt.Errorf("the driver claims %s but does not list the %q call", driverapi.FeatureSignals, driverapi.CallSignal)
	}
	s, err := h.startStream(ctx, Cmd{Program: h.suite.progs.sh, Args: []string{"-c",
		`trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done`}}, nil)
	if err != nil {
		return err
	}
	if err := s.waitOut(ctx, "ready\n"); err != nil {
		return err
	}
	if err := sg.Signal(ctx, s.id, driverapi.SignalTERM); err != nil {
		return fmt.Errorf("Signal: %w", err)
	}
	o := s.end(ctx)
	if o.Err != nil || o.Exit.ExitCode != 7 || o.Exit.Signal != 0 || !strings.Contains(string(o.Stdout), "got-term") {
		return fmt.Errorf("want the handler's exit 7 after got-term, got %s", o)
	}
	return nil
}

func (h *H) shCmd(script string) Cmd {
	return Cmd{Program: h.suite.progs.sh, Args: []string{"-c", script}}
}

func casePtyIsatty(ctx context.Context, h *H) error {
	const script = `for fd in 0 1 2; do if test -t $fd; then echo "$fd:tty"; else echo "$fd:no"; fi; done`
	s, err := h.startStream(ctx, h.shCmd(script), &driverapi.WindowSize{Rows: 24, Cols: 80})
	if err != nil {
		return err
	}
	o := s.end(ctx)
	if err := ok("test -t in a pty", o); err != nil {
		return err
	}
	if got := crlf(o.Stdout); got != "0:tty\n1:tty\n2:tty\n" {
		return fmt.Errorf("in a pty: %q, want every descriptor a terminal", got)
	}
	// The control: the same script in a streamed run without a pty.
	s, err = h.startStream(ctx, h.shCmd(script), nil)
	if err != nil {
		return err
	}
	s.stdin.Close()
	o = s.end(ctx)
	if err := ok("test -t without a pty", o); err != nil {
		return err
	}
	if got := string(o.Stdout); got != "0:no\n1:no\n2:no\n" {
		return fmt.Errorf("without a pty: %q, want no terminal", got)
	}
	return nil
}

func casePtyEcho(ctx context.Context, h *H) error {
	s, err := h.startStream(ctx, h.shCmd(`echo ready; read l; echo "line:$l" >&2`), &driverapi.WindowSize{Rows: 24, Cols: 80})
	if err != nil {
		return err
	}
	if err := s.waitOut(ctx, "ready"); err != nil {
		return err
	}
	if err := s.write("hello pty\n"); err != nil {
		return err
	}
	o := s.end(ctx)
	if err := ok("read through the pty", o); err != nil {
		return err
	}
	got := crlf(o.Stdout)
	// The terminal's echo, then the program's line, written to stderr:
	// on a pty both are the one stream.
	if !strings.Contains(got, "ready\nhello pty\n") || !strings.Contains(got, "line:hello pty\n") || len(o.Stderr) != 0 {
		return fmt.Errorf("stdout %q stderr %q: want the echo and the program's line on stdout", got, o.Stderr)
	}
	return nil
}

func casePtyResize(ctx context.Context, h *H) error {
	// The handler prints the size it finds: SIGWINCH reached the program
	// and the terminal has the new size by then.
	s, err := h.startStream(ctx, h.shCmd(`trap 'stty size; exit 0' WINCH; stty size; echo ready; while :; do sleep 0.05; done`),
		&driverapi.WindowSize{Rows: 21, Cols: 77})
	if err != nil {
		return err
	}
	if err := s.waitOut(ctx, "ready"); err != nil {
		return err
	}
	s.resize <- driverapi.WindowSize{Rows: 33, Cols: 111}
	o := s.end(ctx)
	if err := ok("stty size after SIGWINCH", o); err != nil {
		return err
	}
	got := crlf(o.Stdout)
	if got != "21 77\nready\n33 111\n" {
		return fmt.Errorf("stdout %q: want 21 77 first and 33 111 from the SIGWINCH handler", got)
	}
	return nil
}

func casePtyEOF(ctx context.Context, h *H) error {
	s, err := h.startStream(ctx, h.ProbeCmd(Cmd{}, "cat"), &driverapi.WindowSize{Rows: 24, Cols: 80})
	if err != nil {
		return err
	}
	if err := s.write("abc\n"); err != nil {
		return err
	}
	if err := s.waitOut(ctx, "abc\r\nabc\r\n"); err != nil {
		return err
	}
	if !s.running() {
		return fmt.Errorf("cat ended while its terminal was open: %s", s.end(ctx))
	}
	s.stdin.Close()
	return ok("cat after the stream closed", s.end(ctx))
}

func casePtyHostTerminal(ctx context.Context, h *H) error {
	// Without a pty: no controlling terminal, so /dev/tty does not open.
	const probeTTY = `if (exec 3<>/dev/tty) 2>/dev/null; then echo tty-open; else echo tty-none; fi; echo ran`
	s, err := h.startStream(ctx, h.shCmd(probeTTY), nil)
	if err != nil {
		return err
	}
	s.stdin.Close()
	o := s.end(ctx)
	if err := ran("without a pty", o, "ran"); err != nil {
		return err
	}
	if !strings.Contains(string(o.Stdout), "tty-none") {
		return fmt.Errorf("without a pty the program opened /dev/tty: a terminal outside the sandbox is its controlling terminal (%s)", o)
	}
	// With one: /dev/tty opens (the control) and is a terminal of a devpts
	// other than the host's.
	hostDev, err := hostDevptsDev()
	if err != nil {
		return fmt.Errorf("host devpts: %w", err)
	}
	s, err = h.startStream(ctx, h.shCmd(probeTTY+`; stat -c 'dev=%d' "$(tty)"`), &driverapi.WindowSize{Rows: 24, Cols: 80})
	if err != nil {
		return err
	}
	o = s.end(ctx)
	if err := ran("with a pty", o, "ran"); err != nil {
		return err
	}
	got := crlf(o.Stdout)
	if !strings.Contains(got, "tty-open") {
		return fmt.Errorf("with a pty /dev/tty did not open (the control): %q", got)
	}
	var dev uint64
	i := strings.Index(got, "dev=")
	if i < 0 {
		return fmt.Errorf("no device of the terminal in %q", got)
	}
	if _, err := fmt.Sscanf(got[i:], "dev=%d", &dev); err != nil {
		return fmt.Errorf("no device of the terminal in %q: %w", got, err)
	}
	if dev == hostDev {
		return fmt.Errorf("the command's terminal is on the host's devpts (st_dev %d): a host pty", dev)
	}
	return nil
}

func casePtyTIOCSTI(ctx context.Context, h *H) error {
	perl := h.suite.progs.perl
	if _, err := os.Stat(perl); perl == "" || err != nil {
		return fmt.Errorf("perl is needed for this case (%q)", perl)
	}
	const script = `print "ran\n";
my $c = "x"; my $r = ioctl(STDIN, 0x5412, $c); print "sti:", (defined $r ? "ok" : "err=".($!+0)), "\n";
my $ws = "\0" x 8; $r = ioctl(STDIN, 0x5413, $ws); my ($rows, $cols) = unpack("S2", $ws);
print "gwinsz:", (defined $r ? "$rows,$cols" : "err"), "\n";`
	s, err := h.startStream(ctx, Cmd{Program: perl, Args: []string{"-e", script}}, &driverapi.WindowSize{Rows: 13, Cols: 57})
	if err != nil {
		return err
	}
	o := s.end(ctx)
	if err := ran("perl on the pty", o, "ran"); err != nil {
		return err
	}
	got := crlf(o.Stdout)
	if !strings.Contains(got, "gwinsz:13,57\n") {
		return fmt.Errorf("TIOCGWINSZ on the pty did not work (the control): %q", got)
	}
	if !strings.Contains(got, fmt.Sprintf("sti:err=%d\n", errnoEPERM)) {
		return fmt.Errorf("TIOCSTI on the pty was not denied with EPERM: %q", got)
	}
	return nil
}
