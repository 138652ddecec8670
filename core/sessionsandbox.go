package core

import (
	"maps"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// noteSessionSandbox keeps which profiles of sess ran in a session sandbox
// and corrects the driver's report where only the host can know: a driver
// process that was started again (the one before died) has lost every
// session sandbox and reports the session's next one as "new", while what
// the session's earlier commands left in it is gone: "rebuilt". A session
// forgotten starts afresh (its session value goes with it), and a profile
// never seen in the session is "new" indeed.
func noteSessionSandbox(sess *session, profileDigest string, exit *driverapi.Exit) {
	how, ok := exit.Details[driverapi.ExitDetailSessionSandbox]
	if !ok || sess == nil {
		return
	}
	sess.sandboxMu.Lock()
	_, seen := sess.sandboxes[profileDigest]
	if sess.sandboxes == nil {
		sess.sandboxes = map[string]struct{}{}
	}
	sess.sandboxes[profileDigest] = struct{}{}
	sess.sandboxMu.Unlock()
	if how == driverapi.SessionSandboxNew && seen {
		exit.Details = maps.Clone(exit.Details)
		exit.Details[driverapi.ExitDetailSessionSandbox] = driverapi.SessionSandboxRebuilt
	}
}
