package appcontainer

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// fakePlatform fails the tiers it is told to and records every launch.
type fakePlatform struct {
	probeFail  map[Tier]error
	launchFail map[Tier]error
	runErr     error
	files      map[string]bool
	onLaunch   []func()     // called at the start of each Launch
	block      func(Launch) // called after onLaunch, may block

	mu       sync.Mutex
	launches []launchRecord
}

type launchRecord struct {
	tier Tier
	l    Launch
}

func (f *fakePlatform) Probe(_ context.Context, t Tier) error { return f.probeFail[t] }

func (f *fakePlatform) Launch(_ context.Context, t Tier, l Launch, streams driverapi.Streams) (driverapi.Exit, error) {
	f.mu.Lock()
	f.launches = append(f.launches, launchRecord{t, l})
	hooks, block := f.onLaunch, f.block
	f.mu.Unlock()
	for _, h := range hooks {
		h()
	}
	if block != nil {
		block(l)
	}
	if err := f.launchFail[t]; err != nil {
		return driverapi.Exit{}, &SetupError{Tier: t, Step: "fake", Err: err}
	}
	if f.runErr != nil {
		return driverapi.Exit{}, f.runErr
	}
	if streams.Stdout != nil {
		_, _ = streams.Stdout.Write([]byte(l.CommandLine))
	}
	return driverapi.Exit{ExitCode: 7}, nil
}

func (f *fakePlatform) IsFile(p string) bool { return f.files[strings.ToLower(p)] }

func (f *fakePlatform) tiersTried() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var s []string
	for _, r := range f.launches {
		s = append(s, r.tier.String())
	}
	return strings.Join(s, ",")
}

func newTestDriver(t *testing.T, pf *fakePlatform, minTier string) *Driver {
	t.Helper()
	return newTestDriverOn(t, pf, minTier, newVolume())
}

// newTestDriverOn is a driver whose placeholders are made on v.
func newTestDriverOn(t *testing.T, pf *fakePlatform, minTier string, v *fakeVolume) *Driver {
	t.Helper()
	if pf.files == nil {
		pf.files = map[string]bool{`c:\windows\system32\cmd.exe`: true, strings.ToLower(wsPath + `\tool.exe`): true}
	}
	d, err := New(Config{Platform: pf, FS: MapFS{wsPath: {IsDir: true}}, Options: Options{MinTier: minTier}, GOOS: "windows",
		Placeholders: v.proc("1-1"), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func runSpec(t *testing.T, d driverapi.Driver, caps driverapi.Capabilities) driverapi.RunSpec {
	t.Helper()
	prof, err := d.ProfileFor(t.Context(), driverapi.ProfileRequest{Capabilities: caps, Workspace: wsPath, Cwd: wsPath})
	if err != nil {
		t.Fatal(err)
	}
	return driverapi.RunSpec{Program: "cmd", Args: []string{"/c", "echo a b"}, Cwd: wsPath, Profile: prof,
		Timeout: time.Minute, MaxOutputBytes: 1 << 20,
		Env: []driverapi.EnvVar{{Name: "PATH", Value: `C:\Windows\System32`}}}
}

var allowAll = driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}

func TestChainUsesBestTier(t *testing.T) {
	pf := &fakePlatform{}
	d := newTestDriver(t, pf, "")
	var out bytes.Buffer
	exit, err := d.Run(t.Context(), runSpec(t, d, driverapi.Capabilities{}), driverapi.Streams{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if exit.Details["tier"] != "appcontainer" || exit.Details["tier_fallback_reason"] != "" || pf.tiersTried() != "appcontainer" {
		t.Errorf("details %v, tried %s", exit.Details, pf.tiersTried())
	}
	if out.String() != `"C:\Windows\System32\cmd.exe" /c "echo a b"` {
		t.Errorf("command line %q", out.String())
	}
	l := pf.launches[0].l
	if l.Program != `C:\Windows\System32\cmd.exe` || len(l.Setup.ACEs) == 0 {
		t.Errorf("launch %+v", l)
	}
}

// TestSetupFailureNeverFallsThrough: a tier that is present but fails to
// set one command up (a failed ACL write, CreateProcess, ...) fails that
// command. The old chain ran it again with the user's own token.
func TestSetupFailureNeverFallsThrough(t *testing.T) {
	for _, minTier := range []string{"", "restricted_token", "job_object"} {
		pf := &fakePlatform{launchFail: map[Tier]error{TierAppContainer: errors.New(`write ACL of C:\ws\.git: access denied`)}}
		d := newTestDriver(t, pf, minTier)
		_, err := d.Run(t.Context(), runSpec(t, d, allowAll), driverapi.Streams{})
		var se *SetupError
		if !errors.As(err, &se) || se.Tier != TierAppContainer || !strings.Contains(err.Error(), "access denied") {
			t.Errorf("min_tier %q: got %v, want the AppContainer setup error", minTier, err)
		}
		if pf.tiersTried() != "appcontainer" {
			t.Errorf("min_tier %q: tried %s after a setup failure", minTier, pf.tiersTried())
		}
	}
	// Positive control: without the failure the same command runs.
	pf := &fakePlatform{}
	d := newTestDriver(t, pf, "job_object")
	if exit, err := d.Run(t.Context(), runSpec(t, d, allowAll), driverapi.Streams{}); err != nil || exit.Details["tier"] != "appcontainer" {
		t.Errorf("control: %v %v", exit.Details, err)
	}
}

// TestAbsentTierFallsOnlyWithinFloorAndNeeds: a tier absent on the host
// (its probe failed) is skipped, but only down to min_tier, and the tier
// reached runs only commands whose needs it enforces.
func TestAbsentTierFallsOnlyWithinFloorAndNeeds(t *testing.T) {
	noAC := map[Tier]error{TierAppContainer: errors.New("CreateAppContainerProfile: not supported")}
	spawnAll := driverapi.Capabilities{SpawnSubprocess: true, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}

	// Default floor: no AppContainer means nothing runs.
	pf := &fakePlatform{probeFail: noAC}
	d := newTestDriver(t, pf, "")
	_, err := d.Run(t.Context(), runSpec(t, d, spawnAll), driverapi.Streams{})
	var te *TierError
	if !errors.As(err, &te) || te.Tier != 0 || !strings.Contains(err.Error(), "not supported") || pf.tiersTried() != "" {
		t.Errorf("default floor: %v, tried %q", err, pf.tiersTried())
	}

	// Floor lowered: the restricted tier runs what it enforces...
	pf = &fakePlatform{probeFail: noAC}
	d = newTestDriver(t, pf, "restricted_token")
	exit, err := d.Run(t.Context(), runSpec(t, d, spawnAll), driverapi.Streams{})
	if err != nil || exit.Details["tier"] != "restricted_token" || pf.tiersTried() != "restricted_token" {
		t.Fatalf("restricted: %v %v tried %s", exit.Details, err, pf.tiersTried())
	}
	if !strings.Contains(exit.Details["tier_fallback_reason"], "not supported") || !strings.Contains(exit.Details["tier_lost_features"], driverapi.FeatureFSReadIsolation) {
		t.Errorf("fallback not recorded: %v", exit.Details)
	}
	if s := pf.launches[0].l.Setup; len(s.Labels) == 0 || len(s.ACEs) == 0 {
		t.Errorf("restricted tier without labels and capability ACEs: %+v", s)
	}
	// ...and refuses what it does not: no network, no subprocesses, a memory cap.
	for name, caps := range map[string]driverapi.Capabilities{
		"network none": {SpawnSubprocess: true},
		"no spawn":     {Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}},
		"memory":       {SpawnSubprocess: true, MaxMemoryMB: 64, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}},
	} {
		_, err := d.Run(t.Context(), runSpec(t, d, caps), driverapi.Streams{})
		if !errors.As(err, &te) || te.Tier != TierRestrictedToken || len(te.Missing) == 0 {
			t.Errorf("%s on the restricted tier: %v", name, err)
		}
	}
	if len(pf.launches) != 1 {
		t.Errorf("refused commands reached the platform: %s", pf.tiersTried())
	}

	// The job tier enforces no file-system confinement: it runs nothing.
	pf = &fakePlatform{probeFail: map[Tier]error{TierAppContainer: errors.New("a"), TierRestrictedToken: errors.New("b")}}
	d = newTestDriver(t, pf, "job_object")
	_, err = d.Run(t.Context(), runSpec(t, d, spawnAll), driverapi.Streams{})
	if !errors.As(err, &te) || te.Tier != TierJobObject || !strings.Contains(err.Error(), driverapi.FeatureFSWriteIsolation) || len(pf.launches) != 0 {
		t.Errorf("job tier: %v, tried %q", err, pf.tiersTried())
	}
}

// TestClaimsMatchTheTierUsed: whatever tier the probes select, a command
// runs exactly when every feature it needs is claimed by Capabilities.
func TestClaimsMatchTheTierUsed(t *testing.T) {
	for _, tier := range Tiers() {
		fail := map[Tier]error{}
		for _, t2 := range Tiers() {
			if t2 < tier {
				fail[t2] = errors.New("absent")
			}
		}
		pf := &fakePlatform{probeFail: fail}
		d := newTestDriver(t, pf, "job_object")
		hc, _ := d.Capabilities(t.Context())
		if hc.Details["tier"] != tier.String() {
			t.Fatalf("probes select %q, want %s", hc.Details["tier"], tier)
		}
		for _, caps := range []driverapi.Capabilities{{}, allowAll, {SpawnSubprocess: true}, {SpawnSubprocess: true, Network: allowAll.Network},
			{MaxMemoryMB: 10, SpawnSubprocess: true, Network: allowAll.Network}} {
			s := runSpec(t, d, caps)
			plan, _ := DecodePlan(s.Profile.Data)
			claimed := true
			for _, f := range PlanNeeds(plan) {
				claimed = claimed && hc.Has(f)
			}
			exit, err := d.Run(t.Context(), s, driverapi.Streams{})
			if claimed != (err == nil) {
				t.Errorf("tier %s caps %+v: needs claimed=%v but Run error %v", tier, caps, claimed, err)
			}
			if err == nil && exit.Details["tier"] != tier.String() {
				t.Errorf("ran in %q, claims were for %s", exit.Details["tier"], tier)
			}
		}
	}
}

func TestWeakTiersClaimOnlyWhatTheyGive(t *testing.T) {
	for _, f := range []string{driverapi.FeatureMemoryLimit, driverapi.FeatureProcessTreeKill, driverapi.FeatureSubprocessControl,
		driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths, driverapi.FeatureFSReadIsolation, driverapi.FeatureNetworkNone} {
		if has(TierFeatures(TierJobObject), f) {
			t.Errorf("job tier claims %s", f)
		}
	}
	for _, f := range []string{driverapi.FeatureMemoryLimit, driverapi.FeatureProcessTreeKill, driverapi.FeatureSubprocessControl, driverapi.FeatureFSReadIsolation, driverapi.FeatureNetworkNone} {
		if has(TierFeatures(TierRestrictedToken), f) {
			t.Errorf("restricted tier claims %s", f)
		}
		// Positive control: the AppContainer tier claims them.
		if !has(TierFeatures(TierAppContainer), f) {
			t.Errorf("appcontainer tier lacks %s", f)
		}
	}
}

func TestDefaultFloorIsAppContainer(t *testing.T) {
	d, err := New(Config{Platform: &fakePlatform{}, FS: MapFS{}})
	if err != nil || d.floor != TierAppContainer {
		t.Fatalf("default floor %v %v", d.floor, err)
	}
	if o, _ := ParseOptions(""); o.MinTier != "appcontainer" {
		t.Errorf("ParseOptions default %q", o.MinTier)
	}
	// The probes stop at the floor: a weaker tier is not even probed.
	pf := &fakePlatform{probeFail: map[Tier]error{TierAppContainer: errors.New("absent")}}
	d = newTestDriver(t, pf, "")
	hc, _ := d.Capabilities(t.Context())
	if len(hc.Features) != 0 || hc.Details["tier"] != "" {
		t.Errorf("claims %v in tier %q without an AppContainer", hc.Features, hc.Details["tier"])
	}
}

func TestNonSetupErrorDoesNotFall(t *testing.T) {
	pf := &fakePlatform{runErr: errors.New("wait failed")}
	d := newTestDriver(t, pf, "")
	if _, err := d.Run(t.Context(), runSpec(t, d, allowAll), driverapi.Streams{}); err == nil || pf.tiersTried() != "appcontainer" {
		t.Errorf("err %v tried %s: a command that started must not be run again", err, pf.tiersTried())
	}
}

func TestCapabilitiesFollowProbes(t *testing.T) {
	cases := []struct {
		name     string
		fail     map[Tier]error
		minTier  string
		tier     string
		claims   []string
		noClaims []string
	}{
		{"appcontainer", nil, "", "appcontainer",
			[]string{driverapi.FeatureNetworkNone, driverapi.FeatureFSReadIsolation, driverapi.FeatureProtectedPaths, driverapi.FeatureProcessTreeKill, driverapi.FeatureMemoryLimit},
			[]string{driverapi.FeatureNetworkViaProxy, driverapi.FeaturePidLimit, driverapi.FeatureCPULimit}},
		{"restricted", map[Tier]error{TierAppContainer: errors.New("old Windows")}, "restricted_token", "restricted_token",
			[]string{driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths, driverapi.FeatureNetworkAll},
			[]string{driverapi.FeatureNetworkNone, driverapi.FeatureFSReadIsolation, driverapi.FeatureNetworkViaProxy, driverapi.FeatureMemoryLimit, driverapi.FeatureProcessTreeKill}},
		{"job only", map[Tier]error{TierAppContainer: errors.New("a"), TierRestrictedToken: errors.New("b")}, "job_object", "job_object",
			[]string{driverapi.FeatureEnvIsolation, driverapi.FeatureNetworkAll},
			[]string{driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths, driverapi.FeatureNetworkNone, driverapi.FeatureMemoryLimit, driverapi.FeatureProcessTreeKill, driverapi.FeatureSubprocessControl}},
		{"default floor without AppContainer", map[Tier]error{TierAppContainer: errors.New("a")}, "", "",
			nil, driverapi.KnownFeatures()},
		{"floor above what works", map[Tier]error{TierAppContainer: errors.New("a")}, "appcontainer", "",
			nil, driverapi.KnownFeatures()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := newTestDriver(t, &fakePlatform{probeFail: c.fail}, c.minTier)
			hc, err := d.Capabilities(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if hc.Backend != Backend || hc.Details["tier"] != c.tier {
				t.Errorf("backend %q tier %q", hc.Backend, hc.Details["tier"])
			}
			for _, f := range c.claims {
				if !hc.Has(f) {
					t.Errorf("does not claim %s", f)
				}
			}
			for _, f := range c.noClaims {
				if hc.Has(f) {
					t.Errorf("claims %s", f)
				}
				found := false
				for _, u := range hc.Unavailable {
					found = found || (u.Feature == f && u.Reason != "")
				}
				if !found {
					t.Errorf("%s not listed as unavailable with a reason", f)
				}
			}
			// Every known feature is either claimed or explained.
			for _, f := range driverapi.KnownFeatures() {
				explained := hc.Has(f)
				for _, u := range hc.Unavailable {
					explained = explained || u.Feature == f
				}
				if !explained {
					t.Errorf("%s neither claimed nor unavailable", f)
				}
			}
		})
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	pf := &fakePlatform{}
	d := newTestDriver(t, pf, "")
	good := runSpec(t, d, driverapi.Capabilities{})
	var pe *driverapi.ProfileError
	var ise *driverapi.InvalidSpecError
	s := good
	s.Profile.Data = append([]byte{}, s.Profile.Data...)
	s.Profile.Data[len(s.Profile.Data)-2] ^= 1
	if _, err := d.Run(t.Context(), s, driverapi.Streams{}); !errors.As(err, &pe) {
		t.Errorf("tampered: %v", err)
	}
	s = good
	s.Profile = driverapi.NewProfile("seatbelt", s.Profile.Data)
	if _, err := d.Run(t.Context(), s, driverapi.Streams{}); !errors.As(err, &pe) {
		t.Errorf("foreign: %v", err)
	}
	s = good
	s.Cwd = `C:\Windows`
	if _, err := d.Run(t.Context(), s, driverapi.Streams{}); !errors.As(err, &ise) {
		t.Errorf("cwd outside: %v", err)
	}
	for _, cwd := range []string{wsPath + `\.`, wsPath + `\sub\..`, wsPath + `\`} {
		s = good
		s.Cwd = cwd
		if _, err := d.Run(t.Context(), s, driverapi.Streams{}); !errors.As(err, &ise) || ise.Field != "cwd" {
			t.Errorf("cwd %q: %v, want an InvalidSpecError for cwd", cwd, err)
		}
	}
	s = good
	s.Program = "missing"
	if _, err := d.Run(t.Context(), s, driverapi.Streams{}); !errors.As(err, &ise) {
		t.Errorf("missing program: %v", err)
	}
	s = good
	s.Env = append(s.Env, driverapi.EnvVar{Name: "Path", Value: "x"})
	if _, err := d.Run(t.Context(), s, driverapi.Streams{}); !errors.As(err, &ise) {
		t.Errorf("PATH and Path: %v", err)
	}
	if len(pf.launches) != 0 {
		t.Errorf("bad input reached the platform %d times", len(pf.launches))
	}
	// A reparse point planted after ProfileFor is caught at Run.
	d.cfg.FS = MapFS{wsPath: {IsDir: true}, wsPath + `\.git`: {Reparse: true}}
	var re *ReparsePointError
	if _, err := d.Run(t.Context(), good, driverapi.Streams{}); !errors.As(err, &re) {
		t.Errorf("late junction: %v", err)
	}
}

func TestResolveProgram(t *testing.T) {
	files := map[string]bool{
		`c:\bin\tool.exe`: true, `c:\bin\script.bat`: true, `c:\bin\plain`: true,
		`c:\ws\local.exe`: true, `c:\other\tool.com`: true,
	}
	isFile := func(p string) bool { return files[strings.ToLower(p)] }
	env := func(path, pathext string) []driverapi.EnvVar {
		e := []driverapi.EnvVar{{Name: "Path", Value: path}}
		if pathext != "" {
			e = append(e, driverapi.EnvVar{Name: "PATHEXT", Value: pathext})
		}
		return e
	}
	ok := []struct{ prog, cwd, path, pathext, want string }{
		{"tool", `C:\ws`, `C:\bin`, "", `C:\bin\tool.exe`},
		{"tool", `C:\ws`, `C:\other;C:\bin`, "", `C:\other\tool.com`},
		{"tool", `C:\ws`, `C:\other;C:\bin`, ".EXE", `C:\bin\tool.exe`},
		{"tool.exe", `C:\ws`, `"C:\bin"`, "", `C:\bin\tool.exe`},
		{`.\local`, `C:\ws`, ``, "", `C:\ws\local.exe`},
		{`C:\bin\tool.exe`, `C:\ws`, ``, "", `C:\bin\tool.exe`},
		{`C:/bin/tool`, `C:\ws`, ``, "", `C:\bin\tool.exe`},
	}
	for _, c := range ok {
		got, err := ResolveProgram(c.prog, c.cwd, env(c.path, c.pathext), isFile)
		if err != nil || got != c.want {
			t.Errorf("ResolveProgram(%q, PATH=%q) = %q, %v; want %q", c.prog, c.path, got, err, c.want)
		}
	}
	bad := []struct{ prog, path, pathext string }{
		{"script", `C:\bin`, ".BAT;.CMD"},
		{"script.bat", `C:\bin`, ""},
		{`C:\bin\script.bat`, ``, ""},
		{"local", `.;relative`, ""},
		{"nothing", `C:\bin`, ""},
		{`\rooted\tool`, ``, ""},
		{`D:tool`, ``, ""},
	}
	for _, c := range bad {
		var ise *driverapi.InvalidSpecError
		if got, err := ResolveProgram(c.prog, `C:\ws`, env(c.path, c.pathext), isFile); !errors.As(err, &ise) {
			t.Errorf("ResolveProgram(%q, PATH=%q) = %q, %v; want a refusal", c.prog, c.path, got, err)
		}
	}
}

func TestOverGRPC(t *testing.T) {
	pf := &fakePlatform{}
	d := newTestDriver(t, pf, "")
	c := drivertest.Connect(t, d)
	hc, err := c.Capabilities(t.Context())
	if err != nil || !hc.Has(driverapi.FeatureNetworkNone) {
		t.Fatalf("capabilities over gRPC: %+v %v", hc, err)
	}
	s := runSpec(t, c, allowAll)
	var out bytes.Buffer
	exit, err := c.Run(t.Context(), s, driverapi.Streams{Stdout: &out, Stderr: &bytes.Buffer{}})
	if err != nil || exit.ExitCode != 7 || exit.Details["tier"] != "appcontainer" {
		t.Errorf("run over gRPC: %+v %v", exit, err)
	}
}

func TestOffWindowsPlatformIsHonest(t *testing.T) {
	d, err := New(Config{FS: MapFS{}})
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := d.Capabilities(t.Context())
	if d.cfg.GOOS != "windows" && len(hc.Features) != 0 {
		t.Errorf("claims %v off Windows", hc.Features)
	}
}

func TestNewRefusesBadMinTier(t *testing.T) {
	if _, err := New(Config{Options: Options{MinTier: "sandbox-lite"}}); err == nil {
		t.Error("accepted")
	}
}

// A Home, which this driver does not report supporting, is refused, not
// dropped; the same request without it is accepted.
func TestProfileRefusesHome(t *testing.T) {
	d := newTestDriver(t, &fakePlatform{}, "")
	r := driverapi.ProfileRequest{Workspace: wsPath, Cwd: wsPath}
	if _, err := d.ProfileFor(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	r.Home = wsPath + `\home`
	var ie *driverapi.InvalidSpecError
	if _, err := d.ProfileFor(t.Context(), r); !errors.As(err, &ie) || ie.Field != "home" {
		t.Fatalf("ProfileFor with a home: %v, want an InvalidSpecError for home", err)
	}
}
