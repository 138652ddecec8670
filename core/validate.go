package core

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Where each check of a command lives, once:
//
//   - Its form (this file's ValidateCommand): what a Command must be
//     whatever the host and the session, checked on the value alone. Front
//     ends reach it through alephsandbox.Request, which normalises their
//     input (relative paths against the caller's directory, the --net
//     syntax, seconds to a Duration) and then calls ValidateCommand, naming
//     the refused field in its own terms; the pipeline calls it again on
//     every Execute because a Go embedder may build a Command without
//     Request, and a malformed one must be refused there too. One
//     validator, called from both, not two copies of its rules.
//   - What depends on the session and the host at run time stays in the
//     pipeline, checked once per command: the named workspace resolved and
//     refused when it goes through a link or reaches the sandbox's own
//     state or another session (canonicalDir, reachesOwnState,
//     reachesOtherSessions), the cwd resolved inside the session's actual
//     workspace against the links there now (confineCwd), grants resolved
//     where they lead (capcheck.go), and what the driver can enforce
//     (unenforceable in capcheck.go, for capabilities and streams alike).
//     A front end cannot check these: the workspace and its links are the
//     session's, and they change between commands.
//   - The driver checks its RunSpec again (driverapi.ValidateRunSpec,
//     CheckCanonicalDir): that guards the driver against a host that is not
//     this one, and stays as defence in depth.

// ValidateCommand refuses a malformed command with an
// *InvalidCommandError naming the field: the rules of its form alone (a
// session id and a program, text the driver protocol can carry, absolute
// paths, a network mode with its hosts, limits in range, the streaming
// fields consistent). It reads nothing on disk; the pipeline's checks
// against the session's workspace and the driver come after it. The
// session is cmd.SessionID (a command carrying its session in the context
// instead is checked by Execute, which fills it in first).
func ValidateCommand(cmd Command) error {
	return validateCommand(cmd.SessionID, cmd)
}

// validateSessionID is the session id's rule: it names a directory only
// through its hash, but an unbounded id is a memory and ledger hazard, and
// the protocol carries text.
func validateSessionID(sid string) error {
	switch {
	case sid == "":
		return &InvalidCommandError{Field: "session_id", Reason: "empty", Hint: "set Command.SessionID or carry one in the context with WithSession"}
	case len(sid) > maxSessionIDLen:
		return &InvalidCommandError{Field: "session_id", Reason: fmt.Sprintf("longer than %d bytes", maxSessionIDLen)}
	case !utf8.ValidString(sid) || strings.IndexByte(sid, 0) >= 0:
		return &InvalidCommandError{Field: "session_id", Reason: "must be valid UTF-8 without NUL bytes"}
	}
	return nil
}

func validateCommand(sid string, cmd Command) error {
	bad := func(field, reason string) error { return &InvalidCommandError{Field: field, Reason: reason} }
	if err := validateSessionID(sid); err != nil {
		return err
	}
	switch {
	case cmd.Program == "":
		return bad("program", "empty")
	case !utf8.ValidString(cmd.Program):
		return bad("program", "not valid UTF-8 (the driver protocol carries text)")
	case !utf8.ValidString(cmd.Cwd):
		return bad("cwd", "not valid UTF-8")
	case !utf8.ValidString(cmd.Workspace):
		return bad("workspace", "not valid UTF-8")
	case strings.IndexByte(cmd.Program, 0) >= 0:
		return bad("program", "contains a NUL byte")
	case cmd.Timeout < 0:
		return bad("timeout", "must not be negative")
	case cmd.Timeout > MaxTimeout:
		return bad("timeout", fmt.Sprintf("longer than the %s maximum", MaxTimeout))
	case cmd.Capabilities.TimeoutSecs > uint64(MaxTimeout/time.Second):
		return bad("capabilities.timeout_secs", fmt.Sprintf("longer than the %s maximum", MaxTimeout))
	case cmd.MaxOutputBytes < 0:
		return bad("max_output_bytes", "must not be negative")
	case len(cmd.Stdin) > driverapi.MaxStdinBytes:
		return bad("stdin", fmt.Sprintf("%d bytes exceeds the %d byte limit", len(cmd.Stdin), driverapi.MaxStdinBytes))
	case strings.IndexByte(cmd.Cwd, 0) >= 0:
		return bad("cwd", "contains a NUL byte")
	case strings.IndexByte(cmd.Workspace, 0) >= 0:
		return bad("workspace", "contains a NUL byte")
	case cmd.Workspace != "" && !filepath.IsAbs(cmd.Workspace):
		// Resolved against this process's directory it would name a
		// different directory for each host program: only absolute.
		return bad("workspace", fmt.Sprintf("%q is not an absolute path", cmd.Workspace))
	}
	if err := validateStream(cmd); err != nil {
		return err
	}
	for i, a := range cmd.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return bad(fmt.Sprintf("args[%d]", i), "contains a NUL byte")
		}
		if !utf8.ValidString(a) {
			return bad(fmt.Sprintf("args[%d]", i), "not valid UTF-8 (the driver protocol carries text)")
		}
	}
	for name, v := range cmd.Env {
		if err := driverapi.ValidateEnvName(name); err != nil {
			return bad(fmt.Sprintf("env %q", name), fmt.Sprintf("%q is not a variable name (empty, '=', NUL or not UTF-8)", name))
		}
		if strings.IndexByte(v, 0) >= 0 {
			return bad("env "+name, "the value of "+name+" contains a NUL byte")
		}
		if !utf8.ValidString(v) {
			return bad("env "+name, "the value of "+name+" is not valid UTF-8")
		}
	}
	for name, v := range cmd.Secrets {
		if err := driverapi.ValidateEnvName(name); err != nil {
			return bad(fmt.Sprintf("secret %q", name), fmt.Sprintf("%q is not a variable name (empty, '=', NUL or not UTF-8)", name))
		}
		if strings.ContainsAny(v, "\x00\r\n") || !utf8.ValidString(v) {
			return bad("secret "+name, "the value of "+name+" contains NUL, CR or LF, or is not valid UTF-8")
		}
		if _, dup := cmd.Env[name]; dup {
			return bad("secret "+name, name+" collides with an Env entry of the same name")
		}
		if isDefaultEnvName(name) {
			return bad("secret "+name, name+" collides with a variable the sandbox sets")
		}
	}
	for _, g := range []struct {
		field string
		paths []string
	}{{"capabilities.fs_read", cmd.Capabilities.FSRead}, {"capabilities.fs_write", cmd.Capabilities.FSWrite}} {
		for i, p := range g.paths {
			if !filepath.IsAbs(p) || strings.IndexByte(p, 0) >= 0 || !utf8.ValidString(p) {
				return bad(fmt.Sprintf("%s[%d]", g.field, i), fmt.Sprintf("%q is not an absolute path", p))
			}
		}
	}
	n := cmd.Capabilities.Network
	switch n.Mode {
	case driverapi.NetworkNone, driverapi.NetworkAllowAll:
		if len(n.Hosts) > 0 {
			return bad("capabilities.network.hosts", "only allowed with mode allow_hosts")
		}
	case driverapi.NetworkAllowHosts:
		if len(n.Hosts) == 0 {
			return bad("capabilities.network.hosts", "allow_hosts needs at least one host")
		}
		for i, h := range n.Hosts {
			if h == "" || strings.ContainsAny(h, " \t\r\n/\x00") || !utf8.ValidString(h) {
				return bad(fmt.Sprintf("capabilities.network.hosts[%d]", i), fmt.Sprintf("%q is not a host", h))
			}
		}
	default:
		return bad("capabilities.network.mode", fmt.Sprintf("unknown mode %d", n.Mode))
	}
	return nil
}

// canonicalDir resolves an existing directory, named absolute (checked
// by validateCommand, which every caller has run: a relative name would
// resolve against this process's directory).
func canonicalDir(field, p string) (string, error) {
	canon, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", &InvalidCommandError{Field: field, Reason: fmt.Sprintf("%q does not exist or cannot be resolved", p)}
	}
	st, err := os.Stat(canon)
	if err != nil || !st.IsDir() {
		return "", &InvalidCommandError{Field: field, Reason: fmt.Sprintf("%q is not a directory", p)}
	}
	// A workspace named through a symbolic link is refused, not followed:
	// a sandboxed command can plant a link in a directory it may write
	// (W/project -> $HOME), and a later command naming that link as its
	// workspace would make the link's target writable. Grants and the
	// driver's mounts refuse links for the same reason.
	if canon != filepath.Clean(p) {
		return "", &InvalidCommandError{Field: field, Reason: fmt.Sprintf("%q goes through a symbolic link (it resolves to %s); name the real directory", p, canon)}
	}
	return canon, nil
}

// confineCwd resolves cwd (symlinks included) and requires it inside ws.
func confineCwd(ws, cwd string) (string, error) {
	if cwd == "" {
		return ws, nil
	}
	if !filepath.IsAbs(cwd) {
		cwd = filepath.Join(ws, cwd)
	}
	canon, err := filepath.EvalSymlinks(cwd)
	if err != nil {
		// A path that does not resolve may still be an escape attempt;
		// report escape first when it is lexically outside.
		if !driverapi.PathWithin(filepath.Clean(cwd), ws) {
			return "", &DeniedError{Code: ReasonCwdOutsideWorkspace, Reason: fmt.Sprintf("cwd %q is outside the workspace %s", cwd, ws)}
		}
		return "", &InvalidCommandError{Field: "cwd", Reason: fmt.Sprintf("%q does not exist", cwd)}
	}
	if !driverapi.PathWithin(canon, ws) {
		return "", &DeniedError{Code: ReasonCwdOutsideWorkspace, Reason: fmt.Sprintf("cwd %q resolves to %s, outside the workspace %s", cwd, canon, ws)}
	}
	if st, err := os.Stat(canon); err != nil || !st.IsDir() {
		return "", &InvalidCommandError{Field: "cwd", Reason: fmt.Sprintf("%q is not a directory", cwd)}
	}
	return canon, nil
}

// unwrapPath is a *fs.PathError's cause alone (the path is named already).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
