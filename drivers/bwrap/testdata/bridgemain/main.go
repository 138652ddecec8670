//go:build linux

// Command bridgemain runs bwrap.BridgeMain on its own, for the end-to-end
// bridge test (the driver binary gains the subcommand when the launcher
// starts the bridge itself).
package main

import (
	"os"

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap"
)

func main() { os.Exit(bwrap.BridgeMain(os.Args[1:])) }
