package driverapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/aleph-sandbox/aleph-sandbox/driverapi/proto/alephv1"
)

// Streamed runs (protocol 1.2, call "run_stream").
//
// Run takes stdin as one buffer given up front. RunStream takes it as a
// stream instead, closed explicitly, and can give the command a
// pseudo-terminal (RunSpec.Tty) whose window size the host changes while
// it runs. Nothing is buffered without bound: the host's reader is read
// only as fast as the command consumes what it was given (gRPC's flow
// control carries that across the wire).

// WindowSize is a terminal's size in character cells.
type WindowSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// StreamInput is what the host feeds a streamed run.
type StreamInput struct {
	// Stdin is read until io.EOF, which closes the command's stdin (it
	// then reads end-of-file; on a pty the terminal's EOF character is
	// sent, which a program in canonical mode reads as end-of-file). Any
	// other error ends stdin the same way. nil: stdin is empty. RunStream
	// may return while a Read is still in progress; the caller ends it (a
	// pipe it closes, a reader that returns).
	Stdin io.Reader
	// Resize delivers window-size changes of a tty run; nil when there are
	// none. RunStream stops reading it when the command ends. Sizes travel
	// in order with stdin: one sent after stdin the command has not read
	// yet reaches it once that stdin has been taken.
	Resize <-chan WindowSize
}

// StreamRunner is implemented by drivers that list CallRunStream.
type StreamRunner interface {
	// RunStream runs spec as Run does (same verification, limits, exit
	// reporting and cancellation), except that stdin comes from in.Stdin
	// (spec.Stdin must be empty, else *InvalidSpecError) and spec.Tty may
	// ask for a pseudo-terminal. A driver that cannot give a pty here
	// refuses a spec with Tty with an *UnavailableError for FeaturePTY.
	// Signaler.Signal reaches a streamed run as it reaches any other.
	RunStream(ctx context.Context, spec RunSpec, in StreamInput, streams Streams) (Exit, error)
}

// streamChunk is the largest stdin chunk one RunStream message carries.
const streamChunk = 32 << 10

// errTtyNeedsStream: a pty is only given through RunStream (a Run of an
// older driver would ignore the field and run without one).
var errTtyNeedsStream = &InvalidSpecError{Field: "tty", Reason: "a pseudo-terminal needs RunStream (protocol 1.2); Run does not give one"}

// validateStreamSpec checks what RunStream adds to RunSpec.
func validateStreamSpec(s RunSpec) error {
	if len(s.Stdin) > 0 {
		return &InvalidSpecError{Field: "stdin", Reason: "a streamed run takes its stdin from the stream, not from the request"}
	}
	return nil
}

// ---- server side ----

func (s *driverServer) RunStream(stream pb.OsSandboxDriver_RunStreamServer) error {
	sr, ok := s.impl.(StreamRunner)
	if !ok {
		return status.Error(codes.Unimplemented, "this driver does not implement RunStream")
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return toStatus(&InvalidSpecError{Field: "start", Reason: "the first RunStream message must carry the RunRequest"})
	}
	if t := start.GetTty(); t != nil && (t.GetRows() > 0xffff || t.GetCols() > 0xffff) {
		return toStatus(&InvalidSpecError{Field: "tty", Reason: fmt.Sprintf("window size %dx%d exceeds 65535", t.GetRows(), t.GetCols())})
	}
	spec := runSpecFromPB(start)
	if err := validateStreamSpec(spec); err != nil {
		return toStatus(err)
	}

	// Stdin goes through an io.Pipe: each chunk is handed over only when
	// the driver reads it, and the next message is received only then,
	// so gRPC's flow control holds the host back.
	pr, pw := io.Pipe()
	resize := make(chan WindowSize, 1)
	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		stdinOpen := true
		for {
			m, err := stream.Recv()
			if err != nil {
				// The host ended its side (EOF) or the stream died:
				// either way no more stdin.
				pw.CloseWithError(io.EOF)
				return
			}
			switch x := m.GetMsg().(type) {
			case *pb.RunStreamRequest_Stdin:
				if stdinOpen {
					if _, err := pw.Write(x.Stdin); err != nil {
						// The driver stopped reading (the command ended):
						// later chunks are dropped.
						stdinOpen = false
					}
				}
			case *pb.RunStreamRequest_CloseStdin:
				stdinOpen = false
				pw.CloseWithError(io.EOF)
			case *pb.RunStreamRequest_Resize:
				ws := WindowSize{Rows: uint16(min(x.Resize.GetRows(), 0xffff)), Cols: uint16(min(x.Resize.GetCols(), 0xffff))}
				// The latest size wins: an older one still queued is
				// replaced, so a slow command never holds the stream up.
				select {
				case <-resize:
				default:
				}
				resize <- ws
			}
		}
	}()

	var mu sync.Mutex // grpc streams allow one concurrent Send
	send := func(st pb.Stream, p []byte) error {
		mu.Lock()
		defer mu.Unlock()
		for len(p) > 0 {
			n := min(len(p), MaxOutputChunk)
			ev := &pb.RunEvent{Event: &pb.RunEvent_Output{Output: &pb.OutputChunk{Stream: st, Data: p[:n]}}}
			if err := stream.Send(ev); err != nil {
				return err
			}
			p = p[n:]
		}
		return nil
	}
	streams := Streams{
		Stdout: chunkWriter{stream: pb.Stream_STREAM_STDOUT, send: send},
		Stderr: chunkWriter{stream: pb.Stream_STREAM_STDERR, send: send},
	}
	in := StreamInput{Stdin: pr}
	if spec.Tty != nil {
		in.Resize = resize
	}
	exit, err := sr.RunStream(stream.Context(), spec, in, streams)
	// Unblocks a Write of the receiver the driver will never read.
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return toStatus(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return stream.Send(&pb.RunEvent{Event: &pb.RunEvent_Exit{Exit: exitToPB(exit)}})
}

// ---- client side ----

var _ StreamRunner = (*driverClient)(nil)

// RunStream runs spec with streamed stdin. Callers check
// HostCapabilities.Supports(CallRunStream) first; a driver without the
// call gives an *UnsupportedCallError.
func (d *driverClient) RunStream(ctx context.Context, spec RunSpec, in StreamInput, streams Streams) (Exit, error) {
	if err := validateStreamSpec(spec); err != nil {
		return Exit{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream, which tells the driver to kill the tree
	st, err := d.c.RunStream(ctx)
	if err != nil {
		return Exit{}, d.callError("RunStream", CallRunStream, err)
	}
	if err := st.Send(&pb.RunStreamRequest{Msg: &pb.RunStreamRequest_Start{Start: runSpecToPB(spec)}}); err != nil && !errors.Is(err, io.EOF) {
		return Exit{}, d.callError("RunStream", CallRunStream, err)
	}

	// One goroutine sends (gRPC allows one concurrent Send); another reads
	// stdin and hands each chunk over unbuffered, so at most one chunk is
	// held here while Send waits for the driver's flow-control window.
	chunks := make(chan []byte)
	go func() {
		defer close(chunks)
		if in.Stdin == nil {
			return
		}
		for {
			buf := make([]byte, streamChunk)
			n, err := in.Stdin.Read(buf)
			if n > 0 {
				select {
				case chunks <- buf[:n]:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, resize := chunks, in.Resize
		for {
			var m *pb.RunStreamRequest
			// A waiting size goes before more stdin: the command may be
			// redrawing for it rather than reading.
			select {
			case ws, ok := <-resize:
				if ok {
					m = &pb.RunStreamRequest{Msg: &pb.RunStreamRequest_Resize{Resize: &pb.WindowSize{Rows: uint32(ws.Rows), Cols: uint32(ws.Cols)}}}
				} else {
					resize = nil
				}
			default:
			}
			if m != nil {
				if err := st.Send(m); err != nil {
					return
				}
				continue
			}
			select {
			case <-ctx.Done():
				return
			case b, ok := <-c:
				if !ok {
					c = nil
					m = &pb.RunStreamRequest{Msg: &pb.RunStreamRequest_CloseStdin{CloseStdin: &pb.CloseStdin{}}}
				} else {
					m = &pb.RunStreamRequest{Msg: &pb.RunStreamRequest_Stdin{Stdin: b}}
				}
			case ws, ok := <-resize:
				if !ok {
					resize = nil
					continue
				}
				m = &pb.RunStreamRequest{Msg: &pb.RunStreamRequest_Resize{Resize: &pb.WindowSize{Rows: uint32(ws.Rows), Cols: uint32(ws.Cols)}}}
			}
			if err := st.Send(m); err != nil {
				// The run is over (or the stream broke): Recv reports it.
				return
			}
		}
	}()
	defer wg.Wait()
	defer cancel() // before wg.Wait: the sender stops on ctx
	for {
		ev, err := st.Recv()
		if err == io.EOF {
			return Exit{}, &PluginError{Plugin: d.name, Op: "RunStream", Err: errors.New("stream ended without an exit event")}
		}
		if err != nil {
			return Exit{}, d.callError("RunStream", CallRunStream, err)
		}
		switch e := ev.GetEvent().(type) {
		case *pb.RunEvent_Output:
			w := streams.Stdout
			if e.Output.GetStream() == pb.Stream_STREAM_STDERR {
				w = streams.Stderr
			}
			if w != nil {
				if _, err := w.Write(e.Output.GetData()); err != nil {
					return Exit{}, fmt.Errorf("writing command output: %w", err)
				}
			}
		case *pb.RunEvent_Exit:
			return exitFromPB(e.Exit), nil
		default:
			return Exit{}, &PluginError{Plugin: d.name, Op: "RunStream", Err: errors.New("unknown event in run stream")}
		}
	}
}
