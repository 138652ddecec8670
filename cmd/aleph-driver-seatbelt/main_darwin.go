//go:build darwin

package main

import (
	"fmt"
	"os"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/seatbelt"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == seatbelt.ShimArg {
		os.Exit(seatbelt.ShimMain(os.Args[2:]))
	}
	if err := seatbelt.ParseOptions(os.Getenv("ALEPH_DRIVER_OPTIONS")); err != nil {
		// Never stdout: it carries the plugin handshake.
		fmt.Fprintln(os.Stderr, "aleph-driver-seatbelt:", err)
		os.Exit(125)
	}
	driverapi.Serve(seatbelt.New(seatbelt.Config{}))
}
