//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func TestParseOptions(t *testing.T) {
	o, err := parseOptions("")
	if err != nil || o.Pids() != defaultMaxPids || o.Cgroup != cgroupAuto || o.TmpfsMaxBytes() != 1<<30 {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	if o, err := parseOptions(`{"tmpfs_max_mb": 64}`); err != nil || o.TmpfsMaxBytes() != 64<<20 {
		t.Fatalf("tmpfs_max_mb: %+v %v", o, err)
	}
	o, err = parseOptions(`{"max_pids": 0, "cpu_quota_percent": 50, "cgroup": "v1"}`)
	if err != nil || o.Pids() != 0 || o.CPUQuotaPercent != 50 || o.Cgroup != cgroupV1 {
		t.Fatalf("%+v %v", o, err)
	}
	// What the core sends for [sandbox.linux] (every key, empty cgroup
	// meaning auto) is accepted.
	for _, good := range []string{
		`{"max_pids":200,"cpu_quota_percent":0,"cgroup":""}`,
		`{"max_pids":0,"cpu_quota_percent":102400,"cgroup":"auto","bwrap_path":"/usr/bin/bwrap"}`,
	} {
		if _, err := parseOptions(good); err != nil {
			t.Errorf("%s: %v", good, err)
		}
	}
	for _, bad := range []string{
		`{"max_pid": 10}`, `{"cgroup": "v3"}`, `{"cpu_quota_percent": -1}`, `{"cpu_quota_percent": 102401}`,
		`{} {}`, `[1]`, `{"bwrap_path": "bwrap"}`, `{"max_pids": "ten"}`,
		`{"tmpfs_max_mb": -1}`, `{"tmpfs_max_mb": 1048577}`,
	} {
		var oe *optionsError
		if _, err := parseOptions(bad); !errors.As(err, &oe) {
			t.Errorf("%s: want OptionsError, got %v", bad, err)
		}
	}
}

func TestProfileDeterministic(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	a, b := newWorkspace(t), newWorkspace(t)
	req := driverapi.ProfileRequest{Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{FSRead: []string{b, a}, FSWrite: []string{a}}}
	p1, err := d.ProfileFor(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	req.Capabilities.FSRead = []string{a, b, b}
	p2, err := d.ProfileFor(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p1.Data, p2.Data) || p1.Digest != p2.Digest {
		t.Fatalf("profiles differ:\n%s\n%s", p1.Data, p2.Data)
	}
	var plan launchPlan
	if err := json.Unmarshal(p1.Data, &plan); err != nil {
		t.Fatal(err)
	}
	// fs_write wins over fs_read for the same path.
	if len(plan.FSRead) != 1 || plan.FSRead[0] != b || len(plan.FSWrite) != 1 || plan.FSWrite[0] != a {
		t.Fatalf("grants %v / %v", plan.FSRead, plan.FSWrite)
	}
}

func TestProfileRequestRefused(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	link := filepath.Join(newWorkspace(t), "link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	cases := map[string]driverapi.ProfileRequest{
		"relative workspace":   {Workspace: "rel/ws", Cwd: ws},
		"missing workspace":    {Workspace: ws + "/nope", Cwd: ws},
		"symlinked workspace":  {Workspace: link, Cwd: link},
		"root workspace":       {Workspace: "/", Cwd: "/"},
		"system workspace":     {Workspace: "/usr", Cwd: "/usr"},
		"cwd outside":          {Workspace: ws, Cwd: "/usr"},
		"NUL":                  {Workspace: ws + "\x00x", Cwd: ws},
		"fs_read /proc":        {Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{FSRead: []string{"/proc/1/root"}}},
		"fs_read /":            {Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{FSRead: []string{"/"}}},
		"fs_write /etc":        {Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{FSWrite: []string{"/etc"}}},
		"fs_read /etc":         {Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{FSRead: []string{"/etc"}}},
		"fs_write relative":    {Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{FSWrite: []string{"x"}}},
		"fs_write in .git":     {Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{FSWrite: []string{mkdir(t, ws, ".git/hooks")}}},
		"allow_hosts no proxy": {Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}}},
		"allow_hosts tcp only": {Workspace: ws, Cwd: ws, Proxy: &driverapi.ProxyEndpoint{TCPAddr: "127.0.0.1:1"}, Capabilities: driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts}}},
	}
	// Spellings of a canonical path are refused, not cleaned: the host
	// hands canonical paths, and one that is not was not checked as such.
	sub := mkdir(t, ws, "sub")
	for name, req := range map[string]driverapi.ProfileRequest{
		"workspace with .":         {Workspace: ws + "/.", Cwd: ws},
		"workspace with ..":        {Workspace: sub + "/..", Cwd: ws},
		"workspace trailing slash": {Workspace: ws + "/", Cwd: ws},
		"workspace doubled slash":  {Workspace: filepath.Dir(ws) + "//" + filepath.Base(ws), Cwd: ws},
		"cwd with ..":              {Workspace: ws, Cwd: sub + "/.."},
		"cwd with .":               {Workspace: ws, Cwd: ws + "/./sub"},
		"cwd trailing slash":       {Workspace: ws, Cwd: sub + "/"},
	} {
		_, err := d.ProfileFor(context.Background(), req)
		var ise *driverapi.InvalidSpecError
		want := "cwd"
		if strings.HasPrefix(name, "workspace") {
			want = "workspace"
		}
		if !errors.As(err, &ise) || ise.Field != want || !strings.Contains(ise.Reason, "not canonical") {
			t.Errorf("%s: want an InvalidSpecError for %s, got %v", name, want, err)
		}
	}
	for name, req := range cases {
		_, err := d.ProfileFor(context.Background(), req)
		var ise *driverapi.InvalidSpecError
		var ue *unavailableError
		if !errors.As(err, &ise) && !errors.As(err, &ue) {
			t.Errorf("%s: want a typed refusal, got %v", name, err)
		}
	}
	// Controls: the plain request works (with the cwd in a subdirectory
	// too), and so does a read grant inside a system directory (the path
	// itself, not its parent).
	if _, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: sub}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws,
		Capabilities: driverapi.Capabilities{FSRead: []string{"/usr/share"}}}); err != nil {
		t.Fatalf("fs_read /usr/share: %v", err)
	}
}

func mkdir(t *testing.T, parts ...string) string {
	p := filepath.Join(parts...)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunBadInput(t *testing.T) {
	d := testDriver(t, options{})
	ctx := context.Background()
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	good := driverapi.RunSpec{Program: "/bin/true", Cwd: ws, Profile: prof, Timeout: 10 * time.Second, MaxOutputBytes: 1024}

	forge := func(mut func(*launchPlan)) driverapi.Profile {
		var p launchPlan
		if err := json.Unmarshal(prof.Data, &p); err != nil {
			t.Fatal(err)
		}
		mut(&p)
		data, _ := json.Marshal(p)
		return driverapi.NewProfile(backend, data) // a valid digest: integrity is not origin
	}
	garbled := prof
	garbled.Data = append([]byte{}, prof.Data...)
	garbled.Data[10] ^= 0x20
	wrongBackend := driverapi.NewProfile("seatbelt", prof.Data)

	type tc struct {
		name string
		mut  func(*driverapi.RunSpec)
		want func(error) bool
	}
	isProfile := func(err error) bool { var e *driverapi.ProfileError; return errors.As(err, &e) }
	isSpec := func(err error) bool { var e *driverapi.InvalidSpecError; return errors.As(err, &e) }
	isCwd := func(err error) bool { var e *driverapi.InvalidSpecError; return errors.As(err, &e) && e.Field == "cwd" }
	sub := mkdir(t, ws, "sub")
	link := filepath.Join(ws, "link")
	if err := os.Symlink(sub, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []tc{
		{"garbled profile", func(s *driverapi.RunSpec) { s.Profile = garbled }, isProfile},
		{"other backend", func(s *driverapi.RunSpec) { s.Profile = wrongBackend }, isProfile},
		{"not JSON", func(s *driverapi.RunSpec) { s.Profile = driverapi.NewProfile(backend, []byte("{oops")) }, isProfile},
		{"unknown field", func(s *driverapi.RunSpec) {
			s.Profile = driverapi.NewProfile(backend, append(bytes.TrimSuffix(bytes.Clone(prof.Data), []byte("}")), []byte(`,"extra":1}`)...))
		}, isProfile},
		{"forged system mount", func(s *driverapi.RunSpec) {
			s.Profile = forge(func(p *launchPlan) {
				p.System = append(p.System, mount{Kind: mountROBind, Src: "/root", Dest: "/root"})
			})
		}, isProfile},
		{"forged grant", func(s *driverapi.RunSpec) {
			s.Profile = forge(func(p *launchPlan) { p.FSWrite = append(p.FSWrite, "/") })
		}, isProfile},
		{"forged unprotected", func(s *driverapi.RunSpec) {
			s.Profile = forge(func(p *launchPlan) { p.Protected = nil })
		}, isProfile},
		{"forged protected path", func(s *driverapi.RunSpec) {
			s.Profile = forge(func(p *launchPlan) { p.Protected = []string{".git", "../elsewhere"} })
		}, isProfile},
		{"forged network", func(s *driverapi.RunSpec) {
			s.Profile = forge(func(p *launchPlan) { p.ShareNet = true })
		}, isProfile},
		{"other version", func(s *driverapi.RunSpec) {
			s.Profile = forge(func(p *launchPlan) { p.Version = 99 })
		}, isProfile},
		{"relative cwd", func(s *driverapi.RunSpec) { s.Cwd = "sub" }, isSpec},
		{"cwd outside", func(s *driverapi.RunSpec) { s.Cwd = "/usr" }, isSpec},
		{"cwd with ..", func(s *driverapi.RunSpec) { s.Cwd = sub + "/.." }, isCwd},
		{"cwd with .", func(s *driverapi.RunSpec) { s.Cwd = ws + "/./sub" }, isCwd},
		{"cwd trailing slash", func(s *driverapi.RunSpec) { s.Cwd = sub + "/" }, isCwd},
		{"cwd doubled slash", func(s *driverapi.RunSpec) { s.Cwd = ws + "//sub" }, isCwd},
		{"cwd through a link", func(s *driverapi.RunSpec) { s.Cwd = link }, isCwd},
		{"NUL arg", func(s *driverapi.RunSpec) { s.Args = []string{"a\x00b"} }, isSpec},
		{"NUL env", func(s *driverapi.RunSpec) { s.Env = []driverapi.EnvVar{{Name: "A", Value: "x\x00"}} }, isSpec},
		{"zero timeout", func(s *driverapi.RunSpec) { s.Timeout = 0 }, isSpec},
		{"empty program", func(s *driverapi.RunSpec) { s.Program = "" }, isSpec},
	} {
		spec := good
		c.mut(&spec)
		_, err := d.Run(ctx, spec, driverapi.Streams{})
		if !c.want(err) {
			t.Errorf("%s: got %v", c.name, err)
		}
	}
	// Controls: the untouched spec runs, and so does one in the canonical
	// subdirectory.
	if exit, err := d.Run(ctx, good, driverapi.Streams{}); err != nil || exit.ExitCode != 0 {
		t.Fatalf("control: %v %+v", err, exit)
	}
	inSub := good
	inSub.Cwd = sub
	if exit, err := d.Run(ctx, inSub, driverapi.Streams{}); err != nil || exit.ExitCode != 0 {
		t.Fatalf("control in %s: %v %+v", sub, err, exit)
	}
	// A program that does not exist is found missing inside the sandbox
	// (the driver cannot see its view), and reported as the program's
	// error, not as the command's exit status (TestProgramNotRun has the
	// other ways a program cannot run).
	spec := good
	spec.Program = "/nonexistent"
	var errb bytes.Buffer
	exit, err := d.Run(ctx, spec, driverapi.Streams{Stderr: &errb})
	var ise *driverapi.InvalidSpecError
	if !errors.As(err, &ise) || ise.Field != "program" || !strings.Contains(ise.Reason, "/nonexistent") || errb.Len() != 0 {
		t.Fatalf("missing program: %v %+v %q", err, exit, errb.String())
	}
}

func TestCapabilitiesReport(t *testing.T) {
	d := testDriver(t, options{})
	caps, err := d.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if caps.Backend != backend || caps.ProtocolVersion != driverapi.ProtocolVersion || caps.Details["bwrap_version"] == "" {
		t.Fatalf("%+v", caps)
	}
	t.Logf("features %v; landlock ABI %d; seccomp %v; cgroup %s; unavailable %+v", caps.Features, caps.LandlockABI, caps.Seccomp, caps.CgroupMode, caps.Unavailable)
	if int(caps.LandlockABI) != landlockABI() || caps.Seccomp != seccompAvailable() {
		t.Fatalf("landlock %d / seccomp %v reported, sandbox-init enforces %d / %v", caps.LandlockABI, caps.Seccomp, landlockABI(), seccompAvailable())
	}
	// Every known feature is either claimed or explained, never both.
	for _, f := range driverapi.KnownFeatures() {
		if caps.Has(f) == hasUnavailable(caps, f) {
			t.Errorf("%s: claimed=%v unavailable=%v", f, caps.Has(f), hasUnavailable(caps, f))
		}
	}
	// network_via_proxy rests on the seccomp socket gate and Landlock TCP
	// rules: claimed exactly when both are there.
	if caps.Has(driverapi.FeatureNetworkViaProxy) != (caps.Seccomp && caps.LandlockABI >= 4) {
		t.Errorf("network_via_proxy claimed=%v with seccomp %v, Landlock ABI %d", caps.Has(driverapi.FeatureNetworkViaProxy), caps.Seccomp, caps.LandlockABI)
	}
	if os.Geteuid() == 0 {
		// Root on a host with writable cgroups gets limits.
		if caps.CgroupMode == "none" {
			t.Logf("root without usable cgroups: %+v", caps.Unavailable)
		}
	} else if caps.CgroupMode == "v1" {
		t.Errorf("uid %d cannot write cgroup v1, yet mode v1 was reported", os.Geteuid())
	}
	// cgroup = none: limits reported unavailable, sandbox still there.
	dn := testDriver(t, options{Cgroup: cgroupNone})
	cn, _ := dn.Capabilities(context.Background())
	// Without cgroups the pid limit stays only where RLIMIT_NPROC counts
	// the sandbox alone (an unprivileged driver, its own user namespace).
	if cn.CgroupMode != "none" || cn.Has(driverapi.FeatureMemoryLimit) || cn.Has(driverapi.FeaturePidLimit) != dn.probe().nprocPerSandbox() ||
		!hasUnavailable(cn, driverapi.FeatureMemoryLimit) || !cn.Has(driverapi.FeatureFSReadIsolation) {
		t.Fatalf("cgroup none: %+v", cn)
	}
	// A missing bwrap: nothing claimed, everything explained.
	dm, err := newDriver(config{Options: options{BwrapPath: "/nonexistent/bwrap"}, InitBinary: driverBin})
	if err != nil {
		t.Fatal(err)
	}
	cm, _ := dm.Capabilities(context.Background())
	if len(cm.Features) != 0 || len(cm.Unavailable) != len(driverapi.KnownFeatures()) {
		t.Fatalf("missing bwrap: %+v", cm)
	}
	ws := newWorkspace(t)
	if _, err := dm.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws}); err == nil {
		t.Fatal("profile from a driver without bwrap")
	}
}
