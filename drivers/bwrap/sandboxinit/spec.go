// Package sandboxinit is the confinement that runs inside bubblewrap: the
// sandbox-init mode parses an InitSpec, applies Landlock (up to the kernel's
// ABI), rlimits and a seccomp filter to its own thread, and execs the target.
//
// It is a leaf package on purpose (Landlock, seccomp and x/sys only): it runs
// once per command, inside the sandbox, so a binary built from it alone starts
// in a fraction of the time of the full driver plugin with gRPC linked in.
// The bwrap driver package re-exports its API.
package sandboxinit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// SandboxInitCommand is the hidden subcommand of the driver binary that runs
// inside bwrap and confines itself before exec'ing the target. The argv after
// it is InitArgs' output: `<initspec-json> -- PROGRAM ARGS...`.
const SandboxInitCommand = "sandbox-init"

// SessionUserTrialCommand is the hidden command that tries, inside a trial
// sandbox built with a session supervisor's flags, what a session
// supervisor of an unprivileged launcher does (sessionuser_linux.go): a
// child in a user namespace of its own that mounts in its mount namespace.
// Its arguments are the uid and gid to map; exit status 0: it works here.
const SessionUserTrialCommand = "sandbox-session-user-trial"

// LayeredViewCommand is the hidden command that mounts a layered
// session's overlay for the host (the driver's OpenLayeredView): started
// by the driver in a user and mount namespace of its own, it mounts the
// overlay, opens its root and passes that descriptor back over a unix
// socket (its descriptor 3), then exits. Its arguments are TARGET LOWER
// UPPER WORK OPTIONS (layeredview_linux.go).
const LayeredViewCommand = "sandbox-layered-view"

// SandboxInitExitCode is the exit status of sandbox-init when it refuses or
// fails to confine. It matches the CLI's refusal code: the target never ran.
const SandboxInitExitCode = 125

// SocketMode selects the seccomp socket gate (and, with Landlock ABI >= 4,
// the TCP rules). The names follow the seed's SeccompNetworkMode.
type SocketMode string

const (
	// SocketUnrestricted is network "all": no socket-family filtering.
	SocketUnrestricted SocketMode = "unrestricted"
	// SocketUnixOnly is network "none": no socket() at all, socketpair()
	// only for AF_UNIX stream and seqpacket pairs, connect() denied, TCP
	// bind/connect denied by Landlock.
	SocketUnixOnly SocketMode = "unix_only"
	// SocketProxyRouted is network "allow_hosts" behind the in-namespace
	// bridge: AF_INET and AF_INET6 sockets (AF_UNIX only where the
	// notification filter guards it, unixsock_linux.go: host unix sockets
	// in the workspace or a grant stay out of reach), socketpair() as in
	// SocketUnixOnly; Landlock lets TCP connect only to BridgePorts and
	// bind nothing (the launcher holds the same pin for the connects it
	// makes for the command).
	SocketProxyRouted SocketMode = "proxy_routed"
	// SocketLoopback is network "none" in an empty network namespace (the
	// session's, or bwrap's own): AF_INET and AF_INET6 sockets of every
	// type (no AF_UNIX, AF_NETLINK or raw packet sockets: host unix sockets
	// in the workspace or a grant stay out of reach), socketpair() as in
	// SocketUnixOnly, connect() allowed, TCP not handled by Landlock. The
	// namespace is what confines it: it holds nothing but loopback, so
	// bind and connect reach only the sandbox's own listeners. Never valid
	// without a network namespace (NoNamespaces).
	SocketLoopback SocketMode = "loopback"
)

// Valid reports whether m is one of the defined modes.
func (m SocketMode) Valid() bool {
	switch m {
	case SocketUnrestricted, SocketUnixOnly, SocketProxyRouted, SocketBridge, SocketLoopback:
		return true
	}
	return false
}

// InitSpec is what the launcher tells sandbox-init to enforce inside bwrap.
// It travels as one JSON argv element; decoding is strict (unknown fields,
// trailing data and invalid values are refused) because a field the init does
// not understand is a restriction it would silently not apply.
//
// Zero rlimit values mean "leave the inherited limit"; every other field's
// zero value is the most restrictive choice (no paths, no spawn, no ports).
type InitSpec struct {
	// ReadOnly paths may be read and executed (system read set, fs_read).
	ReadOnly []string `json:"read_only"`
	// ReadWrite paths get every filesystem right Landlock knows (workspace,
	// fs_write, private /tmp).
	ReadWrite []string `json:"read_write"`
	// SocketMode is required.
	SocketMode SocketMode `json:"socket_mode"`
	// AllowSpawn false denies fork/vfork/clone without CLONE_THREAD/clone3.
	AllowSpawn bool `json:"allow_spawn"`
	// BridgePorts are the loopback TCP ports the child may connect to in
	// proxy_routed mode, or the ports the bridge itself may bind in bridge
	// mode (Landlock ABI >= 4). Only valid with those two modes.
	BridgePorts []uint16 `json:"bridge_ports,omitempty"`
	// RlimitASBytes caps the address space (RLIMIT_AS); 0 leaves it.
	RlimitASBytes uint64 `json:"rlimit_as_bytes,omitempty"`
	// RlimitNproc caps processes+threads of the uid (RLIMIT_NPROC); 0 leaves it.
	RlimitNproc uint64 `json:"rlimit_nproc,omitempty"`
	// RlimitNofile caps open files (RLIMIT_NOFILE); 0 leaves it.
	RlimitNofile uint64 `json:"rlimit_nofile,omitempty"`
	// ScopeSignals forbids signalling processes outside the sandbox's
	// Landlock domain (ABI >= 6).
	ScopeSignals bool `json:"scope_signals,omitempty"`
	// ScopeAbstractUnix forbids connecting to abstract unix sockets created
	// outside the domain (ABI >= 6).
	ScopeAbstractUnix bool `json:"scope_abstract_unix,omitempty"`
	// InheritFDs are descriptors above stderr the target keeps. Every
	// other descriptor >= 3 is closed at exec: bwrap passes on whatever it
	// inherited (only its own status/info fds are closed), and a leaked pipe
	// back to the driver would let the child forge status or reach the host.
	InheritFDs []int `json:"inherit_fds,omitempty"`
	// CommandFD, when set, is a descriptor holding the target's argv and
	// environment as a command record (command.go), read from offset 0;
	// sandbox-init's own argv then ends with the spec. The target is
	// exec'd with exactly that argv and environment, and sandbox-init
	// starts with a fixed environment of the launcher's: loader variables
	// (LD_PRELOAD, LD_AUDIT, GCONV_PATH...) meant for the target then act
	// on the target alone, never on bwrap, sandbox-init or anything
	// outside the sandbox, and no argv of the target's counts against
	// bwrap's limit on its own arguments. 0: the program and its
	// arguments follow the spec on sandbox-init's argv, and the target
	// gets sandbox-init's own environment (the launcher's own programs,
	// such as the bridge).
	CommandFD int `json:"command_fd,omitempty"`
	// ReportFD, when set, is a descriptor on which the plain mode (the
	// supervisor's child: never with Supervise or a lifeline) writes a
	// NotRunTag record when the target's lookup or exec fails, in place
	// of its stderr line. It is close-on-exec like every descriptor not in
	// InheritFDs, so the target never holds it and cannot forge a record.
	ReportFD int `json:"report_fd,omitempty"`
	// LifelineFD, when set, is the sandbox's end of a socket whose other
	// end only the launcher holds. sandbox-init writes one byte on it as
	// soon as it runs (so the launcher can tell a sandbox that never got
	// set up from a command that failed), and refuses to exec the target,
	// exiting SandboxInitExitCode, once the launcher's end is closed: a
	// launcher killed while bwrap was still setting up, before its
	// --die-with-parent was armed, must not leave the command running.
	LifelineFD int `json:"lifeline_fd,omitempty"`
	// Supervise keeps sandbox-init as the target's parent instead of
	// exec'ing it: PID 1 of the sandbox (bwrap --as-pid-1) or else the
	// children's subreaper, confined itself, not dumpable, reaping every
	// child, forwarding signals and reporting the target's wait status on
	// the lifeline (supervise_linux.go).
	Supervise bool `json:"supervise,omitempty"`
	// NoNamespaces is the Landlock tier: sandbox-init runs on the host,
	// started by the launcher without bwrap, because namespaces cannot be
	// created here. It then waits for the launcher's go-ahead on the
	// lifeline (GoAheadTag: the launcher moves it into the command's
	// cgroup first) instead of for bwrap's reaper, drops every capability
	// (bounding and ambient sets included), denies setsid and setpgid so
	// nothing leaves the process group the launcher kills as a whole,
	// denies the SysV IPC calls (no IPC namespace),
	// keeps the target in that group, denies socket(AF_UNIX) in every
	// socket mode (no mount namespace hides the host's unix sockets), and
	// kills its whole group when the launcher is gone. The launcher sets
	// LifelineFD and Supervise with it; the plain child a no-spawn
	// supervisor starts keeps the flag (its filter) without them.
	NoNamespaces bool `json:"no_namespaces,omitempty"`
	// SeccompFD, when set, is a sealed memfd holding the seccomp programs
	// the launcher built for this spec (precompiled_linux.go): sandbox-init
	// loads those instead of building its own. 0: it builds them.
	SeccompFD int `json:"seccomp_fd,omitempty"`
	// Tty, when set, makes the supervisor give the target a pseudo-terminal
	// of this initial size, allocated from the sandbox's own devpts
	// (pty_linux.go). Only with Supervise and namespaces.
	Tty *TtySpec `json:"tty,omitempty"`
	// NotifyFD, when set, is a unix socket to the launcher. The process
	// that execs the target (the supervisor's child, never the supervisor)
	// installs the command's notification filter (notify_linux.go) with a
	// listener and sends the listener on it: the launcher answers the
	// calls the filter hands over. The filter holds the fork rules when
	// AllowSpawn is false (refused and counted) and the metadata guard's
	// rules with MetaGuard. Without it, fork and the rest are refused in
	// the filter itself, uncounted.
	NotifyFD int `json:"notify_fd,omitempty"`
	// MetaGuard puts the metadata guard's rules (metaguard_linux.go) in
	// the notification filter. Only with NotifyFD and NoNamespaces (the
	// Landlock tier).
	MetaGuard bool `json:"meta_guard,omitempty"`
	// childNotifies marks the supervisor's own spec (supervisorSpec),
	// never sent: the child it forks installs a notification filter, so
	// the supervisor's program hands the denylist over instead of
	// refusing it (seccomp_linux.go says why).
	childNotifies bool
	// Prepared makes sandbox-init wait on the lifeline for its command
	// (handover.go): CommandFD holds nothing until the hand-over puts the
	// command's record there. Only with Supervise, a lifeline, a command
	// descriptor and namespaces, and without a terminal.
	Prepared bool `json:"prepared,omitempty"`
	// SessionSupervisor makes sandbox-init the PID 1 of a session sandbox
	// (session_linux.go): it never runs a command itself, it forks and
	// execs, for each spawn record on the lifeline, a sandbox-init of this
	// spec in the prepared mode with SessionChild, in a PID and a mount
	// namespace of its own. Only with Prepared.
	SessionSupervisor bool `json:"session_supervisor,omitempty"`
	// SessionChild is a prepared sandbox-init started by a session
	// supervisor: after its started byte it waits for the launcher's
	// go-ahead (GoAheadTag: the launcher moved it into the command's
	// cgroup), and its mounts are made private first. Only with Prepared.
	SessionChild bool `json:"session_child,omitempty"`
	// SessionUser, for a session sandbox an unprivileged launcher built:
	// the sandbox runs as uid and gid 0 of bwrap's user namespace, which
	// owns its mount namespace (sessionuser_linux.go), and the supervisor
	// starts each command's sandbox-init in a user namespace of its own
	// that maps these ids (the launcher's, as the command sees itself) to
	// that uid and gid 0. Only with SessionSupervisor or SessionChild.
	SessionUser *SessionUser `json:"session_user,omitempty"`
	// SessionOverlay, for a layered session of an unprivileged launcher
	// (only with SessionSupervisor and SessionUser): the overlay the
	// supervisor mounts at the workspace before it takes any command
	// (sessionuser_linux.go, mountSessionOverlay).
	SessionOverlay *SessionOverlay `json:"session_overlay,omitempty"`
}

// SessionOverlay is a layered session's overlay as the supervisor of an
// unprivileged launcher's session sandbox mounts it. Paths are the
// sandbox's.
type SessionOverlay struct {
	// Target is the workspace: bwrap binds it there read-only, the
	// overlay's lower directory, and the overlay is mounted over it.
	Target string `json:"target"`
	// Layer is where bwrap bound the layer's directory, which holds Upper
	// and Work (overlayfs wants both on one mount); the supervisor
	// unmounts it once the overlay is mounted.
	Layer string `json:"layer"`
	Upper string `json:"upper"`
	Work  string `json:"work"`
	// Options are overlayfs's options after the three directories.
	Options string `json:"options"`
}

// SessionUser is the uid and gid a command of an unprivileged launcher's
// session sees itself as (InitSpec.SessionUser).
type SessionUser struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// TtySpec is the initial window size of InitSpec.Tty.
type TtySpec struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// InitSpecError is returned for a spec or argv that sandbox-init refuses.
type InitSpecError struct {
	Field  string // JSON field name, or "" for the document / argv as a whole
	Reason string
}

func (e *InitSpecError) Error() string {
	if e.Field == "" {
		return "invalid init spec: " + e.Reason
	}
	return fmt.Sprintf("invalid init spec: %s: %s", e.Field, e.Reason)
}

// maxID is the highest uid or gid a user namespace can map (-1 is none).
const maxID int64 = 1<<32 - 2

// maxInitSpecBytes bounds the JSON argv element (argv is limited anyway; this
// keeps a malformed launcher from making the decoder work hard).
const maxInitSpecBytes = 1 << 20

// Validate checks every field. Paths must be absolute and clean (the launcher
// resolves them; the init never guesses), without NUL bytes.
func (s *InitSpec) Validate() error {
	if !s.SocketMode.Valid() {
		return &InitSpecError{"socket_mode", fmt.Sprintf("unknown mode %q", s.SocketMode)}
	}
	if err := validPaths("read_only", s.ReadOnly); err != nil {
		return err
	}
	if err := validPaths("read_write", s.ReadWrite); err != nil {
		return err
	}
	if len(s.BridgePorts) > 0 && s.SocketMode != SocketProxyRouted && s.SocketMode != SocketBridge {
		return &InitSpecError{"bridge_ports", "only valid with socket_mode " + string(SocketProxyRouted) + " or " + string(SocketBridge)}
	}
	if err := s.validateBridge(); err != nil {
		return err
	}
	if s.NoNamespaces && s.SocketMode != SocketUnrestricted && s.SocketMode != SocketUnixOnly {
		return &InitSpecError{"no_namespaces", "only socket_mode " + string(SocketUnrestricted) + " or " + string(SocketUnixOnly) + " (no network namespace for a bridge)"}
	}
	if s.Tty != nil && (!s.Supervise || s.NoNamespaces) {
		return &InitSpecError{"tty", "needs supervise and a sandbox of its own (a private devpts)"}
	}
	if s.Prepared && (!s.Supervise || s.NoNamespaces || s.Tty != nil || s.LifelineFD == 0 || s.CommandFD == 0) {
		return &InitSpecError{"prepared", "needs supervise, a lifeline, a command descriptor and a sandbox of its own, and no tty"}
	}
	if (s.SessionSupervisor || s.SessionChild) && (!s.Prepared || s.SessionSupervisor == s.SessionChild) {
		return &InitSpecError{"session_supervisor", "session_supervisor or session_child, one of them, and only with prepared"}
	}
	if u := s.SessionUser; u != nil && (!s.SessionSupervisor && !s.SessionChild || u.UID < 0 || u.GID < 0 || int64(u.UID) > maxID || int64(u.GID) > maxID) {
		return &InitSpecError{"session_user", "only with session_supervisor or session_child, and ids in 0..4294967294"}
	}
	if o := s.SessionOverlay; o != nil {
		if !s.SessionSupervisor || s.SessionUser == nil {
			return &InitSpecError{"session_overlay", "only with session_supervisor and session_user"}
		}
		for _, p := range []string{o.Target, o.Layer, o.Upper, o.Work} {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsAny(p, ",:\\\n") {
				return &InitSpecError{"session_overlay", fmt.Sprintf("%q: paths must be absolute, clean, and hold no comma, colon, backslash or newline (overlayfs's option parser)", p)}
			}
		}
		if filepath.Dir(o.Upper) != o.Layer || filepath.Dir(o.Work) != o.Layer || o.Upper == o.Work {
			return &InitSpecError{"session_overlay", "upper and work must be two directories directly in layer"}
		}
		if strings.ContainsAny(o.Options, "\n") || !strings.Contains(","+o.Options+",", ",userxattr,") {
			return &InitSpecError{"session_overlay", "options must include userxattr (a user namespace's overlay keeps its markers in user.overlay.*)"}
		}
	}
	if s.MetaGuard && (s.NotifyFD == 0 || !s.NoNamespaces) {
		return &InitSpecError{"meta_guard", "only in the Landlock tier (no_namespaces) and with notify_fd, the socket its listener goes to"}
	}
	if s.ReportFD != 0 && (s.Supervise || s.LifelineFD != 0) {
		return &InitSpecError{"report_fd", "only for the plain mode (a supervisor reports on its lifeline)"}
	}
	for _, p := range s.BridgePorts {
		if p == 0 {
			return &InitSpecError{"bridge_ports", "port 0"}
		}
	}
	seen := map[int]bool{}
	for _, fd := range s.InheritFDs {
		if fd < 3 || fd > maxInheritFD {
			return &InitSpecError{"inherit_fds", fmt.Sprintf("fd %d outside 3..%d", fd, maxInheritFD)}
		}
		if seen[fd] {
			return &InitSpecError{"inherit_fds", fmt.Sprintf("fd %d listed twice", fd)}
		}
		seen[fd] = true
	}
	for _, f := range []struct {
		name string
		fd   int
	}{{"command_fd", s.CommandFD}, {"lifeline_fd", s.LifelineFD}, {"seccomp_fd", s.SeccompFD}, {"report_fd", s.ReportFD}, {"notify_fd", s.NotifyFD}} {
		if f.fd == 0 {
			continue
		}
		if f.fd < 3 || f.fd > maxInheritFD {
			return &InitSpecError{f.name, fmt.Sprintf("fd %d outside 3..%d", f.fd, maxInheritFD)}
		}
		if seen[f.fd] {
			return &InitSpecError{f.name, fmt.Sprintf("fd %d is also used for something else", f.fd)}
		}
		seen[f.fd] = true
	}
	return nil
}

// maxInheritFD bounds InheritFDs (far above any real launch).
const maxInheritFD = 1 << 20

func validPaths(field string, paths []string) error {
	for _, p := range paths {
		switch {
		case p == "":
			return &InitSpecError{field, "empty path"}
		case strings.IndexByte(p, 0) >= 0:
			return &InitSpecError{field, "path contains NUL"}
		case !filepath.IsAbs(p) || !strings.HasPrefix(p, "/"):
			return &InitSpecError{field, fmt.Sprintf("path %q is not absolute", p)}
		case filepath.Clean(p) != p:
			return &InitSpecError{field, fmt.Sprintf("path %q is not clean", p)}
		}
	}
	return nil
}

// MarshalInitSpec validates s and encodes it for the sandbox-init argv.
func MarshalInitSpec(s InitSpec) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(s)
}

// ParseInitSpec decodes and validates one JSON document strictly.
func ParseInitSpec(data []byte) (InitSpec, error) {
	var s InitSpec
	if len(data) > maxInitSpecBytes {
		return s, &InitSpecError{"", "too large"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return InitSpec{}, &InitSpecError{"", err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return InitSpec{}, &InitSpecError{"", "trailing data after the JSON object"}
	}
	if err := s.Validate(); err != nil {
		return InitSpec{}, err
	}
	return s, nil
}

// InitArgs builds the argv that follows SandboxInitCommand for a spec
// without CommandFD: `<initspec-json> -- PROGRAM ARGS...`. The launcher's
// bwrap argv ends with `-- <driver-binary> sandbox-init <InitArgs...>`.
func InitArgs(s InitSpec, program string, args ...string) ([]string, error) {
	if s.CommandFD != 0 {
		return nil, &InitSpecError{"command_fd", "the command comes from the descriptor: use CommandInitArgs"}
	}
	if program == "" {
		return nil, &InitSpecError{"", "empty program"}
	}
	js, err := MarshalInitSpec(s)
	if err != nil {
		return nil, err
	}
	return append([]string{string(js), "--", program}, args...), nil
}

// CommandInitArgs builds the argv that follows SandboxInitCommand for a
// spec with CommandFD: `<initspec-json>`, nothing else (the command is on
// the descriptor).
func CommandInitArgs(s InitSpec) ([]string, error) {
	if s.CommandFD == 0 {
		return nil, &InitSpecError{"command_fd", "not set: use InitArgs with the program"}
	}
	js, err := MarshalInitSpec(s)
	if err != nil {
		return nil, err
	}
	return []string{string(js)}, nil
}

// ParseInitArgs is the inverse of InitArgs and CommandInitArgs. argv is the
// program and its arguments of InitArgs' form, nil for a spec with
// CommandFD (sandbox-init reads them from the descriptor).
func ParseInitArgs(argv []string) (InitSpec, []string, error) {
	const usage = "usage: sandbox-init <initspec-json> [-- PROGRAM [ARGS...]]"
	if len(argv) == 0 {
		return InitSpec{}, nil, &InitSpecError{"", usage}
	}
	s, err := ParseInitSpec([]byte(argv[0]))
	if err != nil {
		return InitSpec{}, nil, err
	}
	if s.CommandFD != 0 {
		if len(argv) != 1 {
			return InitSpec{}, nil, &InitSpecError{"command_fd", "the command comes from the descriptor: nothing may follow the spec"}
		}
		return s, nil, nil
	}
	if len(argv) < 3 || argv[1] != "--" {
		return InitSpec{}, nil, &InitSpecError{"", usage}
	}
	if argv[2] == "" {
		return InitSpec{}, nil, &InitSpecError{"", "empty program"}
	}
	return s, argv[2:], nil
}
