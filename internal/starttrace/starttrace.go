// Package starttrace writes timestamped marks of a command's way through
// the CLI and the driver to one file, so the cost of a one-shot command can
// be split into its steps (docs/performance.md, "Where the one-shot CLI's
// time goes").
//
// It is off unless EnvVar names a file. Every process that sees the
// variable (the CLI, and the driver plugin, which inherits the host's
// environment) appends its marks there; a mark is one write of one line,
// "UNIX_NANOSECONDS PID WHO EVENT", so the lines of several processes
// interleave whole. Nothing of it reaches a sandbox: the driver starts
// bwrap with an environment of its own.
package starttrace

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// EnvVar names the file the marks are appended to.
const EnvVar = "ALEPH_SANDBOX_TRACE"

// Trace appends marks to the trace file. A nil *Trace is valid and marks
// nothing, so callers need no check of their own.
type Trace struct {
	f   *os.File
	who string
}

// FromEnv opens the file EnvVar names (created 0600 if missing) and
// returns a Trace marking as who; nil when the variable is unset or the
// file cannot be opened (tracing is a measurement aid: it never fails the
// command).
func FromEnv(who string) *Trace {
	path := os.Getenv(EnvVar)
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil
	}
	return &Trace{f: f, who: who}
}

// Mark appends one line for event, stamped now.
func (t *Trace) Mark(event string) {
	if t == nil {
		return
	}
	var b strings.Builder
	b.WriteString(strconv.FormatInt(time.Now().UnixNano(), 10))
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(os.Getpid()))
	b.WriteByte(' ')
	b.WriteString(t.who)
	b.WriteByte(' ')
	b.WriteString(strings.ReplaceAll(event, "\n", " "))
	b.WriteByte('\n')
	// One write: O_APPEND keeps the line whole beside other processes'.
	_, _ = t.f.WriteString(b.String())
}

// Close closes the trace file.
func (t *Trace) Close() {
	if t != nil {
		_ = t.f.Close()
	}
}
