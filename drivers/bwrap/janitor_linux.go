//go:build linux

package bwrap

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/ownertag"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/protectjournal"
)

// janitorCommand is the mode of the driver binary that removes a driver's
// placeholders once the driver is gone, however it went.
//
// Why a process of its own: a driver is often ended from outside before it
// can clean up: the CLI interrupted by Ctrl-C, SIGTERM or SIGPIPE stops its
// plugin, a CLI that dies takes the plugin down through the lifeline
// (os.Exit, no deferred code), and SIGKILL allows nothing at all. The
// janitor is started with the driver's first placeholder, in a session of
// its own (a terminal's signals to the foreground group do not reach it)
// and detached from the driver (not its descendant),
// and waits for the end of a pipe only the driver holds. When that pipe
// closes it waits for the driver's sandboxes to be gone (the bwrap
// processes the driver recorded) and removes every placeholder nobody holds
// any more, then exits. Only a kill of the janitor as well leaves the
// removal to the next driver start.
const janitorCommand = "placeholder-janitor"

// userWait bounds how long a clean-up waits for the sandboxes of a dead
// driver to finish dying before it leaves their placeholders to a later one.
const userWait = 10 * time.Second

// janitorMain is the janitor's main: `janitorCommand --state DIR`, with the
// driver's pipe as descriptor 3. It starts itself once more (with
// --detached) and returns at once: the janitor proper is then no
// descendant of the driver, which keeps no child beyond its commands.
func janitorMain(args []string) int {
	if len(args) < 2 || args[0] != "--state" || !filepath.IsAbs(args[1]) || len(args) > 3 || len(args) == 3 && args[2] != "--detached" {
		fmt.Fprintln(os.Stderr, "usage: "+janitorCommand+" --state DIR")
		return 2
	}
	pipe := os.NewFile(3, "driver")
	if pipe == nil {
		return 2
	}
	if len(args) == 2 {
		cmd := exec.Command("/proc/self/exe", janitorCommand, "--state", args[1], "--detached")
		cmd.Args[0] = "aleph-sandbox-janitor"
		cmd.Env = []string{}
		cmd.Dir = "/"
		cmd.ExtraFiles = []*os.File{pipe}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "janitor:", err)
			return 1
		}
		return 0
	}
	_, _ = io.Copy(io.Discard, pipe)
	d := &Driver{cfg: config{StateDir: args[1]}, log: hclog.NewNullLogger(), owner: ownertag.Self()}
	d.journal = protectjournal.New(d.cfg.StateDir, d.owner, d.log)
	d.journal.Recover(userWait, true)
	// The driver's locks on its /etc views went with it.
	sweepEtcViews(d.etcViewRoot())
	return 0
}

// startJanitor starts this driver's janitor once. A janitor that cannot be
// started is logged: placeholders then still go on every path the driver
// survives, and at the next driver start otherwise.
func (d *Driver) startJanitor() {
	d.trace.Mark("janitor start")
	defer d.trace.Mark("janitor started")
	r, w, err := os.Pipe()
	if err != nil {
		d.log.Warn("placeholder janitor not started", "error", err)
		return
	}
	defer r.Close()
	cmd := exec.Command(d.cfg.DriverBinary, janitorCommand, "--state", d.cfg.StateDir)
	cmd.Args[0] = "aleph-sandbox-janitor"
	if helper := setsidHelper(); helper != "" {
		// util-linux's setsid forks, starts a session in the child and
		// execs the janitor proper there while the parent exits: the same
		// detachment as the first stage below, without a second start of
		// this (large) binary, whose package initialisation alone costs
		// more than the whole helper. The pipe is held by the forked child
		// before the helper exits, so the janitor is still there for
		// every placeholder made after the wait below.
		cmd = exec.Command(helper, "--fork", d.cfg.DriverBinary, janitorCommand, "--state", d.cfg.StateDir, "--detached")
	}
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		d.log.Warn("placeholder janitor not started", "error", err)
		return
	}
	// The first stage (or the helper) only starts the detached janitor
	// and exits. It is waited for: the janitor proper is then up before
	// the first placeholder is made. (A one-command driver starts it while the
	// handshake runs, Prepare, so the wait is off the command's path.)
	if err := cmd.Wait(); err != nil {
		w.Close()
		d.log.Warn("placeholder janitor not started", "error", err)
		return
	}
	// The write end stays open (close-on-exec, so no sandbox holds it)
	// until this process ends; the janitor outlives it.
	d.janitorPipe = w
}

// setsidHelper is util-linux's setsid, when it is installed where the
// system keeps it (never looked up in PATH: the driver may run as root), or
// "" (the janitor's own first stage then detaches it).
func setsidHelper() string {
	for _, p := range []string{"/usr/bin/setsid", "/bin/setsid"} {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}
