//go:build linux

package layer

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeGit is a GitImporter that records its calls.
type fakeGit struct {
	mu       sync.Mutex
	snapshot GitBase
	imports  []GitImportRequest
	result   GitImportResult
	err      error
}

func (g *fakeGit) Snapshot(ctx context.Context, ws string) (GitBase, error) { return g.snapshot, nil }

func (g *fakeGit) Import(ctx context.Context, req GitImportRequest) (GitImportResult, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.imports = append(g.imports, req)
	return g.result, g.err
}

// fixture is a workspace with a layer over it.
type fixture struct {
	t      *testing.T
	root   string // holds ws, layer, m
	ws     string
	merged string
	l      *Layer
	git    *fakeGit
	uid    int // the user that mounts and runs commands (0: root)
}

// writeTree makes files (path -> content; a trailing "/" makes a
// directory) below dir.
func writeTree(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(dir, n)
		if n[len(n)-1] == '/' {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(files[n]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// newFixture makes a workspace holding files and a layer over it, for a
// mount by root (uid 0) or by an unprivileged uid in a user namespace.
func newFixture(t *testing.T, files map[string]string, uid int, p Policy) *fixture {
	t.Helper()
	root, err := os.MkdirTemp("", "layer-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeLayerDir(root) })
	f := &fixture{t: t, root: root, ws: filepath.Join(root, "ws"), merged: filepath.Join(root, "m"), git: &fakeGit{}, uid: uid}
	for _, d := range []string{f.ws, f.merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeTree(t, f.ws, files)
	if uid != 0 {
		p.UserNS = true
		if err := os.Chmod(root, 0o755); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			chownTree(t, root, uid)
		}
	}
	if uid != 0 {
		// The layer is made by the unprivileged user's files: its
		// directories must be that user's for the mount.
		f.l = f.createAs(p)
	} else {
		f.l, err = Create(context.Background(), filepath.Join(root, "layer"), f.ws, f.git, p)
		if err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) createAs(p Policy) *Layer {
	l, err := Create(context.Background(), filepath.Join(f.root, "layer"), f.ws, f.git, p)
	if err != nil {
		f.t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		chownTree(f.t, l.dir, f.uid)
	}
	return l
}

func chownTree(t testing.TB, dir string, uid int) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// mountCmd is a command that mounts the layer's overlay on merged in a
// private mount namespace and runs script there with sh.
func mountCmd(ctx context.Context, l *Layer, merged string, uid int, script string) (*exec.Cmd, error) {
	data, err := l.MountSpec().Data()
	if err != nil {
		return nil, err
	}
	inner := `mount -t overlay overlay -o "$LAYER_DATA" "$LAYER_MERGED" && cd "$LAYER_MERGED" && sh -c "$LAYER_SCRIPT"`
	var cmd *exec.Cmd
	switch {
	case uid == 0:
		cmd = exec.CommandContext(ctx, "unshare", "-m", "--propagation", "private", "sh", "-c", inner)
	case uid == os.Geteuid():
		cmd = exec.CommandContext(ctx, "unshare", "-Urm", "sh", "-c", inner)
	default:
		cmd = exec.CommandContext(ctx, "setpriv", "--reuid="+strconv.Itoa(uid), "--regid="+strconv.Itoa(uid), "--clear-groups",
			"unshare", "-Urm", "sh", "-c", inner)
	}
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LAYER_DATA=" + data, "LAYER_MERGED=" + merged, "LAYER_SCRIPT=" + script}
	return cmd, nil
}

// run runs script in the mounted overlay, then Observe (as the session
// code does after each command).
func (f *fixture) run(script string) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, err := mountCmd(ctx, f.l, f.merged, f.uid, script)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		f.t.Fatalf("command in the overlay: %v\n%s", err, out)
	}
	if err := f.l.Observe(context.Background()); err != nil {
		f.t.Fatalf("Observe: %v", err)
	}
	return string(out)
}

// requireOverlay skips unless an overlay can be mounted here (as root, or
// by uid in a user namespace), after proving it with a control mount that
// also makes a whiteout.
func requireOverlay(t *testing.T, uid int) {
	t.Helper()
	if os.Geteuid() != 0 && uid != os.Geteuid() {
		t.Skip("this test mounts an overlay as root; run as another user, the user-namespace tests (TestLayerUnprivileged*) cover that user")
	}
	for _, tool := range []string{"unshare", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (util-linux): %v", tool, err)
		}
	}
	root, err := os.MkdirTemp("", "layer-probe-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	ws := filepath.Join(root, "ws")
	writeTree(t, ws, map[string]string{"gone": "x"})
	if err := os.Mkdir(filepath.Join(root, "m"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := Policy{}
	if uid != 0 {
		p.UserNS = true
		os.Chmod(root, 0o755)
		if os.Geteuid() == 0 {
			chownTree(t, root, uid)
		}
	}
	l, err := Create(context.Background(), filepath.Join(root, "layer"), ws, nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if uid != 0 && os.Geteuid() == 0 {
		chownTree(t, l.dir, uid)
	}
	cmd, err := mountCmd(context.Background(), l, filepath.Join(root, "m"), uid, "rm gone")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		if uid == 0 {
			t.Skipf("control: this host cannot mount an overlay in a private mount namespace as root (%v: %s)", err, out)
		}
		t.Skipf("control: this host does not let uid %d mount an overlay in a user namespace (%v: %s)", uid, err, out)
	}
	st, err := os.Lstat(filepath.Join(l.dir, UpperDir, "gone"))
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("control: the overlay mounted but left no whiteout for a deleted file (%v, %v)", st, err)
	}
}

// changeMap indexes changes by path.
func changeMap(cs []Change) map[string]Change {
	m := map[string]Change{}
	for _, c := range cs {
		m[c.Path] = c
	}
	return m
}

func refusedMap(r ApplyResult) map[string]string {
	m := map[string]string{}
	for _, x := range r.Refused {
		m[x.Path] = x.Reason
	}
	return m
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// unprivUID is the user of the user-namespace tests: this one when the
// tests run unprivileged, else nobody (65534), switched to with setpriv.
func unprivUID() int {
	if u := os.Geteuid(); u != 0 {
		return u
	}
	return 65534
}

// sessionUID is the user the overlay tests mount as: root when the tests
// run as root (a mount in a private mount namespace), else the invoking
// user (a mount in a user namespace).
func sessionUID() int { return os.Geteuid() }
