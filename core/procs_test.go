package core

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

func newProcTable(t *testing.T, d *streamDriver, lim ProcessLimits) (*harness, *ProcessTable) {
	t.Helper()
	h := newHarness(t, testConfig(t), nil, WithDriver(drivertest.Connect(t, d)))
	pt := NewProcessTable(h.sb, lim)
	t.Cleanup(pt.Close)
	return h, pt
}

// readUntil reads from offset 0 until the output holds want.
func readUntil(t *testing.T, pt *ProcessTable, id, want string) ProcessRead {
	t.Helper()
	var all []byte
	var off int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := pt.Read(context.Background(), id, off, 200*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		all, off = append(all, r.Data...), r.Next
		if strings.Contains(string(all), want) {
			return r
		}
		if r.Exited || time.Now().After(deadline) {
			t.Fatalf("never saw %q in %q (exited %v)", want, all, r.Exited)
		}
	}
}

func TestProcessStdinRoundTripAndWait(t *testing.T) {
	h, pt := newProcTable(t, &streamDriver{}, ProcessLimits{})
	ctx, cancel := context.WithCancel(context.Background())
	id, err := pt.Start(ctx, Command{SessionID: "s", Program: "prog"})
	// The call that started it ends; the process does not.
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := pt.Write(context.Background(), id, []byte("one\n")); err != nil || n != 4 {
		t.Fatalf("write %d %v", n, err)
	}
	readUntil(t, pt, id, "got:one\n")
	if l := pt.List("s"); len(l) != 1 || l[0].ID != id || l[0].Exited {
		t.Fatalf("list %+v", l)
	}
	if l := pt.List("other"); len(l) != 0 {
		t.Fatalf("other session lists %+v", l)
	}
	if err := pt.CloseStdin(id); err != nil {
		t.Fatal(err)
	}
	if _, err := pt.Write(context.Background(), id, []byte("x")); !errors.Is(err, ErrStdinClosed) && !errors.Is(err, ErrProcessEnded) {
		t.Fatalf("write after close: %v", err)
	}
	res, err := pt.Wait(context.Background(), id)
	if err != nil || res.Err != nil || res.Output.Exit.ExitCode != 0 {
		t.Fatalf("wait %+v %v", res, err)
	}
	if got := string(res.Output.Stdout); got != "got:one\neof\n" {
		t.Fatalf("output %q", got)
	}
	// Its own audit record, written at its end, with its duration.
	if r := h.sink.last(t); !r.Interactive || r.Decision != DecisionAllow || r.SessionID != "s" {
		t.Fatalf("audit record %+v", r)
	}
	// Waited for: gone.
	var nf *ProcessNotFoundError
	if _, err := pt.Read(context.Background(), id, 0, 0); !errors.As(err, &nf) {
		t.Fatalf("read after wait: %v", err)
	}
}

func TestProcessOnAnOlderDriverIsRefused(t *testing.T) {
	h := newHarness(t, testConfig(t), nil)
	pt := NewProcessTable(h.sb, ProcessLimits{MaxLifetime: 3 * time.Hour})
	t.Cleanup(pt.Close)
	id, err := pt.Start(context.Background(), Command{SessionID: "s", Program: "prog"})
	if err != nil {
		t.Fatal(err)
	}
	// The fake driver does not stream: the refusal is the result.
	res, err := pt.Wait(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var de *DeniedError
	if !errors.As(res.Err, &de) || de.Feature != driverapi.FeatureStdinStream {
		t.Fatalf("want a stdin_stream refusal, got %+v", res)
	}
}

// timeoutDriver records the timeout RunStream was given.
type timeoutDriver struct {
	streamDriver
	timeout atomic.Value
}

func (d *timeoutDriver) RunStream(ctx context.Context, spec driverapi.RunSpec, in driverapi.StreamInput, st driverapi.Streams) (driverapi.Exit, error) {
	d.timeout.Store(spec.Timeout)
	return d.streamDriver.RunStream(ctx, spec, in, st)
}

func TestProcessLifetimeIsTheTimeout(t *testing.T) {
	d := &timeoutDriver{}
	h := newHarness(t, testConfig(t), nil, WithDriver(drivertest.Connect(t, d)))
	pt := NewProcessTable(h.sb, ProcessLimits{MaxLifetime: 3 * time.Hour})
	t.Cleanup(pt.Close)
	id, err := pt.Start(context.Background(), Command{SessionID: "s", Program: "prog", Timeout: 100 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	_ = pt.CloseStdin(id)
	if _, err := pt.Wait(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	// Not the configured default of one command, nor more than the cap.
	if got := d.timeout.Load().(time.Duration); got != 3*time.Hour {
		t.Fatalf("timeout %v, want the 3h maximum lifetime", got)
	}
}

func TestProcessForgetSessionKillsIt(t *testing.T) {
	d := &streamDriver{hold: make(chan struct{})}
	_, pt := newProcTable(t, d, ProcessLimits{})
	id, err := pt.Start(context.Background(), Command{SessionID: "a", Program: "prog"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := pt.Start(context.Background(), Command{SessionID: "b", Program: "prog"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { pt.ForgetSession("a"); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("ForgetSession did not end the session's process")
	}
	var nf *ProcessNotFoundError
	if _, err := pt.Read(context.Background(), id, 0, 0); !errors.As(err, &nf) {
		t.Fatalf("forgotten process still there: %v", err)
	}
	// The other session's process runs on.
	if l := pt.List(""); len(l) != 1 || l[0].ID != other || l[0].Exited {
		t.Fatalf("list %+v", l)
	}
	pt.Close()
	if l := pt.List(""); len(l) != 0 {
		t.Fatalf("after Close: %+v", l)
	}
	if _, err := pt.Start(context.Background(), Command{SessionID: "a", Program: "prog"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("start after close: %v", err)
	}
}

func TestProcessSignalAndResize(t *testing.T) {
	_, pt := newProcTable(t, &streamDriver{}, ProcessLimits{})
	id, err := pt.Start(context.Background(), Command{SessionID: "s", Program: "prog", Tty: &driverapi.WindowSize{Rows: 24, Cols: 80}})
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, pt, id, "tty 24x80\n")
	if err := pt.Resize(id, driverapi.WindowSize{Rows: 40, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	readUntil(t, pt, id, "resize 40x100\n")
	// The fake driver cannot forward signals: the pipeline ends the
	// command, which is the process's result.
	if err := pt.Signal(id, driverapi.SignalTERM); err != nil {
		t.Fatal(err)
	}
	res, err := pt.Wait(context.Background(), id)
	if err != nil || res.Err == nil {
		t.Fatalf("signalled process: %+v %v", res, err)
	}
	plain, err := pt.Start(context.Background(), Command{SessionID: "s", Program: "prog"})
	if err != nil {
		t.Fatal(err)
	}
	var ic *InvalidCommandError
	if err := pt.Resize(plain, driverapi.WindowSize{Rows: 1, Cols: 1}); !errors.As(err, &ic) {
		t.Fatalf("resize without a terminal: %v", err)
	}
}

func TestProcessRingDropsOldestAndSaysSo(t *testing.T) {
	_, pt := newProcTable(t, &streamDriver{}, ProcessLimits{RingBytes: 16})
	id, err := pt.Start(context.Background(), Command{SessionID: "s", Program: "prog"})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = pt.Write(context.Background(), id, []byte("aaaa\nbbbb\ncccc\n"))
	_ = pt.CloseStdin(id)
	// "got:aaaa\ngot:bbbb\ngot:cccc\neof\n" is 31 bytes; 16 are kept.
	var r ProcessRead
	for deadline := time.Now().Add(10 * time.Second); !r.Exited; {
		r, err = pt.Read(context.Background(), id, 0, 200*time.Millisecond)
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("read %+v %v", r, err)
		}
	}
	if r.Dropped != 31-16 || r.Next != 31 || !strings.HasSuffix(string(r.Data), "got:cccc\neof\n") {
		t.Fatalf("read %+v (%q)", r, r.Data)
	}
	// Reading from the end gives nothing more, at once.
	if r2, err := pt.Read(context.Background(), id, r.Next, time.Hour); err != nil || len(r2.Data) != 0 || !r2.Exited {
		t.Fatalf("read at end %+v %v", r2, err)
	}
}

func TestProcessCaps(t *testing.T) {
	d := &streamDriver{hold: make(chan struct{})}
	_, pt := newProcTable(t, d, ProcessLimits{PerSession: 1, Total: 2})
	if _, err := pt.Start(context.Background(), Command{SessionID: "a", Program: "prog"}); err != nil {
		t.Fatal(err)
	}
	var le *ProcessLimitError
	if _, err := pt.Start(context.Background(), Command{SessionID: "a", Program: "prog"}); !errors.As(err, &le) || le.Scope != "session" {
		t.Fatalf("second in session: %v", err)
	}
	if _, err := pt.Start(context.Background(), Command{SessionID: "b", Program: "prog"}); err != nil {
		t.Fatal(err)
	}
	if _, err := pt.Start(context.Background(), Command{SessionID: "c", Program: "prog"}); !errors.As(err, &le) || le.Scope != "total" {
		t.Fatalf("third in all: %v", err)
	}
	var ic *InvalidCommandError
	if _, err := pt.Start(context.Background(), Command{Program: "prog"}); !errors.As(err, &ic) {
		t.Fatalf("no session: %v", err)
	}
}

func TestProcessStdinPipeIsBounded(t *testing.T) {
	// The pipe between Write and the run (whose driver stream has its own
	// flow-control window) holds at most its bound: a writer past it waits.
	b := newBoundedPipe(4)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	n, err := b.write(ctx, []byte("abc\ndef\n"), nil)
	if n != 4 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write into a full pipe: %d %v", n, err)
	}
	buf := make([]byte, 16)
	if n, err := b.Read(buf); n != 4 || err != nil || string(buf[:n]) != "abc\n" {
		t.Fatalf("read %q %v", buf[:n], err)
	}
	if n, err := b.write(context.Background(), []byte("def\n"), nil); n != 4 || err != nil {
		t.Fatalf("write once read: %d %v", n, err)
	}
	b.CloseWrite()
	if n, err := b.Read(buf); n != 4 || err != nil {
		t.Fatalf("read after close: %d %v", n, err)
	}
	if _, err := b.Read(buf); err != io.EOF {
		t.Fatalf("EOF after the last byte: %v", err)
	}
	if _, err := b.write(context.Background(), []byte("x"), nil); !errors.Is(err, ErrStdinClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// deafExecutor runs until its context ends and never reads the signals
// it is given: a command still in its hooks or approval, or a driver that
// does not deliver them.
type deafExecutor struct{ running chan struct{} }

func (e deafExecutor) Execute(ctx context.Context, cmd Command) (*Output, error) {
	close(e.running)
	<-ctx.Done()
	return nil, ctx.Err()
}

// A KILL is never lost: not behind a full queue of other signals, and not
// when nothing delivers signals at all. Positive control: the other
// signals alone do not end the process.
func TestProcessKillIsNeverDropped(t *testing.T) {
	for _, burst := range []int{0, 20} {
		e := deafExecutor{running: make(chan struct{})}
		pt := NewProcessTable(e, ProcessLimits{})
		id, err := pt.Start(context.Background(), Command{SessionID: "s", Program: "prog"})
		if err != nil {
			t.Fatal(err)
		}
		<-e.running
		for range burst {
			if err := pt.Signal(id, driverapi.SignalTERM); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
		if l := pt.List(""); len(l) != 1 || l[0].Exited {
			t.Fatalf("burst %d: TERM ended a process that ignores it: %+v", burst, l)
		}
		if err := pt.Signal(id, driverapi.SignalKILL); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*killBackstop)
		res, err := pt.Wait(ctx, id)
		cancel()
		if err != nil || res.Err == nil {
			t.Fatalf("burst %d: KILL did not end the process: %+v %v", burst, res, err)
		}
		pt.Close()
	}
}

// slowEndExecutor is a run that a cancel reaches at once but that takes
// until release to end (a driver still tearing its sandbox down).
type slowEndExecutor struct{ running, cancelled, release chan struct{} }

func (e slowEndExecutor) Execute(ctx context.Context, cmd Command) (*Output, error) {
	close(e.running)
	<-ctx.Done()
	close(e.cancelled)
	<-e.release
	return nil, ctx.Err()
}

// Repeated KILLs while the run ends arm one backstop, not a timer and a
// goroutine each (before, a thousand KILLs left a thousand goroutines
// waiting for the run's end). Positive control: the KILLs did cancel the
// run, and its end is the process's result.
func TestProcessRepeatedKillsHoldNothing(t *testing.T) {
	e := slowEndExecutor{running: make(chan struct{}), cancelled: make(chan struct{}), release: make(chan struct{})}
	pt := NewProcessTable(e, ProcessLimits{})
	defer pt.Close()
	id, err := pt.Start(context.Background(), Command{SessionID: "s", Program: "prog"})
	if err != nil {
		t.Fatal(err)
	}
	<-e.running
	before := runtime.NumGoroutine()
	const kills = 1000
	for range kills {
		if err := pt.Signal(id, driverapi.SignalKILL); err != nil {
			t.Fatal(err)
		}
	}
	if grown := runtime.NumGoroutine() - before; grown > kills/10 {
		t.Errorf("%d KILLs left %d more goroutines", kills, grown)
	}
	<-e.cancelled
	close(e.release)
	res, err := pt.Wait(context.Background(), id)
	if err != nil || !errors.Is(res.Err, context.Canceled) {
		t.Fatalf("result %+v %v, want the cancelled run's", res, err)
	}
}

// What a process holds for its result is counted (ResultBytes), besides
// its ring: while it runs and once it has ended until it is waited for;
// Wait returns the whole output, and then nothing is held.
func TestProcessResultBytesCounted(t *testing.T) {
	_, pt := newProcTable(t, &streamDriver{}, ProcessLimits{})
	id, err := pt.Start(context.Background(), Command{SessionID: "s", Program: "prog"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pt.Write(context.Background(), id, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, pt, id, "got:one\n")
	if st := pt.Stats(); st.ResultBytes != int64(len("got:one\n")) || st.OutputBytes != st.ResultBytes {
		t.Fatalf("running: ResultBytes %d, OutputBytes %d; want %d each", st.ResultBytes, st.OutputBytes, len("got:one\n"))
	}
	if err := pt.CloseStdin(id); err != nil {
		t.Fatal(err)
	}
	readUntil(t, pt, id, "eof\n")
	deadline := time.Now().Add(10 * time.Second)
	for pt.Stats().Running > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	want := "got:one\neof\n"
	if st := pt.Stats(); st.Running != 0 || st.ResultBytes != int64(len(want)) {
		t.Fatalf("ended, not waited for: running %d, ResultBytes %d; want 0, %d", st.Running, st.ResultBytes, len(want))
	}
	res, err := pt.Wait(context.Background(), id)
	if err != nil || res.Err != nil || string(res.Output.Stdout) != want || res.Output.Streamed {
		t.Fatalf("wait: %+v %v", res, err)
	}
	if st := pt.Stats(); st.ResultBytes != 0 {
		t.Fatalf("after Wait: ResultBytes %d, want 0", st.ResultBytes)
	}
}
