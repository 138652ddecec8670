//go:build linux

package bwrap

import (
	"os"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// detailSessionSandbox is the capability detail saying whether session
// sandboxes are on here, or why not.
const detailSessionSandbox = "linux.session_sandbox"

func wantsSession(spec driverapi.RunSpec) bool {
	return os.Getenv("ALEPH_SESSION_TMP") == "1"
}

func setSessionSandbox(spec *driverapi.RunSpec) { os.Setenv("ALEPH_SESSION_TMP", "1") }
