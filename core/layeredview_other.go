//go:build !linux

package core

import (
	"os"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// openDriverView refuses: layered sessions are Linux-only.
func openDriverView(driverapi.LayeredView) (*os.File, error) {
	return nil, &LayeredUnavailableError{Reason: "layered sessions need Linux's overlayfs"}
}
