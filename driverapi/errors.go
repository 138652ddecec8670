package driverapi

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ProfileError: a profile that is garbled, forged or meant for another backend.
type ProfileError struct{ Reason string }

func (e *ProfileError) Error() string { return "invalid profile: " + e.Reason }

// InvalidSpecError: a RunSpec or ProfileRequest field that cannot be run.
type InvalidSpecError struct {
	Field  string
	Reason string
}

func (e *InvalidSpecError) Error() string {
	return fmt.Sprintf("invalid %s: %s", e.Field, e.Reason)
}

// ProtocolMismatchError: the plugin speaks another protocol version.
type ProtocolMismatchError struct {
	Plugin     string // path of the plugin binary
	PluginVer  int    // -1 when the plugin did not say
	HostVer    int
	Underlying error
}

func (e *ProtocolMismatchError) Error() string {
	pv := "unknown"
	if e.PluginVer >= 0 {
		pv = fmt.Sprint(e.PluginVer)
	}
	return fmt.Sprintf("plugin %s speaks protocol version %s, this host speaks version %d: use a plugin built for protocol %d",
		e.Plugin, pv, e.HostVer, e.HostVer)
}

func (e *ProtocolMismatchError) Unwrap() error { return e.Underlying }

// PluginError: a plugin binary that is missing, not executable, fails its
// checksum pin, or could not be started or reached.
type PluginError struct {
	Plugin string // path or name
	Op     string // "find", "checksum", "start", "call"
	Err    error
}

func (e *PluginError) Error() string {
	return fmt.Sprintf("plugin %s: %s: %v", e.Plugin, e.Op, e.Err)
}

func (e *PluginError) Unwrap() error { return e.Err }

// ErrPluginDied is wrapped by errors from a call whose plugin process died.
var ErrPluginDied = errors.New("plugin process died")

// PluginDiedError: the plugin process died during a call. errors.Is(err,
// ErrPluginDied) holds for it.
type PluginDiedError struct {
	// LastWords is what the plugin's stderr ended with: for a Go panic or
	// fatal error its "panic: ..." line and first frame, otherwise its last
	// line. Empty when it wrote nothing. Only ever the plugin's own log:
	// command output never passes through the plugin's stderr.
	LastWords string
	// Transport is what the connection said (gRPC's message), shown only
	// when the plugin left no words of its own.
	Transport string
}

func (e *PluginDiedError) Error() string {
	switch {
	case e.LastWords != "":
		return "plugin process died; it wrote: " + e.LastWords
	case e.Transport != "":
		return "plugin process died: " + e.Transport
	}
	return "plugin process died"
}

func (e *PluginDiedError) Unwrap() error { return ErrPluginDied }

// HandshakeError: a plugin process that ended, or wrote something else,
// before completing go-plugin's handshake. It is the Err of a
// *PluginError with Op "start".
type HandshakeError struct {
	// ForeignPlugin: the binary printed go-plugin's notice for a missing
	// magic cookie, so it is a go-plugin plugin of another program.
	ForeignPlugin bool
	// WroteStdout: the plugin wrote to stdout, which carries the
	// handshake; Stdout is the first line it wrote there (bounded).
	WroteStdout bool
	Stdout      string
	// LastWords is what its stderr ended with (see PluginDiedError).
	LastWords string
	// Err is go-plugin's error, kept for errors.Is; its message guesses
	// (wrong architecture, missing libraries) and is not shown.
	Err error
	// kind is "driver" or "hook", for the message.
	kind string
}

func (e *HandshakeError) Error() string {
	kind := e.kind
	if kind == "" {
		kind = "plugin"
	}
	var s string
	switch {
	case e.ForeignPlugin:
		return "this binary is not an aleph-sandbox " + kind + " plugin (it printed go-plugin's notice for a missing magic cookie: it is a plugin of another program)"
	case e.WroteStdout:
		s = fmt.Sprintf("the %s wrote to stdout before its handshake (stdout is the plugin protocol's channel; log to stderr): first line: %q", kind, e.Stdout)
		if e.LastWords != "" {
			s += "; its stderr ended with: " + e.LastWords
		}
		return s
	case e.LastWords != "":
		return "exited without a handshake; it wrote: " + e.LastWords
	}
	return "exited without a handshake, writing nothing on stderr"
}

func (e *HandshakeError) Unwrap() error { return e.Err }

// ChecksumError: a plugin binary whose SHA-256 is not the pinned one. It
// is never executed. It is the Err of a *PluginError with Op "checksum".
type ChecksumError struct {
	Pinned string // lower-case hex, from the configuration
	Actual string // lower-case hex of the file now; empty if unreadable
	// ReadErr is why Actual is empty.
	ReadErr error
}

func (e *ChecksumError) Error() string {
	actual := e.Actual
	if actual == "" {
		actual = fmt.Sprintf("unknown (%v)", e.ReadErr)
	}
	return fmt.Sprintf("binary does not match the pinned sha256, refusing to run it: pinned %s, the file's is %s (pin the new hash only if you trust the new binary)", e.Pinned, actual)
}

// ValidateRunSpec checks the parts of a RunSpec every driver relies on. It
// does not check the profile (Profile.Verify does).
func ValidateRunSpec(s RunSpec) error {
	if s.Program == "" {
		return &InvalidSpecError{Field: "program", Reason: "empty"}
	}
	if strings.IndexByte(s.Program, 0) >= 0 {
		return &InvalidSpecError{Field: "program", Reason: "contains a NUL byte"}
	}
	for i, a := range s.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return &InvalidSpecError{Field: fmt.Sprintf("args[%d]", i), Reason: "contains a NUL byte"}
		}
	}
	seen := make(map[string]bool, len(s.Env))
	for _, e := range s.Env {
		if err := ValidateEnvName(e.Name); err != nil {
			return err
		}
		if strings.IndexByte(e.Value, 0) >= 0 {
			return &InvalidSpecError{Field: "env " + e.Name, Reason: "value contains a NUL byte"}
		}
		if seen[e.Name] {
			return &InvalidSpecError{Field: "env " + e.Name, Reason: "set twice"}
		}
		seen[e.Name] = true
	}
	if len(s.Stdin) > MaxStdinBytes {
		return &InvalidSpecError{Field: "stdin", Reason: fmt.Sprintf("%d bytes exceeds the %d byte limit", len(s.Stdin), MaxStdinBytes)}
	}
	if s.Cwd == "" || s.Cwd[0] != '/' && !isWindowsAbs(s.Cwd) {
		return &InvalidSpecError{Field: "cwd", Reason: fmt.Sprintf("%q is not an absolute path", s.Cwd)}
	}
	if strings.IndexByte(s.Cwd, 0) >= 0 {
		return &InvalidSpecError{Field: "cwd", Reason: "contains a NUL byte"}
	}
	if s.Timeout <= 0 {
		return &InvalidSpecError{Field: "timeout", Reason: "must be greater than zero"}
	}
	if s.MaxOutputBytes <= 0 {
		return &InvalidSpecError{Field: "max_output_bytes", Reason: "must be greater than zero"}
	}
	if s.Layered != nil {
		if !s.SessionSandbox || s.SessionID == "" {
			return &InvalidSpecError{Field: "layered", Reason: "a layered workspace needs session_sandbox and a session_id (the overlay is mounted once per session sandbox)"}
		}
		if err := s.Layered.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// ValidateEnvName checks an environment variable name: non-empty, no '=',
// no NUL, valid UTF-8.
func ValidateEnvName(name string) error {
	switch {
	case name == "":
		return &InvalidSpecError{Field: "env", Reason: "empty variable name"}
	case strings.ContainsAny(name, "=\x00"):
		return &InvalidSpecError{Field: "env " + fmt.Sprintf("%q", name), Reason: "name contains '=' or NUL"}
	case !utf8.ValidString(name):
		return &InvalidSpecError{Field: "env " + fmt.Sprintf("%q", name), Reason: "name is not valid UTF-8"}
	}
	return nil
}

func isWindowsAbs(p string) bool {
	return len(p) >= 3 && p[1] == ':' && (p[2] == '\\' || p[2] == '/') ||
		strings.HasPrefix(p, `\\`)
}
