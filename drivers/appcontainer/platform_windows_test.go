//go:build windows

package appcontainer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/registry"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// underWine reports whether the tests run under Wine, whose Job Objects do
// not enforce every limit.
func underWine() bool {
	k, err := registry.OpenKey(registry.LOCAL_MACHINE, `Software\Wine`, registry.QUERY_VALUE)
	if err != nil {
		return false
	}
	k.Close()
	return true
}

// tempDir is t.TempDir without failing the test when removal fails
// (Wine cannot delete some directories Go creates).
func tempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "aleph-ac-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// TestMain lets the test binary be its own child: ALEPH_TEST_CHILD picks
// what it does. These tests run the real Win32 plumbing (job, pipes,
// process creation); isolation itself is the conformance suite's job.
func TestMain(m *testing.M) {
	switch os.Getenv("ALEPH_TEST_CHILD") {
	case "":
		os.Exit(m.Run())
	case "args":
		_ = json.NewEncoder(os.Stdout).Encode(os.Args[1:])
	case "cat":
		_, _ = io.Copy(os.Stdout, os.Stdin)
	case "exit":
		fmt.Fprint(os.Stderr, "bye")
		os.Exit(3)
	case "sleep":
		time.Sleep(time.Minute)
	case "spawn":
		exe, _ := os.Executable()
		c := exec.Command(exe)
		c.Env = []string{"ALEPH_TEST_CHILD=exit", "SystemRoot=" + os.Getenv("SystemRoot")}
		if err := c.Start(); err != nil {
			fmt.Print("spawn-denied")
		} else {
			_ = c.Wait()
			fmt.Print("spawn-ok")
		}
	}
	os.Exit(0)
}

func childLaunch(t *testing.T, mode string, spawn bool, args ...string) Launch {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ws := tempDir(t)
	p, err := BuildPlan(t.Context(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{
		SpawnSubprocess: spawn, Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}}, Options{MaxProcesses: 8}, osFS{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := CommandLine(exe, args)
	if err != nil {
		t.Fatal(err)
	}
	env, _ := EnvBlock([]driverapi.EnvVar{{Name: "ALEPH_TEST_CHILD", Value: mode}, {Name: "SystemRoot", Value: os.Getenv("SystemRoot")}})
	return Launch{Plan: p, Program: exe, CommandLine: cl, Env: env, Cwd: ws, Timeout: time.Minute, MaxOutputBytes: 1 << 20}
}

func runJobTier(t *testing.T, l Launch) (driverapi.Exit, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	exit, err := osPlatform().Launch(t.Context(), TierJobObject, l, driverapi.Streams{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	return exit, out.String(), errb.String()
}

func TestJobTierArgvRoundTrip(t *testing.T) {
	exit, out, _ := runJobTier(t, childLaunch(t, "args", false, nastyArgs...))
	var got []string
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("exit %+v, output %q: %v", exit, out, err)
	}
	if strings.Join(got, "\x00") != strings.Join(nastyArgs, "\x00") {
		t.Errorf("argv through CreateProcess:\n got %q\nwant %q", got, nastyArgs)
	}
}

func TestJobTierStdinExitStderr(t *testing.T) {
	l := childLaunch(t, "cat", false)
	l.Stdin = bytes.Repeat([]byte("0123456789"), 30000)
	exit, out, _ := runJobTier(t, l)
	if out != string(l.Stdin) || exit.ExitCode != 0 {
		t.Errorf("stdin: %d bytes back, exit %d", len(out), exit.ExitCode)
	}
	exit, _, errs := runJobTier(t, childLaunch(t, "exit", false))
	if exit.ExitCode != 3 || errs != "bye" {
		t.Errorf("exit %d stderr %q", exit.ExitCode, errs)
	}
}

func TestJobTierTimeout(t *testing.T) {
	l := childLaunch(t, "sleep", false)
	l.Timeout = 500 * time.Millisecond
	exit, _, _ := runJobTier(t, l)
	if !exit.TimedOut || exit.ExitCode != 137 {
		t.Errorf("timeout: %+v", exit)
	}
}

func TestJobTierProcessLimit(t *testing.T) {
	if underWine() {
		t.Skip("Wine does not enforce a Job Object's active-process limit")
	}
	_, out, _ := runJobTier(t, childLaunch(t, "spawn", false))
	if out != "spawn-denied" {
		t.Errorf("spawn_subprocess=false: child said %q", out)
	}
	_, out, _ = runJobTier(t, childLaunch(t, "spawn", true))
	if out != "spawn-ok" {
		t.Errorf("spawn_subprocess=true: child said %q", out)
	}
}

// TestProbesReport only logs: which tiers work depends on the host.
func TestProbesReport(t *testing.T) {
	pf := osPlatform()
	for _, tier := range Tiers() {
		t.Logf("probe %s: %v", tier, pf.Probe(t.Context(), tier))
	}
	if err := pf.Probe(t.Context(), TierJobObject); err != nil {
		t.Errorf("Job Objects must work on any Windows: %v", err)
	}
}

func TestDriverChainOnThisHost(t *testing.T) {
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	hc, _ := d.Capabilities(t.Context())
	t.Logf("capabilities: tier=%s features=%v probe_failures=%s", hc.Details["tier"], hc.Features, hc.Details["probe_failures"])
	if hc.Details["tier"] == "" {
		if underWine() {
			t.Skip("Wine has no AppContainers, and the default min_tier uses nothing weaker")
		}
		t.Fatalf("no AppContainer on this Windows host: %s", hc.Details["probe_failures"])
	}
	exe, _ := os.Executable()
	ws := tempDir(t)
	prof, err := d.ProfileFor(t.Context(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws,
		Capabilities: driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	exit, err := d.Run(t.Context(), driverapi.RunSpec{Program: exe, Args: []string{"a b"}, Cwd: ws, Profile: prof,
		Env:     []driverapi.EnvVar{{Name: "ALEPH_TEST_CHILD", Value: "args"}, {Name: "SystemRoot", Value: os.Getenv("SystemRoot")}},
		Timeout: time.Minute, MaxOutputBytes: 1 << 20}, driverapi.Streams{Stdout: &out})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("ran in tier %s; fallback: %s", exit.Details["tier"], exit.Details["tier_fallback_reason"])
	if strings.TrimSpace(out.String()) != `["a b"]` {
		t.Errorf("output %q exit %+v", out.String(), exit)
	}
	for _, d := range driverapi.DefaultProtectedEntries() {
		if _, err := os.Stat(filepath.Join(ws, d)); err != nil {
			t.Errorf("protected stub %s missing after a %s run: %v", d, exit.Details["tier"], err)
		}
	}
}

// TestACLApplyAndRevoke applies the planned ACEs for a made-up
// AppContainer SID to a real directory tree, reads the DACL back, and
// revokes them.
func TestACLApplyAndRevoke(t *testing.T) {
	if underWine() {
		t.Skip("Wine accepts file DACLs but does not store them")
	}
	ws := tempDir(t)
	if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	sid, err := windows.StringToSid("S-1-15-2-1111-2222-3333-4444-5555-6666-7777")
	if err != nil {
		t.Fatal(err)
	}
	p, err := BuildPlan(t.Context(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws}, Options{}, osFS{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := PlanSetup(TierAppContainer, p, "", func(path string) bool { fi, _ := osFS{}.Lstat(path); return fi.Exists })
	if len(s.Stubs) != 3 {
		t.Fatalf("stubs %v", s.Stubs)
	}
	for _, stub := range s.Stubs {
		if err := os.Mkdir(stub, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var cleanups []func()
	pf := &winPlatform{labelRefs: map[string]int{}}
	if err := pf.applySetup(s, sid, &cleanups); err != nil {
		t.Fatalf("applySetup: %v", err)
	}
	sddl := func(path string) string {
		sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
		if err != nil {
			t.Fatal(err)
		}
		return sd.String()
	}
	ws1, git1 := sddl(ws), sddl(filepath.Join(ws, ".git"))
	t.Logf("workspace: %s\n.git: %s", ws1, git1)
	if !strings.Contains(ws1, sid.String()) || !strings.Contains(git1, "(D;") || !strings.Contains(git1, sid.String()) {
		t.Errorf("ACEs not applied:\nworkspace %s\n.git %s", ws1, git1)
	}
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	if ws2, git2 := sddl(ws), sddl(filepath.Join(ws, ".git")); strings.Contains(ws2, sid.String()) || strings.Contains(git2, sid.String()) {
		t.Errorf("ACEs not revoked:\nworkspace %s\n.git %s", ws2, git2)
	}
}
