// Command denyall is a driver for the suite's own tests that claims every
// feature and "enforces" them by running nothing: every command exits 126
// with no output. The suite must fail it on the positive controls, so that
// denying everything never passes for isolation.
package main

import (
	"context"
	"encoding/json"
	"runtime"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

const backend = "denyall"

type driver struct{}

func (driver) Capabilities(context.Context) (driverapi.HostCapabilities, error) {
	return driverapi.HostCapabilities{
		Backend: backend, DriverVersion: "0.0.0-test", ProtocolVersion: driverapi.ProtocolVersion,
		Features: driverapi.KnownFeatures(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		Details: map[string]string{driverapi.DetailNetworkNoneLoopback: "session"},
	}, nil
}

func (driver) ProfileFor(_ context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	data, err := json.Marshal(req)
	return driverapi.NewProfile(backend, data), err
}

func (driver) Run(_ context.Context, spec driverapi.RunSpec, _ driverapi.Streams) (driverapi.Exit, error) {
	if err := driverapi.ValidateRunSpec(spec); err != nil {
		return driverapi.Exit{}, err
	}
	if err := spec.Profile.Verify(backend); err != nil {
		return driverapi.Exit{}, err
	}
	return driverapi.Exit{ExitCode: 126}, nil
}

func main() { driverapi.Serve(driver{}) }
