// Package appcontainer is the Windows driver of aleph-sandbox: the
// three-tier soft-degrade chain AppContainer → restricted token at Low
// integrity → plain process, every tier inside a Job Object.
//
// What needs no Windows (command-line quoting, the launch plan, ACL and
// label planning, reparse-point checks, tier selection, the capability
// report, the allow_hosts refusal) lives in files without a build tag and
// is unit-tested on any OS. The Windows calls sit in *_windows.go behind
// the Platform interface; elsewhere Platform reports that it is missing.
package appcontainer

import (
	"context"
	"errors"
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
	// a *SetupError means the command never started, so the next tier may
	// be tried.
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

// ChainError: no tier of the allowed chain could start the command.
type ChainError struct {
	Failures []error
	// StoppedAt is the weakest tier allowed for this command, and Why
	// says what kept the chain from going lower.
	StoppedAt Tier
	Why       string
}

func (e *ChainError) Error() string {
	var parts []string
	for _, f := range e.Failures {
		parts = append(parts, f.Error())
	}
	msg := "no sandbox tier could start the command (" + strings.Join(parts, "; ") + ")"
	if e.Why != "" {
		msg += "; not degrading below " + e.StoppedAt.String() + ": " + e.Why
	}
	return msg
}

// Config configures a Driver.
type Config struct {
	Options  Options
	Platform Platform // nil: the OS platform (a stub off Windows)
	FS       FS       // nil: the OS file system
	Resolver Resolver // nil: net.DefaultResolver
	GOOS     string   // default runtime.GOOS
}

// Driver is the Windows driver. Safe for concurrent use.
type Driver struct {
	cfg   Config
	floor Tier

	probeMu   sync.Mutex
	probed    bool
	best      Tier
	probeErrs map[Tier]error
}

var _ driverapi.Driver = (*Driver)(nil)

// New returns a driver; it fails only on invalid options.
func New(cfg Config) (*Driver, error) {
	if cfg.Options.MinTier == "" {
		cfg.Options.MinTier = TierJobObject.String()
	}
	floor, err := ParseTier(cfg.Options.MinTier)
	if err != nil {
		return nil, err
	}
	if cfg.Options.MaxProcesses == 0 {
		cfg.Options.MaxProcesses = DefaultMaxProcesses
	}
	if cfg.Platform == nil {
		cfg.Platform = osPlatform()
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
	return &Driver{cfg: cfg, floor: floor}, nil
}

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
			d.best = t
			break
		}
		d.probed = true
	}
	return d.best, d.probeErrs
}

// Capabilities probes the tiers once and claims what the best working
// tier enforces. A later per-command fall to a weaker tier is the audited
// soft degrade (Exit.Details), and never widens the network: see chainFor.
func (d *Driver) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	best, errs := d.probe(ctx)
	features, un, details := report(best, d.floor, errs)
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

// Run walks the tier chain for spec.
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
	cwd := WinClean(spec.Cwd)
	if cwd == "" || !WinWithin(cwd, plan.Workspace) {
		return driverapi.Exit{}, &driverapi.InvalidSpecError{Field: "cwd", Reason: fmt.Sprintf("%q is not inside the workspace %q", spec.Cwd, plan.Workspace)}
	}
	// Again now: the file system may have changed since ProfileFor.
	if err := CheckReparsePoints(d.cfg.FS, plan); err != nil {
		return driverapi.Exit{}, err
	}
	prog, err := ResolveProgram(spec.Program, cwd, spec.Env, d.cfg.Platform.IsFile)
	if err != nil {
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
	launch := Launch{Plan: plan, Program: prog, CommandLine: cmdline, Env: env, Cwd: cwd,
		Stdin: spec.Stdin, Timeout: spec.Timeout, MaxOutputBytes: spec.MaxOutputBytes, CommandID: spec.CommandID}
	return runChain(ctx, d.cfg.Platform, chainFor(plan, d.floor), d.floor, launch, exists, streams)
}

// runChain tries each tier in order; a setup failure falls to the next
// and is recorded, anything else ends the command.
func runChain(ctx context.Context, pf Platform, chain []Tier, floor Tier, l Launch, exists func(string) bool, streams driverapi.Streams) (driverapi.Exit, error) {
	var fails []error
	for _, t := range chain {
		if err := ctx.Err(); err != nil {
			return driverapi.Exit{}, err
		}
		l.Setup = PlanSetup(t, l.Plan, l.Program, exists)
		exit, err := pf.Launch(ctx, t, l, streams)
		var se *SetupError
		if errors.As(err, &se) {
			fails = append(fails, err)
			continue
		}
		if err != nil {
			return driverapi.Exit{}, err
		}
		if exit.Details == nil {
			exit.Details = map[string]string{}
		}
		exit.Details["tier"] = t.String()
		if len(fails) > 0 {
			var parts []string
			for _, f := range fails {
				parts = append(parts, f.Error())
			}
			exit.Details["tier_fallback_reason"] = strings.Join(parts, "; ")
			exit.Details["tier_lost_features"] = strings.Join(lostFeatures(chain[0], t), ",")
		}
		return exit, nil
	}
	ce := &ChainError{Failures: fails, StoppedAt: chain[len(chain)-1]}
	if ce.StoppedAt < floor {
		ce.Why = "the command asked for no network, which only an AppContainer enforces"
	}
	return driverapi.Exit{}, ce
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
			if e != "" && e != ".bat" && e != ".cmd" {
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
	l := strings.ToLower(p)
	if strings.HasSuffix(l, ".bat") || strings.HasSuffix(l, ".cmd") {
		return "", &driverapi.InvalidSpecError{Field: "program", Reason: fmt.Sprintf("%s is a batch file; run cmd.exe /d /c explicitly so the quoting is yours", p)}
	}
	return p, nil
}
