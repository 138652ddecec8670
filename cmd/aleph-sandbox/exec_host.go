package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/driverapi/proto/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/proto/hostv1/hostv1connect"
)

// hostEnv names the service `exec` sends its command to when --host is
// not given.
const hostEnv = "ALEPH_SANDBOX_HOST"

// hostAddress is --host, else $ALEPH_SANDBOX_HOST; "" runs in-process.
func hostAddress(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return os.Getenv(hostEnv)
}

// socketPath reads unix:PATH (or a bare absolute path).
func socketPath(addr string) (string, error) {
	p := strings.TrimPrefix(addr, "unix:")
	if p == "" || (!strings.HasPrefix(addr, "unix:") && !filepath.IsAbs(addr)) {
		return "", &usageError{fmt.Sprintf("--host %q: want unix:PATH", addr)}
	}
	return filepath.Abs(p)
}

// hostClient speaks to the service over its unix socket.
func hostClient(sock string) hostv1connect.ServiceClient {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	return hostv1connect.NewServiceClient(&http.Client{Transport: tr}, "http://aleph-sandbox")
}

// executeRequest is cmd as the service takes it.
func executeRequest(cmd core.Command) *hostv1.ExecuteRequest {
	c := cmd.Capabilities
	net := "none"
	switch c.Network.Mode {
	case driverapi.NetworkAllowAll:
		net = "all"
	case driverapi.NetworkAllowHosts:
		net = strings.Join(c.Network.Hosts, ",")
	}
	return &hostv1.ExecuteRequest{
		Session: cmd.SessionID, Argv: append([]string{cmd.Program}, cmd.Args...), Workspace: cmd.Workspace,
		Cwd: cmd.Cwd, Read: c.FSRead, Write: c.FSWrite, Net: net, Spawn: c.SpawnSubprocess,
		MemoryMb: c.MaxMemoryMB, TimeoutSeconds: cmd.Timeout.Seconds(), MaxOutput: cmd.MaxOutputBytes,
		Env: cmd.Env, Stdin: cmd.Stdin, AnswerApprovals: true,
	}
}

// runExecHost is `exec --host`: the command goes to a running service; the
// output, the exit statuses and --json are those of in-process exec, and
// this CLI answers its own approval requests (--yes or the terminal).
func runExecHost(ctx context.Context, addr string, f *runFlags, argv []string, std stdio) int {
	switch {
	case f.config != "":
		return execFailure(std, f.json, "exec: --config does not apply with --host: the service's configuration does")
	case f.driver != "":
		return execFailure(std, f.json, "exec: --driver does not apply with --host: the service's driver runs the command")
	case f.workspaceRoot != "":
		return execFailure(std, f.json, "exec: --workspace-root does not apply with --host: the service's configuration does")
	}
	sock, err := socketPath(addr)
	if err != nil {
		return execFailure(std, f.json, err.Error())
	}
	cmd, err := f.command(argv[0], argv[1:], std.In)
	if err != nil {
		return execFailure(std, f.json, err.Error())
	}
	c := hostClient(sock)
	ask := &approver{yes: f.yes, terminal: std.InIsTerminal || f.stdin, prompt: std.Err, answers: ttyAnswers}
	// A signal cancels the call; the service then kills the command's tree.
	stream, err := c.Execute(ctx, connect.NewRequest(executeRequest(cmd)))
	if err != nil {
		return execFailure(std, f.json, hostError(sock, err))
	}
	defer stream.Close()
	var res *hostv1.ExecResult
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *hostv1.ExecuteResponse_Output:
			if f.json {
				continue
			}
			w := std.Out
			if ev.Output.GetStream() == hostv1.OutputChunk_STREAM_STDERR {
				w = std.Err
			}
			_, _ = w.Write(ev.Output.GetData())
		case *hostv1.ExecuteResponse_ApprovalRequest:
			r := ev.ApprovalRequest
			// Answered aside: the stream is read meanwhile.
			go func() {
				o, _ := ask.RequestApproval(ctx, driverapi.ApprovalRequest{SessionID: r.GetSession(), CommandID: r.GetCommandId(), Summary: r.GetSummary()})
				_, _ = c.Approve(ctx, connect.NewRequest(&hostv1.ApproveRequest{Id: r.GetId(), Approved: o == driverapi.ApprovalApproved}))
			}()
		case *hostv1.ExecuteResponse_Result:
			res = ev.Result
		}
	}
	if err := stream.Err(); err != nil {
		return execFailure(std, f.json, hostError(sock, err))
	}
	if res == nil {
		return execFailure(std, f.json, "exec: the service ended the call without a result")
	}
	if res.GetDenied() {
		if f.json {
			writeJSON(std.Out, execResult{Denied: true, Reason: res.GetReason(), Rule: res.GetRule()})
			return 0
		}
		return fail(std.Err, "%s", oneLine(res.GetReason()))
	}
	out := &core.Output{Stdout: res.GetStdout(), Stderr: res.GetStderr(), Backend: res.GetBackend(),
		CommandID: res.GetCommandId(), Exit: driverapi.Exit{ExitCode: res.GetExitCode(), Signal: res.GetSignal(),
			TimedOut: res.GetTimedOut(), Truncated: res.GetTruncated(), OOMKilled: res.GetOomKilled(),
			Duration: durationMS(res.GetDurationMs())}}
	return reportExec(std, f.json, out, nil)
}

func hostError(sock string, err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Code() == connect.CodeUnavailable && strings.Contains(ce.Message(), "dial") {
		return fmt.Sprintf("exec: no service at %s (start it with aleph-sandbox serve): %s", sock, ce.Message())
	}
	return "exec: " + err.Error()
}

func durationMS(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
