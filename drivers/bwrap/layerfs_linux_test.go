//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/internal/overlaytest"
)

// refusedUpperEnv names a directory the test user can write whose file
// system overlayfs refuses as an upper in a user namespace (a FUSE mount
// made for the test, say), for hosts where none of the usual places is
// one. The test proves the refusal with a control mount before using it.
const refusedUpperEnv = "ALEPH_TEST_REFUSED_UPPER_DIR"

// newLayerDirsIn is newLayerDirs with the layer's directory made under
// base, removed at the end of the test.
func newLayerDirsIn(t testing.TB, base string) *driverapi.LayeredWorkspace {
	t.Helper()
	dir, err := os.MkdirTemp(base, "aleph-layer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Chmod(filepath.Join(dir, "work", "work"), 0o700)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove the layer directory: %v", err)
		}
	})
	l := &driverapi.LayeredWorkspace{Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work"), Lock: filepath.Join(dir, "lock"), UserNS: os.Geteuid() != 0}
	for _, p := range []string{l.Upper, l.Work} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(l.Lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return l
}

// controlOverlayMount mounts, as this user in a user and mount namespace
// of its own (unshare -Urm, gone with the process), the overlay a session
// supervisor mounts, with its upper and work directories made under base
// and the lower under lowerBase: nil if the kernel mounted it.
func controlOverlayMount(t *testing.T, base, lowerBase string) error {
	t.Helper()
	dir, err := os.MkdirTemp(base, "aleph-control-")
	if err != nil {
		return fmt.Errorf("control directories: %w", err)
	}
	defer func() {
		_ = os.Chmod(filepath.Join(dir, "work", "work"), 0o700)
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove the control directories: %v", err)
		}
	}()
	lower, err := os.MkdirTemp(lowerBase, "aleph-control-lower-")
	if err != nil {
		return fmt.Errorf("control directories: %w", err)
	}
	defer os.RemoveAll(lower)
	for _, p := range []string{"upper", "work", "merged"} {
		if err := os.Mkdir(filepath.Join(dir, p), 0o700); err != nil {
			return fmt.Errorf("control directories: %w", err)
		}
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s/upper,workdir=%s/work,%s", lower, dir, dir, overlayOptionsUserNS)
	// The write through the overlay must land in the upper directory:
	// mounted, and writable there.
	out, err := exec.Command("unshare", "-Urm", "sh", "-c",
		`mount -t overlay overlay -o "$1" "$2/merged" && echo x > "$2/merged/written"`, "sh", data, dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	if _, err := os.Lstat(filepath.Join(dir, "upper", "written")); err != nil {
		return fmt.Errorf("mounted, but the write is not in the upper directory: %w", err)
	}
	return nil
}

// trialDirsLeft lists what a trial left in dir.
func trialDirsLeft(dir string) []string {
	var left []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".overlay-trial-") {
			left = append(left, e.Name())
		}
	}
	return left
}

// TestLayeredUpperFileSystem: an unprivileged driver tries the overlay
// on a layer's upper file system before it builds the session sandbox,
// when that file system is not the one its probe tried (checkUpperFS).
// Controls: a layer on the probe's file system runs with no trial; one on
// another file system the kernel accepts runs after one trial, and a
// second layer there runs with none (the success is kept). The refusal: a
// layer on a file system the kernel refuses as an upper (found here and
// proved refused by a control mount; where the host has none, made by
// trial options the kernel refuses, which the log says) gets the typed
// layered_workspace refusal naming the data directory as the fix; nothing
// ran (no output, an empty upper, no session sandbox), no trial
// directory is left, and the failure is not kept (the next command tries
// again).
func TestLayeredUpperFileSystem(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root: the driver mounts the overlay itself, and a refused mount is the typed layered_workspace refusal already (mountLayer); the unprivileged pass runs this one")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("no unshare(1) for the control mounts: %v", err)
	}
	state := t.TempDir()
	d, err := newDriver(config{Options: options{SessionSandbox: sessionSandboxAlways}, InitBinary: driverBin, DriverBinary: driverBin, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	needLayered(t, d)
	h := d.probe()
	stateFS, err := fsIdentityOf(state)
	if err != nil {
		t.Fatal(err)
	}
	if !h.sessionOverlayTried || h.sessionOverlayFS != stateFS {
		t.Fatalf("the probe's trial: tried %v on %+v, want the state directory's %+v", h.sessionOverlayTried, h.sessionOverlayFS, stateFS)
	}
	// A state directory reached through a link is tried all the same.
	link := filepath.Join(t.TempDir(), "state")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	ld, err := newDriver(config{Options: options{SessionSandbox: sessionSandboxAlways}, InitBinary: driverBin, DriverBinary: driverBin, StateDir: link})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ld.Close)
	if why := ld.layeredOffWhy(); why != "" || !ld.probe().sessionOverlayTried {
		t.Errorf("a state directory behind a link: layered off (%q), tried %v", why, ld.probe().sessionOverlayTried)
	}
	// The control mount works where the probe's trial did: a refusal it
	// reports elsewhere is the file system's.
	if err := controlOverlayMount(t, state, state); err != nil {
		t.Fatalf("control: the control mount on the state directory's file system: %v", err)
	}

	// Control: a layer on the probe's file system, no trial.
	ws := newWorkspace(t)
	l := newLayerDirsIn(t, state)
	expectOK(t, layRun(t, d, ws, "same", spawnCaps, l, `echo same > a.txt`))
	if b, err := os.ReadFile(filepath.Join(l.Upper, "a.txt")); err != nil || string(b) != "same\n" {
		t.Errorf("control: upper a.txt %q %v", b, err)
	}
	_ = d.ForgetSession(context.Background(), "same")
	if d.upperFS.count() != 0 {
		t.Errorf("a layer on the probe's file system was tried again: %d trials", d.upperFS.count())
	}

	// The other file systems this user can write to, each proved usable
	// or refused by a control mount.
	var usable, refused string
	seen := map[fsIdentity]bool{stateFS: true}
	cands := []string{os.Getenv(refusedUpperEnv), os.TempDir(), "/dev/shm", "/var/tmp", os.Getenv("XDG_RUNTIME_DIR"), os.Getenv("HOME")}
	for _, c := range cands {
		if c == "" || !filepath.IsAbs(c) {
			continue
		}
		base, err := os.MkdirTemp(c, "aleph-layerfs-")
		if err != nil {
			continue // not writable by this user
		}
		t.Cleanup(func() { _ = os.RemoveAll(base) })
		fs, err := fsIdentityOf(base)
		if err != nil || seen[fs] {
			continue
		}
		seen[fs] = true
		if err := controlOverlayMount(t, base, state); err != nil {
			t.Logf("%s (%s): the control mount is refused: %v", c, fsTypeName(fs.typ), err)
			if refused == "" {
				refused = base
			}
		} else if usable == "" {
			t.Logf("%s (%s): the control mount works", c, fsTypeName(fs.typ))
			usable = base
		}
	}
	if usable == "" {
		t.Skipf("no second file system this user can write to that the kernel accepts as an upper (tried %q); the control above shows the state directory's does", cands)
	}

	// Control: another usable file system, one trial, kept.
	ul := newLayerDirsIn(t, usable)
	expectOK(t, layRun(t, d, ws, "other", spawnCaps, ul, `echo other > b.txt`))
	if b, err := os.ReadFile(filepath.Join(ul.Upper, "b.txt")); err != nil || string(b) != "other\n" {
		t.Errorf("control: upper b.txt %q %v", b, err)
	}
	_ = d.ForgetSession(context.Background(), "other")
	if d.upperFS.count() != 1 {
		t.Errorf("a layer on another file system: %d trials, want 1", d.upperFS.count())
	}
	ul2 := newLayerDirsIn(t, usable)
	expectOK(t, layRun(t, d, ws, "other2", spawnCaps, ul2, `echo other2 > c.txt`))
	_ = d.ForgetSession(context.Background(), "other2")
	if d.upperFS.count() != 1 {
		t.Errorf("a second layer on that file system: %d trials, want still 1 (the success kept)", d.upperFS.count())
	}
	for _, dir := range []string{filepath.Dir(ul.Upper), filepath.Dir(ul2.Upper)} {
		if left := trialDirsLeft(dir); len(left) != 0 {
			t.Errorf("the trial left %v in %s", left, dir)
		}
	}

	// The refusal.
	r := d
	rl := (*driverapi.LayeredWorkspace)(nil)
	wantWhy := ""
	if refused != "" {
		t.Logf("a file system the kernel refuses as an upper: %s", refused)
		rl = newLayerDirsIn(t, refused)
		wantWhy = "trial overlay mount"
	} else {
		t.Logf("no file system this user can write to here is refused as an upper by the kernel (set %s to one to try it): the refusal is made by trial options the kernel refuses, on %s", refusedUpperEnv, usable)
		r, err = newDriver(config{Options: options{SessionSandbox: sessionSandboxAlways}, InitBinary: driverBin, DriverBinary: driverBin,
			StateDir: t.TempDir(), upperTrialOptions: overlayOptionsUserNS + ",aleph_no_such_option"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		if why := r.layeredOffWhy(); why != "" {
			t.Fatalf("control: the probe's trial (real options) failed: %s", why)
		}
		rl = newLayerDirsIn(t, usable)
		wantWhy = "invalid argument"
	}
	rws := newWorkspace(t)
	before := r.upperFS.count()
	for i := range 2 {
		res := layRun(t, r, rws, "refused", spawnCaps, rl, `echo layered > a.txt; echo ran`)
		var ue *driverapi.UnavailableError
		if !errors.As(res.err, &ue) || ue.Feature != driverapi.FeatureLayeredWorkspace ||
			!strings.Contains(ue.Reason, rl.Upper) || !strings.Contains(ue.Reason, wantWhy) || !strings.Contains(ue.Fix, "sandbox.workspace_root") {
			t.Fatalf("a layer on a refused file system: %v, want the layered_workspace refusal naming %s and %q, with the data directory in its fix", res.err, rl.Upper, wantWhy)
		}
		if i == 0 {
			t.Logf("refused: %s (fix: %s)", ue.Reason, ue.Fix)
		}
		expectRefusedLeftNothing(t, res, rl.Upper)
		if _, all := sessionProcs(rws); len(all) != 0 {
			t.Errorf("a session sandbox was built for the refused command: %v", all)
		}
		if left := trialDirsLeft(filepath.Dir(rl.Upper)); len(left) != 0 {
			t.Errorf("the trial left %v", left)
		}
		if got := r.upperFS.count() - before; got != i+1 {
			t.Errorf("after refusal %d: %d trials, want %d (a failure is not kept)", i+1, got, i+1)
		}
	}
	// Positive control: the refusing driver still runs a layer on its
	// probe's file system.
	pl := newLayerDirsIn(t, r.cfg.StateDir)
	expectOK(t, layRun(t, r, rws, "fine", spawnCaps, pl, `echo fine > d.txt`))
	if b, err := os.ReadFile(filepath.Join(pl.Upper, "d.txt")); err != nil || string(b) != "fine\n" {
		t.Errorf("control: upper d.txt %q %v", b, err)
	}
	_ = r.ForgetSession(context.Background(), "fine")
}

// TestLayeredUpperRefusedAsRoot: a root driver mounts a layer's overlay
// itself, and the kernel refuses an upper directory on another overlay
// (so a data directory on one) with a bare EINVAL. The refusal is the
// typed layered_workspace one naming the upper's file system and the data
// directory as the way out; nothing ran and no mount point is left. The
// controls: the same driver runs a layer on an ordinary directory, and a
// mount by hand with the upper on that overlay is refused too (the
// kernel's refusal, not the driver's).
func TestLayeredUpperRefusedAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unprivileged: the session sandbox mounts the overlay, and TestLayeredUpperFileSystem covers that refusal")
	}
	d, err := newDriver(config{Options: options{SessionSandbox: sessionSandboxAlways}, InitBinary: driverBin, DriverBinary: driverBin, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	needLayered(t, d)
	ws := newWorkspace(t)
	// Control: an ordinary layer runs.
	ok := newLayerDirsIn(t, t.TempDir())
	expectOK(t, layRun(t, d, ws, "fine", spawnCaps, ok, `echo fine > a.txt`))
	if b, err := os.ReadFile(filepath.Join(ok.Upper, "a.txt")); err != nil || string(b) != "fine\n" {
		t.Fatalf("control: upper a.txt %q %v", b, err)
	}
	_ = d.ForgetSession(context.Background(), "fine")

	// A data directory on an overlay.
	m := overlaytest.RefusedUpper(t)
	rl := newLayerDirsIn(t, m)
	res := layRun(t, d, ws, "refused", spawnCaps, rl, `echo layered > b.txt; echo ran`)
	var ue *driverapi.UnavailableError
	if !errors.As(res.err, &ue) || ue.Feature != driverapi.FeatureLayeredWorkspace ||
		!strings.Contains(ue.Reason, rl.Upper) || !strings.Contains(ue.Reason, "overlayfs") || !strings.Contains(ue.Fix, "sandbox.workspace_root") {
		t.Fatalf("a layer on an overlay: %v, want the layered_workspace refusal naming %s on overlayfs, with the data directory in its fix", res.err, rl.Upper)
	}
	t.Logf("refused: %s (fix: %s)", ue.Reason, ue.Fix)
	expectRefusedLeftNothing(t, res, rl.Upper)
	if left, _ := filepath.Glob(filepath.Join(d.layerMountParent(), "layer-*")); len(left) != 0 {
		t.Errorf("mount points left after the refusal: %v", left)
	}
}
