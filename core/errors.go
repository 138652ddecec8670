package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// ReasonCode says why the pipeline decided what it decided. It appears in
// DeniedError and in every audit record.
type ReasonCode string

// Reason codes. They are stable strings: ledgers and scripts match on them.
const (
	ReasonAllowed                 ReasonCode = "allowed"
	ReasonHookWarned              ReasonCode = "hook_warned"
	ReasonApprovalGranted         ReasonCode = "approval_granted"
	ReasonApprovalGrantedOnce     ReasonCode = "approval_granted_once"
	ReasonGrantCached             ReasonCode = "grant_cached"
	ReasonInvalidCommand          ReasonCode = "invalid_command"
	ReasonCwdOutsideWorkspace     ReasonCode = "cwd_outside_workspace"
	ReasonHookDenied              ReasonCode = "hook_denied"
	ReasonHookFailed              ReasonCode = "hook_failed"
	ReasonApprovalDenied          ReasonCode = "approval_denied"
	ReasonApprovalTimeout         ReasonCode = "approval_timeout"
	ReasonUnenforceable           ReasonCode = "unenforceable"
	ReasonSecretRequiresMediation ReasonCode = "secret_requires_mediation"
	ReasonMediationFailed         ReasonCode = "mediation_failed"
	ReasonGrantApplied            ReasonCode = "grant_applied"
	ReasonGrantStale              ReasonCode = "grant_stale"
	ReasonGrantRevoked            ReasonCode = "grant_revoked"
	ReasonNetworkAllowed          ReasonCode = "network_allowed"
	ReasonNetworkDenied           ReasonCode = "network_denied"
	ReasonDriverFailed            ReasonCode = "driver_failed"
	ReasonTimeout                 ReasonCode = "timeout"
	ReasonCanceled                ReasonCode = "canceled"
	ReasonWorkspaceFailed         ReasonCode = "workspace_failed"
	ReasonClosed                  ReasonCode = "sandbox_closed"
	ReasonSignalBeforeStart       ReasonCode = "signal_before_start"
	ReasonSignalEnded             ReasonCode = "signal_ended"
	ReasonDisabled                ReasonCode = "sandbox_disabled"
	ReasonDriverNotFound          ReasonCode = "driver_not_found"
	ReasonConfigInvalid           ReasonCode = "config_invalid"
	// ReasonAuditUnavailable: sandbox.audit_on_failure is "closed" and the
	// last audit record could not be written; nothing ran.
	ReasonAuditUnavailable ReasonCode = "audit_unavailable"
	// ReasonResourceExhausted: a configured capacity limit was reached
	// (LimitError names it); nothing ran.
	ReasonResourceExhausted ReasonCode = "resource_exhausted"
	// ReasonSpawnRefused: the command ran, but it tried to start a process
	// (fork, vfork, clone) without the spawn capability, and the sandbox
	// refused it; the driver counted it (driverapi.Exit.SpawnRefused).
	// Output.Hint says what to do.
	ReasonSpawnRefused ReasonCode = "spawn_refused"
	// ReasonSessionExpired: the audit record of a session deleted because
	// it sat idle for serve.session_idle_ttl.
	ReasonSessionExpired ReasonCode = "session_expired"
	// ReasonFileAccess, ReasonFileRefused, ReasonFileFailed: the audit
	// records of the files API (AuditRecord.File): an operation done, one
	// refused (a protected entry, a link out, a bad path, a limit), one
	// that failed.
	ReasonFileAccess  ReasonCode = "file_access"
	ReasonFileRefused ReasonCode = "file_refused"
	ReasonFileFailed  ReasonCode = "file_failed"
)

// SpawnRefusedHint is the hint of a spawn_refused result, naming the
// capability in the pipeline's own terms. Each front end says it in its
// own: the CLI names --spawn, the Python client spawn=True, the
// TypeScript client spawn: true, the MCP server its spawn argument.
const SpawnRefusedHint = "the command tried to start a subprocess and the sandbox refused it: subprocesses need the spawn capability"

// ErrAuditUnavailable refuses a command when the audit fails closed
// (sandbox.audit_on_failure = "closed") and the last record could not be
// written.
var ErrAuditUnavailable = errors.New("the audit log could not be written and sandbox.audit_on_failure is \"closed\": commands are refused until a record can be written (free space on its filesystem)")

// LimitError is a configured capacity limit a request reached: Limit is
// the limit's configuration key (e.g. "serve.max_request_bytes"), Value
// its value. It is never a failure of the sandbox: raise the limit or
// send less.
type LimitError struct {
	Limit  string
	Value  int64
	Reason string
}

// LimitOf is the configuration key of the capacity limit err reached (a
// *LimitError of the pipeline or a *driverapi.LimitError of the driver),
// or "".
func LimitOf(err error) string {
	var le *LimitError
	var dle *driverapi.LimitError
	switch {
	case errors.As(err, &le):
		return le.Limit
	case errors.As(err, &dle):
		return dle.Limit
	}
	return ""
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s (limit %s = %d; raise it in the configuration, or send less)", e.Reason, e.Limit, e.Value)
}

// FailureReason is the reason code of err, a command that did not give an
// exit status, and the command field at fault (for invalid_command): what
// a caller branches on instead of parsing the message. A denial has its
// own code (DeniedError.Code); an error of no known kind gives "".
func FailureReason(err error) (code ReasonCode, field string) {
	var (
		denied *DeniedError
		invCmd *InvalidCommandError
		cfgErr *ConfigError
		notFnd *DriverNotFoundError
		drvErr *DriverError
		hookE  *HookError
		hookPE *HookPluginError
		wsErr  *WorkspaceError
		medErr *MediationError
	)
	switch {
	case err == nil:
		return "", ""
	case errors.As(err, &denied):
		return denied.Code, ""
	case errors.As(err, &invCmd):
		return ReasonInvalidCommand, invCmd.Field
	case errors.Is(err, ErrSignalBeforeStart):
		return ReasonSignalBeforeStart, ""
	case errors.Is(err, ErrSignalEnded):
		return ReasonSignalEnded, ""
	case errors.Is(err, ErrAuditUnavailable):
		return ReasonAuditUnavailable, ""
	case errors.As(err, new(*LimitError)), errors.As(err, new(*driverapi.LimitError)):
		return ReasonResourceExhausted, LimitOf(err)
	case errors.As(err, &cfgErr):
		return ReasonConfigInvalid, cfgErr.FullKey()
	case errors.As(err, &notFnd):
		return ReasonDriverNotFound, ""
	case errors.As(err, &drvErr):
		return ReasonDriverFailed, ""
	case errors.As(err, &hookE), errors.As(err, &hookPE):
		return ReasonHookFailed, ""
	case errors.As(err, &wsErr):
		return ReasonWorkspaceFailed, ""
	case errors.As(err, &medErr):
		return ReasonMediationFailed, ""
	case errors.Is(err, ErrClosed):
		return ReasonClosed, ""
	case errors.Is(err, ErrDisabled):
		return ReasonDisabled, ""
	case errors.Is(err, context.Canceled):
		return ReasonCanceled, ""
	}
	return "", ""
}

// DeniedError is a policy decision not to run a command.
type DeniedError struct {
	Code   ReasonCode
	Reason string
	// Rule and Hook are set when a before-hook denied.
	Rule string
	Hook string
	// RetryAfter is set when the denying hook said when to try again.
	RetryAfter time.Duration
	// Feature is the driver feature that is missing, for reason
	// unenforceable (a driverapi.Feature* name).
	Feature string
}

func (e *DeniedError) Error() string {
	var b strings.Builder
	b.WriteString("denied (")
	b.WriteString(string(e.Code))
	b.WriteString(")")
	if e.Hook != "" {
		b.WriteString(" by hook " + e.Hook)
	}
	if e.Rule != "" {
		b.WriteString(" rule " + e.Rule)
	}
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// InvalidCommandError is a Command field that cannot be run as given.
// Field names it as the wire protocol does (session_id, cwd,
// capabilities.fs_read[0], ...): a front end maps it to its own spelling
// (the CLI to a flag) and shows Reason, which names no Go API.
type InvalidCommandError struct {
	Field  string
	Reason string
	// Hint, when set, says how a Go caller sets the field (Error includes
	// it; a front end whose users set it otherwise leaves it out).
	Hint string
	// Err is the driver's refusal when the driver found the field bad
	// (a *driverapi.InvalidSpecError), else nil.
	Err error
}

func (e *InvalidCommandError) Unwrap() error { return e.Err }

func (e *InvalidCommandError) Error() string {
	if e.Hint != "" {
		return fmt.Sprintf("invalid command: %s: %s (%s)", e.Field, e.Reason, e.Hint)
	}
	return fmt.Sprintf("invalid command: %s: %s", e.Field, e.Reason)
}

// HookError is a before-hook that failed, timed out or answered nonsense.
// The command did not run: hooks fail closed.
type HookError struct {
	Hook string
	Err  error
}

func (e *HookError) Error() string {
	return fmt.Sprintf("hook %s failed, command not run: %v", e.Hook, e.Err)
}

func (e *HookError) Unwrap() error { return e.Err }

// DriverError is a driver that failed a call or died. Driver names the
// driver (its binary, or its backend for an in-process driver).
type DriverError struct {
	Driver string
	Op     string
	Err    error
}

func (e *DriverError) Error() string {
	// driverapi's errors label themselves with the plugin's path and the
	// step: say the driver, its path and the step once each.
	var plugin, op string
	var inner any
	switch de := e.Err.(type) {
	case *driverapi.PluginError:
		plugin, op, inner = de.Plugin, de.Op, de.Err
	case *driverapi.RemoteError:
		plugin, op, inner = de.Plugin, de.Op, de.Msg
	}
	if inner == nil {
		return fmt.Sprintf("driver %s: %s: %v", e.Driver, e.Op, e.Err)
	}
	name := e.Driver
	if plugin != "" && plugin != e.Driver {
		name += " (" + plugin + ")"
	}
	// The plugin's step is the more precise one ("checksum" or "find"
	// during a "start").
	return fmt.Sprintf("driver %s: %s: %v", name, op, inner)
}

func (e *DriverError) Unwrap() error { return e.Err }

// StaleGrantError refuses a grant approved against a policy digest that is
// no longer the session's.
type StaleGrantError struct {
	SessionID string
	Subject   string
	Expected  string
	Current   string
}

func (e *StaleGrantError) Error() string {
	return fmt.Sprintf("network grant for %s was approved against policy digest %s, but the session policy is now %s: re-approve against the current policy",
		e.Subject, e.Expected, e.Current)
}

// MediationError is a network mediation that could not be started.
type MediationError struct{ Err error }

func (e *MediationError) Error() string { return "network mediation failed to start: " + e.Err.Error() }

func (e *MediationError) Unwrap() error { return e.Err }

// WorkspaceError is a session workspace that could not be created or is
// not a plain directory.
type WorkspaceError struct {
	Path string
	Err  error
}

func (e *WorkspaceError) Error() string {
	return fmt.Sprintf("session workspace %s: %v", e.Path, e.Err)
}

func (e *WorkspaceError) Unwrap() error { return e.Err }

// ErrClosed is returned by a WorkspaceSandbox after Close.
var ErrClosed = errors.New("sandbox is closed")

// ErrDisabled is returned by every call of a runtime built from a
// configuration with sandbox.enabled = false (ReasonDisabled).
var ErrDisabled = errors.New("the sandbox is disabled (sandbox.enabled = false): nothing runs")

// ErrSessionForgotten is the cause a command that was running when its
// session was forgotten (ForgetSession) ends with: it is killed before
// the session's HOME is removed.
var ErrSessionForgotten = errors.New("its session was forgotten while it ran")

// HookPluginError is a hook plugin that could not be started, died, hung
// past its deadline or answered something that is not a verdict. The
// pipeline fails the command closed on it.
type HookPluginError struct {
	Hook string
	Op   string
	Err  error
}

func (e *HookPluginError) Error() string {
	return fmt.Sprintf("hook plugin %s: %s: %v", e.Hook, e.Op, e.Err)
}

func (e *HookPluginError) Unwrap() error { return e.Err }

// ErrHookHung is wrapped by the error of a call the plugin did not answer
// within its deadline.
var ErrHookHung = errors.New("hook plugin did not answer within its deadline")
