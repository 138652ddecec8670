package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/pluginhost"
)

// doctorReport says what this host can enforce through the chosen driver
// and how to fix what it cannot.
type doctorReport struct {
	Driver string `json:"driver"`
	Path   string `json:"path,omitempty"`
	Config string `json:"config"`
	// ConfigSection is the configuration section the driver is handed
	// ("sandbox.linux", "sandbox.drivers.runc"); empty where the platform
	// has none for it.
	ConfigSection string                      `json:"config_section,omitempty"`
	Capabilities  *driverapi.HostCapabilities `json:"capabilities,omitempty"`
	Problems      []doctorProblem             `json:"problems"`
	// OK: a driver was found and answered; Problems may still list
	// features it cannot enforce here.
	OK bool `json:"ok"`
}

type doctorProblem struct {
	What string `json:"what"`
	Why  string `json:"why"`
	Fix  string `json:"fix,omitempty"`
}

func runDoctor(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	cfgPath := fs.String("config", "", "TOML config `FILE`")
	driver := fs.String("driver", "", "driver `NAME|PATH`")
	if done, code := parseFlags(fs, args, io, "aleph-sandbox doctor [--driver NAME|PATH] [--config FILE] [--json]"); done {
		return code
	}
	r := diagnose(ctx, *cfgPath, *driver)
	if *asJSON {
		writeJSON(io.Out, r)
	} else {
		printDoctor(io, r)
	}
	if !r.OK {
		return 1
	}
	return 0
}

func diagnose(ctx context.Context, cfgPath, driver string) doctorReport {
	r := doctorReport{Config: "ok", Problems: []doctorProblem{}}
	cfg, err := loadConfig(cfgPath, "", driver)
	configOK := err == nil
	if err != nil {
		r.Config = err.Error()
		r.Problems = append(r.Problems, doctorProblem{What: "configuration", Why: err.Error(), Fix: "correct the key named above (aleph-sandbox config prints the effective configuration)"})
		cfg = core.DefaultConfig()
		cfg.Sandbox.Driver = driver
	}
	// The driver looked for: --driver, else the configuration's, else the
	// platform's default.
	r.Driver = cfg.Sandbox.Driver
	if r.Driver == "" {
		r.Driver = pluginhost.DefaultDriverName()
	}
	if r.Driver == "" {
		r.Problems = append(r.Problems, doctorProblem{What: "driver", Why: "no default driver for this OS", Fix: "pass --driver PATH to a third-party driver"})
		return r
	}
	if r.Driver == "bwrap" {
		if _, err := exec.LookPath("bwrap"); err != nil {
			r.Problems = append(r.Problems, doctorProblem{What: "bubblewrap", Why: "bwrap is not on PATH", Fix: "apt-get install bubblewrap (Debian/Ubuntu) or dnf install bubblewrap"})
		}
	}
	path, looked, err := pluginhost.FindDriver(cfg.Sandbox.Driver, nil)
	if err != nil {
		r.Problems = append(r.Problems, doctorProblem{What: "driver binary", Why: fmt.Sprintf("%s not found; looked in %s", pluginhost.DriverBinaryName(r.Driver), strings.Join(looked, ", ")), Fix: "make build, or put the binary beside aleph-sandbox or in $ALEPH_SANDBOX_PLUGIN_DIR"})
		return r
	}
	r.Path = path
	host, err := pluginhost.NewDriverHost(pluginhost.DriverHostConfig{Path: path, SHA256: cfg.Sandbox.DriverSHA256, Options: cfg.DriverOptions(goos()), Section: cfg.DriverSection, StartTimeout: 15 * time.Second})
	if err == nil {
		defer host.Close()
		var caps driverapi.HostCapabilities
		caps, err = host.Capabilities(ctx)
		if err == nil {
			r.Capabilities = &caps
		}
	}
	if host != nil {
		if r.ConfigSection = host.ConfigSection(); r.ConfigSection == "" {
			r.ConfigSection = platformSectionKey()
		}
	}
	var ce *driverapi.ConfigError
	if errors.As(err, &ce) {
		// The driver refused its section: the configuration is what is
		// wrong, and "config: ok" would send the user looking elsewhere.
		configOK = false
		r.Config = err.Error()
	}
	if err != nil {
		r.Problems = append(r.Problems, doctorProblem{What: "driver", Why: err.Error(), Fix: driverFix(r.Driver, err)})
		return r
	}
	// Keys of the platform section belong to this project's driver. With
	// another driver configured they reach nothing: a limit the user set
	// there (cpu_quota_percent, max_pids) is enforced by nobody.
	if name := core.DriverName(path); !ownDrivers[name] && platformSectionKey() != "" {
		if keys := sectionKeys(cfg.DriverOptions(goos())); len(keys) > 0 {
			configOK = false
			r.Config = fmt.Sprintf("[%s] sets %s, which the driver %s is not handed", platformSectionKey(), strings.Join(keys, ", "), name)
			r.Problems = append(r.Problems, doctorProblem{What: "configuration",
				Why: fmt.Sprintf("[%s] holds keys of this project's driver (%s), but the configured driver is %s, which is handed [%s] instead: no driver enforces them",
					platformSectionKey(), strings.Join(keys, ", "), name, r.ConfigSection),
				Fix: fmt.Sprintf("move what %s understands to [%s] and remove [%s], or configure this project's driver", name, r.ConfigSection, platformSectionKey())})
		}
	}
	for _, u := range r.Capabilities.Unavailable {
		r.Problems = append(r.Problems, doctorProblem{What: u.Feature, Why: u.Reason, Fix: u.Fix})
	}
	// The driver runs: what it cannot enforce is reported, and commands that
	// need it are refused at run time, so the host is usable, once its
	// configuration is (with a broken one no command runs).
	r.OK = configOK
	return r
}

// platformSectionKey is the key of this platform's section, the one this
// project's driver reads ("" on macOS, whose driver has none).
func platformSectionKey() string {
	switch goos() {
	case "linux", "windows":
		return core.SectionKey(goos())
	}
	return ""
}

// sectionKeys are the top-level keys of a section's JSON, sorted.
func sectionKeys(js []byte) []string {
	var m map[string]any
	if json.Unmarshal(js, &m) != nil {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ownDrivers are the drivers this project builds (make build).
var ownDrivers = map[string]bool{"bwrap": true, "seatbelt": true, "appcontainer": true}

// driverFix is what to do about a driver that did not start or answer.
// Only this project's drivers are rebuilt with make build; a pin that no
// longer matches is the configuration's to change; a third-party driver's
// own message (quoted in the problem) says what is wrong with it.
func driverFix(driver string, err error) string {
	var ce *driverapi.ChecksumError
	var pe *driverapi.PluginError
	switch {
	case errors.As(err, &ce):
		return "sandbox.driver_sha256 pins another binary: put back the binary it pins, or, if you trust this one, pin its hash"
	case errors.As(err, &pe) && pe.Op == "find":
		return "the driver binary must be an executable file"
	case ownDrivers[driver]:
		return "rebuild the driver (make build)"
	}
	return "see the driver's own words above; ALEPH_SANDBOX_LOG=debug shows its log"
}

func printDoctor(io stdio, r doctorReport) {
	// The path once: a driver named by its path is that path.
	switch {
	case r.Path == "":
		fmt.Fprintf(io.Out, "driver: %s\n", shown(r.Driver))
	case strings.ContainsAny(r.Driver, `/\`):
		fmt.Fprintf(io.Out, "driver: %s\n", shown(r.Path))
	default:
		fmt.Fprintf(io.Out, "driver: %s (%s)\n", shown(r.Driver), shown(r.Path))
	}
	fmt.Fprintf(io.Out, "config: %s\n", oneLine(r.Config))
	if r.ConfigSection != "" {
		fmt.Fprintf(io.Out, "driver section: [%s]\n", shown(r.ConfigSection))
	}
	if c := r.Capabilities; c != nil {
		fmt.Fprintf(io.Out, "backend: %s %s (protocol %d.%d) on %s/%s\n", shown(c.Backend), shown(c.DriverVersion), c.ProtocolVersion, c.ProtocolMinor, shown(c.OS), shown(c.Arch))
		if c.LandlockABI > 0 || c.OS == "linux" {
			fmt.Fprintf(io.Out, "landlock ABI: %d   seccomp: %v   cgroups: %s\n", c.LandlockABI, c.Seccomp, shown(orNone(c.CgroupMode)))
		}
		// A driver with tiers (the Linux Landlock tier, the Windows chain)
		// says which one runs commands and what that tier does not give.
		if tier := c.Details["tier"]; tier != "" {
			fmt.Fprintf(io.Out, "tier: %s\n", tier)
			if why := c.Details["tier_reason"]; why != "" {
				fmt.Fprintf(io.Out, "  because: %s\n", oneLine(why))
			}
			for _, l := range strings.Split(c.Details["tier_limits"], "; ") {
				if l != "" {
					fmt.Fprintf(io.Out, "  not in this tier: %s\n", l)
				}
			}
		}
		for _, f := range driverapi.KnownFeatures() {
			mark := "no "
			if c.Has(f) {
				mark = "yes"
			}
			fmt.Fprintf(io.Out, "  [%s] %s\n", mark, shown(f))
		}
	}
	if len(r.Problems) == 0 {
		fmt.Fprintln(io.Out, "everything this driver can enforce is enforced here")
		return
	}
	fmt.Fprintln(io.Out, "not enforced here:")
	for _, p := range r.Problems {
		fmt.Fprintf(io.Out, "  - %s: %s\n", oneLine(p.What), oneLine(p.Why))
		if p.Fix != "" {
			fmt.Fprintf(io.Out, "    fix: %s\n", oneLine(p.Fix))
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
