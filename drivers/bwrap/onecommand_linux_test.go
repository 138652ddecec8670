//go:build linux

package bwrap

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// A driver told it runs one command (driverapi.OneCommandEnv) holds no
// network namespace for the session: the command gets bwrap's own, with a
// working loopback of its own (positive control) and no way to the host's
// loopback (the denial, from inside a command that demonstrably ran), and
// the capability report says the loopback is per command. A driver not
// told so shares the session's namespace as before (control).
func TestOneCommandHoldsNoSessionNetwork(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 for the loopback programs")
	}
	shared := sessionNetDriver(t) // fails where sessions must share one
	caps, err := shared.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := caps.Details[driverapi.DetailNetworkNoneLoopback]; got != "session" {
		t.Fatalf("control: a long-lived driver reports loopback %q, want session", got)
	}

	d, err := newDriver(config{InitBinary: driverBin, DriverBinary: driverBin, OneCommand: true})
	if err != nil {
		t.Fatal(err)
	}
	h := d.probe()
	if h.sessionNet != "" || !strings.Contains(h.sessionNetWhy, driverapi.OneCommandEnv) {
		t.Fatalf("one-command driver: session network %q (%s), want none, for the hint", h.sessionNet, h.sessionNetWhy)
	}
	caps, err = d.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := caps.Details[driverapi.DetailNetworkNoneLoopback]; got != "command" {
		t.Fatalf("one-command driver reports loopback %q, want command", got)
	}

	// A listener on the host's loopback the command must not reach.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("host"))
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ws := newWorkspace(t)
	ctx := context.Background()
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	out, errw := newLineWriter(`^$`), newLineWriter(`^$`)
	exit, err := sessionRun(ctx, d, prof, ws, "one-shot", out, errw, "-c", pyConnect, port)
	if err != nil || exit.ExitCode != 0 {
		t.Fatalf("command: %+v %v stdout %q stderr %q", exit, err, out, errw)
	}
	if !strings.Contains(out.String(), "own-loopback-ok") {
		t.Fatalf("the command's own loopback did not work: %q", out)
	}
	if !strings.Contains(out.String(), "refused") || strings.Contains(out.String(), "got:host") {
		t.Fatalf("the command reached the host's loopback: %q", out)
	}
	hostNS, _ := os.Readlink("/proc/self/ns/net")
	if nsInode(t, out.String()) == nsInode(t, hostNS) {
		t.Fatalf("the command ran in the host's network namespace: %q", out)
	}
	if held := d.heldInodes(); len(held) != 0 {
		t.Fatalf("one-command driver holds session namespaces %v", held)
	}
}

// A one-command driver's Prepare takes up the /etc view and builds the
// default command's seccomp programs before any command arrives; the
// command then uses exactly those (and runs: positive control), while a
// plan the view must not serve still gets the binds (the plan's checks
// are made at the command, not at the warm-up).
func TestOneCommandWarmsUpBeforeTheCommand(t *testing.T) {
	d, err := newDriver(config{InitBinary: driverBin, DriverBinary: driverBin, OneCommand: true})
	if err != nil {
		t.Fatal(err)
	}
	h := d.probe()
	if h.sandboxErr != nil || h.tier != tierBwrap {
		t.Skipf("no bwrap sandbox here: %v", h.sandboxErr)
	}
	d.Prepare()
	d.etc.mu.Lock()
	warmView := d.etc.dir
	d.etc.mu.Unlock()
	if warmView == "" {
		t.Fatal("Prepare made no /etc view")
	}
	d.progs.mu.Lock()
	nprogs := len(d.progs.files)
	d.progs.mu.Unlock()
	if nprogs != 1 {
		t.Fatalf("Prepare built %d program sets, want the default command's", nprogs)
	}
	ws := newWorkspace(t)
	plan := launchPlan{System: systemReadSet(), Workspace: ws}
	if v := d.etcViewFor(plan); v != warmView {
		t.Fatalf("the command's view %q is not the one Prepare took up (%q)", v, warmView)
	}
	underEtc := plan
	underEtc.FSRead = []string{"/etc/ssl/certs"}
	if v := d.etcViewFor(underEtc); v != "" {
		t.Fatalf("a grant under /etc got the view %s", v)
	}
	r := drvRun(t, context.Background(), d, ws, driverapi.Capabilities{}, nil, "/bin/echo", "ran")
	if r.err != nil || r.exit.ExitCode != 0 || r.stdout != "ran\n" {
		t.Fatalf("the command after the warm-up: %+v", r)
	}
	d.progs.mu.Lock()
	nprogs = len(d.progs.files)
	d.progs.mu.Unlock()
	if nprogs != 1 {
		t.Fatalf("the default command built programs of its own (%d sets): the warm-up's key differs", nprogs)
	}
}
