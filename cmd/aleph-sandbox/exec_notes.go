package main

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// tinyMemoryMB is the largest --memory that gets the "too small to start"
// hint with a kill for memory: below a few MiB no program gets going.
const tinyMemoryMB = 4

// execNotes says on stderr, in text mode, what would otherwise pass in
// silence or leave a user guessing: which flag asked for a denied elevation
// and how to approve it, output cut at the budget, a kill for memory, and a
// command that failed to start subprocesses without --spawn. JSON output
// carries the same facts in its fields and gets no notes.
func execNotes(io stdio, f *runFlags, out *core.Output, err error) {
	if f.json {
		return
	}
	if err != nil || out == nil {
		return
	}
	e := out.Exit
	if e.OOMKilled {
		limit := "its memory limit"
		if f.memoryMB > 0 {
			limit = fmt.Sprintf("its memory limit (--memory %d)", f.memoryMB)
		}
		hint := ""
		if f.memoryMB > 0 && f.memoryMB <= tinyMemoryMB {
			// Killed as it started (or, a moment earlier, while its
			// sandbox was set up: the driver's MemoryTooSmallError).
			hint = fmt.Sprintf(": %d MiB is too small to start the program (hint: a sandbox needs about 2 MiB before the program starts, and the program its own share on top: try tens of MiB or more)", f.memoryMB)
		}
		fmt.Fprintf(io.Err, "aleph-sandbox: the command was killed for exceeding %s%s\n", limit, hint)
	}
	switch {
	case e.Truncated && e.StdoutBytes+e.StderrBytes > 0:
		fmt.Fprintf(io.Err, "aleph-sandbox: output truncated: the command wrote %d bytes to stdout and %d to stderr, more than the output budget keeps (raise it with --max-output)\n",
			e.StdoutBytes, e.StderrBytes)
	case e.Truncated:
		// Through the service, whose result has no byte counts.
		fmt.Fprintln(io.Err, "aleph-sandbox: output truncated: the command wrote more than the output budget keeps (raise it with --max-output)")
	}
	if note := violationsNote(e.Violations, e.ViolationsDropped); note != "" {
		fmt.Fprintln(io.Err, "aleph-sandbox: "+note)
	}
	switch {
	case e.SpawnRefused > 0:
		// Seen where it happened: the driver refused and counted it.
		fmt.Fprintln(io.Err, "aleph-sandbox: "+cliSpawnHint)
	case !out.SpawnReported && !f.spawn && e.ExitCode != 0 && looksLikeForkDenied(out.Stderr):
		// A driver that does not count refused forks (the macOS and
		// Windows drivers, a third party's): the command's own words are
		// all there is to go by. Never with one that counts: its 0 means
		// nothing was refused, whatever the output says.
		fmt.Fprintln(io.Err, "aleph-sandbox: "+cliSpawnHint)
	}
}

// cliSpawnHint is the CLI's one line for a command that was refused a
// subprocess (core.SpawnRefusedHint in the CLI's terms).
const cliSpawnHint = "the command could not start a subprocess: subprocesses need --spawn (approve it with --yes or at the prompt)"

// deniedWithHint is the one refusal line of a denied elevation in text
// mode, naming the flags that asked for it and how to approve; ok is false
// for every other outcome (reportExec handles those).
func deniedWithHint(io stdio, f *runFlags, err error) (code int, ok bool) {
	var de *core.DeniedError
	if !errors.As(err, &de) {
		return 0, false
	}
	return denialHint(io, f, de.Code, de.Error())
}

// denialHint is deniedWithHint for a denial known by its code and text
// (exec --host has them from the service's result).
func denialHint(io stdio, f *runFlags, code core.ReasonCode, text string) (int, bool) {
	if f.json || (code != core.ReasonApprovalDenied && code != core.ReasonApprovalTimeout) {
		return 0, false
	}
	return fail(io.Err, "%s (asked for by %s; approve with --yes, or answer the prompt on a terminal)",
		oneLine(text), elevationFlags(f)), true
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) bytes() []byte { return t.b }

// elevationFlags names the flags of this invocation that ask for more than
// the strict baseline.
func elevationFlags(f *runFlags) string {
	var fl []string
	if f.spawn {
		fl = append(fl, "--spawn")
	}
	if n := strings.ToLower(strings.TrimSpace(f.net)); n != "" && n != "none" {
		fl = append(fl, "--net "+f.net)
	}
	if len(f.read) > 0 {
		fl = append(fl, "--read")
	}
	if len(f.write) > 0 {
		fl = append(fl, "--write")
	}
	if f.memoryMB > 0 {
		fl = append(fl, "--memory")
	}
	if f.timeout > 0 {
		fl = append(fl, "--timeout")
	}
	if len(fl) == 0 {
		return "the command"
	}
	return strings.Join(fl, ", ")
}

// looksLikeForkDenied recognises what shells and runtimes print when fork,
// clone or exec of a child is refused (the seccomp filter answers EPERM).
func looksLikeForkDenied(stderr []byte) bool {
	for _, s := range []string{"Cannot fork", "cannot fork", "fork: Operation not permitted", "fork failed", "posix_spawn", "Resource temporarily unavailable"} {
		if bytes.Contains(stderr, []byte(s)) {
			return true
		}
	}
	// Runtimes that say it in their own words, each with the errno
	// (EPERM) so that an unrelated failure of theirs is not taken for it:
	// python's subprocess (a PermissionError raised in _execute_child),
	// node's child_process ("spawn PROGRAM EPERM", "spawnSync PROGRAM
	// EPERM"), go's os/exec ("fork/exec PROGRAM: operation not permitted").
	switch {
	case bytes.Contains(stderr, []byte("_execute_child")) && bytes.Contains(stderr, []byte("PermissionError: [Errno 1]")):
		return true
	case forkDeniedNode.Match(stderr), forkDeniedGo.Match(stderr):
		return true
	}
	return false
}

var (
	forkDeniedNode = regexp.MustCompile(`\bspawn(Sync)? \S+ EPERM\b`)
	forkDeniedGo   = regexp.MustCompile(`fork/exec \S+: operation not permitted`)
)

// maxViolationsNoted bounds the refusals the text-mode note names; the
// rest are counted ("and N more"), as --json lists them all.
const maxViolationsNoted = 6

// violationsNote is the one line that names what the sandbox refused the
// command (syscalls, connections, ...) in text mode, "" when nothing was.
// Refused subprocesses are left to the spawn hint, which says what to do
// about them. Operations and targets come from the command, so the line
// goes through oneLine: no control character reaches the terminal.
func violationsNote(vs []driverapi.Violation, dropped int64) string {
	var named []string
	more := dropped
	for _, v := range vs {
		if v.Kind == driverapi.ViolationSpawn {
			continue
		}
		if len(named) == maxViolationsNoted {
			more += v.Count
			continue
		}
		what := v.Kind + " " + v.Operation
		if v.Operation == v.Kind || v.Operation == "" {
			what = v.Kind
		}
		if v.Target != "" {
			what += " " + v.Target
		}
		if v.Count > 1 {
			what += fmt.Sprintf(" (%d times)", v.Count)
		}
		named = append(named, what)
	}
	if len(named) == 0 {
		return ""
	}
	line := "the sandbox refused the command: " + strings.Join(named, ", ")
	if more > 0 {
		line += fmt.Sprintf(", and %d more refusals", more)
	}
	return oneLine(line + " (--json lists them)")
}
