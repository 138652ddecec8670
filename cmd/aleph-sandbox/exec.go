package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// execResult is the --json object of CLI.md.
type execResult struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exit_code"`
	Signal     int    `json:"signal"`
	TimedOut   bool   `json:"timed_out"`
	Truncated  bool   `json:"truncated"`
	DurationMS int64  `json:"duration_ms"`
	Denied     bool   `json:"denied"`
	Reason     string `json:"reason"`
	Rule       string `json:"rule"`
	Backend    string `json:"backend"`
	Error      string `json:"error"`
}

func runExec(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	var f runFlags
	f.register(fs)
	host := fs.String("host", "", "send the command to a running `aleph-sandbox serve` at `unix:PATH` (default: $ALEPH_SANDBOX_HOST; neither: run in-process)")
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
	if addr := hostAddress(*host); addr != "" {
		return runExecHost(ctx, addr, &f, rest, io)
	}
	cfg, err := loadConfig(f.config, f.workspaceRoot, f.driver)
	if err != nil {
		return execFailure(io, f.json, err.Error())
	}
	cmd, err := f.command(rest[0], rest[1:], io.In)
	if err != nil {
		return execFailure(io, f.json, err.Error())
	}
	p, err := buildPipeline(cfg, &approver{yes: f.yes, terminal: io.InIsTerminal || f.stdin, prompt: io.Err, answers: ttyAnswers}, io.Err)
	if err != nil {
		return execFailure(io, f.json, err.Error())
	}
	defer p.Close()
	if !f.json {
		// Live output; Output still captures within the budget.
		cmd.Stdout, cmd.Stderr = io.Out, io.Err
	}
	if io.forwardSignals == nil {
		out, err := p.sandbox.Execute(ctx, cmd)
		return reportExec(io, f.json, out, err)
	}
	// SIGINT, SIGTERM and SIGHUP go to the command, which has the grace
	// period to end by itself; then its tree is killed.
	execCtx, kill := context.WithCancel(ctx)
	defer kill()
	sigs := forwardToCommand(io.forwardSignals, f.grace, kill)
	cmd.Signals = sigs.C
	out, err := p.sandbox.Execute(execCtx, cmd)
	sigs.stop()
	if first, expired := sigs.got(); err != nil && first != nil && ctx.Err() == nil {
		// The command did not end with a status of its own: report what a
		// shell would for a process ended by that signal (CLI.md).
		switch {
		case expired:
			fmt.Fprintf(io.Err, "aleph-sandbox: the command did not end within %s of SIG%s; its process tree was killed\n", f.grace, sigLabel(first))
			return 128 + int(syscall.SIGKILL)
		case errors.Is(err, core.ErrSignalEnded):
			fmt.Fprintf(io.Err, "aleph-sandbox: SIG%s ended the command (this driver cannot forward signals, so its tree was killed)\n", sigLabel(first))
			return 128 + signalNumber(first)
		}
	}
	return reportExec(io, f.json, out, err)
}

// reportExec turns the outcome into the exit status and, with --json, the
// one object CLI.md describes.
func reportExec(io stdio, asJSON bool, out *core.Output, err error) int {
	var denied *core.DeniedError
	switch {
	case errors.As(err, &denied):
		if asJSON {
			writeJSON(io.Out, execResult{Denied: true, Reason: denied.Error(), Rule: denied.Rule})
			return 0
		}
		return fail(io.Err, "%s", oneLine(denied.Error()))
	case err != nil:
		return execFailure(io, asJSON, err.Error())
	}
	e := out.Exit
	if asJSON {
		writeJSON(io.Out, execResult{
			Stdout:     lossless(out.Stdout),
			Stderr:     lossless(out.Stderr),
			ExitCode:   int(e.ExitCode),
			Signal:     int(e.Signal),
			TimedOut:   e.TimedOut,
			Truncated:  e.Truncated,
			DurationMS: e.Duration.Milliseconds(),
			Backend:    out.Backend,
		})
		return 0
	}
	switch {
	case e.TimedOut:
		fmt.Fprintf(io.Err, "aleph-sandbox: timed out after %s\n", e.Duration.Round(1e6))
		return exitTimedOut
	case e.Signal > 0:
		return 128 + int(e.Signal)
	}
	return int(e.ExitCode) & 0xff
}

func execFailure(io stdio, asJSON bool, msg string) int {
	if asJSON {
		writeJSON(io.Out, execResult{Error: oneLine(msg)})
		return exitSandboxError
	}
	return fail(io.Err, "%s", oneLine(msg))
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// oneLine keeps the refusal to the single line CLI.md promises.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

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
