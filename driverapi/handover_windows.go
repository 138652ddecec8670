//go:build windows

package driverapi

import (
	"crypto/tls"
	"io"
	"os"
	"os/exec"
)

// On Windows a child cannot inherit extra descriptors through os/exec, so
// launch falls back to go-plugin's AutoMTLS (same guarantee, P-521 keys) and
// has no lifeline pipe; drivers there tie their processes to a Job Object.
// The keyed transport (transport.go) is never offered: go-plugin serves on
// loopback TCP there, which every local user can reach.
type handover struct {
	tlsConfig *tls.Config // nil: AutoMTLS
	lifeline  io.Closer
	key       []byte // always nil
	keyDir    string
}

func newHandover(*exec.Cmd, bool) (*handover, error) { return &handover{}, nil }

func takeKeyedTransport([]byte) bool { os.Unsetenv(transportEnv); return false }

func (h *handover) closeChildEnds() {}

func (h *handover) cleanup() {}

func watchLifeline() error { return nil }

// Windows handles are inherited only when a process is started asking for
// it, and then only those marked inheritable: nothing to do.
func markInheritedCloseOnExec() {}
