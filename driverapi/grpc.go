package driverapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/aleph-sandbox/aleph-sandbox/driverapi/proto/alephv1"
)

// ---- driver: server side (runs in the plugin process) ----

type driverServer struct {
	pb.UnimplementedOsSandboxDriverServer
	impl Driver
}

func (s *driverServer) Capabilities(ctx context.Context, _ *pb.CapabilitiesRequest) (*pb.HostCapabilities, error) {
	h, err := s.impl.Capabilities(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	if h.ProtocolVersion == 0 {
		h.ProtocolVersion = ProtocolVersion
	}
	return hostCapsToPB(h), nil
}

func (s *driverServer) ProfileFor(ctx context.Context, req *pb.ProfileRequest) (*pb.Profile, error) {
	r, err := profileReqFromPB(req)
	if err != nil {
		return nil, toStatus(err)
	}
	p, err := s.impl.ProfileFor(ctx, r)
	if err != nil {
		return nil, toStatus(err)
	}
	return profileToPB(p), nil
}

func (s *driverServer) Run(req *pb.RunRequest, stream pb.OsSandboxDriver_RunServer) error {
	var mu sync.Mutex // grpc streams allow one concurrent Send
	send := func(st pb.Stream, p []byte) error {
		mu.Lock()
		defer mu.Unlock()
		for len(p) > 0 {
			n := min(len(p), MaxOutputChunk)
			// Copy: the caller may reuse p once Write returns, but Send
			// marshals synchronously, so the slice is safe to pass as is.
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
	exit, err := s.impl.Run(stream.Context(), runSpecFromPB(req), streams)
	if err != nil {
		return toStatus(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return stream.Send(&pb.RunEvent{Event: &pb.RunEvent_Exit{Exit: exitToPB(exit)}})
}

type chunkWriter struct {
	stream pb.Stream
	send   func(pb.Stream, []byte) error
}

func (w chunkWriter) Write(p []byte) (int, error) {
	if err := w.send(w.stream, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// ---- driver: client side (runs in the host) ----

// driverClient turns a gRPC connection to a driver plugin back into a Driver.
type driverClient struct {
	c    pb.OsSandboxDriverClient
	name string
}

var _ Driver = (*driverClient)(nil)

// NewDriverClient wraps a gRPC connection to an OsSandboxDriver service.
// name labels errors (usually the plugin's path).
func NewDriverClient(conn grpc.ClientConnInterface, name string) Driver {
	return &driverClient{c: pb.NewOsSandboxDriverClient(conn), name: name}
}

func (d *driverClient) Capabilities(ctx context.Context) (HostCapabilities, error) {
	h, err := d.c.Capabilities(ctx, &pb.CapabilitiesRequest{})
	if err != nil {
		return HostCapabilities{}, fromStatus(d.name, "Capabilities", err)
	}
	return hostCapsFromPB(h), nil
}

func (d *driverClient) ProfileFor(ctx context.Context, req ProfileRequest) (Profile, error) {
	p, err := d.c.ProfileFor(ctx, profileReqToPB(req))
	if err != nil {
		return Profile{}, fromStatus(d.name, "ProfileFor", err)
	}
	return profileFromPB(p), nil
}

func (d *driverClient) Run(ctx context.Context, spec RunSpec, streams Streams) (Exit, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream, which tells the driver to kill the tree
	st, err := d.c.Run(ctx, runSpecToPB(spec))
	if err != nil {
		return Exit{}, fromStatus(d.name, "Run", err)
	}
	for {
		ev, err := st.Recv()
		if err == io.EOF {
			return Exit{}, &PluginError{Plugin: d.name, Op: "Run", Err: errors.New("stream ended without an exit event")}
		}
		if err != nil {
			return Exit{}, fromStatus(d.name, "Run", err)
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
			return Exit{}, &PluginError{Plugin: d.name, Op: "Run", Err: errors.New("unknown event in run stream")}
		}
	}
}

// ---- hook: server side ----

type hookServer struct {
	pb.UnimplementedSandboxHookServer
	impl Hook
}

func (s *hookServer) Describe(ctx context.Context, _ *pb.DescribeRequest) (*pb.HookInfo, error) {
	i, err := s.impl.Describe(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.HookInfo{Name: i.Name, Version: i.Version, Description: i.Description}, nil
}

func (s *hookServer) Before(ctx context.Context, req *pb.HookRequest) (*pb.Verdict, error) {
	r, err := hookReqFromPB(req)
	if err != nil {
		return nil, toStatus(err)
	}
	v, err := s.impl.Before(ctx, r)
	if err != nil {
		return nil, toStatus(err)
	}
	return verdictToPB(v), nil
}

func (s *hookServer) After(ctx context.Context, req *pb.AfterRequest) (*pb.AfterResponse, error) {
	if a, ok := s.impl.(AfterHook); ok {
		a.After(ctx, req.GetSessionId(), req.GetCommandId(), req.GetRan())
	}
	return &pb.AfterResponse{}, nil
}

// ---- hook: client side ----

type hookClient struct {
	c    pb.SandboxHookClient
	name string
}

var _ AfterHook = (*hookClient)(nil)

// NewHookClient wraps a gRPC connection to a SandboxHook service.
func NewHookClient(conn grpc.ClientConnInterface, name string) AfterHook {
	return &hookClient{c: pb.NewSandboxHookClient(conn), name: name}
}

func (h *hookClient) Describe(ctx context.Context) (HookInfo, error) {
	i, err := h.c.Describe(ctx, &pb.DescribeRequest{})
	if err != nil {
		return HookInfo{}, fromStatus(h.name, "Describe", err)
	}
	return HookInfo{Name: i.GetName(), Version: i.GetVersion(), Description: i.GetDescription()}, nil
}

func (h *hookClient) Before(ctx context.Context, req HookRequest) (Verdict, error) {
	v, err := h.c.Before(ctx, hookReqToPB(req))
	if err != nil {
		return Verdict{}, fromStatus(h.name, "Before", err)
	}
	out, err := verdictFromPB(v)
	if err != nil {
		return Verdict{}, &PluginError{Plugin: h.name, Op: "Before", Err: err}
	}
	return out, nil
}

func (h *hookClient) After(ctx context.Context, sessionID, commandID string, ran bool) {
	// Best effort: a lost After only keeps a slot until the hook forgets the
	// session; it never lets a command through.
	_, _ = h.c.After(ctx, &pb.AfterRequest{SessionId: sessionID, CommandId: commandID, Ran: ran})
}

// ---- errors across the wire ----

func toStatus(err error) error {
	var pe *ProfileError
	var ie *InvalidSpecError
	switch {
	case errors.As(err, &pe), errors.As(err, &ie):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

// RemoteError is an error a plugin returned for a call.
type RemoteError struct {
	Plugin string
	Op     string
	Msg    string
}

func (e *RemoteError) Error() string { return fmt.Sprintf("plugin %s: %s: %s", e.Plugin, e.Op, e.Msg) }

func fromStatus(name, op string, err error) error {
	s, ok := status.FromError(err)
	if !ok {
		return &PluginError{Plugin: name, Op: op, Err: err}
	}
	switch s.Code() {
	case codes.InvalidArgument:
		msg := s.Message()
		if r, ok := strings.CutPrefix(msg, "invalid profile: "); ok {
			return &ProfileError{Reason: r}
		}
		if f, r, ok := strings.Cut(strings.TrimPrefix(msg, "invalid "), ": "); ok {
			return &InvalidSpecError{Field: f, Reason: r}
		}
		return &InvalidSpecError{Field: "request", Reason: msg}
	case codes.Canceled:
		return fmt.Errorf("plugin %s: %s: %w", name, op, context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("plugin %s: %s: %w", name, op, context.DeadlineExceeded)
	case codes.Unavailable:
		return &PluginError{Plugin: name, Op: op, Err: fmt.Errorf("%w: %s", ErrPluginDied, s.Message())}
	}
	return &RemoteError{Plugin: name, Op: op, Msg: s.Message()}
}
