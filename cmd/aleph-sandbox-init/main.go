//go:build linux

// Command aleph-sandbox-init is the in-sandbox half of the bwrap driver as a
// small binary: bwrap runs it inside the new namespaces, it confines itself
// (Landlock, rlimits, seccomp) and execs the command. The driver uses it when
// it sits beside aleph-driver-bwrap (it starts faster than the driver binary,
// which carries the gRPC stack) and runs its own hidden mode otherwise.
package main

import (
	"os"

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/initmain"
)

func main() { os.Exit(initmain.Main(os.Args[1:])) }
