// Command hostiledriver is a driver for the conformance command's tests
// that talks back with text made to forge or garble the report: its Run
// error holds a newline, a forged PASS line and terminal escape sequences.
// With HOSTILE_DRIVER_MODE=capabilities-error it completes the handshake
// and then fails its capability report, as a driver that crashes just
// after starting does.
package main

import (
	"context"
	"errors"
	"os"
	"runtime"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Forged is the text of every Run error.
const Forged = "refused\nPASS forged/case\r\x1b[2J\x1b]0;owned\x07\x9b31m"

type driver struct{}

func (driver) Capabilities(context.Context) (driverapi.HostCapabilities, error) {
	if os.Getenv("HOSTILE_DRIVER_MODE") == "capabilities-error" {
		return driverapi.HostCapabilities{}, errors.New("no capability report today")
	}
	return driverapi.HostCapabilities{Backend: "hostile", DriverVersion: "0.0.0-test",
		ProtocolVersion: driverapi.ProtocolVersion, OS: runtime.GOOS, Arch: runtime.GOARCH}, nil
}

func (driver) ProfileFor(_ context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	return driverapi.NewProfile("hostile", []byte(req.Workspace)), nil
}

func (driver) Run(context.Context, driverapi.RunSpec, driverapi.Streams) (driverapi.Exit, error) {
	return driverapi.Exit{}, errors.New(Forged)
}

func main() { driverapi.Serve(driver{}) }
