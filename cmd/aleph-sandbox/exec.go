package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	goio "io"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/termsafe"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/internal/starttrace"
	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostclient "github.com/aleph-sandbox/aleph-sandbox/service/client"
)

// execResult is the --json object of docs/cli.md. ExitCode and Signal are
// null when no process ran (a denial, a sandbox failure): 0 would read as
// a command that ran and succeeded.
type execResult struct {
	Stdout    string `json:"stdout"`
	Stderr    string `json:"stderr"`
	ExitCode  *int   `json:"exit_code"`
	Signal    *int   `json:"signal"`
	TimedOut  bool   `json:"timed_out"`
	Truncated bool   `json:"truncated"`
	// OOMKilled: the kernel ended the command for its memory limit (the
	// fact the note "killed for exceeding its memory limit" says without
	// --json).
	OOMKilled  bool   `json:"oom_killed"`
	DurationMS int64  `json:"duration_ms"`
	Denied     bool   `json:"denied"`
	Reason     string `json:"reason"`
	Rule       string `json:"rule"`
	Backend    string `json:"backend"`
	Error      string `json:"error"`
	// ReasonCode is what a script branches on instead of parsing reason
	// or error: core's reason codes, as serve's results and errors carry
	// them (allowed, timeout, approval_denied, invalid_command, ...), and
	// invalid_request for the CLI's own flags. Field, for invalid_command
	// and config_invalid, is the command field or configuration key.
	ReasonCode string `json:"reason_code"`
	Field      string `json:"field"`
	// SpawnRefused: how many process starts the sandbox refused (the
	// command lacked --spawn); non-zero goes with reason_code
	// spawn_refused and Hint.
	SpawnRefused int64 `json:"spawn_refused"`
	// Hint is one line saying how to get what was refused (for
	// spawn_refused: --spawn); empty otherwise.
	Hint string `json:"hint,omitempty"`
	// GitQuarantine: git repositories the command planted in its
	// workspace, neutralised after it ended (core.GitQuarantine).
	GitQuarantine *core.GitQuarantine `json:"git_quarantine,omitempty"`
	// Violations: what the sandbox refused the command (kind, operation,
	// target, count), bounded; ViolationsDropped counts the refusals past
	// the bound; ViolationKinds are the kinds the driver watched (an
	// empty list means none of those was refused).
	Violations        []driverapi.Violation `json:"violations,omitempty"`
	ViolationsDropped int64                 `json:"violations_dropped,omitempty"`
	ViolationKinds    []string              `json:"violation_kinds,omitempty"`
}

// oneCommandGCPercent is the GOGC of a process that runs one command
// (the CLI's exec in-process, its driver): see runExec.
const oneCommandGCPercent = 400

func runExec(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	var f runFlags
	f.register(fs)
	rawOutput := fs.Bool("raw-output", false, "write the child's output to a terminal unfiltered (control sequences included)")
	var host hostOptions
	host.register(fs, "send the command to a running aleph-sandbox serve at `unix:PATH` or tcp:HOST:PORT (default: $ALEPH_SANDBOX_HOST; neither: run in-process)")
	fs.BoolVar(&f.layered, "layered", false, "run over the session's layer: the workspace is an overlay, and the host's directory changes only on session apply (the session's first command fixes its mode)")
	verbose := fs.Bool("verbose", false, "say on stderr what runs the command: with --host, which serve answered (its pid, version and data dir)")
	var inter interactiveFlags
	inter.register(fs)
	const usageLine = "aleph-sandbox exec [flags] -- PROGRAM [ARG...]"
	if help, err := parseFlagsQuiet(fs, args, io, usageLine); help {
		return 0
	} else if err != nil {
		return execFailure(io, jsonRequested(args), fmt.Sprintf("exec: %v (usage: %s)", err, usageLine))
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return execFailure(io, f.json, "exec: no program given (usage: aleph-sandbox exec [flags] -- PROGRAM [ARG...])")
	}
	if msg := inter.check(&f); msg != "" {
		return execFailure(io, f.json, msg)
	}
	if inter.tty && !ttySupported() {
		return execFailure(io, f.json, "exec: -t/--tty: this build of the CLI drives a terminal on Linux only")
	}
	if inter.tty && !inter.interactive && !f.stdin && io.InIsTerminal {
		// `exec -t bash` on a terminal means an interactive shell: without
		// the user's keys the shell sat at its prompt for ever (a program
		// that puts its terminal in raw mode never sees the end-of-file
		// that -t alone gives it). -t alone keeps its meaning where stdin
		// is not a terminal (output to a terminal, no input).
		inter.interactive = true
	}
	if io.InIsPipe && !inter.interactive && !f.stdin {
		// Input piped or redirected to exec is not passed unless asked:
		// forwarding it by default would let a command eat the rest of a
		// `while read` loop's input, and a driver without streamed stdin
		// would refuse every such command. Say so instead of dropping it
		// silently.
		fmt.Fprintln(io.Err, "aleph-sandbox: note: standard input is a pipe or a file and is not passed to the command; use --stdin (read whole, up to 2 MiB) or -i (streamed) to pass it, or </dev/null to silence this")
	}
	target, remote, err := host.target()
	if err != nil {
		return execFailureErr(io, f.json, err)
	}
	if remote {
		if *verbose {
			if target.tcp != "" {
				// Who serves a TCP address is its certificate's to say,
				// checked by the call itself.
				fmt.Fprintf(io.Err, "aleph-sandbox: served on %s (TLS)\n", target)
			} else {
				who, err := hostclient.Describe(target.sock)
				if err != nil {
					return execFailureErr(io, f.json, err)
				}
				fmt.Fprintf(io.Err, "aleph-sandbox: served by %s on %s\n", who, target.sock)
			}
		}
		return runExecHost(ctx, target, &host.remoteFlags, &f, &inter, rest, io, !*rawOutput)
	}
	if *verbose {
		fmt.Fprintln(io.Err, "aleph-sandbox: in-process: a pipeline of this CLI's own (no serve; --host or ALEPH_SANDBOX_HOST sends the command to one)")
	}
	trace := starttrace.FromEnv("cli")
	defer trace.Close()
	trace.Mark("exec")
	// This process runs one command and exits: its heap stays a few MB,
	// and the collection the runtime starts at 4 MB (about 1.5 ms of CPU,
	// on the path of the command) frees nothing that matters before the
	// exit. GOGC 400 moves that first collection to 16 MB; a command with
	// large output is still collected, its heap bounded by five times what
	// is live. Restored on return (tests call runExec in their process).
	defer debug.SetGCPercent(debug.SetGCPercent(oneCommandGCPercent))
	cfg, err := loadConfig(f.config, f.workspaceRoot, f.driver)
	if err != nil {
		return execFailureErr(io, f.json, err)
	}
	trace.Mark("config loaded")
	cmd, err := f.command(rest[0], rest[1:], io.In)
	if err != nil {
		return execFailureErr(io, f.json, err)
	}
	// What the session's baseline gives needs no flag: with baseline
	// "spawn" a shell line runs without --spawn.
	cmd.Capabilities.SpawnSubprocess = cmd.Capabilities.SpawnSubprocess || cfg.SessionBaseline().SpawnSubprocess
	// This process runs one command and ends its driver: the driver may
	// leave out what only later commands would use (driverapi.OneCommandEnv),
	// and a session sandbox would be built for one command and torn down.
	//
	// A layered command is the exception: its overlay is mounted in a
	// session sandbox, built for this one command and ended with this
	// process (the layer stays on disk, and the next command mounts it
	// again). The driver holds the layer's upper directory locked while
	// it is mounted, so a second process's command of the session is
	// refused rather than mounting it twice. Going through serve instead
	// would keep the session's /tmp and processes between commands, but
	// would make a running service a condition of every layered command.
	if !cmd.Layered {
		cfg.Sandbox.SessionSandboxes = core.SessionSandboxesOff
	}
	p, err := buildPipeline(cfg, &approver{yes: f.yes, terminal: io.InIsTerminal || f.stdin, prompt: io.Err, answers: ttyAnswers}, io.Err,
		alephsandbox.WithDriverEnv(driverapi.OneCommandEnv+"=1"))
	if err != nil {
		return execFailureErr(io, f.json, err)
	}
	trace.Mark("pipeline built")
	defer func() {
		p.Close()
		trace.Mark("pipeline closed")
	}()
	if inter.any() && f.timeout == 0 {
		// An interactive command waits for a person: no default timeout,
		// only the processes' maximum lifetime ([sandbox.processes]).
		cmd.Timeout = p.sandbox.ProcessLimits().MaxLifetime
	}
	execCtx, kill := context.WithCancel(ctx)
	defer kill()
	if inter.interactive {
		cmd.StdinStream = io.In
	}
	var term *userTerminal
	if inter.tty {
		term = openUserTerminal(io.In, io.Out)
		// Every way out of exec passes here (signals end the command, then
		// exec returns): the user's terminal is never left raw.
		defer term.restore()
		size := term.size
		cmd.Tty, cmd.Resize = &size, term.resize
		if inter.interactive {
			cmd.StdinStream = &onFirstRead{r: io.In, first: term.makeRaw}
		}
	}
	var sigs *commandSignals
	if io.forwardSignals != nil {
		// SIGINT, SIGTERM and SIGHUP go to the command, which has the
		// grace period to end by itself; then its tree is killed.
		sigs = forwardToCommand(io.forwardSignals, f.grace, kill)
		cmd.Signals = sigs.C
	}
	var live liveOutput
	if !f.json {
		// Live output; Output still captures within the budget. A
		// terminal command owns the user's terminal: its output passes
		// raw (docs/cli.md).
		cmd.Stdout, cmd.Stderr = live.wire(io, !*rawOutput && !inter.tty, brokenPipe(sigs, kill))
	}
	out, err := p.sandbox.Execute(execCtx, cmd)
	trace.Mark("executed")
	if term != nil {
		// Before any message of the CLI's own: they are written for a
		// terminal in its ordinary mode.
		term.restore()
	}
	if sigs != nil {
		sigs.stop()
	}
	live.stopPipeTimer()
	if live.finish() {
		// The reader of stdout (or stderr) went away: as in a shell
		// pipeline, the command ends and the status says SIGPIPE.
		return exitBrokenPipe
	}
	if sigs != nil {
		if first, expired := sigs.got(); err != nil && first != nil && ctx.Err() == nil {
			// The command did not end with a status of its own: report
			// what a shell would for a process ended by that signal.
			switch {
			case expired:
				fmt.Fprintf(io.Err, "aleph-sandbox: the command did not end within %s of SIG%s; its process tree was killed\n", f.grace, sigLabel(first))
				return 128 + int(syscall.SIGKILL)
			case errors.Is(err, core.ErrSignalBeforeStart):
				fmt.Fprintf(io.Err, "aleph-sandbox: SIG%s came before the command started; nothing ran\n", sigLabel(first))
				return 128 + signalNumber(first)
			case errors.Is(err, core.ErrSignalEnded):
				fmt.Fprintf(io.Err, "aleph-sandbox: SIG%s ended the command (this driver cannot forward signals, so its tree was killed)\n", sigLabel(first))
				return 128 + signalNumber(first)
			}
		}
	}
	execNotes(io, &f, out, err)
	if code, ok := deniedWithHint(io, &f, err); ok {
		return code
	}
	return reportExec(io, f.json, out, "", err)
}

// liveOutput is the child's output on its way to the CLI's stdout and
// stderr: filtered for a terminal, and watched for a closed pipe.
type liveOutput struct {
	out, err *pipeWatch
	filters  []*termsafe.Writer
}

// wire returns the writers for the child's stdout and stderr. filter asks
// for the terminal filter where the stream is a terminal; stop ends the
// command when a stream's reader is gone.
func (l *liveOutput) wire(io stdio, filter bool, stop func() *time.Timer) (stdout, stderr goio.Writer) {
	l.out = &pipeWatch{w: io.Out, stop: stop}
	l.err = &pipeWatch{w: io.Err, stop: stop}
	stdout, stderr = l.out, l.err
	if filter && io.OutIsTerminal {
		t := termsafe.NewWriter(stdout)
		l.filters = append(l.filters, t)
		stdout = t
	}
	if filter && io.ErrIsTerminal {
		t := termsafe.NewWriter(stderr)
		l.filters = append(l.filters, t)
		stderr = t
	}
	return stdout, stderr
}

// stopPipeTimer disarms the kill a closed output armed: the command has
// ended.
func (l *liveOutput) stopPipeTimer() {
	for _, p := range []*pipeWatch{l.out, l.err} {
		if p == nil {
			continue
		}
		if t := p.timer.Load(); t != nil {
			t.Stop()
		}
	}
}

// finish writes what the filters still hold and reports whether a reader
// went away.
func (l *liveOutput) finish() (broken bool) {
	if l.out == nil {
		return false
	}
	for _, t := range l.filters {
		_ = t.Flush()
	}
	return l.out.broken.Load() || l.err.broken.Load()
}

// pipeGrace is how long a command told of a closed output (SIGPIPE) has
// to end before its tree is killed: outside a sandbox the kernel's SIGPIPE
// ends a writer at once, and a writer that ignores it sees EPIPE and
// normally stops; here its writes still succeed (they go to the driver), so
// only the kill bounds one that carries on.
const pipeGrace = 500 * time.Millisecond

// brokenPipe returns what pipeWatch calls when the CLI's output is closed:
// SIGPIPE to the command where signals reach it (the command then ends as
// it would outside, by the signal or its own handler), with the kill
// after pipeGrace; the kill at once where they do not.
func brokenPipe(sigs *commandSignals, kill context.CancelFunc) func() *time.Timer {
	return func() *time.Timer {
		if sigs == nil {
			kill()
			return nil
		}
		select {
		case sigs.C <- driverapi.SignalPIPE:
		default: // the channel is full of signals already: kill
			kill()
			return nil
		}
		return time.AfterFunc(pipeGrace, kill)
	}
}

// pipeWatch passes writes on and, at the first EPIPE (the reader closed
// the pipe; SIGPIPE is caught, see main), stops the command: outside a
// sandbox the writer would have been killed by SIGPIPE, and a command whose
// output nobody reads must not run on until its timeout.
type pipeWatch struct {
	w      goio.Writer
	stop   func() *time.Timer
	broken atomic.Bool
	timer  atomic.Pointer[time.Timer]
}

func (p *pipeWatch) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if err != nil && errors.Is(err, syscall.EPIPE) && !p.broken.Swap(true) {
		if t := p.stop(); t != nil {
			p.timer.Store(t)
		}
	}
	return n, err
}

// reportExec turns the outcome into the exit status and, with --json, the
// one object docs/cli.md describes.
//
// reason is the run's reason code when it is known already (the
// service's), else out.Reason() gives it.
func reportExec(io stdio, asJSON bool, out *core.Output, reason core.ReasonCode, err error) int {
	var denied *core.DeniedError
	switch {
	case errors.As(err, &denied):
		if asJSON {
			writeJSON(io.Out, execResult{Denied: true, Reason: denied.Error(), Rule: denied.Rule, ReasonCode: string(denied.Code)})
			return 0
		}
		return fail(io.Err, "%s", oneLine(denied.Error()))
	case err != nil:
		code, field := core.FailureReason(err)
		return execFailureCode(io, asJSON, userMessage(err), string(code), field)
	}
	e := out.Exit
	reason = cmp.Or(reason, out.Reason())
	if asJSON {
		hint := ""
		if reason == core.ReasonSpawnRefused {
			hint = cliSpawnHint
		}
		writeJSON(io.Out, execResult{
			Stdout:       lossless(out.Stdout),
			Stderr:       lossless(out.Stderr),
			ExitCode:     ptr(int(e.ExitCode)),
			Signal:       ptr(int(e.Signal)),
			TimedOut:     e.TimedOut,
			Truncated:    e.Truncated,
			OOMKilled:    e.OOMKilled,
			DurationMS:   e.Duration.Milliseconds(),
			Backend:      out.Backend,
			ReasonCode:   string(reason),
			SpawnRefused: e.SpawnRefused,
			Hint:         hint,

			GitQuarantine:     out.GitQuarantine,
			Violations:        e.Violations,
			ViolationsDropped: e.ViolationsDropped,
			ViolationKinds:    e.ViolationKinds,
		})
		return 0
	}
	gitQuarantineNote(io, out.GitQuarantine)
	switch {
	case e.TimedOut:
		// Duration is how long the command's sandbox ran, setup included,
		// which a limit shorter than the setup exceeds.
		// Which signal ended it: SIGTERM came sandbox.timeout_term_grace_ms
		// before the limit, SIGKILL at it for a command still running.
		how := "was killed"
		switch {
		case e.Signal == int32(syscall.SIGTERM):
			how = "was sent SIGTERM before it and ended"
		case e.Signal == int32(syscall.SIGKILL):
			how = "was killed (SIGKILL)"
		case e.Signal == 0:
			how = fmt.Sprintf("was sent SIGTERM before it and exited with status %d", e.ExitCode)
		case e.Signal > 0:
			how = fmt.Sprintf("was sent SIGTERM before it and died of signal %d", e.Signal)
		}
		fmt.Fprintf(io.Err, "aleph-sandbox: timed out: the command reached its time limit (--timeout, or sandbox.default_timeout_seconds) and %s after %s\n", how, e.Duration.Round(1e6))
		return exitTimedOut
	case e.Signal > 0:
		return 128 + int(e.Signal)
	}
	// A status holds a byte: a wider code (Windows' are 32 bits) is cut to
	// its low byte as shells do, but a failure whose low byte is 0 (256)
	// must not read as success.
	if c := int(e.ExitCode) & 0xff; c != 0 || e.ExitCode == 0 {
		return c
	}
	return 255
}

func ptr[T any](v T) *T { return &v }

// execFailure is exec refusing its own input (flags, their values):
// reason code invalid_request.
func execFailure(io stdio, asJSON bool, msg string) int {
	return execFailureCode(io, asJSON, msg, service.ReasonInvalidRequest, "")
}

// execFailureErr is exec failing on err, with err's reason code (see
// core.FailureReason), invalid_request when it has none.
func execFailureErr(io stdio, asJSON bool, err error) int {
	code, field := core.FailureReason(err)
	if code == "" {
		code = service.ReasonInvalidRequest
	}
	return execFailureCode(io, asJSON, userMessage(err), string(code), field)
}

func execFailureCode(io stdio, asJSON bool, msg, code, field string) int {
	if asJSON {
		writeJSON(io.Out, execResult{Error: oneLine(msg), ReasonCode: code, Field: field})
		return exitSandboxError
	}
	return fail(io.Err, "%s", oneLine(msg))
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// oneLine keeps the refusal to the single line docs/cli.md promises, with no
// control character left: messages carry names and text from outside (a
// driver name, a path, what a plugin said), and an ESC or a newline in them
// must not reach the terminal or split the line.
func oneLine(s string) string {
	return escapeControls(strings.Join(strings.Fields(s), " "))
}

// shown is a name or path as printed: as it is when it holds only
// printable characters, else quoted (Go syntax), so a newline or an escape
// sequence in it is seen, not acted on.
func shown(s string) string {
	if escapeControls(s) == s {
		return s
	}
	return strconv.Quote(s)
}

// escapeControls is termsafe.Escape: what prints nothing of its own is
// shown escaped.
func escapeControls(s string) string { return termsafe.Escape(s) }

// lossless returns b as a string; invalid UTF-8 is replaced rather than
// letting encoding/json mangle it silently (JSON strings are Unicode).
func lossless(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// jsonRequested reports whether --json appears among the flags (before
// "--"), so even a flag error can answer in the format asked for.
func jsonRequested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--json", "-json", "--json=true", "-json=true":
			return true
		}
	}
	return false
}

// gitQuarantineNote tells the user which git repositories the command
// planted were neutralised (and how to undo it), or that the search for
// them could not finish.
func gitQuarantineNote(io stdio, q *core.GitQuarantine) {
	if q.Empty() {
		return
	}
	for _, r := range q.Renamed {
		fmt.Fprintf(io.Err, "aleph-sandbox: the command made or changed a git repository in the workspace; renamed %s so that git on the host does not run what its config or hooks name (inspect it, then rename it back if you trust it)\n", oneLine(r))
	}
	if q.Incomplete != "" {
		fmt.Fprintf(io.Err, "aleph-sandbox: warning: the search for git repositories planted in the workspace did not finish: %s\n", oneLine(q.Incomplete))
	}
}
