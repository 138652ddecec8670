package sandboxinit

import (
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestInitSpecRoundTrip(t *testing.T) {
	spec := InitSpec{
		ReadOnly:      []string{"/usr", "/etc/passwd"},
		ReadWrite:     []string{"/workspace", "/tmp"},
		SocketMode:    SocketProxyRouted,
		AllowSpawn:    true,
		BridgePorts:   []uint16{3128, 8080},
		RlimitASBytes: 1 << 30,
		RlimitNproc:   200,
		RlimitNofile:  1024,
		ScopeSignals:  true,
		InheritFDs:    []int{3, 7},
	}
	argv, err := InitArgs(spec, "python3", "-c", "print(1)")
	if err != nil {
		t.Fatal(err)
	}
	if argv[1] != "--" || argv[2] != "python3" || argv[4] != "print(1)" {
		t.Fatalf("argv layout: %q", argv)
	}
	got, prog, err := ParseInitArgs(argv)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, spec) {
		t.Errorf("round trip: got %+v, want %+v", got, spec)
	}
	if !reflect.DeepEqual(prog, []string{"python3", "-c", "print(1)"}) {
		t.Errorf("program argv: %q", prog)
	}
}

func TestInitSpecRefusals(t *testing.T) {
	cases := []struct {
		name, json, field string
	}{
		{"unknown field", `{"socket_mode":"unix_only","allow_network":true}`, ""},
		{"missing mode", `{}`, "socket_mode"},
		{"bad mode", `{"socket_mode":"all"}`, "socket_mode"},
		{"relative path", `{"socket_mode":"unix_only","read_only":["usr"]}`, "read_only"},
		{"unclean path", `{"socket_mode":"unix_only","read_write":["/a/../etc"]}`, "read_write"},
		{"empty path", `{"socket_mode":"unix_only","read_write":[""]}`, "read_write"},
		{"nul path", `{"socket_mode":"unix_only","read_only":["/a\u0000b"]}`, "read_only"},
		{"ports outside proxy mode", `{"socket_mode":"unix_only","bridge_ports":[80]}`, "bridge_ports"},
		{"port zero", `{"socket_mode":"proxy_routed","bridge_ports":[0]}`, "bridge_ports"},
		{"port overflow", `{"socket_mode":"proxy_routed","bridge_ports":[70000]}`, ""},
		{"trailing data", `{"socket_mode":"unix_only"} {}`, ""},
		{"not an object", `["unix_only"]`, ""},
		{"negative rlimit", `{"socket_mode":"unix_only","rlimit_nproc":-1}`, ""},
		{"wrong type", `{"socket_mode":"unix_only","allow_spawn":"yes"}`, ""},
		{"empty", ``, ""},
		{"inherit stderr", `{"socket_mode":"unix_only","inherit_fds":[2]}`, "inherit_fds"},
		{"inherit twice", `{"socket_mode":"unix_only","inherit_fds":[5,5]}`, "inherit_fds"},
		{"inherit huge", `{"socket_mode":"unix_only","inherit_fds":[99999999]}`, "inherit_fds"},
		// Without a network namespace an inet socket is the host's.
		{"loopback without namespaces", `{"socket_mode":"loopback","no_namespaces":true}`, "no_namespaces"},
		{"ports in loopback mode", `{"socket_mode":"loopback","bridge_ports":[80]}`, "bridge_ports"},
		// The waiting child is a fork now, never a sandbox-init of its own.
		{"go fd", `{"socket_mode":"unix_only","command_fd":3,"go_fd":5}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseInitSpec([]byte(c.json))
			var se *InitSpecError
			if !errors.As(err, &se) {
				t.Fatalf("got %v, want *InitSpecError", err)
			}
			if se.Field != c.field {
				t.Errorf("field %q, want %q (%v)", se.Field, c.field, err)
			}
		})
	}
	// Positive control: the minimal valid spec parses.
	if _, err := ParseInitSpec([]byte(`{"socket_mode":"unix_only"}`)); err != nil {
		t.Fatalf("minimal spec refused: %v", err)
	}
	if _, err := ParseInitSpec([]byte(`{"socket_mode":"loopback"}`)); err != nil {
		t.Fatalf("loopback spec refused: %v", err)
	}
	if _, err := ParseInitSpec([]byte(`{"socket_mode":"unix_only","command_fd":3,"lifeline_fd":4,"supervise":true,"prepared":true}`)); err != nil {
		t.Fatalf("prepared supervisor's spec refused: %v", err)
	}
}

func TestInitArgsRefusals(t *testing.T) {
	ok := `{"socket_mode":"unix_only"}`
	for _, argv := range [][]string{
		nil,
		{ok},
		{ok, "--"},
		{ok, "-x", "prog"},
		{ok, "--", ""},
		{`{"socket_mode":"nope"}`, "--", "prog"},
		// With command_fd the command is on the descriptor, and nothing
		// follows the spec on the command line.
		{`{"socket_mode":"unix_only","command_fd":3}`, "--", "prog"},
		{`{"socket_mode":"unix_only","command_fd":3}`, "--"},
		{`{"socket_mode":"unix_only","command_fd":3,"lifeline_fd":4,"supervise":true,"prepared":true}`, "--", "prog"},
		// A prepared sandbox-init takes its command from the hand-over's
		// record: never without the descriptor.
		{`{"socket_mode":"unix_only","lifeline_fd":4,"supervise":true,"prepared":true}`, "--", "prog"},
		// The environment-only descriptor of earlier sandbox-inits is no
		// field any more: an older launcher's spec is refused whole.
		{`{"socket_mode":"unix_only","env_fd":3}`, "--", "prog"},
	} {
		if _, _, err := ParseInitArgs(argv); err == nil {
			t.Errorf("ParseInitArgs(%q) accepted", argv)
		} else if !strings.HasPrefix(err.Error(), "invalid init spec") {
			t.Errorf("ParseInitArgs(%q): unexpected error text %q", argv, err)
		}
	}
	if _, err := InitArgs(InitSpec{SocketMode: "x"}, "prog"); err == nil {
		t.Error("InitArgs accepted an invalid spec")
	}
	if _, err := InitArgs(InitSpec{SocketMode: SocketUnixOnly}, ""); err == nil {
		t.Error("InitArgs accepted an empty program")
	}
	if _, _, err := ParseInitArgs([]string{ok, "--", "prog"}); err != nil {
		t.Errorf("positive control refused: %v", err)
	}
	if _, argv, err := ParseInitArgs([]string{`{"socket_mode":"unix_only","command_fd":3,"lifeline_fd":4,"supervise":true,"prepared":true}`}); err != nil || argv != nil {
		t.Errorf("prepared supervisor's argv refused: %q %v", argv, err)
	}
	if _, argv, err := ParseInitArgs([]string{`{"socket_mode":"unix_only","command_fd":3}`}); err != nil || argv != nil {
		t.Errorf("command_fd spec alone refused: %q %v", argv, err)
	}
	if _, err := InitArgs(InitSpec{SocketMode: SocketUnixOnly, CommandFD: 3}, "prog"); err == nil {
		t.Error("InitArgs put a program beside command_fd")
	}
	if _, err := CommandInitArgs(InitSpec{SocketMode: SocketUnixOnly}); err == nil {
		t.Error("CommandInitArgs accepted a spec without command_fd")
	}
	if args, err := CommandInitArgs(InitSpec{SocketMode: SocketUnixOnly, CommandFD: 3}); err != nil || len(args) != 1 {
		t.Errorf("CommandInitArgs: %q %v", args, err)
	}
}

// TestSessionModesNeedPrepared: the session supervisor and its children are
// prepared sandbox-inits, one mode or the other; anything else is refused
// naming the field.
func TestSessionModesNeedPrepared(t *testing.T) {
	base := InitSpec{SocketMode: SocketLoopback, Supervise: true, Prepared: true, LifelineFD: 4, CommandFD: 3}
	for _, ok := range []func(*InitSpec){
		func(s *InitSpec) { s.SessionSupervisor = true },
		func(s *InitSpec) { s.SessionChild = true },
	} {
		s := base
		ok(&s)
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	for _, bad := range []func(*InitSpec){
		func(s *InitSpec) { s.SessionSupervisor, s.Prepared = true, false },
		func(s *InitSpec) { s.SessionChild, s.Prepared = true, false },
		func(s *InitSpec) { s.SessionSupervisor, s.SessionChild = true, true },
	} {
		s := base
		bad(&s)
		var e *InitSpecError
		if err := s.Validate(); !errors.As(err, &e) || e.Field != "session_supervisor" {
			t.Errorf("%+v: %v", s, err)
		}
	}
}

// TestSessionUserNeedsSessionMode: session_user is valid in the session
// modes with ids a user namespace can map (the controls), and refused
// naming the field without them or with an id out of range.
func TestSessionUserNeedsSessionMode(t *testing.T) {
	base := InitSpec{SocketMode: SocketLoopback, Supervise: true, Prepared: true, LifelineFD: 4, CommandFD: 3}
	for _, ok := range []func(*InitSpec){
		func(s *InitSpec) { s.SessionSupervisor, s.SessionUser = true, &SessionUser{UID: 1001, GID: 1001} },
		func(s *InitSpec) { s.SessionChild, s.SessionUser = true, &SessionUser{UID: 0, GID: math.MaxInt32} },
	} {
		s := base
		ok(&s)
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
	bads := []func(*InitSpec){
		func(s *InitSpec) { s.SessionUser = &SessionUser{UID: 1001, GID: 1001} },
		func(s *InitSpec) { s.SessionSupervisor, s.SessionUser = true, &SessionUser{UID: -1, GID: 1001} },
		func(s *InitSpec) { s.SessionChild, s.SessionUser = true, &SessionUser{UID: 1001, GID: -2} },
	}
	if strconv.IntSize == 64 {
		over := maxID + 1 // a variable: the conversion below would not compile where int has 32 bits
		bads = append(bads, func(s *InitSpec) { s.SessionChild, s.SessionUser = true, &SessionUser{UID: int(over), GID: 1001} })
	}
	for _, bad := range bads {
		s := base
		bad(&s)
		var e *InitSpecError
		if err := s.Validate(); !errors.As(err, &e) || e.Field != "session_user" {
			t.Errorf("%+v: %v", s, err)
		}
	}
}

// TestSessionOverlayValidate: session_overlay is valid for an unprivileged
// launcher's supervisor with upper and work directly in the layer's bind
// and userxattr among the options (the control), and refused naming the
// field otherwise: in a command's sandbox-init, without session_user,
// with paths overlayfs's option parser would misread, with upper or work
// elsewhere, or without userxattr.
func TestSessionOverlayValidate(t *testing.T) {
	base := InitSpec{SocketMode: SocketLoopback, Supervise: true, Prepared: true, LifelineFD: 4, CommandFD: 3,
		SessionSupervisor: true, SessionUser: &SessionUser{UID: 1001, GID: 1001}}
	good := SessionOverlay{Target: "/home/u/proj", Layer: "/.aleph-sandbox-layer", Upper: "/.aleph-sandbox-layer/upper",
		Work: "/.aleph-sandbox-layer/work", Options: "redirect_dir=nofollow,metacopy=off,index=off,xino=off,userxattr"}
	s := base
	o := good
	s.SessionOverlay = &o
	if err := s.Validate(); err != nil {
		t.Fatalf("control: %v", err)
	}
	for _, bad := range []func(*InitSpec, *SessionOverlay){
		func(s *InitSpec, _ *SessionOverlay) { s.SessionSupervisor, s.SessionChild = false, true },
		func(s *InitSpec, _ *SessionOverlay) { s.SessionUser = nil },
		func(_ *InitSpec, o *SessionOverlay) { o.Target = "/home/u/a,upperdir=/x" },
		func(_ *InitSpec, o *SessionOverlay) { o.Target = "relative" },
		func(_ *InitSpec, o *SessionOverlay) { o.Upper = "/elsewhere/upper" },
		func(_ *InitSpec, o *SessionOverlay) { o.Work = o.Upper },
		func(_ *InitSpec, o *SessionOverlay) { o.Options = "redirect_dir=nofollow" },
	} {
		s := base
		o := good
		bad(&s, &o)
		s.SessionOverlay = &o
		var e *InitSpecError
		if err := s.Validate(); !errors.As(err, &e) || e.Field != "session_overlay" {
			t.Errorf("%+v %+v: %v", s, o, err)
		}
	}
}
