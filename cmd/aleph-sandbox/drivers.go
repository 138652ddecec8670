package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/pluginhost"
)

// driverReport is one driver binary and what it says it enforces here.
type driverReport struct {
	Name         string                      `json:"name"`
	Path         string                      `json:"path"`
	Default      bool                        `json:"default"`
	Capabilities *driverapi.HostCapabilities `json:"capabilities,omitempty"`
	Error        string                      `json:"error,omitempty"`
	// ForOS is set, instead of a report, for one of the project's drivers
	// built for another system (seatbelt: darwin, appcontainer: windows):
	// it is not launched, since it can only say it does not run here.
	ForOS string `json:"for_os,omitempty"`
}

// builtinDriverOS is the system each of the project's own drivers is for.
func builtinDriverOS(name string) string {
	switch name {
	case "bwrap":
		return "linux"
	case "seatbelt":
		return "darwin"
	case "appcontainer":
		return "windows"
	}
	return ""
}

// osLabel is a GOOS as people name the system.
func osLabel(goos string) string {
	switch goos {
	case "darwin":
		return "macOS"
	case "windows":
		return "Windows"
	case "linux":
		return "Linux"
	}
	return goos
}

// runDrivers lists the driver binaries found where exec would look, launches
// each and prints its capability report.
func runDrivers(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("drivers", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	cfgPath := fs.String("config", "", "TOML config `FILE`")
	if done, code := parseFlags(fs, args, io, "aleph-sandbox drivers [--config FILE] [--json]"); done {
		return code
	}
	cfg, err := loadConfig(*cfgPath, "", "")
	if err != nil {
		return fail(io.Err, "%s", oneLine(err.Error()))
	}
	var reports []driverReport
	for _, d := range discoverDrivers(cfg) {
		reports = append(reports, probeDriver(ctx, d, cfg))
	}
	if *asJSON {
		if reports == nil {
			reports = []driverReport{}
		}
		writeJSON(io.Out, reports)
		return 0
	}
	if len(reports) == 0 {
		fmt.Fprintf(io.Out, "no driver binaries found (looked for %s)\n", pluginhost.DriverBinaryName("*"))
		return 0
	}
	for _, r := range reports {
		def := ""
		if r.Default {
			def = " (default)"
		}
		if r.ForOS != "" {
			fmt.Fprintf(io.Out, "%s  %s  for %s, not this system (%s): not launched\n", shown(r.Name), shown(r.Path), osLabel(r.ForOS), osLabel(goos()))
			continue
		}
		fmt.Fprintf(io.Out, "%s%s  %s\n", shown(r.Name), def, shown(r.Path))
		if r.Error != "" {
			fmt.Fprintf(io.Out, "  error: %s\n", oneLine(r.Error))
			continue
		}
		c := r.Capabilities
		fmt.Fprintf(io.Out, "  backend %s, version %s, protocol %d.%d, %s/%s\n", shown(c.Backend), shown(c.DriverVersion), c.ProtocolVersion, c.ProtocolMinor, shown(c.OS), shown(c.Arch))
		fmt.Fprintf(io.Out, "  enforces: %s\n", oneLine(strings.Join(c.Features, ", ")))
		for _, u := range c.Unavailable {
			fmt.Fprintf(io.Out, "  unavailable: %s: %s\n", shown(u.Feature), oneLine(u.Reason))
		}
	}
	return 0
}

type foundDriver struct {
	name, path string
	isDefault  bool
}

// discoverDrivers finds aleph-driver-* binaries in the same places, and the
// same order, as exec's lookup by name; the first of each name wins. A
// driver the configuration names by path is listed too, in place of one of
// the same name found by lookup (exec would run it), but its directory is
// not searched: exec would not find the other drivers there by name.
func discoverDrivers(cfg core.Config) []foundDriver {
	var configured *foundDriver
	if d := cfg.Sandbox.Driver; strings.ContainsRune(d, filepath.Separator) {
		if p, _, err := pluginhost.FindDriver(d, nil); err == nil {
			name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "aleph-driver-"), ".exe")
			configured = &foundDriver{name: name, path: p, isDefault: name == pluginhost.DefaultDriverName()}
		}
	}
	var out []foundDriver
	if configured != nil {
		out = append(out, *configured)
	}
	for _, c := range pluginhost.FindDrivers(nil) {
		if configured != nil && c.Name == configured.name {
			continue
		}
		out = append(out, foundDriver{name: c.Name, path: c.Path, isDefault: c.Name == pluginhost.DefaultDriverName()})
	}
	return out
}

// driverPin is the configured sha256 pin for the driver at path: the pin
// belongs to the driver the configuration selects, and applies wherever
// that binary is launched.
func driverPin(cfg core.Config, path string) string {
	if cfg.Sandbox.DriverSHA256 == "" {
		return ""
	}
	if p, _, err := pluginhost.FindDriver(cfg.Sandbox.Driver, nil); err == nil && p == path {
		return cfg.Sandbox.DriverSHA256
	}
	return ""
}

func probeDriver(ctx context.Context, d foundDriver, cfg core.Config) driverReport {
	r := driverReport{Name: d.name, Path: d.path, Default: d.isDefault}
	if sys := builtinDriverOS(d.name); sys != "" && sys != goos() {
		r.ForOS = sys
		return r
	}
	host, err := pluginhost.NewDriverHost(pluginhost.DriverHostConfig{Path: d.path, SHA256: driverPin(cfg, d.path), Options: cfg.DriverOptions(goos()), Section: cfg.DriverSection, StartTimeout: 15 * time.Second})
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer host.Close()
	caps, err := host.Capabilities(ctx)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Capabilities = &caps
	return r
}
