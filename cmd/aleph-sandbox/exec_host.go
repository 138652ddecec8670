package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
	hostclient "github.com/aleph-sandbox/aleph-sandbox/service/client"
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

// runExecHost is `exec --host`: the command goes to a running service; the
// output, the exit statuses and --json are those of in-process exec, and
// this CLI answers its own approval requests (--yes or the terminal).
func runExecHost(ctx context.Context, target hostTarget, remote *remoteFlags, f *runFlags, inter *interactiveFlags, argv []string, std stdio, filter bool) int {
	switch {
	case f.config != "":
		return execFailure(std, f.json, "exec: --config does not apply with --host: the service's configuration does")
	case f.driver != "":
		return execFailure(std, f.json, "exec: --driver does not apply with --host: the service's driver runs the command")
	case f.workspaceRoot != "":
		return execFailure(std, f.json, "exec: --workspace-root does not apply with --host: the service's configuration does")
	}
	cmd, err := f.command(argv[0], argv[1:], std.In)
	if err != nil {
		return execFailureErr(std, f.json, err)
	}
	// The tracker sends the session header with every call naming the
	// session, for a router in front of several servers.
	c, err := remote.client(target, hostclient.WithTracker(hostclient.NewTracker()))
	if err != nil {
		return execFailureErr(std, f.json, err)
	}
	ask := &approver{yes: f.yes, terminal: std.InIsTerminal || f.stdin, prompt: std.Err, answers: ttyAnswers}
	req := hostclient.ExecuteRequest(cmd)
	req.SignalKey = newSignalKey()
	// Cancelling the call (a closed output pipe, or the grace period after
	// a signal running out) makes the service kill the command's tree.
	execCtx, kill := context.WithCancel(ctx)
	defer kill()
	// Signal, WriteStdin, CloseStdin and ResizeTerminal name the command
	// by its signal key alone: the session header goes with them too.
	execCtx = hostclient.WithSession(execCtx, req.GetSession())
	// -i and -t: the stdin goes through WriteStdin and the window size
	// through ResizeTerminal, named by the signal key. Without --timeout
	// (0 in the request) the service gives an interactive command no
	// default timeout, only its processes' maximum lifetime.
	req.StdinStream = inter.interactive
	var term *userTerminal
	resized := make(chan struct{})
	if inter.tty {
		term = openUserTerminal(std.In, std.Out)
		// Every way out passes here: the user's terminal is never left raw.
		defer term.restore()
		req.Tty, req.Rows, req.Cols = true, uint32(term.size.Rows), uint32(term.size.Cols)
		go func() {
			defer close(resized)
			followWindow(execCtx, c, req.SignalKey, term.resize)
		}()
	} else {
		close(resized)
	}
	onStdinOpen := func() {
		if !inter.interactive {
			return
		}
		if term != nil {
			// Raw only now that the command reads: an approval prompt
			// before it was answered in the terminal's ordinary mode.
			term.makeRaw()
		}
		go pumpStdin(execCtx, c, req.SignalKey, std.In)
	}
	var sigs *commandSignals
	sent := make(chan struct{})
	if std.forwardSignals != nil {
		// SIGINT, SIGTERM and SIGHUP go to the command through the
		// service, with the grace period of in-process exec.
		sigs = forwardToCommand(std.forwardSignals, f.grace, kill)
		go func() {
			defer close(sent)
			for {
				select {
				case <-execCtx.Done():
					return
				case sig := <-sigs.C:
					sendSignal(execCtx, c, req.SignalKey, sig)
				}
			}
		}()
	} else {
		close(sent)
	}
	var live liveOutput
	var stdout, stderr io.Writer
	// With --json the output is printed in the result, assembled from the
	// chunks: the service sends each byte once.
	var got hostclient.Output
	errTail := tailBuffer{max: 4096}
	if !f.json {
		// The same writers as in-process: the terminal filter where a
		// stream is a terminal (unless --raw-output), and a closed pipe
		// sending the command SIGPIPE, then ending it.
		// A terminal command owns the user's terminal: its output
		// passes raw (docs/cli.md).
		stdout, stderr = live.wire(std, filter && !inter.tty, brokenPipe(sigs, kill))
		// The streamed stderr's end, for the notes an in-process exec
		// reads from the captured output (a fork refused without --spawn).
		stderr = io.MultiWriter(stderr, &errTail)
	}
	// The call returns with the first message (or the failure of the
	// call), which a silent command sends only at its end.
	var res *hostv1.ExecResult
	stream, streamErr := c.Execute(execCtx, connect.NewRequest(req))
	if streamErr == nil {
		res, streamErr = receiveExec(execCtx, stream, c, ask, &got, stdout, stderr, onStdinOpen)
	}
	if term != nil {
		// Before any message of the CLI's own: they are written for a
		// terminal in its ordinary mode.
		term.restore()
	}
	if sigs != nil {
		sigs.stop()
	}
	live.stopPipeTimer()
	kill()
	<-sent
	<-resized
	if live.finish() {
		// The reader of stdout (or stderr) went away: as in a shell
		// pipeline, the command ends and the status says SIGPIPE.
		return exitBrokenPipe
	}
	if sigs != nil {
		if first, expired := sigs.got(); streamErr != nil && first != nil && ctx.Err() == nil {
			switch {
			case expired:
				fmt.Fprintf(std.Err, "aleph-sandbox: the command did not end within %s of SIG%s; its process tree was killed\n", f.grace, sigLabel(first))
				return 128 + int(syscall.SIGKILL)
			case reasonOf(streamErr) == service.ReasonSignalBeforeStart:
				fmt.Fprintf(std.Err, "aleph-sandbox: SIG%s came before the command started; nothing ran\n", sigLabel(first))
				return 128 + signalNumber(first)
			case reasonOf(streamErr) == service.ReasonSignalEnded:
				fmt.Fprintf(std.Err, "aleph-sandbox: SIG%s ended the command (this driver cannot forward signals, so its tree was killed)\n", sigLabel(first))
				return 128 + signalNumber(first)
			}
		}
	}
	if streamErr != nil {
		code, field := hostReason(streamErr)
		return execFailureCode(std, f.json, hostError(target, streamErr), code, field)
	}
	if res == nil {
		return execFailureCode(std, f.json, "exec: the service ended the call without a result", reasonServiceUnavailable, "")
	}
	if res.GetDenied() {
		if f.json {
			writeJSON(std.Out, execResult{Denied: true, Reason: res.GetReason(), Rule: res.GetRule(), ReasonCode: res.GetReasonCode()})
			return 0
		}
		if code, ok := denialHint(std, f, core.ReasonCode(res.GetReasonCode()), res.GetReason()); ok {
			return code
		}
		return fail(std.Err, "%s", oneLine(res.GetReason()))
	}
	if !f.json && res.GetOutputStreamed() {
		// What the service could not stream (normally nothing) comes
		// after what it did, in each stream's order.
		_, _ = stdout.Write(res.GetStdout())
		_, _ = stderr.Write(res.GetStderr())
	}
	resOut, resErr := got.Whole(res)
	out := &core.Output{Stdout: resOut, Stderr: resErr, Backend: res.GetBackend(),
		CommandID: res.GetCommandId(), Exit: driverapi.Exit{ExitCode: res.GetExitCode(), Signal: res.GetSignal(),
			TimedOut: res.GetTimedOut(), Truncated: res.GetTruncated(), OOMKilled: res.GetOomKilled(),
			Duration: durationMS(res.GetDurationMs()), SpawnRefused: res.GetSpawnRefused(), Usage: hostclient.UsageOf(res),
			Violations: hostclient.ViolationsOf(res), ViolationsDropped: res.GetViolationsDropped(), ViolationKinds: res.GetViolationKinds()},
		SpawnReported: res.GetSpawnReported()}
	if len(out.Stderr) == 0 {
		out.Stderr = errTail.bytes()
	}
	execNotes(std, f, out, nil)
	return reportExec(std, f.json, out, core.ReasonCode(res.GetReasonCode()), nil)
}

func hostError(target hostTarget, err error) string {
	var ce *connect.Error
	var oe *hostclient.OwnerError
	sock := target.String()
	if hinted := remoteError(target, err); hinted != err {
		// Over TCP, a refusal of the handshake or of the token says
		// which option it wants.
		return "exec: " + hinted.Error()
	}
	switch {
	case errors.As(err, &oe):
		return "exec: " + oe.Error()
	case hostclient.Unreachable(err) && errors.As(err, &ce):
		return fmt.Sprintf("exec: no service at %s (start it with aleph-sandbox serve): %s", sock, ce.Message())
	case reasonOf(err) == service.ReasonServiceStopping:
		return fmt.Sprintf("exec: the service at %s stopped while the command ran, and killed it", sock)
	case errors.As(err, &ce) && ce.Code() == connect.CodeUnavailable && reasonOf(err) == "":
		// No detail: the connection itself went (the server died).
		return fmt.Sprintf("exec: the connection to the service at %s was lost while the command ran (did the service stop?): %s", sock, ce.Message())
	}
	return "exec: " + err.Error()
}

// receiveExec reads the call's events: output to stdout and stderr
// (with --json, where they are nil, into got), approval requests answered
// by ask, then the result.
func receiveExec(ctx context.Context, stream *connect.ServerStreamForClient[hostv1.ExecuteResponse], c hostv1connect.ServiceClient,
	ask *approver, got *hostclient.Output, stdout, stderr io.Writer, onStdinOpen func()) (*hostv1.ExecResult, error) {
	defer stream.Close()
	var res *hostv1.ExecResult
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *hostv1.ExecuteResponse_Output:
			if stdout == nil {
				got.Add(ev.Output)
				continue
			}
			w := stdout
			if ev.Output.GetStream() == hostv1.OutputChunk_STREAM_STDERR {
				w = stderr
			}
			_, _ = w.Write(ev.Output.GetData())
		case *hostv1.ExecuteResponse_ApprovalRequest:
			r := ev.ApprovalRequest
			// Answered aside: the stream is read meanwhile.
			go func() {
				o, _ := ask.RequestApproval(ctx, hostclient.ApprovalFrom(r))
				_, _ = c.Approve(ctx, connect.NewRequest(hostclient.Answer(r.GetId(), o)))
			}()
		case *hostv1.ExecuteResponse_StdinOpen:
			onStdinOpen()
		case *hostv1.ExecuteResponse_Result:
			res = ev.Result
		}
	}
	return res, stream.Err()
}

// newSignalKey names this command for the service's Signal call.
func newSignalKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "sig-" + hex.EncodeToString(b[:])
}

// sendSignal delivers sig to the command through the service. A signal
// that arrives before the service has the call (the user's Ctrl-C at once)
// is retried until the command runs or the call ends.
func sendSignal(ctx context.Context, c hostv1connect.ServiceClient, key string, sig driverapi.Signal) {
	untilRunning(ctx, func() error {
		_, err := c.Signal(ctx, connect.NewRequest(&hostv1.SignalRequest{SignalKey: key, Signal: string(sig)}))
		return err
	})
}

// stdinChunk is the most `exec --host -i` sends in one WriteStdin; each
// waits for the service to hold it, so what is in flight is bounded by
// this, the service's stdin_bytes and the kernel's pipe buffers.
const stdinChunk = 32 << 10

// pumpStdin sends the CLI's stdin to the command as it arrives, one
// WriteStdin at a time, and closes the command's stdin at end of file.
// It stops when the call ends; a Read of a terminal it is blocked in then
// ends with the CLI.
func pumpStdin(ctx context.Context, c hostv1connect.ServiceClient, key string, in io.Reader) {
	buf := make([]byte, stdinChunk)
	for {
		n, rerr := in.Read(buf)
		if n > 0 {
			// The call is synchronous: buf is marshalled before it returns.
			resp, err := c.WriteStdin(ctx, connect.NewRequest(&hostv1.WriteStdinRequest{SignalKey: key, Data: buf[:n]}))
			if err != nil || resp.Msg.GetWritten() < int64(n) {
				return // the command ended, or closed its stdin
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				_, _ = c.CloseStdin(ctx, connect.NewRequest(&hostv1.CloseStdinRequest{SignalKey: key}))
			}
			return
		}
	}
}

// followWindow sends the user's terminal's new sizes to the command's.
func followWindow(ctx context.Context, c hostv1connect.ServiceClient, key string, sizes <-chan driverapi.WindowSize) {
	for {
		select {
		case <-ctx.Done():
			return
		case ws := <-sizes:
			untilRunning(ctx, func() error {
				_, err := c.ResizeTerminal(ctx, connect.NewRequest(&hostv1.ResizeTerminalRequest{SignalKey: key, Rows: uint32(ws.Rows), Cols: uint32(ws.Cols)}))
				return err
			})
		}
	}
}

// untilRunning calls f until it answers anything but NotFound (the
// service does not have the call yet) or ctx ends.
func untilRunning(ctx context.Context, f func() error) {
	wait := 5 * time.Millisecond
	for {
		if connect.CodeOf(f()) != connect.CodeNotFound {
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// reasonOf is the reason code of a service error.
func reasonOf(err error) string { return hostclient.Reason(err) }

// reasonServiceUnavailable is exec --host's reason code for a service it
// could not reach, or that went away without a reason of its own.
const reasonServiceUnavailable = "service_unavailable"

// hostReason is exec --json's reason_code and field for a service error:
// the service's own, else service_unavailable when the service could not
// be reached or the connection broke.
func hostReason(err error) (code, field string) {
	if d := hostclient.Detail(err); d.GetReasonCode() != "" {
		return d.GetReasonCode(), d.GetField()
	}
	var ce *connect.Error
	if errors.As(err, &ce) && ce.Code() == connect.CodeUnavailable {
		return reasonServiceUnavailable, ""
	}
	return "", ""
}

func durationMS(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
