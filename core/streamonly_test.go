package core

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// failAfter takes n bytes and then fails, as a stream to a client that
// went away does.
type failAfter struct {
	n   int
	got bytes.Buffer
}

func (w *failAfter) Write(p []byte) (int, error) {
	if room := w.n - w.got.Len(); room < len(p) {
		w.got.Write(p[:max(room, 0)])
		return max(room, 0), errors.New("client gone")
	}
	return w.got.Write(p)
}

// A StreamOnly command's output is held once: what reached the live
// writers is not kept again in Output, which holds only what the live
// writer did not take; truncation is judged on the whole output.
// Control: without StreamOnly the output is both streamed and kept.
func TestStreamOnlyKeepsOnlyWhatWasNotStreamed(t *testing.T) {
	out := bytes.Repeat([]byte("0123456789"), 300) // 3000 bytes
	h := newHarness(t, testConfig(t), &drivertest.FakeDriver{Stdout: out, Stderr: []byte("err")})
	ctx := context.Background()

	var live, liveErr bytes.Buffer
	o, err := h.sb.Execute(ctx, Command{SessionID: "s", Program: "/bin/echo", Stdout: &live, Stderr: &liveErr, StreamOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Stdout) != 0 || len(o.Stderr) != 0 || !bytes.Equal(live.Bytes(), out) || liveErr.String() != "err" || o.Exit.Truncated {
		t.Fatalf("streamed: kept %d+%d bytes, streamed %d (truncated %v); want 0 kept, all streamed", len(o.Stdout), len(o.Stderr), live.Len(), o.Exit.Truncated)
	}
	// The output says it was streamed, and how much: "streamed" is not
	// "empty".
	if !o.Streamed || o.StreamedStdout != int64(len(out)) || o.StreamedStderr != 3 {
		t.Fatalf("streamed: Streamed %v, counts %d/%d; want true, %d/3", o.Streamed, o.StreamedStdout, o.StreamedStderr, len(out))
	}

	// A budget below the output: the stream stops at the budget and the
	// result says it was truncated, keeping nothing.
	live.Reset()
	o, err = h.sb.Execute(ctx, Command{SessionID: "s", Program: "/bin/echo", Stdout: &live, Stderr: &liveErr, StreamOnly: true, MaxOutputBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Stdout) != 0 || live.Len() == 0 || live.Len() >= len(out) || !o.Exit.Truncated {
		t.Fatalf("budget: kept %d, streamed %d, truncated %v", len(o.Stdout), live.Len(), o.Exit.Truncated)
	}

	// The live writer fails after 100 bytes: the rest is kept.
	fw := &failAfter{n: 100}
	o, err = h.sb.Execute(ctx, Command{SessionID: "s", Program: "/bin/echo", Stdout: fw, StreamOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := append(fw.got.Bytes(), o.Stdout...); !bytes.Equal(got, out) || fw.got.Len() != 100 {
		t.Fatalf("failed stream: streamed %d + kept %d, want 100 + the rest, in order", fw.got.Len(), len(o.Stdout))
	}
	if o.StreamedStdout != 100 {
		t.Fatalf("failed stream: StreamedStdout %d, want the 100 bytes the writer took", o.StreamedStdout)
	}

	// Control: without StreamOnly, streamed and kept.
	live.Reset()
	o, err = h.sb.Execute(ctx, Command{SessionID: "s", Program: "/bin/echo", Stdout: &live})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(o.Stdout, out) || !bytes.Equal(live.Bytes(), out) || o.Streamed {
		t.Fatalf("control: kept %d, streamed %d, Streamed %v", len(o.Stdout), live.Len(), o.Streamed)
	}
}
