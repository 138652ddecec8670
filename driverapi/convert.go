package driverapi

import (
	"strconv"
	"time"

	pb "github.com/aleph-sandbox/aleph-sandbox/driverapi/proto/alephv1"
)

// Conversions between the Go value types and their protobuf forms. Each
// direction is total: unknown enum values map to the strictest Go value
// (NetworkNone) or to an error at the call site, never to something wider.

func capsToPB(c Capabilities) *pb.Capabilities {
	return &pb.Capabilities{
		FsRead:          c.FSRead,
		FsWrite:         c.FSWrite,
		Network:         &pb.NetworkPolicy{Mode: netModeToPB(c.Network.Mode), Hosts: c.Network.Hosts},
		SpawnSubprocess: c.SpawnSubprocess,
		MaxMemoryMb:     c.MaxMemoryMB,
		TimeoutSecs:     c.TimeoutSecs,
	}
}

func capsFromPB(c *pb.Capabilities) (Capabilities, error) {
	if c == nil {
		return Capabilities{}, nil
	}
	out := Capabilities{
		FSRead:          c.GetFsRead(),
		FSWrite:         c.GetFsWrite(),
		SpawnSubprocess: c.GetSpawnSubprocess(),
		MaxMemoryMB:     c.GetMaxMemoryMb(),
		TimeoutSecs:     c.GetTimeoutSecs(),
	}
	mode, err := netModeFromPB(c.GetNetwork().GetMode())
	if err != nil {
		return Capabilities{}, err
	}
	out.Network = NetworkPolicy{Mode: mode, Hosts: c.GetNetwork().GetHosts()}
	return out, nil
}

func netModeToPB(m NetworkMode) pb.NetworkMode {
	switch m {
	case NetworkNone:
		return pb.NetworkMode_NETWORK_MODE_NONE
	case NetworkAllowHosts:
		return pb.NetworkMode_NETWORK_MODE_ALLOW_HOSTS
	case NetworkAllowAll:
		return pb.NetworkMode_NETWORK_MODE_ALLOW_ALL
	}
	return pb.NetworkMode_NETWORK_MODE_UNSPECIFIED
}

func netModeFromPB(m pb.NetworkMode) (NetworkMode, error) {
	switch m {
	case pb.NetworkMode_NETWORK_MODE_NONE, pb.NetworkMode_NETWORK_MODE_UNSPECIFIED:
		return NetworkNone, nil
	case pb.NetworkMode_NETWORK_MODE_ALLOW_HOSTS:
		return NetworkAllowHosts, nil
	case pb.NetworkMode_NETWORK_MODE_ALLOW_ALL:
		return NetworkAllowAll, nil
	}
	return NetworkNone, &InvalidSpecError{Field: "network.mode", Reason: "unknown network mode " + m.String()}
}

func hostCapsToPB(h HostCapabilities) *pb.HostCapabilities {
	out := &pb.HostCapabilities{
		Backend:         h.Backend,
		DriverVersion:   h.DriverVersion,
		ProtocolVersion: h.ProtocolVersion,
		ProtocolMinor:   h.ProtocolMinor,
		Calls:           h.Calls,
		Features:        h.Features,
		LandlockAbi:     h.LandlockABI,
		Seccomp:         h.Seccomp,
		CgroupMode:      h.CgroupMode,
		Os:              h.OS,
		Arch:            h.Arch,
		Details:         h.Details,
	}
	for _, u := range h.Unavailable {
		out.Unavailable = append(out.Unavailable, &pb.Unavailable{Feature: u.Feature, Reason: u.Reason, Fix: u.Fix})
	}
	return out
}

func hostCapsFromPB(h *pb.HostCapabilities) HostCapabilities {
	out := HostCapabilities{
		Backend:         h.GetBackend(),
		DriverVersion:   h.GetDriverVersion(),
		ProtocolVersion: h.GetProtocolVersion(),
		ProtocolMinor:   h.GetProtocolMinor(),
		Calls:           h.GetCalls(),
		Features:        h.GetFeatures(),
		LandlockABI:     h.GetLandlockAbi(),
		Seccomp:         h.GetSeccomp(),
		CgroupMode:      h.GetCgroupMode(),
		OS:              h.GetOs(),
		Arch:            h.GetArch(),
		Details:         h.GetDetails(),
	}
	for _, u := range h.GetUnavailable() {
		out.Unavailable = append(out.Unavailable, Unavailable{Feature: u.GetFeature(), Reason: u.GetReason(), Fix: u.GetFix()})
	}
	reconcileLinuxDetails(&out)
	return out
}

// reconcileLinuxDetails fills the Linux detail keys from the deprecated
// fields a protocol-1.0 driver sends, and the deprecated fields from the
// keys a newer driver sends, so hosts of either age read the same facts.
// Only a Linux report is touched: the deprecated fields are Linux facts.
func reconcileLinuxDetails(h *HostCapabilities) {
	if h.OS != "linux" {
		return
	}
	if h.Details == nil {
		h.Details = map[string]string{}
	}
	if v, ok := h.Details[DetailLinuxLandlockABI]; ok {
		if n, err := strconv.ParseUint(v, 10, 32); err == nil {
			h.LandlockABI = uint32(n)
		}
	} else {
		h.Details[DetailLinuxLandlockABI] = strconv.FormatUint(uint64(h.LandlockABI), 10)
	}
	if v, ok := h.Details[DetailLinuxSeccomp]; ok {
		h.Seccomp = v == "true"
	} else {
		h.Details[DetailLinuxSeccomp] = strconv.FormatBool(h.Seccomp)
	}
	if v, ok := h.Details[DetailLinuxCgroupMode]; ok {
		h.CgroupMode = v
	} else if h.CgroupMode != "" {
		h.Details[DetailLinuxCgroupMode] = h.CgroupMode
	}
}

func profileToPB(p Profile) *pb.Profile {
	return &pb.Profile{Backend: p.Backend, Data: p.Data, Digest: p.Digest}
}

func profileFromPB(p *pb.Profile) Profile {
	return Profile{Backend: p.GetBackend(), Data: p.GetData(), Digest: p.GetDigest()}
}

func profileReqToPB(r ProfileRequest) *pb.ProfileRequest {
	out := &pb.ProfileRequest{Capabilities: capsToPB(r.Capabilities), Workspace: r.Workspace, Cwd: r.Cwd, Protected: r.Protected, Home: r.Home}
	if r.Proxy != nil {
		out.Proxy = &pb.ProxyEndpoint{UnixSocket: r.Proxy.UnixSocket, TcpAddr: r.Proxy.TCPAddr}
	}
	return out
}

func profileReqFromPB(r *pb.ProfileRequest) (ProfileRequest, error) {
	caps, err := capsFromPB(r.GetCapabilities())
	if err != nil {
		return ProfileRequest{}, err
	}
	out := ProfileRequest{Capabilities: caps, Workspace: r.GetWorkspace(), Cwd: r.GetCwd(), Protected: r.GetProtected(), Home: r.GetHome()}
	if p := r.GetProxy(); p != nil {
		out.Proxy = &ProxyEndpoint{UnixSocket: p.GetUnixSocket(), TCPAddr: p.GetTcpAddr()}
	}
	return out, nil
}

func runSpecToPB(s RunSpec) *pb.RunRequest {
	out := &pb.RunRequest{
		Program:        s.Program,
		Args:           s.Args,
		Stdin:          s.Stdin,
		Cwd:            s.Cwd,
		Profile:        profileToPB(s.Profile),
		TimeoutMs:      uint64(s.Timeout / time.Millisecond),
		MaxOutputBytes: uint64(max(s.MaxOutputBytes, 0)),
		SessionId:      s.SessionID,
		CommandId:      s.CommandID,
		SessionSandbox: s.SessionSandbox,
	}
	if l := s.Layered; l != nil {
		out.Layered = &pb.LayeredWorkspace{Upper: l.Upper, Work: l.Work, Lock: l.Lock, UserNs: l.UserNS}
	}
	if s.Tty != nil {
		out.Tty = &pb.WindowSize{Rows: uint32(s.Tty.Rows), Cols: uint32(s.Tty.Cols)}
	}
	for _, e := range s.Env {
		out.Env = append(out.Env, &pb.EnvVar{Name: e.Name, Value: e.Value})
	}
	return out
}

func runSpecFromPB(r *pb.RunRequest) RunSpec {
	out := RunSpec{
		Program:        r.GetProgram(),
		Args:           r.GetArgs(),
		Stdin:          r.GetStdin(),
		Cwd:            r.GetCwd(),
		Profile:        profileFromPB(r.GetProfile()),
		Timeout:        time.Duration(min(r.GetTimeoutMs(), uint64(1<<62)/uint64(time.Millisecond))) * time.Millisecond,
		MaxOutputBytes: int64(min(r.GetMaxOutputBytes(), 1<<62)),
		SessionID:      r.GetSessionId(),
		CommandID:      r.GetCommandId(),
		SessionSandbox: r.GetSessionSandbox(),
	}
	if l := r.GetLayered(); l != nil {
		out.Layered = &LayeredWorkspace{Upper: l.GetUpper(), Work: l.GetWork(), Lock: l.GetLock(), UserNS: l.GetUserNs()}
	}
	if t := r.GetTty(); t != nil {
		// Sizes past 16 bits are refused before this (windowSizeFromPB).
		out.Tty = &WindowSize{Rows: uint16(min(t.GetRows(), 0xffff)), Cols: uint16(min(t.GetCols(), 0xffff))}
	}
	for _, e := range r.GetEnv() {
		out.Env = append(out.Env, EnvVar{Name: e.GetName(), Value: e.GetValue()})
	}
	return out
}

func exitToPB(e Exit) *pb.Exit {
	return &pb.Exit{
		ExitCode:          e.ExitCode,
		Signal:            e.Signal,
		TimedOut:          e.TimedOut,
		Truncated:         e.Truncated,
		OomKilled:         e.OOMKilled,
		StdoutBytes:       e.StdoutBytes,
		StderrBytes:       e.StderrBytes,
		DurationMs:        e.Duration.Milliseconds(),
		Usage:             &pb.ResourceUsage{MaxRssKb: e.Usage.MaxRSSKB, UserMs: e.Usage.UserMS, SystemMs: e.Usage.SystemMS},
		Details:           e.Details,
		SpawnRefused:      e.SpawnRefused,
		Violations:        violationsToPB(e.Violations),
		ViolationsDropped: e.ViolationsDropped,
		ViolationKinds:    e.ViolationKinds,
	}
}

func violationsToPB(vs []Violation) []*pb.Violation {
	var out []*pb.Violation
	for _, v := range vs {
		out = append(out, &pb.Violation{Kind: v.Kind, Operation: v.Operation, Target: v.Target, Count: v.Count})
	}
	return out
}

func violationsFromPB(vs []*pb.Violation) []Violation {
	var out []Violation
	for _, v := range vs {
		out = append(out, Violation{Kind: v.GetKind(), Operation: v.GetOperation(), Target: v.GetTarget(), Count: v.GetCount()})
	}
	return out
}

func exitFromPB(e *pb.Exit) Exit {
	return Exit{
		ExitCode:    e.GetExitCode(),
		Signal:      e.GetSignal(),
		TimedOut:    e.GetTimedOut(),
		Truncated:   e.GetTruncated(),
		OOMKilled:   e.GetOomKilled(),
		StdoutBytes: e.GetStdoutBytes(),
		StderrBytes: e.GetStderrBytes(),
		Duration:    time.Duration(e.GetDurationMs()) * time.Millisecond,
		Usage: ResourceUsage{
			MaxRSSKB: e.GetUsage().GetMaxRssKb(),
			UserMS:   e.GetUsage().GetUserMs(),
			SystemMS: e.GetUsage().GetSystemMs(),
		},
		Details:           e.GetDetails(),
		SpawnRefused:      e.GetSpawnRefused(),
		Violations:        violationsFromPB(e.GetViolations()),
		ViolationsDropped: e.GetViolationsDropped(),
		ViolationKinds:    e.GetViolationKinds(),
	}
}

func hookReqToPB(r HookRequest) *pb.HookRequest {
	return &pb.HookRequest{
		SessionId:    r.SessionID,
		CommandId:    r.CommandID,
		Program:      r.Program,
		Args:         r.Args,
		Stdin:        r.Stdin,
		Cwd:          r.Cwd,
		Capabilities: capsToPB(r.Capabilities),
		EnvNames:     r.EnvNames,
	}
}

func hookReqFromPB(r *pb.HookRequest) (HookRequest, error) {
	caps, err := capsFromPB(r.GetCapabilities())
	if err != nil {
		return HookRequest{}, err
	}
	return HookRequest{
		SessionID:    r.GetSessionId(),
		CommandID:    r.GetCommandId(),
		Program:      r.GetProgram(),
		Args:         r.GetArgs(),
		Stdin:        r.GetStdin(),
		Cwd:          r.GetCwd(),
		Capabilities: caps,
		EnvNames:     r.GetEnvNames(),
	}, nil
}

func verdictToPB(v Verdict) *pb.Verdict {
	a := pb.Action_ACTION_UNSPECIFIED
	switch v.Action {
	case ActionAllow:
		a = pb.Action_ACTION_ALLOW
	case ActionWarn:
		a = pb.Action_ACTION_WARN
	case ActionDeny:
		a = pb.Action_ACTION_DENY
	}
	return &pb.Verdict{Action: a, Rule: v.Rule, Reason: v.Reason, RetryAfterMs: v.RetryAfter.Milliseconds(), Hook: v.Hook}
}

// verdictFromPB refuses an unknown action: a hook that answers garbage must
// make the command fail closed, not pass.
func verdictFromPB(v *pb.Verdict) (Verdict, error) {
	var a Action
	switch v.GetAction() {
	case pb.Action_ACTION_ALLOW:
		a = ActionAllow
	case pb.Action_ACTION_WARN:
		a = ActionWarn
	case pb.Action_ACTION_DENY:
		a = ActionDeny
	default:
		return Verdict{}, &InvalidSpecError{Field: "verdict.action", Reason: "hook answered with unknown action " + v.GetAction().String()}
	}
	return Verdict{
		Action:     a,
		Rule:       v.GetRule(),
		Reason:     v.GetReason(),
		RetryAfter: time.Duration(v.GetRetryAfterMs()) * time.Millisecond,
		Hook:       v.GetHook(),
	}, nil
}
