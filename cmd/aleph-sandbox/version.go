package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// runVersion is `aleph-sandbox --version` / `version [--json]`.
func runVersion(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "also probe each driver found and print JSON")
	if done, code := parseFlags(fs, args, io, "aleph-sandbox version [--json]"); done {
		return code
	}
	if !*asJSON {
		fmt.Fprintf(io.Out, "aleph-sandbox %s (driver protocol %d.%d)\n", cliVersion, driverapi.ProtocolVersion, driverapi.ProtocolMinor)
		return 0
	}
	type driverVersion struct {
		Name          string `json:"name"`
		Path          string `json:"path"`
		DriverVersion string `json:"driver_version,omitempty"`
		ProtocolMinor uint32 `json:"protocol_minor"`
		Error         string `json:"error,omitempty"`
		ForOS         string `json:"for_os,omitempty"` // a driver for another system, not launched
	}
	out := struct {
		Version  string          `json:"version"`
		Protocol string          `json:"protocol"`
		Drivers  []driverVersion `json:"drivers"`
	}{Version: cliVersion, Protocol: fmt.Sprintf("%d.%d", driverapi.ProtocolVersion, driverapi.ProtocolMinor), Drivers: []driverVersion{}}
	cfg, err := loadConfig("", "", "")
	if err != nil {
		return fail(io.Err, "version: %s", oneLine(err.Error()))
	}
	for _, d := range discoverDrivers(cfg) {
		r := probeDriver(ctx, d, cfg)
		dv := driverVersion{Name: r.Name, Path: r.Path, Error: r.Error, ForOS: r.ForOS}
		if r.Capabilities != nil {
			dv.DriverVersion, dv.ProtocolMinor = r.Capabilities.DriverVersion, r.Capabilities.ProtocolMinor
		}
		out.Drivers = append(out.Drivers, dv)
	}
	writeJSON(io.Out, out)
	return 0
}
