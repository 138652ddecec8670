package core

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// streamDriver is a fake protocol-1.2 driver: RunStream answers each line
// of stdin with "got:LINE", reports the terminal it was given and every
// window size, and ends at EOF with exit 0. With hold set it reads no
// stdin until hold is closed.
type streamDriver struct {
	drivertest.FakeDriver
	hold chan struct{}
}

func (d *streamDriver) RunStream(ctx context.Context, spec driverapi.RunSpec, in driverapi.StreamInput, st driverapi.Streams) (driverapi.Exit, error) {
	if spec.Tty != nil {
		fmt.Fprintf(st.Stdout, "tty %dx%d\n", spec.Tty.Rows, spec.Tty.Cols)
	}
	if d.hold != nil {
		select {
		case <-d.hold:
		case <-ctx.Done():
			return driverapi.Exit{}, ctx.Err()
		}
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		if in.Stdin == nil {
			return
		}
		sc := bufio.NewScanner(in.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return driverapi.Exit{}, ctx.Err()
		case ws := <-in.Resize:
			fmt.Fprintf(st.Stdout, "resize %dx%d\n", ws.Rows, ws.Cols)
		case l, ok := <-lines:
			if !ok {
				fmt.Fprintln(st.Stdout, "eof")
				return driverapi.Exit{}, nil
			}
			fmt.Fprintf(st.Stdout, "got:%s\n", l)
		}
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func waitSeen(t *testing.T, b *syncBuf, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("never saw %q in %q", want, b.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func streamCmd(stdin io.Reader, out io.Writer) Command {
	return Command{SessionID: "s", Program: "prog", StdinStream: stdin, Stdout: out}
}

func TestStreamedStdinArrivesAsWritten(t *testing.T) {
	h := newHarness(t, testConfig(t), nil, WithDriver(drivertest.Connect(t, &streamDriver{})))
	pr, pw := io.Pipe()
	var out syncBuf
	done := make(chan error, 1)
	go func() {
		_, err := h.sb.Execute(context.Background(), streamCmd(pr, &out))
		done <- err
	}()
	fmt.Fprintln(pw, "one")
	// Answered before the next line exists: nothing waits for EOF.
	waitSeen(t, &out, "got:one\n")
	fmt.Fprintln(pw, "two")
	waitSeen(t, &out, "got:two\n")
	if strings.Contains(out.String(), "eof") {
		t.Fatal("EOF before stdin was closed")
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if out.String() != "got:one\ngot:two\neof\n" {
		t.Fatalf("output %q", out.String())
	}
	if r := h.sink.last(t); !r.Interactive || r.Tty || r.Decision != DecisionAllow {
		t.Fatalf("audit record %+v", r)
	}
}

func TestTtyCommandGetsSizeAndResizes(t *testing.T) {
	h := newHarness(t, testConfig(t), nil, WithDriver(drivertest.Connect(t, &streamDriver{})))
	pr, pw := io.Pipe()
	resize := make(chan driverapi.WindowSize)
	var out syncBuf
	cmd := streamCmd(pr, &out)
	cmd.Tty, cmd.Resize = &driverapi.WindowSize{Rows: 24, Cols: 80}, resize
	done := make(chan error, 1)
	go func() {
		_, err := h.sb.Execute(context.Background(), cmd)
		done <- err
	}()
	waitSeen(t, &out, "tty 24x80\n")
	resize <- driverapi.WindowSize{Rows: 50, Cols: 120}
	waitSeen(t, &out, "resize 50x120\n")
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if r := h.sink.last(t); !r.Interactive || !r.Tty {
		t.Fatalf("audit record %+v", r)
	}
}

func TestStreamRefusedByDriverWithoutTheCall(t *testing.T) {
	// FakeDriver claims every feature but has no RunStream: a 1.1 driver.
	h := newHarness(t, testConfig(t), nil)
	_, err := h.sb.Execute(context.Background(), streamCmd(strings.NewReader("x"), nil))
	de := wantDenied(t, err, ReasonUnenforceable)
	if de.Feature != driverapi.FeatureStdinStream || !strings.Contains(de.Reason, driverapi.CallRunStream) {
		t.Fatalf("refusal %+v", de)
	}
	cmd := Command{SessionID: "s", Program: "prog", Tty: &driverapi.WindowSize{Rows: 1, Cols: 1}}
	_, err = h.sb.Execute(context.Background(), cmd)
	if de := wantDenied(t, err, ReasonUnenforceable); de.Feature != driverapi.FeaturePTY {
		t.Fatalf("refusal %+v", de)
	}
	if h.fake.Runs() != 0 {
		t.Fatal("a refused command ran")
	}
	// Positive control: the same driver runs a plain command.
	if _, err := h.sb.Execute(context.Background(), Command{SessionID: "s", Program: "prog", Stdin: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if r := h.sink.last(t); r.Interactive || r.Tty {
		t.Fatalf("plain command recorded as interactive: %+v", r)
	}
}

func TestTtyRefusedWhenNotClaimed(t *testing.T) {
	caps := drivertest.FullCapabilities()
	caps.Features = nil
	for _, f := range driverapi.KnownFeatures() {
		if f != driverapi.FeaturePTY {
			caps.Features = append(caps.Features, f)
		}
	}
	caps.Unavailable = []driverapi.Unavailable{{Feature: driverapi.FeaturePTY, Reason: "no devpts here"}}
	sd := &streamDriver{FakeDriver: drivertest.FakeDriver{Caps: caps}}
	h := newHarness(t, testConfig(t), nil, WithDriver(drivertest.Connect(t, sd)))
	cmd := streamCmd(strings.NewReader(""), nil)
	cmd.Tty = &driverapi.WindowSize{Rows: 1, Cols: 1}
	_, err := h.sb.Execute(context.Background(), cmd)
	if de := wantDenied(t, err, ReasonUnenforceable); de.Feature != driverapi.FeaturePTY || !strings.Contains(de.Reason, "no devpts here") {
		t.Fatalf("refusal %+v", de)
	}
	// Positive control: streamed stdin without a terminal runs.
	var out syncBuf
	if _, err := h.sb.Execute(context.Background(), streamCmd(strings.NewReader("a\n"), &out)); err != nil || out.String() != "got:a\neof\n" {
		t.Fatalf("%v %q", err, out.String())
	}
}

func TestStreamFieldsValidated(t *testing.T) {
	h := newHarness(t, testConfig(t), nil, WithDriver(drivertest.Connect(t, &streamDriver{})))
	cmd := streamCmd(strings.NewReader(""), nil)
	cmd.Stdin = []byte("x")
	_, err := h.sb.Execute(context.Background(), cmd)
	wantInvalid(t, err, "stdin")
	cmd = streamCmd(strings.NewReader(""), nil)
	cmd.Resize = make(chan driverapi.WindowSize)
	_, err = h.sb.Execute(context.Background(), cmd)
	wantInvalid(t, err, "resize")
}

// countingReader is an endless stdin that counts what was taken from it.
type countingReader struct{ n atomic.Int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}

// A driver that does not read stdin holds the host's reader back: what is
// read from it stays bounded (gRPC's flow-control window and one chunk per
// hand-over), instead of the host buffering an endless stream.
func TestStreamedStdinBackpressure(t *testing.T) {
	sd := &streamDriver{hold: make(chan struct{})}
	h := newHarness(t, testConfig(t), nil, WithDriver(drivertest.Connect(t, sd)))
	src := &countingReader{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.sb.Execute(ctx, streamCmd(src, io.Discard))
		done <- err
	}()
	// Wait until the reading stops growing (it must, or the bound below
	// fails anyway).
	var last int64 = -1
	for i := 0; i < 200; i++ {
		time.Sleep(50 * time.Millisecond)
		n := src.n.Load()
		if n > 0 && n == last {
			break
		}
		last = n
	}
	const bound = 8 << 20
	if n := src.n.Load(); n == 0 || n > bound {
		t.Fatalf("read %d bytes of stdin the driver never took (want 0 < n <= %d)", n, bound)
	} else {
		t.Logf("read %d bytes of an endless stdin the driver did not take", n)
	}
	cancel()
	<-done
	close(sd.hold)
}
