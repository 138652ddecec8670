package core

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Decision is the outcome an audit record reports.
type Decision string

const (
	DecisionAllow Decision = "allow" // the command ran (whatever its exit)
	DecisionDeny  Decision = "deny"  // a policy decision stopped it
	DecisionError Decision = "error" // bad input, a failed hook, driver or mediation
)

// AuditRecord is one ledger entry: one per command, one per denial, one per
// grant decision. It never holds environment values or secrets, and holds
// the program name and the argument count, not the arguments.
type AuditRecord struct {
	Time             time.Time           `json:"time"`
	SessionID        string              `json:"session_id"`
	CommandID        string              `json:"command_id"`
	Program          string              `json:"program,omitempty"`
	ArgCount         int                 `json:"arg_count"`
	CapabilityDigest string              `json:"capability_digest,omitempty"`
	PolicyDigest     string              `json:"policy_digest,omitempty"`
	Decision         Decision            `json:"decision"`
	Reason           ReasonCode          `json:"reason"`
	Detail           string              `json:"detail,omitempty"`
	Rule             string              `json:"rule,omitempty"`
	Hook             string              `json:"hook,omitempty"`
	Verdicts         []driverapi.Verdict `json:"verdicts,omitempty"`
	ExitCode         int32               `json:"exit_code"`
	Signal           int32               `json:"signal"`
	TimedOut         bool                `json:"timed_out"`
	Truncated        bool                `json:"truncated"`
	// DurationMS is the whole Execute, pipeline included (the command's own
	// run time is Output.Exit.Duration).
	DurationMS    int64  `json:"duration_ms"`
	Backend       string `json:"backend,omitempty"`
	ProfileDigest string `json:"profile_digest,omitempty"`
	// Details is what the driver reported about how it ran the command
	// (Exit.Details: e.g. the Windows isolation tier and why a stronger
	// one was not used, the cgroup mode).
	Details map[string]string `json:"details,omitempty"`
	// Network is set on the records of a command's network decisions
	// (one per proxy decision, or a summary of many; see RecordNetwork).
	Network *NetworkAudit `json:"network,omitempty"`
	// Interactive: the command's stdin was a stream (Command.StdinStream).
	Interactive bool `json:"interactive,omitempty"`
	// Tty: the command had a pseudo-terminal (Command.Tty).
	Tty bool `json:"tty,omitempty"`
	// GitQuarantine: git repositories the command planted in its
	// workspace, neutralised after it ended (Output.GitQuarantine).
	GitQuarantine *GitQuarantine `json:"git_quarantine,omitempty"`
	// File is set on the records of the files API: what was read,
	// written, listed or removed in the session's workspace.
	File *FileAudit `json:"file,omitempty"`
	// Usage is what the command consumed as the driver measured it
	// (Exit.Usage); absent when nothing ran.
	Usage *AuditUsage `json:"usage,omitempty"`
	// Violations are what the sandbox refused the command (the driver's
	// report and its proxy's refusals, Exit.Violations), bounded by
	// sandbox.max_violations; ViolationsDropped counts the refusals past
	// the bound.
	Violations        []driverapi.Violation `json:"violations,omitempty"`
	ViolationsDropped int64                 `json:"violations_dropped,omitempty"`
}

// FileAudit is one operation of the files API.
type FileAudit struct {
	// Op is read, write, list, stat or remove.
	Op string `json:"op"`
	// Path is relative to the session's workspace, as the caller gave it.
	Path string `json:"path"`
	// Bytes read or written.
	Bytes int64 `json:"bytes,omitempty"`
	// GitQuarantine: what a write made a git repository planted for the
	// host's git, neutralised once it was written (GuardFileWrite).
	GitQuarantine *GitQuarantine `json:"git_quarantine,omitempty"`
}

// AuditUsage is a command's CPU time (user plus system, and each) in
// milliseconds and the peak resident set size of its largest process in
// KiB.
type AuditUsage struct {
	CPUMS    int64 `json:"cpu_ms"`
	UserMS   int64 `json:"user_ms"`
	SystemMS int64 `json:"system_ms"`
	MaxRSSKB int64 `json:"max_rss_kb"`
}

// UsageOf is u as the audit record and the front ends give it.
func UsageOf(u driverapi.ResourceUsage) *AuditUsage {
	return &AuditUsage{CPUMS: u.UserMS + u.SystemMS, UserMS: u.UserMS, SystemMS: u.SystemMS, MaxRSSKB: u.MaxRSSKB}
}

// NetworkAudit is one decision of a command's managed proxy: the client
// asked for Host:Port and was let through or not. It never holds a secret
// value.
type NetworkAudit struct {
	Host     string `json:"host"`
	Port     uint16 `json:"port"`
	Protocol string `json:"protocol"`
	Allowed  bool   `json:"allowed"`
	// Reason is the proxy's stable reason code (policy_allow,
	// host_not_allowed, refused_loopback, ...).
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
	// Suppressed, when non-zero, makes the record a summary standing for
	// that many decisions like it that were counted, not itemised.
	Suppressed int `json:"suppressed,omitempty"`
}

// AuditSink receives every audit record. Implementations must be safe for
// concurrent use. An error is logged; it never changes a command's outcome.
type AuditSink interface {
	Record(ctx context.Context, rec AuditRecord) error
}

// JSONLinesSink appends one JSON object per line to a file (mode 0600). It
// does not fsync: the ledger is a record, not a transaction log.
type JSONLinesSink struct {
	mu sync.Mutex
	f  *os.File
}

// OpenJSONLinesSink opens (creating it and its directory if needed) the
// ledger file at path for appending.
func OpenJSONLinesSink(path string) (*JSONLinesSink, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("audit log %q: must be an absolute path", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	// Opened without waiting and then held to a regular file: a FIFO with
	// no reader would block every start of the host at open, and one with
	// a reader (or a device) would make each command wait on it.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|nonBlockingOpen, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("audit log %q: not a regular file (a FIFO, socket or device); point sandbox.audit_log at a file", path)
	}
	return &JSONLinesSink{f: f}, nil
}

// Record appends rec as one line, whole or not at all: the line goes out
// in one write, and a write that fails part-way (a full filesystem, a file
// size limit) is cut back off the file, so a reader never finds half a
// record glued to the next one.
func (s *JSONLinesSink) Record(_ context.Context, rec AuditRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return os.ErrClosed
	}
	n, err := s.f.Write(b)
	if err == nil {
		return nil
	}
	if n > 0 {
		s.unwrite(int64(n))
	}
	return fmt.Errorf("audit log: wrote %d of the record's %d bytes (removed again): %w", n, len(b), err)
}

// unwrite removes the n bytes a failed write appended. The file is
// opened O_APPEND, so they are its last n bytes unless another writer
// (a one-shot exec sharing the ledger) appended since: then the size does
// not match and the partial record is ended with a newline instead, so
// the next record still starts a line of its own.
func (s *JSONLinesSink) unwrite(n int64) {
	fi, err := s.f.Stat()
	if err == nil && fi.Size() >= n {
		if err := s.f.Truncate(fi.Size() - n); err == nil {
			return
		}
	}
	_, _ = s.f.Write([]byte{'\n'})
}

// Close closes the file.
func (s *JSONLinesSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// Values of sandbox.audit_on_failure.
const (
	// AuditFailOpen: a record that cannot be written is logged and
	// counted (AuditFailures); commands go on running.
	AuditFailOpen = "open"
	// AuditFailClosed: once a record cannot be written, commands are
	// refused (ErrAuditUnavailable) until one can be written again.
	AuditFailClosed = "closed"
)

// ledger writes records to the capability_ledger logger and the sink.
type ledger struct {
	log  hclog.Logger
	sink AuditSink
	// failClosed: refuse commands while the sink is failing.
	failClosed bool
	// failures counts the records the sink could not write; failing is
	// whether the last one failed.
	failures atomic.Int64
	failing  atomic.Bool
}

// refusing reports whether commands must be refused: failing closed and
// the last record was not written.
func (l *ledger) refusing() bool { return l.failClosed && l.failing.Load() }

// AuditFailures is how many audit records could not be written since the
// sandbox was built (each also logged as "audit sink failed").
func (s *WorkspaceSandbox) AuditFailures() int64 { return s.ledger.failures.Load() }

func (l *ledger) record(ctx context.Context, rec AuditRecord) {
	if rec.Time.IsZero() {
		rec.Time = time.Now().UTC()
	}
	args := []any{
		"session_id", rec.SessionID, "command_id", rec.CommandID, "program", rec.Program,
		"arg_count", rec.ArgCount, "capability_digest", rec.CapabilityDigest,
		"decision", string(rec.Decision), "reason", string(rec.Reason),
		"exit_code", rec.ExitCode, "signal", rec.Signal, "timed_out", rec.TimedOut,
		"truncated", rec.Truncated, "duration_ms", rec.DurationMS, "backend", rec.Backend,
		"profile_digest", rec.ProfileDigest,
	}
	if rec.Detail != "" {
		args = append(args, "detail", rec.Detail)
	}
	if rec.Hook != "" {
		args = append(args, "hook", rec.Hook, "rule", rec.Rule)
	}
	if len(rec.Verdicts) > 0 {
		vs := make([]string, len(rec.Verdicts))
		for i, v := range rec.Verdicts {
			vs[i] = v.Hook + ":" + v.Action.String()
			if v.Rule != "" {
				vs[i] += ":" + v.Rule
			}
		}
		args = append(args, "verdicts", vs)
	}
	if len(rec.Details) > 0 {
		args = append(args, "details", rec.Details)
	}
	if n := rec.Network; n != nil {
		args = append(args, "net_host", n.Host, "net_port", n.Port, "net_protocol", n.Protocol,
			"net_allowed", n.Allowed, "net_reason", n.Reason)
		if n.Suppressed > 0 {
			args = append(args, "net_suppressed", n.Suppressed)
		}
	}
	msg := "command"
	if rec.Network != nil {
		msg = "network"
	}
	if rec.Decision == DecisionAllow {
		l.log.Info(msg, args...)
	} else {
		l.log.Warn(msg, args...)
	}
	if l.sink != nil {
		if err := l.sink.Record(context.WithoutCancel(ctx), rec); err != nil {
			l.failures.Add(1)
			l.failing.Store(true)
			l.log.Error("audit sink failed", "error", err, "command_id", rec.CommandID, "fail_closed", l.failClosed)
		} else {
			l.failing.Store(false)
		}
	}
}

// RecordFile writes the audit record of one operation of the files API:
// refused (refused set: a protected entry, a link out, a limit), failed
// (err set), or done.
func (s *WorkspaceSandbox) RecordFile(ctx context.Context, sessionID string, f FileAudit, refused bool, err error) {
	rec := AuditRecord{SessionID: sessionID, CommandID: "file-" + newCommandID()[4:], Program: "(file " + f.Op + ")",
		File: &f, Decision: DecisionAllow, Reason: ReasonFileAccess}
	switch {
	case refused:
		rec.Decision, rec.Reason, rec.Detail = DecisionDeny, ReasonFileRefused, err.Error()
	case err != nil:
		rec.Decision, rec.Reason, rec.Detail = DecisionError, ReasonFileFailed, err.Error()
	}
	s.ledger.record(ctx, rec)
}

// RecordNetwork writes one network decision of a command's managed proxy
// to the ledger, beside the command's own record. Hosts wire their
// mediator's decisions here (core/proxy: Mediator.Audit), so the ledger
// holds every allow and deny the proxy made, or a summary of them.
func (s *WorkspaceSandbox) RecordNetwork(ctx context.Context, sessionID, commandID string, n NetworkAudit) {
	rec := AuditRecord{SessionID: sessionID, CommandID: commandID, Network: &n,
		Decision: DecisionDeny, Reason: ReasonNetworkDenied, Detail: n.Detail}
	if n.Allowed {
		rec.Decision, rec.Reason = DecisionAllow, ReasonNetworkAllowed
	} else {
		s.refusals.add(commandID, n)
	}
	s.ledger.record(ctx, rec)
}
