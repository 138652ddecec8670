package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Session sandboxes (protocol 1.3, call "session_sandbox"): the commands of
// one session and profile share one persistent sandbox; nothing is shared
// with another session or another profile, and a command's own tree, spawn
// rule and network are its own. Every case first shows that the sharing
// really happens (a file one command leaves in /tmp is read by the next,
// "reused"), so a driver that builds a sandbox per command and reports
// "reused" fails, and a driver that shares across sessions fails too.

func sessionCases() []Case {
	call := driverapi.CallSessionSandbox
	return []Case{
		{ID: "session/tmp-shared-within-session", Level: Must, Call: call,
			Description: "Two commands of one session (RunSpec.SessionSandbox) share the sandbox: a file the first leaves in /tmp is read by the second, whose Exit reports \"reused\" (the first \"new\"); a command of another session does not see it and reports \"new\"; after ForgetSession the session's next command does not see it either.",
			run:         caseSessionTmp},
		{ID: "session/no-spawn-inside-spawn-session", Level: Must, Call: call, Feature: driverapi.FeatureSubprocessControl,
			Description: "In a session whose earlier command started a child (spawn_subprocess, the positive control), a command without spawn_subprocess still cannot start one.",
			run:         caseSessionNoSpawn},
		{ID: "session/command-tree-dies-session-lives", Level: Must, Call: call, Feature: driverapi.FeatureProcessTreeKill,
			Description: "A background child and a double-started daemon a command leaves behind die when the command ends, while the session sandbox lives on: the session's next command reports \"reused\" and sees the file the first left in /tmp.",
			run:         caseSessionTree},
		{ID: "session/network-not-inherited", Level: Must, Call: call, Feature: driverapi.FeatureNetworkNone,
			Description: "A command with network none in a session whose earlier command had network all (and reached a host listener, the positive control, when the driver claims network_all) cannot reach that listener.",
			run:         caseSessionNetwork},
	}
}

// newSession is a session id of this case alone, forgotten when the case
// ends.
func (h *H) newSession(ctx context.Context, what string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := "conformance-" + what + "-" + hex.EncodeToString(b[:])
	h.defer_(func() {
		if f, ok := h.Driver.(driverapi.SessionForgetter); ok {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = f.ForgetSession(fctx, id)
		}
	})
	return id
}

// inSession runs the probe steps as a command of session id, in its
// session sandbox.
func (h *H) inSession(ctx context.Context, id string, caps *driverapi.Capabilities, steps ...string) Out {
	return h.Exec(ctx, h.ProbeCmd(Cmd{Caps: caps, Session: id, SessionSandbox: true}, steps...))
}

// sessionDetail checks how the command ran in its session.
func sessionDetail(what string, o Out, want string) error {
	if got := o.Exit.Details[driverapi.ExitDetailSessionSandbox]; got != want {
		return fmt.Errorf("%s: Exit.Details[%q] = %q, want %q: %s", what, driverapi.ExitDetailSessionSandbox, got, want, o)
	}
	return nil
}

// leaveInTmp runs the first command of session id: it leaves a token in
// /tmp and must report a new session sandbox.
func (h *H) leaveInTmp(ctx context.Context, id string, caps *driverapi.Capabilities) (path, token string, err error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	token = hex.EncodeToString(b[:])
	path = "/tmp/aleph-conformance-" + token
	o := h.inSession(ctx, id, caps, "write", path, token, sep, "echo", "left")
	if err := ran("the first command of the session", o, "left"); err != nil {
		return "", "", err
	}
	if err := sessionDetail("the first command of the session", o, driverapi.SessionSandboxNew); err != nil {
		return "", "", err
	}
	return path, token, nil
}

// readsToken: a later command of session id reads path; it must see token
// (want) or must not.
func (h *H) readsToken(ctx context.Context, id string, caps *driverapi.Capabilities, path, token string, want bool, detail string) error {
	o := h.inSession(ctx, id, caps, "echo", "reading", sep, "read", path)
	if o.Err != nil {
		return fmt.Errorf("reading %s in session %s: %w", path, id, o.Err)
	}
	if !strings.Contains(string(o.Stdout), "reading") {
		return fmt.Errorf("the reading command never ran: %s", o)
	}
	seen := strings.Contains(string(o.Stdout), token)
	switch {
	case want && !seen:
		return fmt.Errorf("a later command of session %s does not see the file the first left in /tmp: %s", id, o)
	case !want && seen:
		return fmt.Errorf("a command of session %s sees a file another session (or its forgotten self) left in /tmp: %s", id, o)
	}
	return sessionDetail("the reading command", o, detail)
}

func caseSessionTmp(ctx context.Context, h *H) error {
	s1, s2 := h.newSession(ctx, "a"), h.newSession(ctx, "b")
	path, token, err := h.leaveInTmp(ctx, s1, nil)
	if err != nil {
		return err
	}
	if err := h.readsToken(ctx, s1, nil, path, token, true, driverapi.SessionSandboxReused); err != nil {
		return err
	}
	if err := h.readsToken(ctx, s2, nil, path, token, false, driverapi.SessionSandboxNew); err != nil {
		return err
	}
	f, ok := h.Driver.(driverapi.SessionForgetter)
	if !ok {
		return fmt.Errorf("the driver lists %q but does not implement ForgetSession", driverapi.CallSessionSandbox)
	}
	if err := f.ForgetSession(ctx, s1); err != nil {
		return fmt.Errorf("forget_session: %w", err)
	}
	return h.readsToken(ctx, s1, nil, path, token, false, driverapi.SessionSandboxNew)
}

func caseSessionNoSpawn(ctx context.Context, h *H) error {
	id := h.newSession(ctx, "spawn")
	o := h.inSession(ctx, id, nil, "spawn", "3")
	if err := ok("the spawning command", o); err != nil {
		return err
	}
	if string(o.Stdout) != "child=3\n" {
		return fmt.Errorf("the command with spawn_subprocess did not start its child (positive control): %s", o)
	}
	o = h.inSession(ctx, id, &driverapi.Capabilities{}, "echo", "started", sep, "spawn", "3")
	if err := ran("the command without spawn_subprocess", o, "started"); err != nil {
		return err
	}
	if strings.Contains(string(o.Stdout), "child=3") {
		return fmt.Errorf("a command without spawn_subprocess started a child in a session whose earlier command could: %s", o)
	}
	return nil
}

func caseSessionTree(ctx context.Context, h *H) error {
	id := h.newSession(ctx, "tree")
	path, token, err := h.leaveInTmp(ctx, id, nil)
	if err != nil {
		return err
	}
	t, err := newTree(h)
	if err != nil {
		return err
	}
	o := h.inSession(ctx, id, nil, t.start()...)
	if err := ran("the command leaving children behind", o, "started"); err != nil {
		return err
	}
	if err := t.check(ctx, o); err != nil {
		return err
	}
	return h.readsToken(ctx, id, nil, path, token, true, driverapi.SessionSandboxReused)
}

func caseSessionNetwork(ctx context.Context, h *H) error {
	id := h.newSession(ctx, "net")
	if h.Caps.Has(driverapi.FeatureNetworkAll) {
		// The control has a listener of its own: the denial below then
		// counts only what the network-none command reached.
		ctl, err := h.listenStream("tcp", ":0")
		if err != nil {
			return err
		}
		all := &driverapi.Capabilities{SpawnSubprocess: true, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}
		out, err := netProbe(ctx, h, ctl, tcpProbes(ctl), Cmd{Caps: all, Session: id, SessionSandbox: true})
		if err != nil {
			return err
		}
		if !waitFor(ctx, 2*time.Second, ctl.reached) {
			return fmt.Errorf("with network all the session's command did not reach the host listener %s (positive control): %q", ctl.addr, clip(out))
		}
	}
	t, err := h.listenStream("tcp", ":0")
	if err != nil {
		return err
	}
	probes := tcpProbes(t)
	none := &driverapi.Capabilities{SpawnSubprocess: true, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkNone}}
	if _, err := netProbe(ctx, h, t, probes, Cmd{Caps: none, Session: id, SessionSandbox: true}); err != nil {
		return err
	}
	sleepCtx(ctx, 500*time.Millisecond)
	if t.reached() {
		return fmt.Errorf("a network-none command of a session whose earlier command had network all reached the host listener %s", t.addr)
	}
	return nil
}
