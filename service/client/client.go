// Package client is the Go client of the host service (`aleph-sandbox
// serve`, package service): the connection over its unix socket, with the
// check of who serves it; the mapping of a command onto the service's
// ExecuteRequest; the reading of its results and errors back into core's
// values; and Pipeline, the service as a runner of commands and processes
// (what `mcp --host` runs on). The CLI's `exec --host`, `mcp --host` and
// `bench` share it; they keep their flags and their printing.
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
)

// OwnerError is a socket served by another user: nothing is sent to it.
type OwnerError struct {
	Socket string
	UID    uint32
}

func (e *OwnerError) Error() string {
	return fmt.Sprintf("the socket %s is served by uid %d, not by you (uid %d) or root: nothing was sent to it "+
		"(fix: start aleph-sandbox serve yourself, on a socket in a directory only you can write, such as the default)",
		e.Socket, e.UID, os.Getuid())
}

// Unix is a client of the service on the unix socket sock. Every
// connection is checked before anything is sent on it: a socket served by
// a uid other than this user's and root's is refused (*OwnerError), since
// whoever listens there gets the command, its environment and stdin, and
// answers for the sandbox.
//
// opts are the connect client's (WithTracker: a Tracker of the sessions'
// incarnations).
func Unix(sock string, opts ...connect.ClientOption) hostv1connect.ServiceClient {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", sock)
		if err != nil {
			return nil, err
		}
		if err := checkOwner(c, sock); err != nil {
			_ = c.Close()
			return nil, err
		}
		return c, nil
	}}
	return hostv1connect.NewServiceClient(&http.Client{Transport: tr}, "http://aleph-sandbox", opts...)
}

// WithTracker makes a client remember and send the sessions' incarnations
// through t (see Tracker).
func WithTracker(t *Tracker) connect.ClientOption { return connect.WithInterceptors(t) }

// ExecuteRequest is cmd (validated: alephsandbox.Request.Command made it)
// as the service takes it, answering its own approvals. A host list
// travels as net_hosts, one host per entry.
func ExecuteRequest(cmd core.Command) *hostv1.ExecuteRequest {
	c := cmd.Capabilities
	req := &hostv1.ExecuteRequest{
		Session: cmd.SessionID, Argv: append([]string{cmd.Program}, cmd.Args...), Workspace: cmd.Workspace,
		Cwd: cmd.Cwd, Read: c.FSRead, Write: c.FSWrite, Spawn: c.SpawnSubprocess,
		MemoryMb: c.MaxMemoryMB, TimeoutSeconds: cmd.Timeout.Seconds(), MaxOutput: cmd.MaxOutputBytes,
		Env: cmd.Env, Stdin: cmd.Stdin, Secrets: cmd.Secrets, AnswerApprovals: true,
		Layered: cmd.Layered,
	}
	if c.Network.Mode == driverapi.NetworkAllowHosts {
		req.NetHosts = c.Network.Hosts
	} else {
		req.Net = alephsandbox.NetString(c.Network)
	}
	return req
}

// Detail is a service error's ErrorDetail (nil when it has none).
func Detail(err error) *hostv1.ErrorDetail {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*hostv1.ErrorDetail); ok {
				return ed
			}
		}
	}
	return nil
}

// Reason is the reason code of a service error ("" when it has none).
func Reason(err error) string { return Detail(err).GetReasonCode() }

// Unreachable reports whether err is the service not answering at all
// (nothing listens on the socket).
func Unreachable(err error) bool {
	var ce *connect.Error
	return errors.As(err, &ce) && ce.Code() == connect.CodeUnavailable && strings.Contains(ce.Message(), "dial")
}

// OutputFrom is a service result as the pipeline's: a denial is the
// pipeline's *core.DeniedError, a result carrying an error an error.
func OutputFrom(res *hostv1.ExecResult) (*core.Output, error) {
	switch {
	case res.GetDenied():
		return nil, DeniedFrom(res)
	case res.GetError() != "":
		return nil, fmt.Errorf("the service could not run the command (%s): %s", res.GetReasonCode(), res.GetError())
	}
	return &core.Output{Stdout: res.GetStdout(), Stderr: res.GetStderr(), Backend: res.GetBackend(), CommandID: res.GetCommandId(),
		ProfileDigest: res.GetProfileDigest(), SpawnReported: res.GetSpawnReported(),
		Exit: driverapi.Exit{ExitCode: res.GetExitCode(), Signal: res.GetSignal(), TimedOut: res.GetTimedOut(),
			Truncated: res.GetTruncated(), OOMKilled: res.GetOomKilled(), Duration: time.Duration(res.GetDurationMs()) * time.Millisecond,
			SpawnRefused: res.GetSpawnRefused(), Usage: UsageOf(res), Violations: ViolationsOf(res),
			ViolationsDropped: res.GetViolationsDropped(), ViolationKinds: res.GetViolationKinds()}}, nil
}

// ViolationsOf is what the sandbox refused the command of res, as the
// service sent it.
func ViolationsOf(res *hostv1.ExecResult) []driverapi.Violation {
	var out []driverapi.Violation
	for _, v := range res.GetViolations() {
		out = append(out, driverapi.Violation{Kind: v.GetKind(), Operation: v.GetOperation(), Target: v.GetTarget(), Count: v.GetCount()})
	}
	return out
}

// UsageOf is the driver's measure of what the command of res consumed, as
// the service sent it.
func UsageOf(res *hostv1.ExecResult) driverapi.ResourceUsage {
	u := res.GetUsage()
	return driverapi.ResourceUsage{MaxRSSKB: u.GetMaxRssKb(), UserMS: u.GetUserMs(), SystemMS: u.GetSystemMs()}
}

// DeniedFrom rebuilds the service's denial. Its reason is the denial's
// whole message ("denied (code) rule R: why"): only the why is kept, so
// that the message is not said twice.
func DeniedFrom(res *hostv1.ExecResult) *core.DeniedError {
	why := res.GetReason()
	if strings.HasPrefix(why, "denied (") {
		if i := strings.Index(why, ": "); i >= 0 {
			why = why[i+2:]
		}
	}
	return &core.DeniedError{Code: core.ReasonCode(res.GetReasonCode()), Reason: why, Rule: res.GetRule()}
}

// CapsFrom is the service's capabilities message as the contract's.
func CapsFrom(m *hostv1.Capabilities) driverapi.Capabilities {
	c := driverapi.Capabilities{FSRead: m.GetFsRead(), FSWrite: m.GetFsWrite(), SpawnSubprocess: m.GetSpawn(),
		MaxMemoryMB: m.GetMemoryMb(), TimeoutSecs: uint64(max(m.GetTimeoutSeconds(), 0))}
	switch m.GetNetworkMode() {
	case driverapi.NetworkAllowAll.String():
		c.Network.Mode = driverapi.NetworkAllowAll
	case driverapi.NetworkAllowHosts.String():
		c.Network = driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: m.GetNetworkHosts()}
	}
	return c
}

// ApprovalFrom is the service's approval request as the contract's.
func ApprovalFrom(r *hostv1.ApprovalRequest) driverapi.ApprovalRequest {
	req := driverapi.ApprovalRequest{SessionID: r.GetSession(), CommandID: r.GetCommandId(), Summary: r.GetSummary(),
		Requested: CapsFrom(r.GetRequested()), Baseline: CapsFrom(r.GetBaseline())}
	if a := r.GetArgv(); len(a) > 0 {
		req.Program, req.Args = a[0], a[1:]
	}
	return req
}

// Answer is an approver's outcome as the service's Approve: a yes for
// this command only (driverapi.ApprovalApprovedOnce) is sent as once, so
// the service keeps no grant of it.
func Answer(id string, o driverapi.ApprovalOutcome) *hostv1.ApproveRequest {
	return &hostv1.ApproveRequest{Id: id, Approved: o == driverapi.ApprovalApproved || o == driverapi.ApprovalApprovedOnce,
		Once: o == driverapi.ApprovalApprovedOnce}
}
