// Package appcontainer is the Windows driver of aleph-sandbox: a command
// runs in an AppContainer inside a Job Object. Two weaker tiers exist for
// hosts without AppContainers (a restricted token at Low integrity, and
// the Job Object alone); the driver uses one only when every stronger one
// is absent on the host and the operator's min_tier allows it, and never
// for a command that needs what the weaker tier does not enforce.
//
// What needs no Windows (command-line quoting, the launch plan, ACL and
// label planning, reparse-point checks, tier selection, the capability
// report, the allow_hosts refusal, the journal, counts and sweep of the
// placeholders for missing protected entries) lives in files without a
// build tag and is unit-tested on any OS. The Windows calls sit in
// *_windows.go behind the Platform and PlaceholderFS interfaces; elsewhere
// they report that they are missing.
package appcontainer

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Backend is the backend name this driver reports and verifies.
const Backend = "appcontainer"

// Version is the driver version reported in Capabilities.
const Version = "0.1.0"

// Launch is one command, planned and ready for a tier.
type Launch struct {
	Plan           Plan
	Setup          Setup
	Program        string // resolved, absolute: lpApplicationName
	CommandLine    string
	Env            []string
	Cwd            string
	Stdin          []byte
	Timeout        time.Duration
	MaxOutputBytes int64
	CommandID      string
}

// Platform is the operating-system side of the driver.
type Platform interface {
	// Probe reports whether tier can be set up on this host now.
	Probe(ctx context.Context, t Tier) error
	// Launch applies l.Setup, runs the command in tier inside a Job
	// Object, streams its output within budget, enforces the timeout and
	// cleans up (AppContainer profile, per-command ACEs). An error that is
	// a *SetupError means the command never started; it is reported, and
	// the command is not retried in another tier.
	Launch(ctx context.Context, t Tier, l Launch, streams driverapi.Streams) (driverapi.Exit, error)
	// IsFile reports whether path is an existing regular file.
	IsFile(path string) bool
}

// SetupError is a tier failing before the command started.
type SetupError struct {
	Tier Tier
	Step string
	Err  error
}

func (e *SetupError) Error() string { return e.Tier.String() + ": " + e.Step + ": " + e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

// Config configures a Driver.
type Config struct {
	Options  Options
	Platform Platform // nil: the OS platform (a stub off Windows)
	FS       FS       // nil: the OS file system
	Resolver Resolver // nil: net.DefaultResolver
	GOOS     string   // default runtime.GOOS
	// Placeholders makes the placeholders of missing protected entries
	// (nil: the OS's; off Windows a stub that refuses).
	Placeholders PlaceholderFS
	// StateDir holds the placeholder records and the ACL lock file
	// (default: under the user's local application data).
	StateDir string
}

// Driver is the Windows driver. Safe for concurrent use.
type Driver struct {
	cfg   Config
	floor Tier
	ph    *placeholders

	probeMu   sync.Mutex
	probed    bool
	best      Tier
	probeErrs map[Tier]error
}

var _ driverapi.Driver = (*Driver)(nil)

// New returns a driver; it fails only on invalid options.
func New(cfg Config) (*Driver, error) {
	if cfg.Options.MinTier == "" {
		cfg.Options.MinTier = DefaultMinTier.String()
	}
	floor, err := ParseTier(cfg.Options.MinTier)
	if err != nil {
		return nil, err
	}
	if cfg.Options.MaxProcesses == 0 {
		cfg.Options.MaxProcesses = DefaultMaxProcesses
	}
	if cfg.FS == nil {
		cfg.FS = osFS{}
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.GOOS == "" {
		cfg.GOOS = runtime.GOOS
	}
	if cfg.Placeholders == nil {
		cfg.Placeholders = osPlaceholders()
	}
	if cfg.StateDir == "" {
		cfg.StateDir = defaultStateDir()
	}
	if cfg.Platform == nil {
		cfg.Platform = osPlatform(cfg.StateDir)
	}
	return &Driver{cfg: cfg, floor: floor, ph: newPlaceholders(cfg.Placeholders, cfg.StateDir)}, nil
}

// probe runs the tier probes once, strongest first, down to the floor,
// and stops at the first tier that works: that is the host's tier.
func (d *Driver) probe(ctx context.Context) (Tier, map[Tier]error) {
	d.probeMu.Lock()
	defer d.probeMu.Unlock()
	if !d.probed {
		d.probeErrs = map[Tier]error{}
		for _, t := range Tiers() {
			if t > d.floor {
				break
			}
			if err := d.cfg.Platform.Probe(ctx, t); err != nil {
				d.probeErrs[t] = err
				continue
			}
			break
		}
		d.best = selectTier(d.floor, d.probeErrs)
		d.probed = true
	}
	return d.best, d.probeErrs
}

// Capabilities probes the tiers once and claims what the host's tier
// enforces: every command runs in that tier, so the claims hold for each.
func (d *Driver) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	best, errs := d.probe(ctx)
	features, un, details := report(best, d.floor, errs)
	for _, f := range features {
		if f == driverapi.FeatureNetworkViaProxy {
			if details == nil {
				details = map[string]string{}
			}
			details[driverapi.DetailNetworkRoute] = string(driverapi.RouteHostLoopback)
		}
	}
	return driverapi.HostCapabilities{
		Backend:         Backend,
		DriverVersion:   Version,
		ProtocolVersion: driverapi.ProtocolVersion,
		Features:        features,
		Unavailable:     un,
		OS:              d.cfg.GOOS,
		Arch:            runtime.GOARCH,
		Details:         details,
	}, nil
}

// ProfileFor builds the launch plan.
func (d *Driver) ProfileFor(ctx context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	// This driver does not report details["profile.home"], so a host
	// sends the HOME as an fs_write path; a Home it would not honour is
	// refused rather than dropped.
	if req.Home != "" {
		return driverapi.Profile{}, &driverapi.InvalidSpecError{Field: "home", Reason: "this driver does not support ProfileRequest.home; pass the directory as an fs_write path"}
	}
	p, err := BuildPlan(ctx, req, d.cfg.Options, d.cfg.FS, d.cfg.Resolver)
	if err != nil {
		return driverapi.Profile{}, err
	}
	data, err := EncodePlan(p)
	if err != nil {
		return driverapi.Profile{}, err
	}
	return driverapi.NewProfile(Backend, data), nil
}

// Run runs spec in the host's tier, or refuses it when that tier does
// not enforce what the command needs.
func (d *Driver) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	if err := driverapi.ValidateRunSpec(spec); err != nil {
		return driverapi.Exit{}, err
	}
	if err := spec.Profile.Verify(Backend); err != nil {
		return driverapi.Exit{}, err
	}
	plan, err := DecodePlan(spec.Profile.Data)
	if err != nil {
		return driverapi.Exit{}, err
	}
	cwd, err := ExactPath(d.cfg.FS, "cwd", spec.Cwd)
	if err != nil {
		return driverapi.Exit{}, err
	}
	if !WinWithin(cwd, plan.Workspace) {
		return driverapi.Exit{}, &driverapi.InvalidSpecError{Field: "cwd", Reason: fmt.Sprintf("%q is not inside the workspace %q", spec.Cwd, plan.Workspace)}
	}
	host, probeErrs := d.probe(ctx)
	tier, err := tierFor(plan, host, d.floor, probeErrs)
	if err != nil {
		return driverapi.Exit{}, err
	}
	// Again now: the file system may have changed since ProfileFor.
	if err := CheckReparsePoints(d.cfg.FS, plan); err != nil {
		return driverapi.Exit{}, err
	}
	prog, err := ResolveProgram(spec.Program, cwd, spec.Env, d.cfg.Platform.IsFile)
	if err != nil {
		return driverapi.Exit{}, err
	}
	if prog, err = CanonicalPath(d.cfg.FS, "program", prog); err != nil {
		return driverapi.Exit{}, err
	}
	if err := checkBatchName(prog); err != nil {
		return driverapi.Exit{}, err
	}
	cmdline, err := CommandLine(prog, spec.Args)
	if err != nil {
		return driverapi.Exit{}, err
	}
	env, err := EnvBlock(spec.Env)
	if err != nil {
		return driverapi.Exit{}, err
	}
	exists := func(p string) bool { fi, err := d.cfg.FS.Lstat(p); return err == nil && fi.Exists }
	if tier != TierJobObject {
		// Every protected entry must exist while the command runs: a
		// missing one is taken by a placeholder, removed after the
		// command (placeholder.go). release runs after Launch, which
		// returns only once the job is gone and the ACEs are revoked.
		release, err := d.ph.acquire(plan.rootedProtected(exists))
		if err != nil {
			return driverapi.Exit{}, fmt.Errorf("appcontainer: %w", err)
		}
		defer release()
	}
	launch := Launch{Plan: plan, Program: prog, CommandLine: cmdline, Env: env, Cwd: cwd,
		Stdin: spec.Stdin, Timeout: spec.Timeout, MaxOutputBytes: spec.MaxOutputBytes, CommandID: spec.CommandID}
	launch.Setup = PlanSetup(tier, plan, prog, exists)
	exit, err := d.cfg.Platform.Launch(ctx, tier, launch, streams)
	if err != nil {
		// A setup failure (a failed ACL write, CreateProcess, ...) is this
		// command's failure. It is never a reason to try a weaker tier:
		// a file left by an earlier command could otherwise push every
		// later one out of its sandbox.
		return driverapi.Exit{}, fmt.Errorf("appcontainer: %w", err)
	}
	if exit.Details == nil {
		exit.Details = map[string]string{}
	}
	exit.Details["tier"] = tier.String()
	if tier != TierAppContainer {
		exit.Details["tier_fallback_reason"] = probeSummary(probeErrs)
		exit.Details["tier_lost_features"] = strings.Join(lostFeatures(TierAppContainer, tier), ",")
	}
	return exit, nil
}

// lostFeatures are what the best tier enforces and the used one does not.
func lostFeatures(best, used Tier) []string {
	var out []string
	for _, f := range TierFeatures(best) {
		if !has(TierFeatures(used), f) {
			out = append(out, f)
		}
	}
	return out
}

// ResolveProgram finds the executable up front, so CreateProcess gets an
// absolute lpApplicationName and never runs its own search (which looks
// in the current directory first). A bare name is searched in the child's
// PATH with PATHEXT (default .COM;.EXE). Batch files are refused: CreateProcess
// runs them through cmd.exe, whose parsing no argument quoting can make safe.
func ResolveProgram(program, cwd string, env []driverapi.EnvVar, isFile func(string) bool) (string, error) {
	get := func(name string) string {
		for _, e := range env {
			if strings.EqualFold(e.Name, name) {
				return e.Value
			}
		}
		return ""
	}
	exts := []string{".com", ".exe"}
	if pe := get("PATHEXT"); pe != "" {
		exts = nil
		for _, e := range strings.Split(strings.ToLower(pe), ";") {
			if t := strings.TrimRight(e, ". "); e != "" && t != ".bat" && t != ".cmd" {
				exts = append(exts, e)
			}
		}
	}
	candidates := func(base string) []string {
		if hasExt(base) {
			return []string{base}
		}
		var out []string
		for _, e := range exts {
			out = append(out, base+e)
		}
		return out
	}
	var dirs []string
	if strings.ContainsAny(program, `\/:`) {
		p := program
		if !WinIsAbs(p) {
			if strings.HasPrefix(p, `\`) || strings.HasPrefix(p, "/") || strings.Contains(p, ":") {
				return "", &driverapi.InvalidSpecError{Field: "program", Reason: fmt.Sprintf("%q is neither absolute nor relative to the working directory", program)}
			}
			p = WinJoin(cwd, p)
		}
		p = WinClean(p)
		for _, c := range candidates(p) {
			if isFile(c) {
				return checkBatch(c)
			}
		}
		return "", &driverapi.InvalidSpecError{Field: "program", Reason: fmt.Sprintf("%s: no such executable", program)}
	}
	for _, dir := range strings.Split(get("PATH"), ";") {
		dir = strings.Trim(dir, `"`)
		if WinIsAbs(dir) {
			dirs = append(dirs, WinClean(dir))
		}
	}
	for _, dir := range dirs {
		for _, c := range candidates(WinJoin(dir, program)) {
			if isFile(c) {
				return checkBatch(c)
			}
		}
	}
	return "", &driverapi.InvalidSpecError{Field: "program", Reason: fmt.Sprintf("%s: not found in the child's PATH (%d absolute entries searched)", program, len(dirs))}
}

func hasExt(p string) bool {
	base := p[strings.LastIndexAny(p, `\/`)+1:]
	return strings.Contains(base, ".")
}

func checkBatch(p string) (string, error) {
	if err := checkBatchName(p); err != nil {
		return "", err
	}
	return p, nil
}

// checkBatchName refuses a program CreateProcess would run through
// cmd.exe. The name is checked as Windows reads it: a trailing dot or
// space (`x.bat.`, `x.cmd `) or a stream suffix (`x.bat::$DATA`) is
// stripped by Win32 and still runs the batch file, so such names are
// refused outright rather than compared.
func checkBatchName(p string) error {
	if err := checkComponents("program", p, WinClean(p), true); err != nil {
		return &driverapi.InvalidSpecError{Field: "program", Reason: err.Error()}
	}
	l := strings.ToLower(p)
	if strings.HasSuffix(l, ".bat") || strings.HasSuffix(l, ".cmd") {
		return &driverapi.InvalidSpecError{Field: "program", Reason: fmt.Sprintf("%s is a batch file; run cmd.exe /d /c explicitly so the quoting is yours", p)}
	}
	return nil
}
