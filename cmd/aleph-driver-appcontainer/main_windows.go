//go:build windows

package main

import (
	"fmt"
	"os"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/appcontainer"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == appcontainer.JanitorCommand {
		os.Exit(appcontainer.JanitorMain(os.Args[2:]))
	}
	opts, err := appcontainer.ParseOptions(os.Getenv("ALEPH_DRIVER_OPTIONS"))
	if err == nil {
		var d *appcontainer.Driver
		if d, err = appcontainer.New(appcontainer.Config{Options: opts}); err == nil {
			driverapi.Serve(d)
			return
		}
	}
	// Never stdout: it carries the plugin handshake.
	fmt.Fprintln(os.Stderr, "aleph-driver-appcontainer:", err)
	os.Exit(125)
}
