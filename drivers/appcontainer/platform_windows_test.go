//go:build windows

package appcontainer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	// A driver run in this binary starts this binary as its placeholder
	// janitor, as the driver binary does.
	if len(os.Args) > 1 && os.Args[1] == JanitorCommand {
		os.Exit(JanitorMain(os.Args[2:]))
	}
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
	case "placeholders":
		// Run in the sandbox with the workspace as cwd: each missing
		// protected entry must be there (a placeholder) and unchangeable.
		for _, name := range os.Args[1:] {
			if _, err := os.Stat(name); err == nil {
				fmt.Println("present", name)
			}
			for op, f := range map[string]func() error{
				"remove": func() error { return os.Remove(name) },
				"rename": func() error { return os.Rename(name, name+"-moved") },
				"mkdir":  func() error { return os.Mkdir(filepath.Join(name, "x"), 0o755) },
				"write":  func() error { return os.WriteFile(filepath.Join(name, "f"), []byte("x"), 0o644) },
			} {
				if f() == nil {
					fmt.Println("DONE", op, name)
				}
			}
		}
		if os.WriteFile("ok.txt", []byte("ok"), 0o644) == nil {
			fmt.Println("wrote ok.txt")
		}
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
	exit, err := osPlatform(tempDir(t)).Launch(t.Context(), TierJobObject, l, driverapi.Streams{Stdout: &out, Stderr: &errb})
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
	pf := osPlatform(tempDir(t))
	for _, tier := range Tiers() {
		t.Logf("probe %s: %v", tier, pf.Probe(t.Context(), tier))
	}
	if err := pf.Probe(t.Context(), TierJobObject); err != nil {
		t.Errorf("Job Objects must work on any Windows: %v", err)
	}
}

func TestDriverChainOnThisHost(t *testing.T) {
	state := tempDir(t)
	d, err := New(Config{StateDir: state})
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
	// Nothing of the placeholders is left after the command.
	for _, d := range driverapi.DefaultProtectedEntries() {
		if _, err := os.Lstat(filepath.Join(ws, d)); err == nil {
			t.Errorf("placeholder %s left after a %s run", d, exit.Details["tier"])
		}
	}
	// While a command runs, the missing entries are placeholders it can
	// neither remove, rename nor fill, beside a workspace write that works.
	out.Reset()
	names := []string{".codex", ".envrc"}
	exit, err = d.Run(t.Context(), driverapi.RunSpec{Program: exe, Args: names, Cwd: ws, Profile: prof,
		Env:     []driverapi.EnvVar{{Name: "ALEPH_TEST_CHILD", Value: "placeholders"}, {Name: "SystemRoot", Value: os.Getenv("SystemRoot")}},
		Timeout: time.Minute, MaxOutputBytes: 1 << 20}, driverapi.Streams{Stdout: &out})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	got := out.String()
	t.Logf("in the sandbox: %s", got)
	if !strings.Contains(got, "wrote ok.txt") {
		t.Fatalf("the workspace write failed (positive control): %q %+v", got, exit)
	}
	for _, n := range names {
		if !strings.Contains(got, "present "+n) {
			t.Errorf("%s was not there during the command", n)
		}
	}
	if strings.Contains(got, "DONE") {
		t.Errorf("a placeholder was changed from the sandbox: %q", got)
	}
	for _, d := range driverapi.DefaultProtectedEntries() {
		if _, err := os.Lstat(filepath.Join(ws, d)); err == nil {
			t.Errorf("placeholder %s left after a %s run", d, exit.Details["tier"])
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "placeholders")); len(ents) != 0 {
		t.Errorf("records left: %v", ents)
	}
}

// TestPlaceholderOSSemantics checks on Windows what placeholder.go relies
// on: creation fails on a taken name; a held placeholder cannot be
// removed or renamed, even by the user; Remove answers busy while it is
// held, removes it once not, and leaves one that is not empty; its DACL
// is protected; a process's tag reads as gone once it has exited.
func TestPlaceholderOSSemantics(t *testing.T) {
	if underWine() {
		t.Skip("Wine does not store DACLs nor enforce every share mode")
	}
	w := osPlaceholders()
	dir := tempDir(t)
	p := filepath.Join(dir, ".codex")
	h, err := w.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Create(p); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second Create: %v, want fs.ErrExist", err)
	}
	if id, err := w.Identify(p); err != nil || id != h.ID() {
		t.Errorf("Identify %q %v, hold %q", id, err, h.ID())
	}
	if err := os.Remove(p); err == nil {
		t.Fatal("the user removed a held placeholder")
	}
	if err := os.Rename(p, p+"-moved"); err == nil {
		t.Fatal("the user renamed a held placeholder")
	}
	if err := w.Remove(p, h.ID(), false); !errors.Is(err, ErrPlaceholderBusy) {
		t.Errorf("Remove while held: %v, want busy", err)
	}
	sd, err := windows.GetNamedSecurityInfo(p, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	if ctl, _, err := sd.Control(); err != nil || ctl&windows.SE_DACL_PROTECTED == 0 {
		t.Errorf("placeholder DACL not protected: %s", sd)
	}
	if strings.Contains(sd.String(), ";ID") {
		t.Errorf("placeholder DACL inherits: %s", sd)
	}
	id := h.ID()
	h.Close()
	if err := w.Remove(p, id, true); err != nil {
		t.Fatalf("Remove of a fresh, unheld placeholder: %v", err)
	}
	if _, err := os.Lstat(p); err == nil {
		t.Fatal("still there after Remove")
	}
	// Not empty: left as the user's.
	h, err = w.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	// A command's DENY merged in keeps it protected.
	sid, err := windows.StringToSid("S-1-15-2-1111-2222-3333-4444-5555-6666-7777")
	if err != nil {
		t.Fatal(err)
	}
	if err := applyACE(ACE{Path: p, Trustee: TrusteeAppContainer, Deny: true, Mask: MaskDenyProtected, Inherit: true}, sid); err != nil {
		t.Fatal(err)
	}
	sd, err = windows.GetNamedSecurityInfo(p, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	if ctl, _, _ := sd.Control(); ctl&windows.SE_DACL_PROTECTED == 0 || !strings.Contains(sd.String(), sid.String()) {
		t.Errorf("after a merged DENY: %s", sd)
	}
	if err := revokeSID(p, sid); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	id = h.ID()
	h.Close()
	if err := w.Remove(p, id, false); !errors.Is(err, ErrPlaceholderChanged) {
		t.Errorf("Remove of a non-empty placeholder: %v, want changed", err)
	}
	if _, err := os.Stat(filepath.Join(p, "f")); err != nil {
		t.Error("the non-empty placeholder was removed")
	}
	if w.OwnerGone(w.Owner()) {
		t.Error("this process reads as gone")
	}
	exe, _ := os.Executable()
	c := exec.Command(exe)
	c.Env = []string{"ALEPH_TEST_CHILD=exit", "SystemRoot=" + os.Getenv("SystemRoot")}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	ph, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(c.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("%d-%d", c.Process.Pid, processStart(ph))
	windows.CloseHandle(ph)
	_ = c.Wait()
	if !w.OwnerGone(tag) {
		t.Errorf("an exited process %s reads as alive", tag)
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
	exists := func(path string) bool { fi, _ := osFS{}.Lstat(path); return fi.Exists }
	// The driver makes the missing entries exist before planning; here
	// plain directories stand in for its placeholders.
	for _, prot := range p.rootedProtected(exists) {
		if !exists(prot) {
			if err := os.Mkdir(prot, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := PlanSetup(TierAppContainer, p, "", exists)
	var cleanups []func()
	pf := osPlatform(tempDir(t)).(*winPlatform)
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

// TestACLLockExcludesOtherDriverProcesses: while one driver holds the ACL
// lock, another handle on the lock file (as another driver process has)
// cannot take it; once released it can.
func TestACLLockExcludesOtherDriverProcesses(t *testing.T) {
	state := tempDir(t)
	p := osPlatform(state).(*winPlatform)
	unlock, err := p.lockACL()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(state, "acl.lock"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	try := func() error {
		ol := new(windows.Overlapped)
		err := windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, ol)
		if err == nil {
			_ = windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, ol)
		}
		return err
	}
	if err := try(); err == nil {
		t.Error("a second driver took the ACL lock while the first held it")
	}
	unlock()
	if err := try(); err != nil {
		t.Errorf("the lock is not free after unlock: %v", err)
	}
}

// TestJanitorRemovesAKilledDriversPlaceholders: a placeholder made for a
// driver process (here a child standing in for it) is held by nobody once
// that process is killed; the janitor started with it waits for the
// process to end and removes the placeholder and its record.
func TestJanitorRemovesAKilledDriversPlaceholders(t *testing.T) {
	if underWine() {
		t.Skip("Wine does not enforce every share mode")
	}
	state, ws := tempDir(t), tempDir(t)
	exe, _ := os.Executable()
	c := exec.Command(exe)
	c.Env = []string{"ALEPH_TEST_CHILD=sleep", "SystemRoot=" + os.Getenv("SystemRoot")}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	ph, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, uint32(c.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	w := &winPlaceholders{owner: fmt.Sprintf("%d-%d", c.Process.Pid, processStart(ph))}
	windows.CloseHandle(ph)
	m := newPlaceholders(w, state)
	p := filepath.Join(ws, ".codex")
	if _, err := m.acquire([]string{p}); err != nil {
		t.Fatal(err)
	}
	// What the child's death would do to its handles.
	m.mu.Lock()
	for _, r := range m.refs {
		r.hold.Close()
	}
	m.mu.Unlock()
	if _, err := os.Lstat(p); err != nil {
		t.Fatalf("the placeholder is not there: %v", err)
	}
	_ = c.Process.Kill()
	_ = c.Wait()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := os.Lstat(p)
		ents, _ := os.ReadDir(filepath.Join(state, "placeholders"))
		if err != nil && len(ents) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the janitor did not remove the killed process's placeholder (%v) and its records (%v)", err, ents)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
