//go:build linux

package bwrap

// warmForOneCommand does, while the host's handshake runs, the work a
// driver does once for its first command and that does not depend on the
// command (config.OneCommand: that first command is the only one): it
// takes up (or makes) the /etc view of the system read set and builds the
// seccomp programs of the default command (network none, no
// subprocesses). The command still decides for itself: etcViewFor checks
// its plan and the host's entries again before it binds the view, and a
// command of another kind gets programs of its own key. Only time moves;
// nothing a command is allowed depends on this having run.
func (d *Driver) warmForOneCommand() {
	h := d.probe()
	if h.sandboxErr != nil || h.tier != tierBwrap || d.cfg.legacySetup {
		return
	}
	if entries := (launchPlan{System: systemReadSet()}).etcEntries(); len(entries) > 0 {
		d.etcViewOf(d.etcViewRoot(), entries)
	}
	// As initSpecFor makes it: a command without spawn gets a notify
	// socket, whose presence (not its number) the programs depend on.
	d.precompiled(initSpec{SocketMode: socketLoopback, NotifyFD: lifelineFD + 1})
}
