package driverapi_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// echoStream is a 1.2 driver: RunStream copies stdin to stdout and reports
// the terminal size and each resize on stderr.
type echoStream struct{ drivertest.FakeDriver }

func (*echoStream) RunStream(_ context.Context, spec driverapi.RunSpec, in driverapi.StreamInput, st driverapi.Streams) (driverapi.Exit, error) {
	// Stdin is read while the size is awaited: sizes travel in order with
	// stdin, so one sent after unread stdin waits for it.
	type copied struct {
		n   int64
		err error
	}
	done := make(chan copied, 1)
	go func() {
		n, err := io.Copy(st.Stdout, in.Stdin)
		done <- copied{n, err}
	}()
	if spec.Tty != nil {
		ws := <-in.Resize
		_, _ = io.WriteString(st.Stderr, "resized")
		if ws.Rows != 7 || ws.Cols != 9 || spec.Tty.Rows != 3 || spec.Tty.Cols != 4 {
			<-done
			return driverapi.Exit{ExitCode: 1}, nil
		}
	}
	c := <-done
	if c.err != nil {
		return driverapi.Exit{}, c.err
	}
	return driverapi.Exit{StdoutBytes: c.n}, nil
}

func TestRunStreamOverGRPC(t *testing.T) {
	d := drivertest.Connect(t, &echoStream{})
	caps, err := d.Capabilities(context.Background())
	if err != nil || !caps.Supports(driverapi.CallRunStream) || caps.ProtocolMinor != driverapi.ProtocolMinor {
		t.Fatalf("caps %+v %v", caps, err)
	}
	sr := d.(driverapi.StreamRunner)
	// Several chunks' worth, so the stream carries many messages.
	data := bytes.Repeat([]byte("stream me "), 20000)
	var out, errb bytes.Buffer
	resize := make(chan driverapi.WindowSize, 1)
	resize <- driverapi.WindowSize{Rows: 7, Cols: 9}
	exit, err := sr.RunStream(context.Background(), driverapi.RunSpec{Program: "p", Cwd: "/", Tty: &driverapi.WindowSize{Rows: 3, Cols: 4}},
		driverapi.StreamInput{Stdin: bytes.NewReader(data), Resize: resize}, driverapi.Streams{Stdout: &out, Stderr: &errb})
	if err != nil || exit.ExitCode != 0 || exit.StdoutBytes != int64(len(data)) || !bytes.Equal(out.Bytes(), data) || errb.String() != "resized" {
		t.Fatalf("exit %+v err %v: %d bytes back of %d, stderr %q", exit, err, out.Len(), len(data), errb.String())
	}
}

func TestRunStreamRefusedByOlderDriver(t *testing.T) {
	d := drivertest.Connect(t, &drivertest.FakeDriver{})
	caps, err := d.Capabilities(context.Background())
	if err != nil || slices.Contains(caps.Calls, driverapi.CallRunStream) {
		t.Fatalf("a driver without RunStream lists it: %+v %v", caps, err)
	}
	_, err = d.(driverapi.StreamRunner).RunStream(context.Background(), driverapi.RunSpec{Program: "p", Cwd: "/"},
		driverapi.StreamInput{Stdin: strings.NewReader("x")}, driverapi.Streams{})
	var uc *driverapi.UnsupportedCallError
	if !errors.As(err, &uc) || uc.Call != driverapi.CallRunStream {
		t.Fatalf("RunStream on an older driver: %T %v", err, err)
	}
}

func TestRunRefusesTtyAndStreamRefusesStdinBuffer(t *testing.T) {
	fake := &drivertest.FakeDriver{}
	d := drivertest.Connect(t, fake)
	_, err := d.Run(context.Background(), driverapi.RunSpec{Program: "p", Cwd: "/", Tty: &driverapi.WindowSize{Rows: 1, Cols: 1}}, driverapi.Streams{})
	var ie *driverapi.InvalidSpecError
	if !errors.As(err, &ie) || ie.Field != "tty" || fake.Runs() != 0 {
		t.Fatalf("Run with a tty: %v (runs %d)", err, fake.Runs())
	}
	sd := drivertest.Connect(t, &echoStream{})
	_, err = sd.(driverapi.StreamRunner).RunStream(context.Background(), driverapi.RunSpec{Program: "p", Cwd: "/", Stdin: []byte("x")},
		driverapi.StreamInput{}, driverapi.Streams{})
	if !errors.As(err, &ie) || ie.Field != "stdin" {
		t.Fatalf("RunStream with a stdin buffer: %v", err)
	}
}
