//go:build linux

package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
	"github.com/aleph-sandbox/aleph-sandbox/internal/gitplant"
)

// hostShDriver runs "sh -c SCRIPT" on the host, in the command's cwd: a
// stand-in for a sandboxed command that writes in its workspace (what a
// sandbox allows there, this does too). Anything else goes to the fake.
type hostShDriver struct{ *drivertest.FakeDriver }

func (d hostShDriver) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	if spec.Program != "sh" {
		return d.FakeDriver.Run(ctx, spec, streams)
	}
	c := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c"}, spec.Args...)...)
	c.Dir, c.Stdout, c.Stderr = spec.Cwd, streams.Stdout, streams.Stderr
	err := c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return driverapi.Exit{ExitCode: int32(ee.ExitCode())}, nil
	}
	return driverapi.Exit{}, err
}

func requireGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: the planted repositories are tested against the host's git")
	}
}

// TestGitQuarantinePlantedRepositories: a repository a command plants in
// its workspace (bare at the root, bare in a subdirectory shadowing the
// workspace's real .git, a nested .git, a gitfile naming one elsewhere, one
// hidden in a directory it made unreadable, a hook or config it adds to a
// repository the host made) makes the host's git run a program; after the
// command it no longer does, the result and the audit record say what was
// renamed, and the workspace's real .git keeps working. The control: the
// same repositories made by the host before the command do run the
// program (the attack is real) and are left alone, as is a host
// repository whose refs and objects the command changed.
func TestGitQuarantinePlantedRepositories(t *testing.T) {
	requireGit(t)
	cfg := testConfig(t)
	d := hostShDriver{&drivertest.FakeDriver{}}
	sink := &memSink{}
	sb, err := NewWorkspaceSandbox(cfg, WithDriver(drivertest.Connect(t, d)), WithAuditSink(sink))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	outside := t.TempDir() // stands for a write grant
	markers := t.TempDir()

	type scenario struct {
		name     string
		gitDir   string // where the host's git runs, workspace-relative
		plant    func(ws, marker string) string
		wantWays int // markers a host-made copy fires
		renamed  string
		noGit    bool // the workspace has no .git of its own
	}
	scenarios := []scenario{
		{"bare at the root", ".", func(ws, m string) string { return gitplant.Script(".", true, m) }, 2, "HEAD -> HEAD.aleph-quarantined", true},
		{"bare in src shadowing the real .git", "src", func(ws, m string) string { return gitplant.Script("src", true, m) }, 2, "src/HEAD -> src/HEAD.aleph-quarantined", false},
		{"nested .git", "sub", func(ws, m string) string { return "mkdir -p sub && " + gitplant.Script("sub/.git", false, m) }, 3, "sub/.git/HEAD -> sub/.git/HEAD.aleph-quarantined", false},
		{"gitfile naming a repository outside", "gf", func(ws, m string) string {
			g := filepath.Join(outside, "g-"+filepath.Base(m))
			return gitplant.Script(g, false, m) + " && mkdir -p gf && echo 'gitdir: " + g + "' > gf/.git"
		}, 3, "gf/.git -> gf/.git.aleph-quarantined", false},
		{"bare in a directory made unreadable", "hid/r", func(ws, m string) string {
			return gitplant.Script("hid/r", true, m) + " && chmod 0100 hid"
		}, 2, "hid/r/HEAD -> hid/r/HEAD.aleph-quarantined", false},
	}
	for i, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			session := fmt.Sprintf("s%d", i)
			ws, err := sb.WorkspacePath(session)
			if err != nil {
				t.Fatal(err)
			}
			// The workspace has a real repository of the host's, which
			// must keep working.
			if !sc.noGit {
				if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
					t.Fatalf("git init: %v %s", err, out)
				}
			}
			t.Cleanup(func() { _ = os.Chmod(filepath.Join(ws, "hid"), 0o700) })

			// Control first: made by the host, the same repository runs
			// the program, and a command that does not touch it leaves
			// it alone.
			ctl := filepath.Join(t.TempDir(), "ctl")
			if err := os.MkdirAll(ctl, 0o700); err != nil {
				t.Fatal(err)
			}
			if !sc.noGit {
				if out, err := exec.Command("git", "init", "-q", ctl).CombinedOutput(); err != nil {
					t.Fatalf("git init: %v %s", err, out)
				}
			}
			cm := filepath.Join(markers, fmt.Sprintf("ctl%d", i))
			hp := exec.Command("/bin/sh", "-c", sc.plant(ctl, cm))
			hp.Dir = ctl
			if out, err := hp.CombinedOutput(); err != nil {
				t.Fatalf("host plant: %v %s", err, out)
			}
			_ = os.Chmod(filepath.Join(ctl, "hid"), 0o700)
			if got := gitplant.Fires(t, filepath.Join(ctl, sc.gitDir), cm); len(got) < sc.wantWays {
				t.Fatalf("control: the host-made repository ran %v, want %d ways: the attack is not shown", got, sc.wantWays)
			}

			m := filepath.Join(markers, fmt.Sprintf("cmd%d", i))
			out, err := sb.Execute(context.Background(), Command{SessionID: session, Program: "sh", Args: []string{sc.plant(ws, m)}})
			if err != nil || out.Exit.ExitCode != 0 {
				t.Fatalf("plant: %v %+v %s", err, out, out.Stderr)
			}
			_ = os.Chmod(filepath.Join(ws, "hid"), 0o700)
			if got := gitplant.Fires(t, filepath.Join(ws, sc.gitDir), m); len(got) > 0 {
				t.Fatalf("the host's git ran the planted program (%v)", got)
			}
			if out.GitQuarantine == nil || !slices.Contains(out.GitQuarantine.Renamed, sc.renamed) {
				t.Fatalf("result says %+v, want %q renamed", out.GitQuarantine, sc.renamed)
			}
			if rec := sink.last(t); rec.GitQuarantine == nil || !slices.Contains(rec.GitQuarantine.Renamed, sc.renamed) {
				t.Fatalf("audit record says %+v", rec.GitQuarantine)
			}
			// The real .git works for the host, untouched.
			if !sc.noGit {
				if b, err := exec.Command("git", "-C", ws, "rev-parse", "--git-dir").CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != ".git" {
					t.Fatalf("the workspace's real .git: %v %s", err, b)
				}
			}
		})
	}
}

// TestGitQuarantineHostRepositoryChanged: a command that adds a hook or
// changes the config of a repository the host made gets it neutralised;
// one that only adds refs and objects (a push into it) does not, nor does
// an empty .git file (git refuses it; the driver's placeholder for a
// missing nested .git is one).
func TestGitQuarantineHostRepositoryChanged(t *testing.T) {
	requireGit(t)
	cfg := testConfig(t)
	sink := &memSink{}
	sb, err := NewWorkspaceSandbox(cfg, WithDriver(drivertest.Connect(t, hostShDriver{&drivertest.FakeDriver{}})), WithAuditSink(sink))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	ws, err := sb.WorkspacePath("s")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"hooked.git", "configured.git", "pushed.git"} {
		if out, err := exec.Command("git", "init", "-q", "--bare", filepath.Join(ws, r)).CombinedOutput(); err != nil {
			t.Fatalf("git init: %v %s", err, out)
		}
	}
	m := filepath.Join(t.TempDir(), "m")
	script := fmt.Sprintf(`printf '#!/bin/sh\ntouch %[1]s-hook\n' > hooked.git/hooks/post-update && chmod +x hooked.git/hooks/post-update &&
printf '[alias]\n\tpwn = "!touch %[1]s-alias"\n' >> configured.git/config &&
echo 0123456789012345678901234567890123456789 > pushed.git/refs/heads/topic && mkdir -p pushed.git/objects/ab &&
mkdir e && : > e/.git`, m)
	out, err := sb.Execute(context.Background(), Command{SessionID: "s", Program: "sh", Args: []string{script}})
	if err != nil || out.Exit.ExitCode != 0 {
		t.Fatalf("command: %v %+v", err, out)
	}
	want := []string{"configured.git/HEAD -> configured.git/HEAD.aleph-quarantined", "hooked.git/HEAD -> hooked.git/HEAD.aleph-quarantined"}
	if out.GitQuarantine == nil || strings.Join(out.GitQuarantine.Renamed, ",") != strings.Join(want, ",") {
		t.Fatalf("renamed %+v, want %q", out.GitQuarantine, want)
	}
	if got := gitplant.Fires(t, filepath.Join(ws, "configured.git"), m); len(got) > 0 {
		t.Fatalf("the changed config ran %v", got)
	}
	if b, err := exec.Command("git", "-C", filepath.Join(ws, "pushed.git"), "rev-parse", "--is-bare-repository").CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != "true" {
		t.Fatalf("the repository with new refs only was neutralised: %v %s", err, b)
	}
	// A command that plants nothing reports nothing.
	out, err = sb.Execute(context.Background(), Command{SessionID: "s", Program: "sh", Args: []string{"echo ok > f"}})
	if err != nil || out.GitQuarantine != nil {
		t.Fatalf("a harmless command: %v %+v", err, out.GitQuarantine)
	}
}

// TestGitQuarantineBoundsSaySo: a walk cut short by its bounds (entries,
// depth) says so in Incomplete, and one within them does not (control).
func TestGitQuarantineBoundsSaySo(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "a", "b", "c", "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprint(i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mark := markGitScan(root)
	lim := defaultGitScanLimits()
	if q := quarantineGitAfter(context.Background(), root, mark, nil, lim); q == nil || q.Incomplete != "" || q.Dirs != 5 {
		t.Fatalf("control: %+v", q)
	}
	lim.maxEntries = 5
	if q := quarantineGitAfter(context.Background(), root, mark, nil, lim); !strings.Contains(q.Incomplete, "more than 5 entries") {
		t.Fatalf("entries bound: %+v", q)
	}
	lim = defaultGitScanLimits()
	lim.maxDepth = 2
	if q := quarantineGitAfter(context.Background(), root, mark, nil, lim); !strings.Contains(q.Incomplete, "deeper than 2 levels") {
		t.Fatalf("depth bound: %+v", q)
	}
}

// TestGitQuarantineAllowLeavesRepositories: [sandbox.protected]
// planted_git = "allow" turns the search off (a planted bare repository
// keeps its HEAD and the result says nothing), while the default
// configuration of the same test quarantines it: the control that the
// setting, not the scenario, makes the difference.
func TestGitQuarantineAllowLeavesRepositories(t *testing.T) {
	for _, tc := range []struct {
		setting  string
		wantHEAD bool
	}{{"", false}, {PlantedGitQuarantine, false}, {PlantedGitAllow, true}} {
		t.Run("planted_git="+tc.setting, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Sandbox.Protected.PlantedGit = tc.setting
			sb, err := NewWorkspaceSandbox(cfg, WithDriver(drivertest.Connect(t, hostShDriver{&drivertest.FakeDriver{}})))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sb.Close() })
			ws, err := sb.WorkspacePath("s")
			if err != nil {
				t.Fatal(err)
			}
			out, err := sb.Execute(context.Background(), Command{
				SessionID: "s", Program: "sh", Args: []string{gitplant.Script("r", true, filepath.Join(t.TempDir(), "m"))},
			})
			if err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(filepath.Join(ws, "r", "HEAD"))
			if gotHEAD := statErr == nil; gotHEAD != tc.wantHEAD {
				t.Errorf("r/HEAD present = %v, want %v (quarantine %+v)", gotHEAD, tc.wantHEAD, out.GitQuarantine)
			}
			if tc.wantHEAD != out.GitQuarantine.Empty() {
				t.Errorf("the result's GitQuarantine = %+v, want it empty only when allowed", out.GitQuarantine)
			}
		})
	}
}

// TestGitQuarantineAcrossCommands: a repository planted over two commands
// of a session (HEAD and config by the first, when the directory is not
// yet git-shaped; objects and refs by the second, made anew or renamed
// into place so their birth times are old) is neutralised all the same:
// its HEAD goes when it appears. The controls: the same steps made by the
// host give a repository that runs the program (the attack is real), and
// a file named HEAD that no git would accept is left alone.
func TestGitQuarantineAcrossCommands(t *testing.T) {
	requireGit(t)
	cfg := testConfig(t)
	sb, err := NewWorkspaceSandbox(cfg, WithDriver(drivertest.Connect(t, hostShDriver{&drivertest.FakeDriver{}})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	markers := t.TempDir()
	for i, tc := range []struct{ name, first, second string }{
		{"objects and refs made by the second", "rm -r d/objects d/refs", "mkdir -p d/objects d/refs/heads"},
		{"objects and refs renamed into place by the second", "mv d/objects d/o && mv d/refs d/r", "mv d/o d/objects && mv d/r d/refs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := filepath.Join(markers, fmt.Sprintf("m%d", i))
			first := gitplant.Script("d", true, m) + " && " + tc.first
			// Control: the host making the same two steps plants a
			// repository that runs the program.
			ctl := t.TempDir()
			for _, step := range []string{first, tc.second} {
				c := exec.Command("/bin/sh", "-c", step)
				c.Dir = ctl
				if out, err := c.CombinedOutput(); err != nil {
					t.Fatalf("host step: %v %s", err, out)
				}
			}
			if got := gitplant.Fires(t, filepath.Join(ctl, "d"), m); len(got) == 0 {
				t.Fatal("control: the two steps made by the host plant no repository that runs anything: the attack is not shown")
			}
			session := fmt.Sprintf("across%d", i)
			ws, err := sb.WorkspacePath(session)
			if err != nil {
				t.Fatal(err)
			}
			var renamed []string
			for _, step := range []string{first, tc.second} {
				out, err := sb.Execute(context.Background(), Command{SessionID: session, Program: "sh", Args: []string{step}})
				if err != nil || out.Exit.ExitCode != 0 {
					t.Fatalf("step %q: %v %+v %s", step, err, out, out.Stderr)
				}
				if out.GitQuarantine != nil {
					renamed = append(renamed, out.GitQuarantine.Renamed...)
				}
			}
			if got := gitplant.Fires(t, filepath.Join(ws, "d"), m); len(got) > 0 {
				t.Fatalf("the host's git ran the program planted over two commands (%v)", got)
			}
			if !slices.Contains(renamed, "d/HEAD -> d/HEAD.aleph-quarantined") {
				t.Fatalf("renamed %q, want d/HEAD", renamed)
			}
		})
	}
	t.Run("a HEAD no git accepts is left", func(t *testing.T) {
		out, err := sb.Execute(context.Background(), Command{SessionID: "notes", Program: "sh", Args: []string{"mkdir -p n && echo 'tip of the branch: see log' > n/HEAD"}})
		if err != nil || out.Exit.ExitCode != 0 {
			t.Fatalf("%v %+v", err, out)
		}
		if out.GitQuarantine != nil {
			t.Fatalf("an ordinary file named HEAD was renamed: %+v", out.GitQuarantine)
		}
	})
}

func TestLooksLikeHeadRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"ref: refs/heads/main\n", true},
		{"ref:refs/heads/main", true},
		{"0123456789abcdef0123456789abcdef01234567\n", true},
		{"0123456789abcdef0123456789abcdef0123456", false}, // 39 digits
		{"0123456789ABCDEF0123456789abcdef01234567", true}, // git's parser takes either case
		{"0123456789abcdeg0123456789abcdef01234567", false},
		{"", false},
		{"refs/heads/main", false},
		{"tip of the branch", false},
	} {
		if got := looksLikeHeadRef([]byte(tc.in)); got != tc.want {
			t.Errorf("looksLikeHeadRef(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
