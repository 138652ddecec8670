//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/ownertag"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/protectjournal"
)

// reqRun runs a shell script through d under the profile req asks for.
func reqRun(t testing.TB, d driverapi.Driver, req driverapi.ProfileRequest, env []driverapi.EnvVar, script string) drvResult {
	t.Helper()
	ctx := context.Background()
	req.Capabilities.SpawnSubprocess = true
	if req.Cwd == "" {
		req.Cwd = req.Workspace
	}
	prof, err := d.ProfileFor(ctx, req)
	if err != nil {
		return drvResult{err: err}
	}
	if env == nil {
		env = []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "HOME", Value: req.Workspace}}
	}
	var out, errb bytes.Buffer
	exit, err := d.Run(ctx, driverapi.RunSpec{
		Program: "/bin/sh", Args: []string{"-c", script}, Env: env, Cwd: req.Cwd, Profile: prof,
		Timeout: 60 * time.Second, MaxOutputBytes: 1 << 20, CommandID: t.Name(),
	}, driverapi.Streams{Stdout: &out, Stderr: &errb})
	return drvResult{exit: exit, stdout: out.String(), stderr: errb.String(), err: err}
}

// gitCmd runs git in dir with no user or system configuration.
func gitCmd(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com",
		"-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func needGit(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
}

// listing describes every entry under root: path, type, size and content
// digest of small files, so any created, removed or changed entry shows.
func listing(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while listed (a clean-up at work)
		}
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		line := fmt.Sprintf("%s %v %d", rel, fi.Mode(), fi.Size())
		if fi.Mode().IsRegular() && fi.Size() < 1<<16 {
			b, _ := os.ReadFile(p)
			line += " " + strconv.Quote(string(b))
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameListing(t testing.TB, what string, before, after []string) {
	t.Helper()
	if !slices.Equal(before, after) {
		t.Fatalf("%s: the tree changed\nbefore %q\nafter  %q", what, before, after)
	}
}

func mkfile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A nested repository's metadata is read-only (a written core.fsmonitor
// would run on the host's next git status); its work tree is not, and
// the directory holding it cannot be moved away to make room for a
// crafted one.
func TestNestedGitReadOnly(t *testing.T) {
	needGit(t)
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	sub := filepath.Join(ws, "a", "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	gitCmd(t, sub, "init", "-q")
	mkfile(t, filepath.Join(sub, "file"), "old\n")
	cfg, _ := os.ReadFile(filepath.Join(sub, ".git", "config"))
	req := driverapi.ProfileRequest{Workspace: ws}
	// Positive control: the command runs and writes the work tree.
	r := reqRun(t, d, req, nil, "echo new > a/sub/file && cat a/sub/.git/config >/dev/null && echo ran")
	expectOK(t, r)
	if b, _ := os.ReadFile(filepath.Join(sub, "file")); string(b) != "new\n" || r.stdout != "ran\n" {
		t.Fatalf("control: file %q, stdout %q", b, r.stdout)
	}
	for _, script := range []string{
		"printf '[core]\\n\\tfsmonitor = /bin/evil\\n' >> a/sub/.git/config",
		"echo evil > a/sub/.git/hooks/post-checkout",
		"rm -rf a/sub/.git",
		"mv a/sub/.git a/sub/g",
		"mv a/sub a/moved && mkdir -p a/sub/.git",
		"mv a a2 && mkdir -p a/sub/.git",
		"rm -rf a",
	} {
		r := reqRun(t, d, req, nil, script)
		expectFail(t, r)
	}
	if b, _ := os.ReadFile(filepath.Join(sub, ".git", "config")); !bytes.Equal(b, cfg) {
		t.Fatalf("nested .git/config changed: %q", b)
	}
	for _, p := range []string{"a/moved", "a2", "a/sub/g", "a/sub/.git/hooks/post-checkout"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("%s exists after the denied commands", p)
		}
	}
}

// A gitfile (submodule or worktree .git file) cannot be rewritten, removed
// or replaced by a directory.
func TestGitfileCannotBeReplaced(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	mkfile(t, filepath.Join(ws, ".git", "modules", "sub", "config"), "[core]\n")
	mkfile(t, filepath.Join(ws, "sub", ".git"), "gitdir: ../.git/modules/sub\n")
	req := driverapi.ProfileRequest{Workspace: ws}
	r := reqRun(t, d, req, nil, "cat sub/.git && echo ok > sub/other")
	expectOK(t, r)
	if r.stdout != "gitdir: ../.git/modules/sub\n" {
		t.Fatalf("control: %q", r.stdout)
	}
	for _, script := range []string{
		"echo 'gitdir: /tmp/evil' > sub/.git",
		"rm -f sub/.git",
		"rm -f sub/.git; mkdir sub/.git",
		"mv sub/.git sub/gitfile",
		"mv sub s2 && mkdir -p sub/.git",
		"ln -sf /tmp sub/.git",
	} {
		expectFail(t, reqRun(t, d, req, nil, script))
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "sub", ".git")); string(b) != "gitdir: ../.git/modules/sub\n" {
		t.Fatalf("gitfile changed: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(ws, "s2")); err == nil {
		t.Fatal("the submodule directory was moved")
	}
}

// addGitlink records a submodule at path in repo's index without cloning it.
func addGitlink(t testing.TB, repo, path string) {
	t.Helper()
	gitCmd(t, repo, "update-index", "--add", "--cacheinfo", "160000,"+strings.Repeat("1", 40)+","+path)
}

// An unpopulated submodule (its directory empty or missing) gets no .git:
// creating one made the host's git run a planted fsmonitor.
func TestUnpopulatedSubmoduleGitCannotBeCreated(t *testing.T) {
	needGit(t)
	d := testDriver(t, options{})
	for _, version := range []string{"2", "3", "4"} {
		t.Run("index-v"+version, func(t *testing.T) {
			ws := newWorkspace(t)
			gitCmd(t, ws, "init", "-q")
			mkfile(t, filepath.Join(ws, "README"), "x\n")
			gitCmd(t, ws, "add", "README")
			if err := os.Mkdir(filepath.Join(ws, "libs"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(ws, "libs", "empty"), 0o755); err != nil {
				t.Fatal(err)
			}
			addGitlink(t, ws, "libs/empty")
			addGitlink(t, ws, "deep/absent/mod")
			if version == "3" {
				// intent-to-add sets an extended flag: git writes v3.
				mkfile(t, filepath.Join(ws, "later"), "y\n")
				gitCmd(t, ws, "add", "-N", "later")
			} else {
				gitCmd(t, ws, "update-index", "--index-version", version)
			}
			b, _ := os.ReadFile(filepath.Join(ws, ".git", "index"))
			if len(b) < 8 || b[7] != version[0]-'0' {
				t.Fatalf("index version %v, want %s", b[4:8], version)
			}
			before := listing(t, ws)
			req := driverapi.ProfileRequest{Workspace: ws}
			// Control: the submodule's directory itself is writable.
			r := reqRun(t, d, req, nil, "touch libs/empty/x && rm libs/empty/x && echo ran")
			expectOK(t, r)
			for _, script := range []string{
				"mkdir libs/empty/.git",
				"echo 'gitdir: /tmp' > libs/empty/.git",
				"mkdir -p deep/absent/mod/.git",
				"mkdir deep",
				"rmdir libs/empty && mkdir -p libs/empty/.git",
				"mv libs l2 && mkdir -p libs/empty/.git",
			} {
				expectFail(t, reqRun(t, d, req, nil, script))
			}
			sameListing(t, "after the denied commands", before, listing(t, ws))
		})
	}
}

// The widened top-level set: an existing .vscode is read-only, a missing
// .claude cannot be created, and nothing of the protection stays behind.
func TestTopLevelSetAndNothingLeft(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	mkfile(t, filepath.Join(ws, ".vscode", "settings.json"), "{}\n")
	before := listing(t, ws)
	req := driverapi.ProfileRequest{Workspace: ws}
	// Positive control: the workspace is writable, .vscode readable.
	r := reqRun(t, d, req, nil, "cat .vscode/settings.json && echo w > written && rm written && echo ran")
	expectOK(t, r)
	if r.stdout != "{}\nran\n" {
		t.Fatalf("control: %q", r.stdout)
	}
	for _, script := range []string{
		"echo '{\"task\":1}' > .vscode/settings.json",
		"echo x > .vscode/tasks.json",
		"mkdir .claude",
		"mkdir -p .claude/commands",
		"echo '{}' > .mcp.json",
		"echo 'source evil' > .envrc",
		"ln -s /tmp .cursor",
		"touch t; mv t .idea; r=$?; rm -f t; exit $r",
		"mkdir .codex/x",
	} {
		expectFail(t, reqRun(t, d, req, nil, script))
	}
	sameListing(t, "after the commands", before, listing(t, ws))
}

// The top-level set and nested repositories are protected inside a write
// grant too.
func TestWriteGrantProtected(t *testing.T) {
	needGit(t)
	d := testDriver(t, options{})
	ws, grant := newWorkspace(t), newWorkspace(t)
	gitCmd(t, grant, "init", "-q")
	if err := os.MkdirAll(filepath.Join(grant, "vendor", "dep"), 0o755); err != nil {
		t.Fatal(err)
	}
	gitCmd(t, filepath.Join(grant, "vendor", "dep"), "init", "-q")
	before := listing(t, grant)
	req := driverapi.ProfileRequest{Workspace: ws, Capabilities: driverapi.Capabilities{FSWrite: []string{grant}}}
	r := reqRun(t, d, req, nil, "echo w > "+grant+"/f && echo w > "+grant+"/vendor/dep/f && echo ran")
	expectOK(t, r)
	for _, f := range []string{"f", "vendor/dep/f"} {
		if err := os.Remove(filepath.Join(grant, f)); err != nil {
			t.Fatalf("control: %s not written: %v", f, err)
		}
	}
	for _, script := range []string{
		"echo evil >> " + grant + "/.git/config",
		"echo evil >> " + grant + "/vendor/dep/.git/config",
		"mkdir " + grant + "/.codex",
		"echo x > " + grant + "/.envrc",
	} {
		expectFail(t, reqRun(t, d, req, nil, script))
	}
	sameListing(t, "grant after the commands", before, listing(t, grant))
}

// The protected set follows the request: an added entry is protected, a
// removed default is not.
func TestConfiguredProtectedSet(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	set := []string{".git", ".my-tool"}
	req := driverapi.ProfileRequest{Workspace: ws, Protected: set}
	expectFail(t, reqRun(t, d, req, nil, "mkdir .my-tool"))
	r := reqRun(t, d, req, nil, "mkdir .vscode && echo ran")
	expectOK(t, r)
	if fi, err := os.Stat(filepath.Join(ws, ".vscode")); err != nil || !fi.IsDir() {
		t.Fatalf("a removed default stayed protected: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(ws, ".my-tool")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("placeholder for the added entry left: %v", err)
	}
	// Control: the default request still protects .vscode.
	if err := os.Remove(filepath.Join(ws, ".vscode")); err != nil {
		t.Fatal(err)
	}
	expectFail(t, reqRun(t, d, driverapi.ProfileRequest{Workspace: ws}, nil, "mkdir .vscode"))
	var ise *driverapi.InvalidSpecError
	if _, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Workspace: ws, Cwd: ws, Protected: []string{"a/b"}}); !errors.As(err, &ise) {
		t.Fatalf("protected entry with a slash: %v", err)
	}
}

// A workspace that is not a repository is not taken for one: go build
// stamps VCS information only from a .git directory, and git, meeting no
// .git, says there is no repository.
func TestGoBuildInNonRepoWorkspace(t *testing.T) {
	goroot := "/usr/local/go"
	if _, err := os.Stat(filepath.Join(goroot, "bin", "go")); err != nil {
		t.Skip("no Go toolchain at " + goroot)
	}
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	mkfile(t, filepath.Join(ws, "go.mod"), "module example.com/hello\n\ngo 1.21\n")
	mkfile(t, filepath.Join(ws, "main.go"), "package main\n\nfunc main() { println(\"hi\") }\n")
	env := []driverapi.EnvVar{{Name: "PATH", Value: goroot + "/bin:/usr/bin:/bin"}, {Name: "HOME", Value: ws},
		{Name: "GOCACHE", Value: "/tmp/gocache"}, {Name: "GOPATH", Value: "/tmp/gopath"}, {Name: "GOTOOLCHAIN", Value: "local"},
		{Name: "CGO_ENABLED", Value: "0"}, {Name: "GOFLAGS", Value: ""}}
	req := driverapi.ProfileRequest{Workspace: ws, Capabilities: driverapi.Capabilities{FSRead: []string{goroot}}}
	r := reqRun(t, d, req, env, "go build -o hello . && ./hello && rm hello; git status 2>&1; true")
	expectOK(t, r)
	if !strings.Contains(r.stderr, "hi") {
		t.Fatalf("go build or the binary failed: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if _, err := exec.LookPath("git"); err == nil && !strings.Contains(r.stdout, "not a git repository") {
		t.Errorf("git inside took the workspace for something: %q", r.stdout)
	}
	if _, err := os.Lstat(filepath.Join(ws, ".git")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf(".git left in the workspace: %v", err)
	}
}

// A scan that cannot finish within its bounds refuses the command rather
// than running it half protected.
func TestProtectedScanBounded(t *testing.T) {
	d := testDriver(t, options{ProtectedScanMaxEntries: 50})
	ws := newWorkspace(t)
	for i := range 60 {
		mkfile(t, filepath.Join(ws, "d", strconv.Itoa(i)), "")
	}
	r := reqRun(t, d, driverapi.ProfileRequest{Workspace: ws}, nil, "true")
	var sl *scanLimitError
	if !errors.As(r.err, &sl) {
		t.Fatalf("want ScanLimitError, got %v %+v", r.err, r.exit)
	}
	// Control: the same tree within a larger bound runs.
	expectOK(t, reqRun(t, testDriver(t, options{ProtectedScanMaxEntries: 1000}), driverapi.ProfileRequest{Workspace: ws}, nil, "true"))
}

// driverJanitors lists the janitor processes of driver pid: those whose
// pipe (descriptor 3) the driver holds the other end of.
func driverJanitors(pid int) []int {
	held := map[string]bool{}
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			held[l] = true
		}
	}
	var out []int
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		c, err := strconv.Atoi(e.Name())
		if err != nil || c == pid {
			continue
		}
		cl, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if !bytes.Contains(cl, []byte(janitorCommand)) {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/fd/3"); err == nil && held[l] {
			out = append(out, c)
		}
	}
	return out
}

// killDriverMidCommand runs a sleeping command through a plugin driver in
// ws and SIGKILLs the driver (and its janitor too, with killJanitor) while
// the command runs. It returns the command cgroups that appeared.
func killDriverMidCommand(t *testing.T, ws string, killJanitor bool) []string {
	t.Helper()
	p := launchPlugin(t)
	ctx := context.Background()
	local := testDriver(t, options{})
	cgBefore := commandCgroups(local)
	prof, err := p.Driver().ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: driverapi.Capabilities{SpawnSubprocess: true}, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	marker := uniqueMarker()
	done := make(chan error, 1)
	go func() {
		_, err := p.Driver().Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", "echo started; sleep " + marker}, Cwd: ws,
			Profile: prof, Timeout: time.Minute, MaxOutputBytes: 1024, Env: pathEnv()}, driverapi.Streams{})
		done <- err
	}()
	deadline := time.Now().Add(15 * time.Second)
	for len(hostMarkerProcs(t, marker)) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(hostMarkerProcs(t, marker)) == 0 {
		t.Fatal("control: the command never ran")
	}
	// While it runs, its placeholders are on the host (the price of
	// blocking a name that does not exist).
	if _, err := os.Lstat(filepath.Join(ws, ".git")); err != nil {
		t.Fatalf("control: no placeholder while the command runs: %v", err)
	}
	var newCg []string
	// Only the plugin's own: other test processes may run commands now.
	own := cgroup.Prefix + strconv.Itoa(p.Pid()) + "-"
	for dir := range commandCgroups(local) {
		if !cgBefore[dir] && strings.HasPrefix(filepath.Base(dir), own) {
			newCg = append(newCg, dir)
		}
	}
	if os.Geteuid() == 0 && len(newCg) == 0 && local.probe().cg.Mode() != cgroup.None {
		t.Error("control: the command had no cgroup to leave behind")
	}
	if killJanitor {
		js := driverJanitors(p.Pid())
		if len(js) == 0 {
			t.Fatal("control: the driver started no janitor")
		}
		for _, j := range js {
			_ = syscall.Kill(j, syscall.SIGKILL)
		}
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitNoMarker(t, marker)
	<-done
	return newCg
}

// A killed driver's janitor removes its placeholders without waiting for
// another driver to start.
func TestDriverKillJanitorCleansUp(t *testing.T) {
	ws := newWorkspace(t)
	mkfile(t, filepath.Join(ws, "src", "main.c"), "int main(){}\n")
	before := listing(t, ws)
	newCg := killDriverMidCommand(t, ws, false)
	// Not a speed check: the janitor waits for the sandbox to be gone,
	// which takes a moment after the driver's death.
	deadline := time.Now().Add(20 * time.Second)
	for !slices.Equal(before, listing(t, ws)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	sameListing(t, "after the driver was killed", before, listing(t, ws))
	testDriver(t, options{}).Prepare() // removes the dead driver's cgroup
	for _, dir := range newCg {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s of the killed driver survived the next start: %v", dir, err)
			_ = os.Remove(dir)
		}
	}
}

// What a killed driver left, its janitor killed too, is removed at the
// next driver start: the placeholders of its running command (found by
// their records) and its command cgroup.
func TestDriverKillLeavesNothingAfterNextStart(t *testing.T) {
	ws := newWorkspace(t)
	mkfile(t, filepath.Join(ws, "src", "main.c"), "int main(){}\n")
	before := listing(t, ws)
	newCg := killDriverMidCommand(t, ws, true)
	if slices.Equal(before, listing(t, ws)) {
		// The records are shared by every driver of this user: a driver
		// started meanwhile by another process may have recovered first.
		t.Log("the placeholders were already recovered by another driver start")
	}
	next := testDriver(t, options{})
	next.Prepare()
	for _, dir := range newCg {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s of the killed driver survived the next start: %v", dir, err)
			_ = os.Remove(dir)
		}
	}
	sameListing(t, "after the driver was killed and a new one started", before, listing(t, ws))
}

// Placeholder recovery never takes a user's file for one: only recorded
// inodes, or an intent of a dead driver naming an empty read-only file.
func TestPlaceholderRecoveryOnlyOwnFiles(t *testing.T) {
	state := t.TempDir()
	d, err := newDriver(config{InitBinary: driverBin, DriverBinary: driverBin, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	dir, err := d.journal.Dir()
	if err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace(t)
	user := filepath.Join(ws, ".envrc")
	mkfile(t, user, "")
	orphan := filepath.Join(ws, ".claude")
	orphan2 := filepath.Join(ws, ".hg")
	for _, o := range []string{orphan, orphan2} {
		mkfile(t, o, "")
		if err := os.Chmod(o, protectjournal.PlaceholderPerm); err != nil {
			t.Fatal(err)
		}
	}
	// Named by the same dead intent, but not empty: a user's file.
	written := filepath.Join(ws, ".svn")
	mkfile(t, written, "mine")
	if err := os.Chmod(written, protectjournal.PlaceholderPerm); err != nil {
		t.Fatal(err)
	}
	// An intent of a process that is gone (our pid, another start time),
	// for all the placeholders of one command.
	st, _ := ownertag.StartTime(os.Getpid())
	dead := fmt.Sprintf("intent-%d-%d-1", os.Getpid(), st+1)
	// Two more unrecorded placeholders of the dead intent, each with an
	// empty record: its writer died between creating and writing it (an
	// old one), or is writing it now (a fresh one, kept with its file).
	staleRec := filepath.Join(ws, ".stale")
	freshRec := filepath.Join(ws, ".fresh")
	recs := map[string]string{}
	for _, o := range []string{staleRec, freshRec} {
		mkfile(t, o, "")
		if err := os.Chmod(o, protectjournal.PlaceholderPerm); err != nil {
			t.Fatal(err)
		}
		var ost unix.Stat_t
		if err := unix.Lstat(o, &ost); err != nil {
			t.Fatal(err)
		}
		recs[o] = filepath.Join(dir, protectjournal.RecordName(&ost))
		mkfile(t, recs[o], "")
	}
	old := time.Now().Add(-2 * protectjournal.EmptyRecordAge)
	if err := os.Chtimes(recs[staleRec], old, old); err != nil {
		t.Fatal(err)
	}
	// Empty intents: their creators died (or are about to write them)
	// between creating and writing them.
	deadEmpty := fmt.Sprintf("intent-%d-%d-2", os.Getpid(), st+1)
	liveEmpty := "intent-" + d.owner + "-10"
	for name, path := range map[string]string{dead: orphan + "\x00" + written + "\x00" + orphan2, "intent-" + d.owner + "-9": user,
		deadEmpty: "", liveEmpty: "", fmt.Sprintf("intent-%d-%d-3", os.Getpid(), st+1): staleRec + "\x00" + freshRec} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(path), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d.recoverPlaceholders()
	if _, err := os.Lstat(filepath.Join(dir, deadEmpty)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a dead driver's empty intent stayed: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, liveEmpty)); err != nil {
		t.Errorf("a live driver's empty intent was removed: %v", err)
	}
	for _, p := range []string{staleRec, recs[staleRec]} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s stayed beside an old empty record: %v", p, err)
		}
	}
	for _, p := range []string{freshRec, recs[freshRec]} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s, with a record being written, was removed: %v", p, err)
		}
	}
	// The dead intent naming it stays, so that a later recovery, once the
	// record is old, still finds the file.
	if _, err := os.Lstat(filepath.Join(dir, fmt.Sprintf("intent-%d-%d-3", os.Getpid(), st+1))); err != nil {
		t.Errorf("the intent naming a placeholder left for its young record was removed: %v", err)
	}
	old2 := time.Now().Add(-2 * protectjournal.EmptyRecordAge)
	if err := os.Chtimes(recs[freshRec], old2, old2); err != nil {
		t.Fatal(err)
	}
	d.recoverPlaceholders()
	for _, p := range []string{freshRec, recs[freshRec], filepath.Join(dir, fmt.Sprintf("intent-%d-%d-3", os.Getpid(), st+1))} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s stayed once the record was old: %v", p, err)
		}
	}
	for _, o := range []string{orphan, orphan2} {
		if _, err := os.Lstat(o); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the dead driver's unrecorded placeholder %s stayed: %v", o, err)
		}
	}
	if _, err := os.Lstat(written); err != nil {
		t.Errorf("a non-empty file named in a dead intent was removed: %v", err)
	}
	if _, err := os.Lstat(user); err != nil {
		t.Errorf("a live driver's intent or a user's file was removed: %v", err)
	}
	// A user's empty file at a protected name is protected, not removed.
	_, release, err := d.protect(planFor(t, ws))
	if err != nil {
		t.Fatal(err)
	}
	release()
	if _, err := os.Lstat(user); err != nil {
		t.Errorf("the user's empty .envrc was taken for a placeholder: %v", err)
	}
}

// The index parser against what git writes: every gitlink, nothing else.
func TestIndexGitlinksAllVersions(t *testing.T) {
	needGit(t)
	for _, version := range []string{"2", "3", "4"} {
		ws := newWorkspace(t)
		gitCmd(t, ws, "init", "-q")
		for i := range 30 {
			mkfile(t, filepath.Join(ws, "dir", "sub"+strconv.Itoa(i%3), "f"+strconv.Itoa(i)), "x")
		}
		gitCmd(t, ws, "add", ".")
		want := []string{"a/mod", "dir/sub1/m", "zz"}
		for _, l := range want {
			addGitlink(t, ws, l)
		}
		if version == "3" {
			mkfile(t, filepath.Join(ws, "ita"), "y")
			gitCmd(t, ws, "add", "-N", "ita")
		} else {
			gitCmd(t, ws, "update-index", "--index-version", version)
		}
		got, err := indexGitlinks(filepath.Join(ws, ".git"), time.Time{})
		if err != nil {
			t.Fatalf("v%s: %v", version, err)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("v%s: gitlinks %q, want %q", version, got, want)
		}
	}
	// A corrupt index is an error, not an empty list.
	bad := filepath.Join(t.TempDir(), "index")
	mkfile(t, bad, "DIRC\x00\x00\x00\x02\x00\x00\x00\x05garbage")
	if _, _, err := parseIndexFile(bad, 20, time.Time{}); err == nil {
		t.Error("corrupt index parsed")
	}
}

// BenchmarkProtectedScan measures the per-command scan of a 50k-file tree
// against a plain filepath.WalkDir of the same tree.
func BenchmarkProtectedScan(b *testing.B) {
	ws := benchTree(b)
	p := launchPlan{Workspace: ws, Protected: driverapi.DefaultProtectedEntries()}
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			if _, err := scanProtected(p, scanLimits{maxEntries: 1 << 30}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("walkdir", func(b *testing.B) {
		for b.Loop() {
			n := 0
			_ = filepath.WalkDir(ws, func(string, fs.DirEntry, error) error { n++; return nil })
		}
	})
}

// benchTree makes 50,000 files in 500 directories, 10 of them nested
// repositories.
func benchTree(b *testing.B) string {
	b.Helper()
	ws, err := filepath.EvalSymlinks(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for i := range 500 {
		dir := filepath.Join(ws, "p"+strconv.Itoa(i/50), "d"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if i%50 == 0 {
			if err := os.MkdirAll(filepath.Join(dir, ".git"), 0o755); err != nil {
				b.Fatal(err)
			}
		}
		for j := range 100 {
			f, err := os.Create(filepath.Join(dir, "f"+strconv.Itoa(j)))
			if err != nil {
				b.Fatal(err)
			}
			f.Close()
		}
	}
	return ws
}

// Anchors never open a read grant below them, and a grant inside a nested
// protected entry is refused.
func TestAnchorsKeepReadGrantsReadOnly(t *testing.T) {
	d := testDriver(t, options{})
	ws, g := newWorkspace(t), newWorkspace(t)
	mkfile(t, filepath.Join(g, "a", ".git", "config"), "[core]\n")
	mkfile(t, filepath.Join(g, "a", "r", "x", ".git", "config"), "[core]\n")
	mkfile(t, filepath.Join(g, "a", "r", "file"), "ro\n")
	req := driverapi.ProfileRequest{Workspace: ws, Capabilities: driverapi.Capabilities{
		FSWrite: []string{g}, FSRead: []string{filepath.Join(g, "a", "r")}}}
	r := reqRun(t, d, req, nil, "echo w > "+g+"/a/f && cat "+g+"/a/r/file")
	expectOK(t, r)
	if r.stdout != "ro\n" {
		t.Fatalf("control: %q", r.stdout)
	}
	for _, script := range []string{
		"echo evil > " + g + "/a/r/file",
		"echo evil > " + g + "/a/r/x/new",
		"echo evil >> " + g + "/a/.git/config",
	} {
		expectFail(t, reqRun(t, d, req, nil, script))
	}
	if b, _ := os.ReadFile(filepath.Join(g, "a", "r", "file")); string(b) != "ro\n" {
		t.Fatalf("read grant written: %q", b)
	}
	bad := driverapi.ProfileRequest{Workspace: ws, Capabilities: driverapi.Capabilities{
		FSWrite: []string{g, filepath.Join(g, "a", ".git")}}}
	r = reqRun(t, d, bad, nil, "true")
	var ise *driverapi.InvalidSpecError
	if !errors.As(r.err, &ise) {
		t.Fatalf("write grant inside a nested .git: %v %+v", r.err, r.exit)
	}
}

// TestPlaceholderRemovalBesideForks: a child of the driver process
// between fork and exec holds a copy of every descriptor, a placeholder's
// lock included; placeholders made and removed while other goroutines
// start processes (by vfork, and with a user namespace, which Go forks
// without vfork) must all be gone once the driver is closed. Each command
// has a workspace of its own, so none removes another's leftover.
func TestPlaceholderRemovalBesideForks(t *testing.T) {
	d := testDriver(t, options{})
	stop := make(chan struct{})
	forks := make(chan int)
	for _, userns := range []bool{false, true} {
		go func() {
			n := 0
			for {
				select {
				case <-stop:
					forks <- n
					return
				default:
				}
				c := exec.Command("/bin/true")
				if userns {
					c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
				}
				if c.Run() == nil {
					n++
				}
			}
		}()
	}
	var wss []string
	made := 0
	for range 200 {
		ws := newWorkspace(t)
		wss = append(wss, ws)
		pr, release, err := d.protect(planFor(t, ws))
		if err != nil {
			t.Fatal(err)
		}
		made += len(pr.missing)
		release()
	}
	close(stop)
	n := <-forks + <-forks
	if made == 0 || n == 0 {
		t.Fatalf("control: %d placeholders made beside %d forks", made, n)
	}
	d.Close()
	left := 0
	for _, ws := range wss {
		ents, err := os.ReadDir(ws)
		if err != nil {
			t.Fatal(err)
		}
		left += len(ents)
	}
	if left > 0 {
		t.Fatalf("%d of %d placeholders left behind beside %d forks", left, made, n)
	}
}

// An empty read-only file at a protected name that no record names, while
// another live process's intent names it, is a placeholder being made or
// removed: protect looks again (bounded) instead of binding it as a user's
// file (without a lock, whose removal would then detach the mount), and
// refuses the command if it never settles. The control: the same file
// with no such intent is a user's file.
func TestProtectWaitsForPlaceholderInFlux(t *testing.T) {
	d := testDriver(t, options{})
	dir, err := d.journal.Dir()
	if err != nil {
		t.Fatal(err)
	}
	other := exec.Command("/bin/sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	ostart, err := ownertag.StartTime(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, way := range []string{"user's file", "stuck"} {
		ws := newWorkspace(t)
		path := filepath.Join(ws, ".claude")
		mkfile(t, path, "")
		if err := os.Chmod(path, protectjournal.PlaceholderPerm); err != nil {
			t.Fatal(err)
		}
		intent := filepath.Join(dir, fmt.Sprintf("intent-%d-%d-%s-r1", other.Process.Pid, ostart, ownertag.NamespaceTag()))
		if way == "stuck" {
			if err := os.WriteFile(intent, []byte(path), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		pr, release, err := d.protect(planFor(t, ws))
		_ = os.Remove(intent)
		switch way {
		case "user's file":
			if err != nil || !slices.Contains(pr.existing, path) || slices.Contains(pr.missing, path) {
				t.Errorf("control: a user's empty read-only file: %v %+v", err, pr)
			}
			if _, err := os.Lstat(path); err != nil {
				t.Errorf("control: the user's file went: %v", err)
			}
		case "stuck":
			if err == nil || !strings.Contains(err.Error(), "keeps changing") {
				t.Errorf("a placeholder that stays in flux: %v %+v, want the command refused", err, pr)
			}
		}
		if err == nil {
			release()
		}
	}
}

// A placeholder that someone holds an exclusive lock on (anyone who can
// read it can) refuses the command within a bound instead of hanging the
// driver; the control, without that lock, shares it.
func TestProtectSharedLockNotBlocking(t *testing.T) {
	d := testDriver(t, options{})
	dir, err := d.journal.Dir()
	if err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace(t)
	path := filepath.Join(ws, ".claude")
	f, _, err := d.journal.Create(dir, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		f.Close()
		_ = protectjournal.Remove(dir, path, nil, d.journal.TombName(dir))
	}()
	// The control: another command shares it.
	pr, release, err := d.protect(planFor(t, ws))
	if err != nil || !slices.Contains(pr.missing, path) {
		t.Fatalf("control: %v %+v", err, pr)
	}
	release()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("control: the maker's placeholder was removed by a sharer: %v", err)
	}
	// Its maker's lock stays shared; a reader takes an exclusive one.
	r, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f.Close() // the maker's shared lock goes: only the reader's holds
	if err := unix.Flock(int(r.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, release, err := d.protect(planFor(t, ws))
		if err == nil {
			release()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "keeps changing") {
			t.Fatalf("a placeholder held exclusively: %v, want the command refused", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("protect hangs on a placeholder held exclusively")
	}
}
