// Command probe is the conformance suite's in-sandbox program as a small
// binary of its own (standard library only). The suite runs it when
// conformance.Config.Probe names it; without it the suite runs its own host
// binary, which answers as the probe through the conformance package.
//
//	go build -o aleph-conformance-probe ./conformance/probe
package main

import (
	"os"

	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
)

func main() { os.Exit(probe.Main(os.Args[1:])) }
