package core

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// TestPrivateHome: each session has a HOME of its own, outside its
// workspace, kept from one command to the next and removed by
// ForgetSession (read-only directories a tool left in it included).
func TestPrivateHome(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, nil)
	ctx := context.Background()
	if _, err := h.sb.Execute(ctx, Command{SessionID: "a", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	ws := h.fake.LastProfileRequest().Workspace
	home, err := h.sb.HomePath("a")
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := filepath.EvalSymlinks(filepath.Join(cfg.Sandbox.WorkspaceRoot, HomesDirName, SessionDirName("a"))); home != want {
		t.Fatalf("HOME %q, want %q", home, want)
	}
	if st, err := os.Stat(home); err != nil || !st.IsDir() || st.Mode().Perm() != 0o700 {
		t.Fatalf("HOME %v %v", st, err)
	}
	if env := envOf(h.fake.LastSpec()); env["HOME"] != home {
		t.Fatalf("child HOME %q, want %q", env["HOME"], home)
	}
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The second command of the session has the same HOME; the workspace
	// holds nothing of it.
	if _, err := h.sb.Execute(ctx, Command{SessionID: "a", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	if env := envOf(h.fake.LastSpec()); env["HOME"] != home {
		t.Fatalf("second command's HOME %q", env["HOME"])
	}
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		t.Fatalf("workspace holds %v", ents)
	}
	// Another session: another HOME.
	if _, err := h.sb.Execute(ctx, Command{SessionID: "b", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	if other := envOf(h.fake.LastSpec())["HOME"]; other == home || other == "" {
		t.Fatalf("session b's HOME %q, a's %q", other, home)
	}
	// A read-only tree, as Go's module cache leaves one.
	ro := filepath.Join(home, "go", "pkg", "mod", "m@v1")
	if err := os.MkdirAll(ro, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "f.go"), []byte("package m"), 0o444); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{ro, filepath.Dir(ro)} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	// Removed by another process (the CLI's session forget) while this
	// one remembers it: the next command gets it again, empty.
	hb, _ := h.sb.HomePath("b")
	if err := RemoveSessionHome(cfg, "b"); err != nil || isDir(hb) {
		t.Fatalf("RemoveSessionHome: %v", err)
	}
	if _, err := h.sb.Execute(ctx, Command{SessionID: "b", Program: "echo"}); err != nil || !isDir(hb) {
		t.Fatalf("after an outside removal: %v, HOME there: %v", err, isDir(hb))
	}
	h.sb.ForgetSession("a")
	if _, err := os.Lstat(home); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("HOME after ForgetSession: %v", err)
	}
	if _, err := os.Stat(ws); err != nil {
		t.Fatalf("the workspace must stay: %v", err)
	}
	// The control: b's HOME is untouched, and a comes back with an empty one.
	if hb, _ := h.sb.HomePath("b"); hb == "" {
		t.Fatal("b lost its HOME")
	} else if _, err := os.Stat(hb); err != nil {
		t.Fatalf("b's HOME: %v", err)
	}
	if _, err := h.sb.Execute(ctx, Command{SessionID: "a", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(home); err != nil || len(ents) != 0 {
		t.Fatalf("a's new HOME: %v %v", ents, err)
	}
}

func envOf(spec driverapi.RunSpec) map[string]string {
	m := map[string]string{}
	for _, e := range spec.Env {
		m[e.Name] = e.Value
	}
	return m
}

// TestPrivateHomeIsOwnState: no grant and no named workspace may reach the
// sessions' HOMEs (one session would read or write another's).
func TestPrivateHomeIsOwnState(t *testing.T) {
	cfg := testConfig(t)
	h := newHarness(t, cfg, nil, WithApprovalRequester(approveAllReq{}))
	ctx := context.Background()
	if _, err := h.sb.Execute(ctx, Command{SessionID: "a", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	homeA, _ := h.sb.HomePath("a")
	homes := filepath.Dir(homeA)
	for _, c := range []Command{
		{SessionID: "b", Program: "cat", Capabilities: driverapi.Capabilities{FSRead: []string{homeA}}},
		{SessionID: "b", Program: "cat", Capabilities: driverapi.Capabilities{FSRead: []string{homes}}},
		{SessionID: "b", Program: "cat", Capabilities: driverapi.Capabilities{FSWrite: []string{cfg.Sandbox.WorkspaceRoot}}},
		{SessionID: "b", Program: "cat", Workspace: homeA},
	} {
		_, err := h.sb.Execute(ctx, c)
		var ie *InvalidCommandError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "session homes") {
			t.Errorf("%+v: %v, want a refusal naming the sandbox's own state", c, err)
		}
	}
	// The control: a grant elsewhere is accepted, and the driver is asked
	// for it beside the HOME.
	other := t.TempDir()
	if _, err := h.sb.Execute(ctx, Command{SessionID: "b", Program: "cat", Capabilities: driverapi.Capabilities{FSWrite: []string{other}}}); err != nil {
		t.Fatal(err)
	}
	homeB, _ := h.sb.HomePath("b")
	if fw := h.fake.LastProfileRequest().Capabilities.FSWrite; !slices.Contains(fw, homeB) || len(fw) != 2 {
		t.Fatalf("fs_write %v", fw)
	}
	// The grant kept is the one asked for, not the HOME.
	for _, g := range h.sb.Grants("b").Grants {
		if g.Capabilities != nil && slices.Contains(g.Capabilities.FSWrite, homeB) {
			t.Fatalf("the HOME was kept as a grant: %+v", g)
		}
	}
}

type approveAllReq struct{}

func (approveAllReq) RequestApproval(context.Context, driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error) {
	return driverapi.ApprovalApproved, nil
}

// TestHomeWorkspace: home = "workspace" keeps the old layout: HOME is the
// workspace, no homes directory, nothing added to the profile request.
func TestHomeWorkspace(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.Session.Home = HomeWorkspace
	h := newHarness(t, cfg, nil)
	if _, err := h.sb.Execute(context.Background(), Command{SessionID: "a", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
	pr := h.fake.LastProfileRequest()
	if envOf(h.fake.LastSpec())["HOME"] != pr.Workspace || len(pr.Capabilities.FSWrite) != 0 {
		t.Fatalf("HOME %q, workspace %q, fs_write %v", envOf(h.fake.LastSpec())["HOME"], pr.Workspace, pr.Capabilities.FSWrite)
	}
	if _, err := os.Stat(filepath.Join(cfg.Sandbox.WorkspaceRoot, HomesDirName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("homes directory made: %v", err)
	}
}

// TestPrivateHomeRefusesOwnState: a configuration that would put the
// audit log in a session's HOME is refused when the HOME is made.
func TestPrivateHomeRefusesOwnState(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.AuditLog = filepath.Join(cfg.Sandbox.WorkspaceRoot, HomesDirName, SessionDirName("a"), "audit.jsonl")
	if err := os.MkdirAll(filepath.Dir(cfg.Sandbox.AuditLog), 0o700); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, cfg, nil)
	_, err := h.sb.Execute(context.Background(), Command{SessionID: "a", Program: "echo"})
	var we *WorkspaceError
	if !errors.As(err, &we) || !strings.Contains(err.Error(), "own state") {
		t.Fatalf("want a WorkspaceError, got %v", err)
	}
	if h.fake.Runs() != 0 {
		t.Fatal("the command ran")
	}
	// The control: another session's HOME is fine.
	if _, err := h.sb.Execute(context.Background(), Command{SessionID: "b", Program: "echo"}); err != nil {
		t.Fatal(err)
	}
}

// TestConfiguredBaseline: sandbox.session.baseline is what sessions get
// without approval, unless the host sets one (WithBaseline).
func TestConfiguredBaseline(t *testing.T) {
	spawn := Command{SessionID: "s", Program: "sh", Capabilities: driverapi.Capabilities{SpawnSubprocess: true}}
	cfg := testConfig(t)
	// strict (the default): no approver, so the elevation is denied.
	h := newHarness(t, cfg, nil)
	_, err := h.sb.Execute(context.Background(), spawn)
	wantDenied(t, err, ReasonApprovalDenied)
	cfg.Sandbox.Session.Baseline = "spawn"
	h = newHarness(t, cfg, nil)
	if _, err := h.sb.Execute(context.Background(), spawn); err != nil {
		t.Fatalf("spawn baseline: %v", err)
	}
	if g := h.sb.Grants("s"); !g.Baseline.SpawnSubprocess || len(g.Grants) != 0 {
		t.Fatalf("grants %+v", g)
	}
	// The host's baseline wins over the file's.
	h = newHarness(t, cfg, nil, WithBaseline(driverapi.Capabilities{}))
	_, err = h.sb.Execute(context.Background(), spawn)
	wantDenied(t, err, ReasonApprovalDenied)
}

func TestSessionConfigLoad(t *testing.T) {
	cfg, err := loadConfig(writeTOML(t, "[sandbox.session]\nbaseline = \"spawn\"\nhome = \"workspace\"\n"), nil)
	if err != nil || !cfg.SessionBaseline().SpawnSubprocess || cfg.Sandbox.Session.Home != HomeWorkspace {
		t.Fatalf("%+v %v", cfg.Sandbox.Session, err)
	}
	if d := DefaultConfig().Sandbox.Session; d.Baseline != "strict" || d.Home != HomeSession {
		t.Fatalf("defaults %+v", d)
	}
	for body, key := range map[string]string{
		"[sandbox.session]\nbaseline = \"lax\"\n":  "sandbox.session.baseline",
		"[sandbox.session]\nhome = \"tmp\"\n":      "sandbox.session.home",
		"[sandbox.session]\nbaselin = \"spawn\"\n": "sandbox.session.baselin",
	} {
		_, err := loadConfig(writeTOML(t, body), nil)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Key != key {
			t.Errorf("%q: %v, want %s", body, err, key)
		}
	}
}

// TestHomeProfileField: a driver reporting Details["profile.home"] = "1"
// gets the private HOME as ProfileRequest.Home (through the gRPC plugin
// glue) and not as an fs_write path; a driver that does not report it
// gets today's fs_write path and no Home.
func TestHomeProfileField(t *testing.T) {
	caps := drivertest.FullCapabilities()
	caps.Details = map[string]string{driverapi.DetailProfileHome: "1"}
	for _, c := range []struct {
		name     string
		fake     *drivertest.FakeDriver
		asFields bool
	}{
		{"advertised", &drivertest.FakeDriver{Caps: caps}, true},
		{"not advertised", &drivertest.FakeDriver{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, testConfig(t), c.fake)
			if _, err := h.sb.Execute(context.Background(), Command{SessionID: "a", Program: "echo"}); err != nil {
				t.Fatal(err)
			}
			home, err := h.sb.HomePath("a")
			if err != nil {
				t.Fatal(err)
			}
			pr := h.fake.LastProfileRequest()
			fw := pr.Capabilities.FSWrite
			if c.asFields {
				if pr.Home != home || len(fw) != 0 {
					t.Fatalf("Home %q fs_write %v, want Home %q and no fs_write", pr.Home, fw, home)
				}
			} else if pr.Home != "" || !slices.Equal(fw, []string{home}) {
				t.Fatalf("Home %q fs_write %v, want no Home and %q among fs_write", pr.Home, fw, home)
			}
			if envOf(h.fake.LastSpec())["HOME"] != home {
				t.Fatalf("child HOME %q, want %q", envOf(h.fake.LastSpec())["HOME"], home)
			}
		})
	}
}
