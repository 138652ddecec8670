//go:build windows

package driverapi

import (
	"crypto/tls"
	"io"
	"os/exec"
)

// On Windows a child cannot inherit extra descriptors through os/exec, so
// launch falls back to go-plugin's AutoMTLS (same guarantee, P-521 keys) and
// has no lifeline pipe; drivers there tie their processes to a Job Object.
type handover struct {
	tlsConfig *tls.Config // nil: AutoMTLS
	lifeline  io.Closer
}

func newHandover(*exec.Cmd) (*handover, error) { return &handover{}, nil }

func (h *handover) closeChildEnds() {}

func (h *handover) cleanup() {}

func watchLifeline() error { return nil }

// Windows handles are inherited only when a process is started asking for
// it, and then only those marked inheritable: nothing to do.
func markInheritedCloseOnExec() {}
