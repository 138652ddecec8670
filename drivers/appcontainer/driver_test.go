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
	f.mu.Unlock()
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
	if pf.files == nil {
		pf.files = map[string]bool{`c:\windows\system32\cmd.exe`: true, strings.ToLower(wsPath + `\tool.exe`): true}
	}
	d, err := New(Config{Platform: pf, FS: MapFS{wsPath: {IsDir: true}}, Options: Options{MinTier: minTier}, GOOS: "windows"})
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
	if l.Program != `C:\Windows\System32\cmd.exe` || len(l.Setup.ACEs) == 0 || len(l.Setup.Stubs) != 4 {
		t.Errorf("launch %+v", l)
	}
}

func TestChainFallsAndRecords(t *testing.T) {
	pf := &fakePlatform{launchFail: map[Tier]error{
		TierAppContainer:    errors.New("CreateAppContainerProfile: access denied"),
		TierRestrictedToken: errors.New("ERROR_PRIVILEGE_NOT_HELD"),
	}}
	d := newTestDriver(t, pf, "")
	exit, err := d.Run(t.Context(), runSpec(t, d, allowAll), driverapi.Streams{})
	if err != nil {
		t.Fatal(err)
	}
	if exit.Details["tier"] != "job_object" || pf.tiersTried() != "appcontainer,restricted_token,job_object" {
		t.Errorf("tier %q tried %s", exit.Details["tier"], pf.tiersTried())
	}
	reason := exit.Details["tier_fallback_reason"]
	if !strings.Contains(reason, "appcontainer: fake: CreateAppContainerProfile: access denied") || !strings.Contains(reason, "restricted_token: fake: ERROR_PRIVILEGE_NOT_HELD") {
		t.Errorf("fallback reason %q", reason)
	}
	if lost := exit.Details["tier_lost_features"]; !strings.Contains(lost, driverapi.FeatureFSReadIsolation) || !strings.Contains(lost, driverapi.FeatureProtectedPaths) {
		t.Errorf("lost features %q", lost)
	}
	// The job tier touches no ACLs.
	if s := pf.launches[2].l.Setup; len(s.ACEs)+len(s.Labels) != 0 {
		t.Errorf("job tier setup %+v", s)
	}
	// And the restricted tier got the label plan.
	if s := pf.launches[1].l.Setup; len(s.Labels) == 0 {
		t.Error("restricted tier without labels")
	}
}

func TestNetworkNoneNeverDegrades(t *testing.T) {
	pf := &fakePlatform{launchFail: map[Tier]error{TierAppContainer: errors.New("no AppContainer")}}
	d := newTestDriver(t, pf, "")
	_, err := d.Run(t.Context(), runSpec(t, d, driverapi.Capabilities{}), driverapi.Streams{})
	var ce *ChainError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want *ChainError", err)
	}
	if pf.tiersTried() != "appcontainer" {
		t.Errorf("a no-network command fell to %s", pf.tiersTried())
	}
	if !strings.Contains(err.Error(), "asked for no network") || !strings.Contains(err.Error(), "no AppContainer") {
		t.Errorf("message %q", err)
	}
	// Positive control: the same failure with network all degrades.
	pf2 := &fakePlatform{launchFail: map[Tier]error{TierAppContainer: errors.New("no AppContainer")}}
	d2 := newTestDriver(t, pf2, "")
	exit, err := d2.Run(t.Context(), runSpec(t, d2, allowAll), driverapi.Streams{})
	if err != nil || exit.Details["tier"] != "restricted_token" {
		t.Errorf("allow_all: %v %v", exit.Details, err)
	}
}

func TestMinTierStopsTheChain(t *testing.T) {
	pf := &fakePlatform{launchFail: map[Tier]error{TierAppContainer: errors.New("x"), TierRestrictedToken: errors.New("y")}}
	d := newTestDriver(t, pf, "restricted_token")
	_, err := d.Run(t.Context(), runSpec(t, d, allowAll), driverapi.Streams{})
	var ce *ChainError
	if !errors.As(err, &ce) || pf.tiersTried() != "appcontainer,restricted_token" {
		t.Errorf("err %v tried %s", err, pf.tiersTried())
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
		{"restricted", map[Tier]error{TierAppContainer: errors.New("old Windows")}, "", "restricted_token",
			[]string{driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths, driverapi.FeatureNetworkAll},
			[]string{driverapi.FeatureNetworkNone, driverapi.FeatureFSReadIsolation, driverapi.FeatureNetworkViaProxy}},
		{"job only", map[Tier]error{TierAppContainer: errors.New("a"), TierRestrictedToken: errors.New("b")}, "", "job_object",
			[]string{driverapi.FeatureSubprocessControl, driverapi.FeatureEnvIsolation},
			[]string{driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths, driverapi.FeatureNetworkNone}},
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
