// Package conformance is the shared suite every aleph-sandbox driver binary
// must pass. It launches the driver through the real plugin mechanism
// (driverapi.LaunchDriver), as a host would, and runs a probe program in it
// (conformance/probe, the same Go code on Linux, macOS and Windows) to prove
// what the driver claims: isolation cases run only for the features the
// driver claims in its Capabilities, and a claimed feature is always tested,
// so a driver cannot claim what it does not enforce. Cases that mean nothing
// on some OS are marked (Case.OS) and skipped there with the reason.
//
// Use Run from `go test` (one subtest per case id) or RunSuite for a
// structured Report (the `aleph-sandbox conformance` command).
package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Level says how binding a case is. Both levels count as failures when they
// fail; the level tells a driver author what to fix first.
type Level string

const (
	// Must: the contract requires it.
	Must Level = "MUST"
	// Should: expected of every driver, but a host may live without it.
	Should Level = "SHOULD"
)

// Status is a case's outcome.
type Status string

const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Case is one conformance check.
type Case struct {
	// ID is stable across releases ("area/what"): CI configurations and
	// --run filters refer to it.
	ID    string
	Level Level
	// Feature is the driverapi.Feature* name the case needs; "" means every
	// driver must pass it.
	Feature string
	// Call is the optional call (driverapi.Call*) the case needs; a driver
	// that does not list it skips the case, named.
	Call string
	// Description says what passing proves.
	Description string
	// OS limits the case to some hosts (AllOS, POSIXOnly, LinuxOnly,
	// WindowsOnly); on
	// the others it is SKIPPED with OSReason, never passed.
	OS       string
	OSReason string
	// fresh: the case launches its own plugin processes and needs no
	// shared one.
	fresh bool
	// scaled: the case runs many commands and sets its own budget from
	// the driver's measured per-command cost (scaledBudget), within
	// maxScale times CaseTimeout.
	scaled bool
	run    func(ctx context.Context, h *H) error
}

// Cases returns the suite's cases: by area (protocol, exec, stream and pty,
// fs, proc, net, res, robust, session, layered), then by id.
func Cases() []Case {
	var all []Case
	all = append(all, protocolCases()...)
	all = append(all, pathCases()...)
	all = append(all, execCases()...)
	all = append(all, streamCases()...)
	all = append(all, fsCases()...)
	all = append(all, hostCases()...)
	all = append(all, hardeningCases()...)
	all = append(all, leakCases()...)
	all = append(all, tightCases()...)
	all = append(all, moveCases()...)
	all = append(all, ttyCases()...)
	all = append(all, procCases()...)
	all = append(all, sessionCases()...)
	all = append(all, layeredCases()...)
	all = append(all, netCases()...)
	all = append(all, resourceCases()...)
	all = append(all, robustCases()...)
	// Areas in the order a driver author meets them, ids sorted within.
	rank := map[string]int{}
	for i, a := range areas() {
		rank[a] = i
	}
	sort.Slice(all, func(i, j int) bool {
		ai, _, _ := strings.Cut(all[i].ID, "/")
		aj, _, _ := strings.Cut(all[j].ID, "/")
		if ai != aj {
			return rank[ai] < rank[aj]
		}
		return all[i].ID < all[j].ID
	})
	return all
}

// areas are the id prefixes, in report order.
func areas() []string {
	return []string{"protocol", "exec", "stream", "pty", "fs", "proc", "net", "res", "robust", "session", "layered"}
}

// Config says which driver binary to test and how.
type Config struct {
	// DriverPath is the driver plugin binary. Required.
	DriverPath string
	// SHA256 optionally pins the binary (see driverapi.LaunchConfig).
	SHA256 string
	// Env is added to the plugin's environment (e.g. ALEPH_DRIVER_OPTIONS).
	Env []string
	// Args are extra arguments for the driver binary.
	Args []string
	// Run, when set, keeps only the cases whose id it matches.
	Run *regexp.Regexp
	// Logger receives the plugin's own log lines; default: none.
	Logger hclog.Logger
	// CaseTimeout bounds each case. Default 60s. The cases that run many
	// commands (robust/sequential-200, robust/concurrent-16) are bounded
	// instead by CaseTimeout plus four times the driver's own per-command
	// cost, measured in their warm-up, for each command, and never by
	// more than 10 times CaseTimeout: a slow driver is not failed for its
	// speed, a hung one still is.
	CaseTimeout time.Duration
	// TempDir is where per-case workspaces are made; default os.TempDir().
	TempDir string
	// Progress, when set, is called as each case ends.
	Progress func(Result)
	// Probe is the program the cases run in the sandbox (built from
	// conformance/probe). Default: the running executable, which must
	// then call ServeProbe first thing in its main (or TestMain); a
	// separate probe binary is smaller and starts faster.
	Probe string
}

// Result is one case's outcome.
type Result struct {
	ID       string        `json:"id"`
	Level    Level         `json:"level"`
	Feature  string        `json:"feature,omitempty"`
	Status   Status        `json:"status"`
	Detail   string        `json:"detail"`
	Duration time.Duration `json:"duration_ns"`
}

// Report is the outcome of a whole suite run.
type Report struct {
	Driver       string                     `json:"driver"`
	Backend      string                     `json:"backend"`
	Capabilities driverapi.HostCapabilities `json:"capabilities"`
	Results      []Result                   `json:"cases"`
	Passed       int                        `json:"passed"`
	Failed       int                        `json:"failed"`
	Skipped      int                        `json:"skipped"`
	Duration     time.Duration              `json:"duration_ns"`
}

// ConfigError: a Config that cannot be run. It is the project's one
// configuration error type, driverapi.ConfigError, with Source
// "conformance" (so it reads "conformance: reason"), and a caller catches
// it with the same errors.As as any other configuration error.
type ConfigError = driverapi.ConfigError

func (c Config) validate() error {
	if c.DriverPath == "" {
		return &ConfigError{Source: "conformance", Reason: "no driver binary given"}
	}
	st, err := os.Stat(c.DriverPath)
	if err != nil {
		return &ConfigError{Source: "conformance", Reason: fmt.Sprintf("driver binary %s: %v", c.DriverPath, err)}
	}
	if !st.Mode().IsRegular() {
		return &ConfigError{Source: "conformance", Reason: fmt.Sprintf("driver binary %s is not a regular file", c.DriverPath)}
	}
	if c.Run != nil && len(selectCases(c.Run)) == 0 {
		// A filter with a typo would otherwise run nothing and pass.
		return &ConfigError{Source: "conformance", Reason: fmt.Sprintf("Run %q matches no case id, so the run would prove nothing (Cases lists the ids)", c.Run.String())}
	}
	if c.Probe != "" {
		st, err := os.Stat(c.Probe)
		if err != nil {
			return &ConfigError{Source: "conformance", Reason: fmt.Sprintf("probe binary %s: %v", c.Probe, err)}
		}
		if !st.Mode().IsRegular() {
			return &ConfigError{Source: "conformance", Reason: fmt.Sprintf("probe binary %s is not a regular file", c.Probe)}
		}
	}
	return nil
}

// LaunchError: the driver did not start, or did not answer its capability
// report, before the first case. No case could say anything about it, so
// the run is refused as a whole (one error, not one failure per case).
type LaunchError struct {
	Path string
	Err  error
}

func (e *LaunchError) Error() string {
	return fmt.Sprintf("conformance: the driver %s did not start, so no case ran: %v", e.Path, e.Err)
}

func (e *LaunchError) Unwrap() error { return e.Err }

// skipError marks a case as skipped from inside it.
type skipError struct{ reason string }

func (e *skipError) Error() string { return "skipped: " + e.reason }

func skipf(format string, a ...any) error { return &skipError{reason: fmt.Sprintf(format, a...)} }

// Factory gives Run the configuration to test; it may build the driver
// binary first (t.TempDir is cleaned up by the test framework).
type Factory func(t testing.TB) Config

// Binary is a Factory for an existing driver binary.
func Binary(path string) Factory {
	return func(testing.TB) Config { return Config{DriverPath: path} }
}

// Run runs the suite as subtests of t, one per case id: a failing case
// fails its subtest, a skipped one skips it with the reason.
func Run(t *testing.T, f Factory) {
	t.Helper()
	cfg := f(t)
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	s := newSuite(cfg)
	defer s.close()
	if err := s.start(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, c := range s.selected() {
		t.Run(c.ID, func(t *testing.T) {
			r := s.runCase(t.Context(), c)
			switch r.Status {
			case Fail:
				t.Errorf("%s %s: %s", c.Level, c.ID, r.Detail)
			case Skip:
				t.Skip(r.Detail)
			}
		})
	}
}

// RunSuite runs every selected case and returns the report. The error is
// non-nil for a Config that cannot be run at all (*ConfigError), a driver
// that does not start (*LaunchError: no case ran), and a cancelled ctx
// (ctx's error, with the cases run so far). A driver that dies later, in
// a case, fails that case and is started again for the next.
func RunSuite(ctx context.Context, cfg Config) (Report, error) {
	rep := Report{Driver: cfg.DriverPath}
	if err := cfg.validate(); err != nil {
		return rep, err
	}
	start := time.Now()
	s := newSuite(cfg)
	defer s.close()
	if err := s.start(ctx); err != nil {
		return rep, err
	}
	for _, c := range s.selected() {
		if ctx.Err() != nil {
			break
		}
		r := s.runCase(ctx, c)
		rep.Results = append(rep.Results, r)
		switch r.Status {
		case Pass:
			rep.Passed++
		case Fail:
			rep.Failed++
		case Skip:
			rep.Skipped++
		}
		if cfg.Progress != nil {
			cfg.Progress(r)
		}
	}
	if s.shared != nil {
		rep.Backend = s.caps.Backend
		rep.Capabilities = s.caps
	}
	rep.Duration = time.Since(start)
	return rep, ctx.Err()
}

// suite holds the plugin shared by the cases that do not need their own,
// and the probe every case copies into its workspace.
type suite struct {
	cfg       Config
	progs     programs
	shared    *driverapi.Process
	caps      driverapi.HostCapabilities
	launchErr error
	// launchCause is launchErr's cause, worded for a *LaunchError.
	launchCause error
	launched    bool

	probeMu         sync.Mutex
	probeDir, probe string // the suite's copy of the probe
	probeErr        error
}

func newSuite(cfg Config) *suite {
	if cfg.CaseTimeout == 0 {
		cfg.CaseTimeout = 60 * time.Second
	}
	return &suite{cfg: cfg, progs: programsFor(runtime.GOOS, os.Getenv)}
}

func (s *suite) selected() []Case { return selectCases(s.cfg.Run) }

// selectCases is the cases whose id re matches (all of them for nil).
func selectCases(re *regexp.Regexp) []Case {
	var out []Case
	for _, c := range Cases() {
		if re == nil || re.MatchString(c.ID) {
			out = append(out, c)
		}
	}
	return out
}

func (s *suite) launchConfig() driverapi.LaunchConfig {
	return driverapi.LaunchConfig{Path: s.cfg.DriverPath, SHA256: s.cfg.SHA256, Env: s.cfg.Env, Args: s.cfg.Args, Logger: s.cfg.Logger, StartTimeout: 20 * time.Second}
}

// start launches the shared plugin before the first case that needs a
// driver (one selected that is not skipped for this OS): a driver that
// cannot start is one *LaunchError, not a failure for every case.
func (s *suite) start(ctx context.Context) error {
	needed := false
	for _, c := range s.selected() {
		needed = needed || osSkip(c, s.progs.goos) == ""
	}
	if !needed {
		return nil
	}
	// Bounded like a case: a driver that hangs in its handshake or its
	// capability report must not hang the run.
	lctx, cancel := context.WithTimeout(ctx, s.cfg.CaseTimeout)
	defer cancel()
	err := s.ensureShared(lctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return &LaunchError{Path: s.cfg.DriverPath, Err: s.launchCause}
}

// ensureShared launches the shared plugin once, and again if it died (a
// case that crashed it must not fail every later case).
func (s *suite) ensureShared(ctx context.Context) error {
	if s.launched && s.shared != nil && !s.shared.Exited() {
		return nil
	}
	if s.launched && s.shared == nil {
		return s.launchErr
	}
	if s.shared != nil {
		s.shared.Kill()
		s.shared = nil
	}
	s.launched = true
	p, err := driverapi.LaunchDriver(ctx, s.launchConfig())
	if err != nil {
		s.launchCause = err
		s.launchErr = fmt.Errorf("driver did not start: %w", err)
		return s.launchErr
	}
	caps, err := p.Driver().Capabilities(ctx)
	if err != nil {
		p.Kill()
		s.launchCause = fmt.Errorf("it started, but its Capabilities call failed: %w", err)
		s.launchErr = fmt.Errorf("driver Capabilities failed: %w", err)
		return s.launchErr
	}
	s.shared, s.caps = p, caps
	return nil
}

func (s *suite) close() {
	if s.shared != nil {
		s.shared.Kill()
		s.shared = nil
	}
	if s.probeDir != "" {
		removeAll(s.probeDir)
		s.probeDir = ""
	}
}

func (s *suite) runCase(parent context.Context, c Case) (r Result) {
	start := time.Now()
	r = Result{ID: c.ID, Level: c.Level, Feature: c.Feature}
	defer func() { r.Duration = time.Since(start) }()
	limit := s.cfg.CaseTimeout
	if c.scaled {
		limit *= maxScale
	}
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	// The OS gate needs no driver.
	if why := osSkip(c, s.progs.goos); why != "" {
		r.Status, r.Detail = Skip, why
		return r
	}
	// Capabilities come from the shared plugin even for fresh cases: the
	// feature gate needs them.
	if err := s.ensureShared(ctx); err != nil {
		r.Status, r.Detail = Fail, err.Error()
		return r
	}
	if c.Feature != "" && !s.caps.Has(c.Feature) {
		r.Status, r.Detail = Skip, fmt.Sprintf("driver does not claim %s", c.Feature)
		return r
	}
	if c.Call != "" && !s.caps.Supports(c.Call) {
		r.Status, r.Detail = Skip, fmt.Sprintf("driver does not list the optional %q call", c.Call)
		return r
	}
	h, err := newH(s, c)
	if err != nil {
		r.Status, r.Detail = Fail, "setting up the case: "+err.Error()
		return r
	}
	err = runGuarded(ctx, c, h)
	h.cleanup()
	var se *skipError
	switch {
	case err == nil:
		r.Status = Pass
	case errors.As(err, &se):
		r.Status, r.Detail = Skip, se.reason
	default:
		r.Status, r.Detail = Fail, oneLine(err.Error())
		if ctx.Err() != nil && parent.Err() == nil {
			r.Detail += fmt.Sprintf(" (case exceeded %s)", limit)
		}
	}
	return r
}

// maxScale bounds a scaled case: at most this many times CaseTimeout.
const maxScale = 10

// scaledBudget is the budget of a case that runs n commands on a driver
// whose commands took perCommand each in the warm-up: CaseTimeout plus
// four times that cost per command. The budget measures the driver against
// itself: only a driver that slows down as it goes (or hangs) exceeds it.
func (s *suite) scaledBudget(n int, perCommand time.Duration) time.Duration {
	return s.cfg.CaseTimeout + time.Duration(n)*4*perCommand
}

// runGuarded turns a panic in a case into a failure rather than ending the
// whole run.
func runGuarded(ctx context.Context, c Case, h *H) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("case panicked: %v", p)
		}
	}()
	return c.run(ctx, h)
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", `\r`)
	s = strings.ReplaceAll(s, "\n", `\n`)
	if len(s) > 600 {
		s = s[:600] + "..."
	}
	return s
}
