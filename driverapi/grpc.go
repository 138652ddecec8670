package driverapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
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

func (s *driverServer) Capabilities(ctx context.Context, req *pb.CapabilitiesRequest) (*pb.HostCapabilities, error) {
	h, err := s.impl.Capabilities(withHostProtocolMinor(ctx, req.GetHostProtocolMinor()))
	if err != nil {
		return nil, toStatus(err)
	}
	if h.ProtocolVersion == 0 {
		h.ProtocolVersion = ProtocolVersion
	}
	if h.Calls == nil {
		h.Calls = implementedCalls(s.impl)
	}
	// The minor version is what this package speaks on the driver's
	// behalf (error details, the refusal of a tty through Run), whatever
	// calls the driver has: the host never makes a call it does not list,
	// so a driver with only the base calls is a 1.2 driver without the
	// optional ones, not a 1.0 driver.
	if h.ProtocolMinor == 0 {
		h.ProtocolMinor = ProtocolMinor
	}
	return hostCapsToPB(h), nil
}

// implementedCalls lists the optional calls d implements.
func implementedCalls(d Driver) []string {
	calls := []string{}
	if _, ok := d.(Signaler); ok {
		calls = append(calls, CallSignal)
	}
	if _, ok := d.(Configurable); ok {
		calls = append(calls, CallConfig)
	}
	if _, ok := d.(SessionForgetter); ok {
		calls = append(calls, CallForgetSession)
	}
	if ss, ok := d.(SessionSandboxer); ok && ss.SessionSandboxes() {
		calls = append(calls, CallSessionSandbox)
	}
	if _, ok := d.(StreamRunner); ok {
		calls = append(calls, CallRunStream)
	}
	if lw, ok := d.(LayeredWorkspacer); ok && lw.LayeredWorkspaces() {
		calls = append(calls, CallLayeredWorkspace)
		if _, ok := d.(LayeredViewer); ok {
			calls = append(calls, CallLayeredView)
		}
		if _, ok := d.(LayeredViewOpener); ok {
			calls = append(calls, CallLayeredViewOpen)
		}
	}
	return calls
}

func (s *driverServer) ForgetSession(ctx context.Context, req *pb.ForgetSessionRequest) (*pb.ForgetSessionResponse, error) {
	f, ok := s.impl.(SessionForgetter)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this driver does not implement ForgetSession")
	}
	if req.GetSessionId() == "" {
		return nil, toStatus(&InvalidSpecError{Field: "session_id", Reason: "empty"})
	}
	if err := f.ForgetSession(ctx, req.GetSessionId()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.ForgetSessionResponse{}, nil
}

func (s *driverServer) LayeredView(ctx context.Context, req *pb.LayeredViewRequest) (*pb.LayeredViewResponse, error) {
	v, ok := s.impl.(LayeredViewer)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this driver does not implement LayeredView")
	}
	if req.GetSessionId() == "" {
		return nil, toStatus(&InvalidSpecError{Field: "session_id", Reason: "empty"})
	}
	lv, err := v.LayeredView(ctx, req.GetSessionId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.LayeredViewResponse{Mounted: lv.Mounted, Path: lv.Path, Dev: lv.Dev, Ino: lv.Ino}, nil
}

func (s *driverServer) Signal(ctx context.Context, req *pb.SignalRequest) (*pb.SignalResponse, error) {
	sg, ok := s.impl.(Signaler)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this driver does not implement Signal")
	}
	sig, err := ParseSignal(req.GetSignal())
	if err != nil {
		return nil, toStatus(err)
	}
	if req.GetCommandId() == "" {
		return nil, toStatus(&InvalidSpecError{Field: "command_id", Reason: "empty"})
	}
	if err := sg.Signal(ctx, req.GetCommandId(), sig); err != nil {
		return nil, toStatus(err)
	}
	return &pb.SignalResponse{}, nil
}

func (s *driverServer) ConfigSchema(ctx context.Context, _ *pb.ConfigSchemaRequest) (*pb.DriverConfigSchema, error) {
	c, ok := s.impl.(Configurable)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this driver does not implement ConfigSchema")
	}
	sc, err := c.ConfigSchema(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.DriverConfigSchema{Section: sc.Section}
	for _, f := range sc.Fields {
		out.Fields = append(out.Fields, &pb.ConfigField{Name: f.Name, Type: string(f.Type), Description: f.Description, DefaultJson: f.DefaultJSON, Enum: f.Enum})
	}
	return out, nil
}

func (s *driverServer) SetConfig(ctx context.Context, req *pb.SetConfigRequest) (*pb.SetConfigResponse, error) {
	c, ok := s.impl.(Configurable)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this driver does not implement SetConfig")
	}
	if err := c.SetConfig(ctx, req.GetConfigJson()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.SetConfigResponse{}, nil
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
	if req.GetTty() != nil {
		return toStatus(errTtyNeedsStream)
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
	// died, when set (a launched process), builds the error of a call
	// whose plugin died, with the plugin's last words on stderr.
	died func(transport string) error
}

var (
	_ Driver            = (*driverClient)(nil)
	_ Signaler          = (*driverClient)(nil)
	_ Configurable      = (*driverClient)(nil)
	_ SessionForgetter  = (*driverClient)(nil)
	_ LayeredViewOpener = (*driverClient)(nil)
)

// NewDriverClient wraps a gRPC connection to an OsSandboxDriver service.
// name labels errors (usually the plugin's path).
func NewDriverClient(conn grpc.ClientConnInterface, name string) Driver {
	return &driverClient{c: pb.NewOsSandboxDriverClient(conn), name: name}
}

func (d *driverClient) Capabilities(ctx context.Context) (HostCapabilities, error) {
	h, err := d.c.Capabilities(ctx, &pb.CapabilitiesRequest{HostProtocolMinor: ProtocolMinor})
	if status.Code(err) == codes.Unimplemented {
		// No driver service at all: a hook plugin, or a plugin of another
		// go-plugin program that shares the handshake.
		return HostCapabilities{}, &PluginError{Plugin: d.name, Op: "Capabilities",
			Err: fmt.Errorf("this plugin serves no aleph-sandbox driver (is it a hook plugin?): %s", status.Convert(err).Message())}
	}
	if err != nil {
		return HostCapabilities{}, statusError(d.died, d.name, "Capabilities", err)
	}
	return hostCapsFromPB(h), nil
}

// Signal asks the driver to signal a running command. Callers check
// HostCapabilities.Supports(CallSignal) first; a driver without the call
// gives an *UnsupportedCallError.
func (d *driverClient) Signal(ctx context.Context, commandID string, sig Signal) error {
	if _, err := d.c.Signal(ctx, &pb.SignalRequest{CommandId: commandID, Signal: string(sig)}); err != nil {
		return d.callError("Signal", CallSignal, err)
	}
	return nil
}

// ForgetSession tells the driver the host forgot sessionID. Callers check
// HostCapabilities.Supports(CallForgetSession) first.
func (d *driverClient) ForgetSession(ctx context.Context, sessionID string) error {
	if _, err := d.c.ForgetSession(ctx, &pb.ForgetSessionRequest{SessionId: sessionID}); err != nil {
		return d.callError("ForgetSession", CallForgetSession, err)
	}
	return nil
}

// LayeredView asks the driver where the session's mounted overlay is.
// Callers check HostCapabilities.Supports(CallLayeredView) first.
func (d *driverClient) LayeredView(ctx context.Context, sessionID string) (LayeredView, error) {
	r, err := d.c.LayeredView(ctx, &pb.LayeredViewRequest{SessionId: sessionID})
	if err != nil {
		return LayeredView{}, d.callError("LayeredView", CallLayeredView, err)
	}
	return LayeredView{Mounted: r.GetMounted(), Path: r.GetPath(), Dev: r.GetDev(), Ino: r.GetIno()}, nil
}

// ConfigSchema asks the driver to describe its configuration section.
func (d *driverClient) ConfigSchema(ctx context.Context) (ConfigSchema, error) {
	sc, err := d.c.ConfigSchema(ctx, &pb.ConfigSchemaRequest{})
	if err != nil {
		return ConfigSchema{}, d.callError("ConfigSchema", CallConfig, err)
	}
	out := ConfigSchema{Section: sc.GetSection()}
	for _, f := range sc.GetFields() {
		out.Fields = append(out.Fields, ConfigField{Name: f.GetName(), Type: ConfigFieldType(f.GetType()), Description: f.GetDescription(), DefaultJSON: f.GetDefaultJson(), Enum: f.GetEnum()})
	}
	return out, nil
}

// SetConfig hands the driver its configuration section.
func (d *driverClient) SetConfig(ctx context.Context, configJSON []byte) error {
	if _, err := d.c.SetConfig(ctx, &pb.SetConfigRequest{ConfigJson: configJSON}); err != nil {
		return d.callError("SetConfig", CallConfig, err)
	}
	return nil
}

func (d *driverClient) callError(op, call string, err error) error {
	if status.Code(err) == codes.Unimplemented {
		return &UnsupportedCallError{Plugin: d.name, Call: call}
	}
	return statusError(d.died, d.name, op, err)
}

func (d *driverClient) ProfileFor(ctx context.Context, req ProfileRequest) (Profile, error) {
	p, err := d.c.ProfileFor(ctx, profileReqToPB(req))
	if err != nil {
		return Profile{}, statusError(d.died, d.name, "ProfileFor", err)
	}
	return profileFromPB(p), nil
}

func (d *driverClient) Run(ctx context.Context, spec RunSpec, streams Streams) (Exit, error) {
	if spec.Tty != nil {
		return Exit{}, errTtyNeedsStream
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream, which tells the driver to kill the tree
	st, err := d.c.Run(ctx, runSpecToPB(spec))
	if err != nil {
		return Exit{}, statusError(d.died, d.name, "Run", err)
	}
	for {
		ev, err := st.Recv()
		if err == io.EOF {
			return Exit{}, &PluginError{Plugin: d.name, Op: "Run", Err: errors.New("stream ended without an exit event")}
		}
		if err != nil {
			return Exit{}, statusError(d.died, d.name, "Run", err)
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
	died func(transport string) error
}

var _ AfterHook = (*hookClient)(nil)

// NewHookClient wraps a gRPC connection to a SandboxHook service.
func NewHookClient(conn grpc.ClientConnInterface, name string) AfterHook {
	return &hookClient{c: pb.NewSandboxHookClient(conn), name: name}
}

func (h *hookClient) Describe(ctx context.Context) (HookInfo, error) {
	i, err := h.c.Describe(ctx, &pb.DescribeRequest{})
	if err != nil {
		return HookInfo{}, statusError(h.died, h.name, "Describe", err)
	}
	return HookInfo{Name: i.GetName(), Version: i.GetVersion(), Description: i.GetDescription()}, nil
}

func (h *hookClient) Before(ctx context.Context, req HookRequest) (Verdict, error) {
	v, err := h.c.Before(ctx, hookReqToPB(req))
	if err != nil {
		return Verdict{}, statusError(h.died, h.name, "Before", err)
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

// toStatus turns an error into a gRPC status carrying an ErrorDetail, so
// the host rebuilds the same typed error without reading the message.
func toStatus(err error) error {
	var (
		pe  *ProfileError
		ie  *InvalidSpecError
		ue  *UnavailableError
		ce  *ConfigError
		nre *NotRunningError
		le  *LimitError
	)
	code, d := codes.Internal, &pb.ErrorDetail{Kind: "internal", Reason: err.Error()}
	switch {
	case errors.As(err, &pe):
		code, d = codes.InvalidArgument, &pb.ErrorDetail{Kind: "profile", Reason: pe.Reason}
	case errors.As(err, &ie):
		code, d = codes.InvalidArgument, &pb.ErrorDetail{Kind: "invalid_spec", Field: ie.Field, Reason: ie.Reason}
	case errors.As(err, &ue):
		code, d = codes.FailedPrecondition, &pb.ErrorDetail{Kind: "unavailable", Feature: ue.Feature, Reason: ue.Reason, Fix: ue.Fix}
	case errors.As(err, &ce):
		code, d = codes.InvalidArgument, &pb.ErrorDetail{Kind: "config", Section: ce.Section, Field: ce.Key, Reason: ce.Reason}
	case errors.As(err, &nre):
		code, d = codes.NotFound, &pb.ErrorDetail{Kind: "not_running", Field: nre.CommandID}
	case errors.As(err, &le):
		// The value travels in Fix (a number as text): ErrorDetail has
		// no integer field.
		code, d = codes.ResourceExhausted, &pb.ErrorDetail{Kind: "limit", Field: le.Limit, Reason: le.Reason, Fix: strconv.FormatInt(le.Value, 10)}
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	st, werr := status.New(code, err.Error()).WithDetails(d)
	if werr != nil {
		return status.Error(code, err.Error())
	}
	return st.Err()
}

// statusError is fromStatus, with the plugin's last words when the call
// failed because the plugin died and died can say them.
func statusError(died func(string) error, name, op string, err error) error {
	out := fromStatus(name, op, err)
	if died == nil || !errors.Is(out, ErrPluginDied) {
		return out
	}
	return &PluginError{Plugin: name, Op: op, Err: died(status.Convert(err).Message())}
}

// RemoteError is an error a plugin returned for a call that has no typed
// form in this package.
type RemoteError struct {
	Plugin string
	Op     string
	Msg    string
}

func (e *RemoteError) Error() string { return fmt.Sprintf("plugin %s: %s: %s", e.Plugin, e.Op, e.Msg) }

// fromStatus rebuilds a typed error from a status. The typed form comes
// from the ErrorDetail alone; the message is only ever shown, never parsed,
// so nothing a plugin writes into a message can change how it is read.
func fromStatus(name, op string, err error) error {
	s, ok := status.FromError(err)
	if !ok {
		return &PluginError{Plugin: name, Op: op, Err: err}
	}
	for _, any := range s.Details() {
		d, ok := any.(*pb.ErrorDetail)
		if !ok {
			continue
		}
		switch d.GetKind() {
		case "profile":
			return &ProfileError{Reason: d.GetReason()}
		case "invalid_spec":
			return &InvalidSpecError{Field: d.GetField(), Reason: d.GetReason()}
		case "unavailable":
			return &UnavailableError{Feature: d.GetFeature(), Reason: d.GetReason(), Fix: d.GetFix()}
		case "config":
			return &ConfigError{Section: d.GetSection(), Key: d.GetField(), Reason: d.GetReason()}
		case "not_running":
			return &NotRunningError{CommandID: d.GetField()}
		case "limit":
			v, _ := strconv.ParseInt(d.GetFix(), 10, 64)
			return &LimitError{Limit: d.GetField(), Value: v, Reason: d.GetReason()}
		}
	}
	switch s.Code() {
	case codes.InvalidArgument:
		// A protocol-1.0 plugin: the request was refused, but which field
		// is not said in a form that can be trusted.
		return &InvalidSpecError{Field: "request", Reason: s.Message()}
	case codes.Canceled:
		return fmt.Errorf("plugin %s: %s: %w", name, op, context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("plugin %s: %s: %w", name, op, context.DeadlineExceeded)
	case codes.Unavailable:
		return &PluginError{Plugin: name, Op: op, Err: &PluginDiedError{Transport: s.Message()}}
	}
	return &RemoteError{Plugin: name, Op: op, Msg: s.Message()}
}
