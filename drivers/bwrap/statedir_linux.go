//go:build linux

package bwrap

import (
	"fmt"
	"path/filepath"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// stateDirRefusal refuses a plan whose workspace or writable grant (an
// fs_write grant, the private home) contains the driver's state directory
// or lies inside it.
//
// Why: the state directory holds the /etc views every later command of
// every session is shown as /etc (etcview_linux.go), and the placeholder
// journal, whose recovery deletes the files it names (internal/protectjournal).
// A command allowed to write there (`--write ~/run` of a user whose
// XDG_RUNTIME_DIR holds it, `--write /run` as root) could add a line to
// every later sandbox's /etc/hosts or make the driver delete a host file.
// As for the service's data directory, such a grant is refused, with the
// reason, instead of narrowed: what was approved is what is mounted. Read
// grants stay allowed: the views are /etc's public read set and the
// journal names paths only.
func (d *Driver) stateDirRefusal(p launchPlan) error {
	state := d.cfg.StateDir
	if state == "" {
		return nil
	}
	if real, err := filepath.EvalSymlinks(state); err == nil {
		state = real
	}
	check := func(field, g string) error {
		if driverapi.PathWithin(state, g) || driverapi.PathWithin(g, state) {
			return &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf(
				"%q reaches the sandbox driver's state directory %s (the /etc views every sandbox reads and the placeholder journal): "+
					"a command must not write there; grant a narrower path beside it", g, state)}
		}
		return nil
	}
	if err := check("workspace", p.Workspace); err != nil {
		return err
	}
	for _, g := range p.writable() {
		if err := check("fs_write", g); err != nil {
			return err
		}
	}
	return nil
}
