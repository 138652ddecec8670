package conformance

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The terminal case: a command run from a user's terminal must not reach
// that terminal. Through /dev/tty (the controlling terminal) a program can
// push bytes into the terminal's input with TIOCSTI, which the user's shell
// then runs as typed once the command ends. The suite gives a driver of
// its own a controlling terminal (a pty it holds, as a shell session would)
// and looks at what the driver's command can do with it.

func ttyCases() []Case {
	return []Case{
		{ID: "proc/no-host-terminal", Level: Must, Feature: driverapi.FeatureFSReadIsolation, fresh: true,
			OS: POSIXOnly, OSReason: "the controlling terminal, /dev/tty and TIOCSTI are POSIX's",
			Description: "A command cannot reach the terminal of the session its driver runs in: with the driver started in a session whose controlling terminal is a pty of the suite, the command cannot open /dev/tty (or, opened, cannot inject input with TIOCSTI), none of its descriptors 0-2 is a terminal, and no byte is pending on the pty afterwards. Positive controls: the same probe run outside any sandbox in such a session opens /dev/tty (and, where the kernel allows TIOCSTI, injects a byte the suite then sees pending), and inside the sandbox the probe opens /dev/null for writing. Skipped, saying so, where the suite cannot make a pty here.",
			run:         caseNoHostTerminal},
	}
}

// ttyFields parses the probe's "tty devtty=... sti=... fds=... devnull=..."
// line.
func ttyFields(out []byte) (map[string]string, bool) {
	for _, l := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(l, "tty "); ok {
			f := map[string]string{}
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				f[k] = v
			}
			return f, true
		}
	}
	return nil, false
}

func caseNoHostTerminal(ctx context.Context, h *H) error {
	term, err := openTerminal()
	if err != nil {
		return skipf("the suite cannot make a pty here: %v", err)
	}
	defer term.close()
	probePath, err := h.suite.suiteProbe()
	if err != nil {
		return err
	}
	pin := "-"
	if h.suite.cfg.SHA256 != "" {
		pin = h.suite.cfg.SHA256
	}
	// Control: the probe itself in a session whose controlling terminal is
	// the pty, with nothing in the way.
	ctl, err := exec.CommandContext(ctx, probePath, probe.Magic, "ctty", term.path, "-", probePath, probe.Magic, "tty").Output()
	if err != nil {
		return fmt.Errorf("the control run outside the sandbox failed: %v (%q)", err, ctl)
	}
	cf, ok := ttyFields(ctl)
	if !ok || cf["devtty"] != "ok" {
		return fmt.Errorf("outside the sandbox the probe could not open the terminal of its session (control): %q", ctl)
	}
	injectedOutside := cf["sti"] == "ok"
	if n, err := term.pending(); err != nil || (injectedOutside && n == 0) {
		return fmt.Errorf("outside the sandbox TIOCSTI was accepted but no byte is pending on the pty (%d, %v)", n, err)
	}
	if err := term.drain(); err != nil {
		return err
	}
	// The driver, started the same way: its session has the pty.
	p, err := h.launch(ctx, func(lc *driverapi.LaunchConfig) {
		lc.Args = append([]string{probe.Magic, "ctty", term.path, pin, lc.Path}, lc.Args...)
		lc.Path, lc.SHA256 = probePath, ""
	})
	if err != nil {
		return fmt.Errorf("launching the driver in a session with a terminal: %w", err)
	}
	h.Driver, h.Proc = p.Driver(), p
	o := h.Probe(ctx, nil, "tty", sep, "echo", "tty-probed")
	if err := ran("the terminal probe", o, "tty-probed"); err != nil {
		return err
	}
	f, ok := ttyFields(o.Stdout)
	if !ok {
		return fmt.Errorf("the probe printed no terminal line: %s", o)
	}
	if f["devnull"] != "ok" {
		return fmt.Errorf("inside the sandbox /dev/null could not be opened for writing (positive control): %s", o)
	}
	if f["devtty"] == "ok" && f["sti"] == "ok" {
		return fmt.Errorf("the command opened its driver's terminal and injected input with TIOCSTI: %s", o)
	}
	if f["devtty"] == "ok" {
		return fmt.Errorf("the command opened its driver's controlling terminal /dev/tty (TIOCSTI %s): %s", f["sti"], o)
	}
	if f["fds"] != "" {
		return fmt.Errorf("descriptors %s of the command are terminals: %s", f["fds"], o)
	}
	if n, err := term.pending(); err != nil || n > 0 {
		return fmt.Errorf("%d bytes are pending on the driver's terminal after the command (%v): %s", n, err, o)
	}
	if bytes.Contains(o.Stdout, []byte("sti=ok")) {
		return fmt.Errorf("TIOCSTI accepted inside the sandbox: %s", o)
	}
	return nil
}
