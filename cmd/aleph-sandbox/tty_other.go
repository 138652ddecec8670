//go:build !linux

package main

import "github.com/aleph-sandbox/aleph-sandbox/driverapi"

// userTerminal: the CLI drives a user's terminal on Linux only; no other
// driver gives a pseudo-terminal yet (docs/macos.md, docs/windows.md).
type userTerminal struct {
	size   driverapi.WindowSize
	resize chan driverapi.WindowSize
}

func openUserTerminal(in, out any) *userTerminal {
	return &userTerminal{size: driverapi.WindowSize{Rows: 24, Cols: 80}}
}

func (t *userTerminal) makeRaw() {}
func (t *userTerminal) restore() {}

func ttySupported() bool { return false }
