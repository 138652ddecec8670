package seatbelt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Backend is the backend name this driver reports and verifies.
const Backend = "seatbelt"

// Version is the driver version reported in Capabilities.
const Version = "0.1.0"

// DefaultSandboxExec is the absolute path of Apple's launcher. It is never
// looked up in PATH: a planted sandbox-exec earlier in PATH would get to
// decide the policy.
const DefaultSandboxExec = "/usr/bin/sandbox-exec"

// DefaultPath is the search path for a bare program name when the child's
// environment has no PATH.
const DefaultPath = "/usr/bin:/bin:/usr/sbin:/sbin"

// Config configures a Driver. The zero value is the production setup.
type Config struct {
	// SandboxExec is the launcher; default DefaultSandboxExec. Tests point
	// it at a stand-in that ignores the profile.
	SandboxExec string
	// Shim is the argv prefix that re-executes a binary as the RLIMIT_AS
	// shim (see ShimMain). Default: this executable and ShimArg.
	Shim []string
	// Canonicalize resolves paths the way Seatbelt sees them; default
	// EvalSymlinksCanonicalizer.
	Canonicalize Canonicalizer
	// GOOS overrides runtime.GOOS (tests check the macOS report on Linux).
	GOOS string
	// ProbeMemoryLimit checks that RLIMIT_AS can be set in a child; nil
	// means the real probe through the shim.
	ProbeMemoryLimit func(ctx context.Context) error
}

// Driver is the Seatbelt driver. It is safe for concurrent use.
type Driver struct {
	cfg Config

	probeOnce sync.Once
	probeErr  error
}

var _ driverapi.Driver = (*Driver)(nil)

// New returns a driver for cfg.
func New(cfg Config) *Driver {
	if cfg.SandboxExec == "" {
		cfg.SandboxExec = DefaultSandboxExec
	}
	if cfg.Canonicalize == nil {
		cfg.Canonicalize = EvalSymlinksCanonicalizer
	}
	if cfg.GOOS == "" {
		cfg.GOOS = runtime.GOOS
	}
	if len(cfg.Shim) == 0 {
		if exe, err := os.Executable(); err == nil {
			cfg.Shim = []string{exe, ShimArg}
		}
	}
	return &Driver{cfg: cfg}
}

// ParseOptions checks the driver's options (the `[sandbox.macos]` section,
// given as JSON in ALEPH_DRIVER_OPTIONS). The driver has no options yet, so
// any key is refused rather than silently ignored.
func ParseOptions(raw string) error {
	if strings.TrimSpace(raw) == "" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		return fmt.Errorf("driver options are not a JSON object: %w", err)
	}
	for k := range m {
		return fmt.Errorf("unknown driver option %q: the seatbelt driver takes no options", k)
	}
	return nil
}

// Capabilities reports what Seatbelt enforces on this host.
func (d *Driver) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	hc := driverapi.HostCapabilities{
		Backend:         Backend,
		DriverVersion:   Version,
		ProtocolVersion: driverapi.ProtocolVersion,
		OS:              d.cfg.GOOS,
		Arch:            runtime.GOARCH,
		Details:         map[string]string{"sandbox_exec": d.cfg.SandboxExec},
	}
	var launcherErr error
	if d.cfg.GOOS != "darwin" {
		launcherErr = fmt.Errorf("Seatbelt (sandbox-exec) exists only on macOS; this host runs %s", d.cfg.GOOS)
	} else {
		launcherErr = checkExecutable(d.cfg.SandboxExec)
	}
	if launcherErr != nil {
		for _, f := range driverapi.KnownFeatures() {
			hc.Unavailable = append(hc.Unavailable, driverapi.Unavailable{Feature: f, Reason: launcherErr.Error(),
				Fix: "use the driver of this operating system (linux: bwrap, windows: appcontainer)"})
		}
		return hc, nil
	}
	d.probeOnce.Do(func() {
		probe := d.cfg.ProbeMemoryLimit
		if probe == nil {
			probe = d.probeRlimitAS
		}
		d.probeErr = probe(ctx)
	})
	hc.Features, hc.Unavailable = capabilityReport(d.probeErr)
	if hc.Has(driverapi.FeatureNetworkViaProxy) {
		hc.Details[driverapi.DetailNetworkRoute] = string(driverapi.RouteHostLoopback)
	}
	return hc, nil
}

// capabilityReport is the macOS feature set: what Seatbelt plus rlimits
// enforce, and why the rest cannot be.
func capabilityReport(memErr error) ([]string, []driverapi.Unavailable) {
	features := []string{
		driverapi.FeatureFSReadIsolation,
		driverapi.FeatureFSWriteIsolation,
		driverapi.FeatureProtectedPaths,
		driverapi.FeatureNetworkNone,
		driverapi.FeatureNetworkAll,
		driverapi.FeatureNetworkViaProxy,
		driverapi.FeatureSubprocessControl,
		driverapi.FeatureEnvIsolation,
	}
	var un []driverapi.Unavailable
	if memErr == nil {
		features = append(features, driverapi.FeatureMemoryLimit)
	} else {
		un = append(un, driverapi.Unavailable{Feature: driverapi.FeatureMemoryLimit,
			Reason: "setting RLIMIT_AS in a child failed: " + memErr.Error(),
			Fix:    "none on this macOS version; run memory-bound commands on Linux"})
	}
	un = append(un,
		driverapi.Unavailable{Feature: driverapi.FeaturePidLimit,
			Reason: "macOS has no per-sandbox process counter (RLIMIT_NPROC counts every process of the user, not of the command)",
			Fix:    "set spawn_subprocess=false, which Seatbelt enforces"},
		driverapi.Unavailable{Feature: driverapi.FeatureCPULimit,
			Reason: "macOS offers no CPU share limit for an unprivileged process tree",
			Fix:    "bound the command with a timeout"},
		driverapi.Unavailable{Feature: driverapi.FeatureSpawnRefusedReport,
			Reason: "Seatbelt refuses a fork in the kernel and tells the driver nothing, so refused starts are not counted",
			Fix:    "read the command's stderr (the CLI recognises the common messages)"},
		driverapi.Unavailable{Feature: driverapi.FeatureViolationReport,
			Reason: "Seatbelt logs its denials to the unified log, which the driver does not read per command, so a result lists no violations (unknown, not none)",
			Fix:    "read the command's stderr, or `log show --predicate 'sender == \"Sandbox\"'`"},
		driverapi.Unavailable{Feature: driverapi.FeatureProcessTreeKill,
			Reason: "timeout and cancel kill the command's process group; a descendant that calls setsid() leaves the group and macOS has no cgroup to find it",
			Fix:    "set spawn_subprocess=false so there are no descendants"},
	)
	return features, un
}

func checkExecutable(path string) error {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s not found", path)
	case err != nil:
		return err
	case !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// ProfileFor builds the SBPL profile and its parameters for req.
func (d *Driver) ProfileFor(_ context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	// This driver does not report details["profile.home"], so a host
	// sends the HOME as an fs_write path; a Home it would not honour is
	// refused rather than dropped.
	if req.Home != "" {
		return driverapi.Profile{}, &driverapi.InvalidSpecError{Field: "home", Reason: "this driver does not support ProfileRequest.home; pass the directory as an fs_write path"}
	}
	plan, err := BuildPlan(req, d.cfg.Canonicalize)
	if err != nil {
		return driverapi.Profile{}, err
	}
	data, err := EncodePlan(plan)
	if err != nil {
		return driverapi.Profile{}, err
	}
	return driverapi.NewProfile(Backend, data), nil
}

// EncodePlan serialises a plan deterministically (fixed field order,
// params already sorted).
func EncodePlan(p Plan) ([]byte, error) { return driverapi.EncodePlanJSON(p) }

// DecodePlan parses and checks profile data. The digest has already been
// verified; this refuses data from another format or with parameters that
// sandbox-exec could misread.
func DecodePlan(data []byte) (Plan, error) {
	var p Plan
	if err := driverapi.DecodePlanJSON("seatbelt profile data", data, &p); err != nil {
		return Plan{}, err
	}
	if p.Format != PlanFormat {
		return Plan{}, &driverapi.ProfileError{Reason: fmt.Sprintf("seatbelt profile format %d, this driver reads format %d", p.Format, PlanFormat)}
	}
	if !strings.HasPrefix(p.SBPL, "(version 1)\n(deny default)\n") {
		return Plan{}, &driverapi.ProfileError{Reason: "seatbelt profile does not start with (version 1) (deny default)"}
	}
	hasWS := false
	for _, prm := range p.Params {
		if prm.Name == "" || strings.ContainsAny(prm.Name, "=\x00") || prm.Name == ParamProgram {
			return Plan{}, &driverapi.ProfileError{Reason: fmt.Sprintf("seatbelt profile has an invalid parameter name %q", prm.Name)}
		}
		if strings.IndexByte(prm.Value, 0) >= 0 {
			return Plan{}, &driverapi.ProfileError{Reason: "seatbelt profile parameter " + prm.Name + " contains a NUL byte"}
		}
		if prm.Name == ParamWorkspace {
			hasWS = true
		}
	}
	if !hasWS {
		return Plan{}, &driverapi.ProfileError{Reason: "seatbelt profile has no WORKSPACE parameter"}
	}
	return p, nil
}

// param returns the value of the named parameter, or "".
func (p Plan) param(name string) string {
	for _, prm := range p.Params {
		if prm.Name == name {
			return prm.Value
		}
	}
	return ""
}

// SandboxArgv is the full argv that runs program under plan: the
// launcher, the profile text, every parameter, then the program and its
// arguments. program must be absolute (it cannot be read as an option).
func SandboxArgv(sandboxExec string, plan Plan, program string, args []string) []string {
	argv := []string{sandboxExec, "-p", plan.SBPL}
	for _, p := range plan.Params {
		argv = append(argv, "-D", p.Name+"="+p.Value)
	}
	argv = append(argv, "-D", ParamProgram+"="+program, program)
	return append(argv, args...)
}

// ResolveProgram finds the program the way execvp would, but up front:
// Seatbelt's process-exec rule names the exact file, so the driver must
// know it. A name with a slash is taken relative to cwd; a bare name is
// searched in the child's PATH (DefaultPath when unset). The result has
// its symlinks resolved by canon.
func ResolveProgram(program, cwd string, env []driverapi.EnvVar, canon Canonicalizer) (string, error) {
	if canon == nil {
		canon = IdentityCanonicalizer
	}
	if strings.Contains(program, "/") {
		p := program
		if !filepath.IsAbs(p) {
			p = filepath.Join(cwd, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", err
		}
		return canon(p), nil
	}
	path := DefaultPath
	for _, e := range env {
		if e.Name == "PATH" {
			path = e.Value
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" || !filepath.IsAbs(dir) {
			// A relative PATH entry would be resolved against the
			// sandbox cwd; execvp does that, we refuse to guess.
			continue
		}
		p := filepath.Join(dir, program)
		if checkExecutable(p) == nil {
			return canon(p), nil
		}
	}
	return "", fmt.Errorf("%s: command not found in PATH %q", program, path)
}

// Run runs spec under its Seatbelt profile.
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
	if d.cfg.GOOS != "darwin" && d.cfg.SandboxExec == DefaultSandboxExec {
		return driverapi.Exit{}, fmt.Errorf("seatbelt: sandbox-exec exists only on macOS; this host runs %s", d.cfg.GOOS)
	}
	if err := checkExact("cwd", spec.Cwd, d.cfg.Canonicalize); err != nil {
		return driverapi.Exit{}, err
	}
	if ws := plan.param(ParamWorkspace); !driverapi.PathWithin(d.cfg.Canonicalize(spec.Cwd), ws) {
		return driverapi.Exit{}, &driverapi.InvalidSpecError{Field: "cwd", Reason: fmt.Sprintf("%q is not inside the workspace %q", spec.Cwd, ws)}
	}
	prog, err := ResolveProgram(spec.Program, spec.Cwd, spec.Env, d.cfg.Canonicalize)
	if err != nil {
		return commandNotFound(spec, streams, err), nil
	}
	argv := SandboxArgv(d.cfg.SandboxExec, plan, prog, spec.Args)
	withShim := plan.MaxMemoryMB > 0
	if withShim {
		if len(d.cfg.Shim) == 0 {
			return driverapi.Exit{}, errors.New("seatbelt: memory limit requested but the RLIMIT_AS shim is unavailable (cannot find this executable)")
		}
		argv = ShimArgv(d.cfg.Shim, plan.MaxMemoryMB<<20, argv)
	}
	exit, err := runProcess(ctx, processSpec{
		argv:     argv,
		env:      envList(spec.Env),
		dir:      spec.Cwd,
		stdin:    spec.Stdin,
		timeout:  spec.Timeout,
		budget:   spec.MaxOutputBytes,
		withShim: withShim,
	}, streams)
	if err != nil {
		return driverapi.Exit{}, err
	}
	if exit.Details == nil {
		exit.Details = map[string]string{}
	}
	exit.Details["program"] = prog
	if withShim {
		exit.Details["memory_limit"] = "rlimit_as"
	}
	return exit, nil
}

// commandNotFound reports a missing program the way a shell does: exit
// status 127 and a line on stderr, so callers see the same outcome on every
// driver.
func commandNotFound(spec driverapi.RunSpec, streams driverapi.Streams, err error) driverapi.Exit {
	_, errBudget := driverapi.StreamBudgets(spec.MaxOutputBytes)
	w := driverapi.NewBudgetWriter(streams.Stderr, errBudget)
	fmt.Fprintf(w, "aleph-sandbox: %v\n", err)
	return driverapi.Exit{ExitCode: 127, StderrBytes: w.Total(), Truncated: w.Truncated(),
		Details: map[string]string{"error": "command_not_found"}}
}

func envList(env []driverapi.EnvVar) []string {
	out := make([]string, 0, len(env))
	for _, e := range env {
		out = append(out, e.Name+"="+e.Value)
	}
	// exec.Cmd treats a nil Env as "inherit the host's": never that.
	if out == nil {
		out = []string{}
	}
	return out
}
