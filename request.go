package alephsandbox

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/proxy"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Request is one command as every front end asks for it: the CLI's flags,
// the service's ExecuteRequest and MCP's run_command arguments are each
// mapped onto it, and Command normalises and validates it, once, into the
// core.Command the pipeline runs. The fields are named as the service's
// protocol names them (docs/serve.md), and so are the fields a
// RequestError names; each front end spells them its own way when it
// reports one (the CLI as flags).
//
// A Request's own checks are of what only it has: its spelling (the
// --net syntax and the proxy's host rules, paths relative to Dir, seconds
// as a number). The form of the command it makes is checked by the
// pipeline's one validator, core.ValidateCommand, which Command calls and
// whose refusal it names by the request's field; the pipeline calls the
// same validator for a Command an embedder builds without a Request. What
// the pipeline checks against the session and the driver (the workspace
// and cwd resolved where they lead, what the driver can enforce, the
// policy, approvals) stays the pipeline's: a Request refuses only what is
// malformed, before anything runs.
type Request struct {
	// Session is the session the command runs in (required).
	Session string
	// Argv is the program and its arguments (the program is required).
	Argv []string
	// Workspace, when set, is an existing directory used as the
	// session's workspace.
	Workspace string
	// Cwd is the working directory, inside the workspace.
	Cwd string
	// Layered runs the command over the session's layer (an overlay): the
	// host's workspace changes only on LayerHost.Apply. The session's
	// first command fixes whether it is layered.
	Layered bool
	// Read and Write are extra readable and writable paths.
	Read, Write []string
	// Net is "none" (or empty), "all", or a comma-separated host list
	// (the CLI's --net syntax). NetHosts is the host list one entry per
	// host; Net and NetHosts together are refused.
	Net      string
	NetHosts []string
	// Spawn allows subprocesses.
	Spawn bool
	// MemoryMB is a memory limit (0: none asked for).
	MemoryMB uint64
	// TimeoutSeconds is the wall-clock limit (0: the configured default).
	TimeoutSeconds float64
	// MaxOutputBytes is the output budget (0: the configured one).
	MaxOutputBytes int64
	// Env are variables set in the child.
	Env map[string]string
	// Stdin is the command's whole standard input (at most
	// driverapi.MaxStdinBytes).
	Stdin []byte
	// Secrets are held by the host; the child sees placeholders.
	Secrets map[string]string
	// Dir is the directory relative paths of Read, Write and Workspace
	// resolve against: the caller's working directory. Empty: only
	// absolute paths are taken (a service cannot know its client's
	// working directory).
	Dir string
}

// MaxTimeout bounds Request.TimeoutSeconds: a larger value is a mistake
// (and would overflow a time.Duration far beyond it). It is the
// pipeline's own bound, core.MaxTimeout.
const MaxTimeout = core.MaxTimeout

// RequestError is a Request that cannot be run as given: Field names the
// field as the service's protocol does (argv, read[0], net, net_hosts[1],
// timeout_seconds, ...), Reason says what is wrong and how to fix it.
type RequestError struct {
	Field  string
	Reason string
	// Err is the pipeline's own refusal when the request was refused by
	// the pipeline's validator (a *core.InvalidCommandError), else nil.
	Err error
}

func (e *RequestError) Error() string { return e.Field + ": " + e.Reason }

func (e *RequestError) Unwrap() error { return e.Err }

func badField(field, format string, a ...any) *RequestError {
	return &RequestError{Field: field, Reason: fmt.Sprintf(format, a...)}
}

// Command is r normalised and validated: paths absolute and clean, the
// network parsed by the proxy's own rule parser (ParseNet), then the
// command's form checked by core.ValidateCommand. Its errors are
// *RequestError.
func (r Request) Command() (core.Command, error) {
	if r.Session == "" {
		// Said here rather than by the validator: a Go caller is told
		// of WithSession, a request's user of what a session is.
		return core.Command{}, badField("session", "required (any name: its workspace and grants are kept across commands)")
	}
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return core.Command{}, badField("argv", "a program is required")
	}
	caps := driverapi.Capabilities{SpawnSubprocess: r.Spawn, MaxMemoryMB: r.MemoryMB}
	for i, p := range r.Read {
		abs, err := r.path(fmt.Sprintf("read[%d]", i), p)
		if err != nil {
			return core.Command{}, err
		}
		caps.FSRead = append(caps.FSRead, abs)
	}
	for i, p := range r.Write {
		abs, err := r.path(fmt.Sprintf("write[%d]", i), p)
		if err != nil {
			return core.Command{}, err
		}
		caps.FSWrite = append(caps.FSWrite, abs)
	}
	net, err := ParseNet(r.Net, r.NetHosts)
	if err != nil {
		return core.Command{}, err
	}
	caps.Network = net
	timeout, err := TimeoutFromSeconds(r.TimeoutSeconds)
	if err != nil {
		return core.Command{}, err
	}
	cmd := core.Command{
		SessionID:      r.Session,
		Program:        r.Argv[0],
		Args:           r.Argv[1:],
		Cwd:            r.Cwd,
		Capabilities:   caps,
		Timeout:        timeout,
		MaxOutputBytes: r.MaxOutputBytes,
		Env:            r.Env,
		Stdin:          r.Stdin,
		Secrets:        r.Secrets,
		Layered:        r.Layered,
	}
	if r.Workspace != "" {
		abs, err := r.path("workspace", r.Workspace)
		if err != nil {
			return core.Command{}, err
		}
		cmd.Workspace = abs
	}
	if err := core.ValidateCommand(cmd); err != nil {
		return core.Command{}, requestErrorOf(err)
	}
	return cmd, nil
}

// requestErrorOf is the validator's refusal named by the request's field
// (the service's protocol names: argv, read[0], net_hosts[1], ...), its
// reason kept and the refusal itself wrapped. A reason that speaks of
// the Go API (the validator's Hint) is left out: a request's user sets
// the field otherwise.
func requestErrorOf(err error) error {
	var ie *core.InvalidCommandError
	if !errors.As(err, &ie) {
		return err
	}
	re := &RequestError{Field: requestField(ie.Field), Reason: ie.Reason, Err: err}
	switch {
	case ie.Field == "stdin" && strings.Contains(ie.Reason, "limit"):
		re.Reason += " (stream a larger input instead: exec -i, or the service's stdin_stream)"
	case ie.Field == "max_output_bytes":
		re.Reason += " (or 0 for the configured budget)"
	}
	return re
}

// requestField is a core.Command field (as core.InvalidCommandError names
// it) as the Request field that sets it.
func requestField(f string) string {
	switch f {
	case "session_id":
		return "session"
	case "program":
		return "argv"
	case "timeout", "capabilities.timeout_secs":
		return "timeout_seconds"
	case "max_output_bytes":
		return "max_output"
	case "capabilities.max_memory_mb":
		return "memory_mb"
	}
	var i int
	switch {
	case scanIndex(f, "args[%d]", &i):
		return fmt.Sprintf("argv[%d]", i+1)
	case scanIndex(f, "capabilities.fs_read[%d]", &i):
		return fmt.Sprintf("read[%d]", i)
	case scanIndex(f, "capabilities.fs_write[%d]", &i):
		return fmt.Sprintf("write[%d]", i)
	case strings.HasPrefix(f, "capabilities.network"):
		return "net"
	case strings.HasPrefix(f, "env "):
		return "env"
	case strings.HasPrefix(f, "secret "):
		return "secrets"
	}
	return f
}

// scanIndex reports whether f is format with its one index, setting i.
func scanIndex(f, format string, i *int) bool {
	n, err := fmt.Sscanf(f, format, i)
	return err == nil && n == 1 && fmt.Sprintf(format, *i) == f
}

// path is p absolute (against r.Dir) and clean.
func (r Request) path(field, p string) (string, error) {
	if p == "" {
		return "", badField(field, "empty path")
	}
	if !filepath.IsAbs(p) {
		if r.Dir == "" {
			return "", badField(field, "%q is not an absolute path (give it absolute: the service cannot know the client's working directory)", p)
		}
		p = filepath.Join(r.Dir, p)
	}
	return filepath.Clean(p), nil
}

// TimeoutFromSeconds is a timeout given in seconds (0: the configured
// default) as a Duration, refusing what is negative, not a number, above
// MaxTimeout, or positive but below a millisecond (which no driver can
// keep, and which is a unit mistake far more often than meant).
func TimeoutFromSeconds(s float64) (time.Duration, error) {
	switch {
	case math.IsNaN(s) || s < 0 || s > MaxTimeout.Seconds():
		return 0, badField("timeout_seconds", "%v is out of range: give seconds from 0 (the configured default) to %v", s, MaxTimeout.Seconds())
	case s == 0:
		return 0, nil
	}
	d := time.Duration(s * float64(time.Second))
	if d < time.Millisecond {
		return 0, badField("timeout_seconds", "%v is below one millisecond (the value is in seconds)", s)
	}
	return d, nil
}

// ParseNet is the network a request asks for: net is "none" (or empty),
// "all", or a comma-separated host list (the CLI's --net syntax); hosts is
// the same list one host per entry (the service's net_hosts). Giving both
// is refused, so that no front end has to say which wins. Every host is
// checked by the proxy's own parser (an exact name, *.suffix, an IP, each
// with an optional :port): a host the proxy would refuse in every command
// is refused here, naming it.
func ParseNet(net string, hosts []string) (driverapi.NetworkPolicy, error) {
	if len(hosts) > 0 {
		if strings.TrimSpace(net) != "" {
			return driverapi.NetworkPolicy{}, badField("net", "give net or net_hosts, not both (net_hosts is the host list; net says none or all)")
		}
		for i, h := range hosts {
			if _, err := proxy.ParseRule(h); err != nil {
				return driverapi.NetworkPolicy{}, badField(fmt.Sprintf("net_hosts[%d]", i), "%s", ruleReason(err))
			}
		}
		return driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: append([]string(nil), hosts...)}, nil
	}
	switch strings.ToLower(strings.TrimSpace(net)) {
	case "", "none":
		return driverapi.NetworkPolicy{Mode: driverapi.NetworkNone}, nil
	case "all":
		return driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}, nil
	}
	var list []string
	for _, h := range strings.Split(net, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if _, err := proxy.ParseRule(h); err != nil {
			return driverapi.NetworkPolicy{}, badField("net", "%s", ruleReason(err))
		}
		list = append(list, h)
	}
	if len(list) == 0 {
		return driverapi.NetworkPolicy{}, badField("net", "%q: want none, all, or HOST[,HOST...]", net)
	}
	return driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: list}, nil
}

// ruleReason is the proxy's refusal of a host, with the forms it takes.
func ruleReason(err error) string {
	return err.Error() + " (want an exact host name, *.suffix or an IP address, each with an optional :port)"
}

// NetString is a network policy in the --net syntax (none, all, or the
// hosts joined by commas): what ParseNet reads back.
func NetString(n driverapi.NetworkPolicy) string {
	switch n.Mode {
	case driverapi.NetworkAllowAll:
		return "all"
	case driverapi.NetworkAllowHosts:
		return strings.Join(n.Hosts, ",")
	}
	return "none"
}
