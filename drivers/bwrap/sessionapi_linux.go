//go:build linux

package bwrap

import "github.com/aleph-sandbox/aleph-sandbox/driverapi"

// detailSessionSandbox is the capability detail saying whether session
// sandboxes are on here, or why not.
const detailSessionSandbox = "linux.session_sandbox"

// wantsSession says whether spec asks for its session's sandbox (or the
// driver runs every command of a session there: session_sandbox =
// "always", the test switch).
func (d *Driver) wantsSession(spec driverapi.RunSpec) bool {
	return spec.SessionSandbox || d.cfg.Options.SessionSandbox == sessionSandboxAlways
}
