//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// newLayerDirs makes upper, work and lock as core/layer.Create lays them
// out, in a directory outside the workspace: made for a user namespace
// when unprivileged (the only way this driver mounts layers then).
func newLayerDirs(t testing.TB) *driverapi.LayeredWorkspace {
	t.Helper()
	dir := t.TempDir()
	l := &driverapi.LayeredWorkspace{Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work"), Lock: filepath.Join(dir, "lock"), UserNS: os.Geteuid() != 0}
	for _, p := range []string{l.Upper, l.Work} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// overlayfs leaves work/work mode 0000, which the user that mounted
	// it in a user namespace cannot remove as it is.
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(l.Work, "work"), 0o700) })
	if err := os.WriteFile(l.Lock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return l
}

// layRun runs a shell snippet as a layered command of session.
func layRun(t testing.TB, d *Driver, ws, session string, caps driverapi.Capabilities, l *driverapi.LayeredWorkspace, script string) drvResult {
	t.Helper()
	ctx := context.Background()
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws})
	if err != nil {
		return drvResult{err: err}
	}
	var out, errb bytes.Buffer
	spec := driverapi.RunSpec{
		Program: "/bin/sh", Args: []string{"-c", script}, Cwd: ws, Profile: prof,
		Env:     []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "HOME", Value: "/tmp"}},
		Timeout: 20 * time.Second, MaxOutputBytes: 1 << 20, SessionID: session, SessionSandbox: true, Layered: l,
	}
	exit, err := d.Run(ctx, spec, driverapi.Streams{Stdout: &out, Stderr: &errb})
	return drvResult{exit: exit, stdout: out.String(), stderr: errb.String(), err: err}
}

// expectRefusedLeftNothing checks that a refused layered command r ran
// nothing: no output, and the layer's upper directory still empty.
func expectRefusedLeftNothing(t *testing.T, r drvResult, upper string) {
	t.Helper()
	if r.stdout != "" || r.stderr != "" {
		t.Errorf("the refused command ran: %q %q", r.stdout, r.stderr)
	}
	if ents, err := os.ReadDir(upper); err != nil || len(ents) != 0 {
		t.Errorf("the upper layer after the refusal: %v %v", ents, err)
	}
}

func needLayered(t *testing.T, d *Driver) {
	t.Helper()
	caps, err := d.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if why := d.layeredOffWhy(); why != "" {
		if caps.Details[driverapi.DetailLayeredWorkspace] != why {
			t.Fatalf("layered off (%s) but the capabilities say %q", why, caps.Details[driverapi.DetailLayeredWorkspace])
		}
		t.Skip("layered workspaces off here: " + why)
	}
	if !strings.HasPrefix(caps.Details[driverapi.DetailLayeredWorkspace], "on") {
		t.Fatalf("layered on but the capabilities say %q", caps.Details[driverapi.DetailLayeredWorkspace])
	}
}

// TestLayeredSession: a layered command writes the workspace, .git
// included (no protected entry, no placeholder in the overlay), and the
// host's directory is untouched while the upper layer has it all; the
// next command of the session sees it (one overlay, kept); a command of
// another capability set is refused typed while the first's sandbox
// lives; a live command of the same session (positive control) writes
// the host.
func TestLayeredSession(t *testing.T) {
	d := testDriver(t, options{})
	needLayered(t, d)
	ws := newWorkspace(t)
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	l := newLayerDirs(t)
	r := layRun(t, d, ws, "lay", spawnCaps, l, `echo session > a.txt && echo new > b.txt && echo x > .git/config && mkdir .vscode && echo '{}' > .vscode/tasks.json && ls -A`)
	expectOK(t, r)
	for _, want := range []string{"a.txt", "b.txt", ".git", ".vscode"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("listing inside lacks %s: %q", want, r.stdout)
		}
	}
	if strings.Count(r.stdout, "\n") != 4 {
		t.Errorf("the overlay shows entries beyond the command's (placeholders?): %q", r.stdout)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "host\n" {
		t.Errorf("host a.txt changed: %q", b)
	}
	for _, p := range []string{"b.txt", ".git/config", ".vscode"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host has %s: %v", p, err)
		}
		if _, err := os.Lstat(filepath.Join(l.Upper, p)); err != nil {
			t.Errorf("upper lacks %s: %v", p, err)
		}
	}
	r = layRun(t, d, ws, "lay", spawnCaps, l, `cat a.txt b.txt`)
	expectOK(t, r)
	if r.stdout != "session\nnew\n" || sessionOf(r) != driverapi.SessionSandboxReused {
		t.Errorf("second command: %q %v", r.stdout, r.exit.Details)
	}
	r = layRun(t, d, ws, "lay", otherLayCaps(), l, `true`)
	var ue *driverapi.UnavailableError
	if !errors.As(r.err, &ue) || ue.Feature != driverapi.FeatureLayeredWorkspace {
		t.Errorf("another capability set over the mounted layer: %v, want an UnavailableError for %s", r.err, driverapi.FeatureLayeredWorkspace)
	}
	// Positive control: the same workspace, live, is written.
	r = sessRun(t, d, ws, "live", spawnCaps, `echo live > c.txt`)
	expectOK(t, r)
	if _, err := os.Stat(filepath.Join(ws, "c.txt")); err != nil {
		t.Errorf("control: a live command did not write the host: %v", err)
	}
	// Forgotten, the layer is free: the other capability set runs.
	if err := d.ForgetSession(context.Background(), "lay"); err != nil {
		t.Fatal(err)
	}
	r = layRun(t, d, ws, "lay", otherLayCaps(), l, `cat b.txt`)
	expectOK(t, r)
	if r.stdout != "new\n" {
		t.Errorf("after forget, another capability set: %q", r.stdout)
	}
	ents, _ := os.ReadDir(d.layerMountParent())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "layer-") {
			t.Errorf("mount point left behind: %s", e.Name())
		}
	}
}

// TestLayeredRefusedWithTerminal: a layered command that cannot run in
// the session's sandbox is refused, never run over the live workspace.
func TestLayeredRefusedWithTerminal(t *testing.T) {
	d := testDriver(t, options{})
	needLayered(t, d)
	ws := newWorkspace(t)
	l := newLayerDirs(t)
	prof, err := d.ProfileFor(context.Background(), driverapi.ProfileRequest{Capabilities: spawnCaps, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	spec := driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", "echo x > t.txt"}, Cwd: ws, Profile: prof,
		Timeout: 20 * time.Second, MaxOutputBytes: 1 << 20, SessionID: "t", SessionSandbox: true, Layered: l,
		Tty: &driverapi.WindowSize{Rows: 24, Cols: 80}}
	_, err = d.RunStream(context.Background(), spec, driverapi.StreamInput{}, driverapi.Streams{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
	var ue *driverapi.UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("a layered command with a terminal: %v, want an UnavailableError", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "t.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the command wrote the host: %v", err)
	}
}

// BenchmarkLayeredSession compares a command in a layered session with the
// same command in a live one: /bin/true, 20 warm commands of each per
// iteration, alternating one by one so load touches both alike (each
// session's first command, which builds its sandbox, untimed). Figures:
// each way's p50 and layered_x_live (the goal: at most 1.1).
func BenchmarkLayeredSession(b *testing.B) {
	ctx := context.Background()
	d := testDriver(b, options{Prepared: preparedOff})
	if why := d.layeredOffWhy(); why != "" {
		b.Skip("layered workspaces off here: " + why)
	}
	spec, _ := benchSpec(b, d)
	spec.SessionSandbox = true
	var live, layered []time.Duration
	n := 0
	for b.Loop() {
		n++
		ls, ly := spec, spec
		ls.SessionID, ly.SessionID = "live-"+strconv.Itoa(n), "layered-"+strconv.Itoa(n)
		ly.Layered = newLayerDirs(b)
		for _, s := range []driverapi.RunSpec{ls, ly} {
			if err := runTrue(ctx, d, s); err != nil {
				b.Fatal(err)
			}
		}
		for range 20 {
			for i, s := range []driverapi.RunSpec{ls, ly} {
				t := time.Now()
				if err := runTrue(ctx, d, s); err != nil {
					b.Fatal(err)
				}
				if i == 0 {
					live = append(live, time.Since(t))
				} else {
					layered = append(layered, time.Since(t))
				}
			}
		}
		for _, s := range []string{ls.SessionID, ly.SessionID} {
			if err := d.ForgetSession(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
	}
	med := func(v []time.Duration) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return float64(s[len(s)/2]) / float64(time.Millisecond)
	}
	b.ReportMetric(med(live), "live_p50_ms")
	b.ReportMetric(med(layered), "layered_p50_ms")
	b.ReportMetric(med(layered)/med(live), "layered_x_live")
}

// TestLayeredView: while a layered session's sandbox lives, LayeredView
// names a path that opens the sandbox's own overlay (what the command
// wrote is there, the host's files show through, and a file written
// there is what the next command reads, while the host's directory is
// untouched); the path's device and inode are the overlay root's. Another
// session has no view; once the sandbox ends there is none either, and
// the driver's descriptor is closed.
func TestLayeredView(t *testing.T) {
	d := testDriver(t, options{})
	needLayered(t, d)
	ctx := context.Background()
	ws := newWorkspace(t)
	if err := os.WriteFile(filepath.Join(ws, "host.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := newLayerDirs(t)
	expectOK(t, layRun(t, d, ws, "view", spawnCaps, l, `echo session > made.txt`))
	v, err := d.LayeredView(ctx, "view")
	if err != nil || !v.Mounted || !strings.HasPrefix(v.Path, "/proc/") {
		t.Fatalf("view of a live layered sandbox: %+v %v", v, err)
	}
	root, err := os.Open(v.Path)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := root.Stat()
	root.Close()
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || uint64(st.Dev) != v.Dev || st.Ino != v.Ino { //nolint:unconvert // Dev's width differs across architectures
		t.Errorf("the view's identity: %+v, stat %+v", v, fi.Sys())
	}
	for name, want := range map[string]string{"made.txt": "session\n", "host.txt": "host\n"} {
		if b, err := os.ReadFile(filepath.Join(v.Path, name)); err != nil || string(b) != want {
			t.Errorf("%s through the view: %q %v", name, b, err)
		}
	}
	if err := os.WriteFile(filepath.Join(v.Path, "put.txt"), []byte("put\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := layRun(t, d, ws, "view", spawnCaps, l, `cat put.txt`)
	expectOK(t, r)
	if r.stdout != "put\n" {
		t.Errorf("the command reads what was written through the view: %q", r.stdout)
	}
	if _, err := os.Lstat(filepath.Join(ws, "put.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the host has put.txt: %v", err)
	}
	if v, err := d.LayeredView(ctx, "other"); err != nil || v.Mounted {
		t.Errorf("another session's view: %+v %v", v, err)
	}
	path := v.Path
	if err := d.ForgetSession(ctx, "view"); err != nil {
		t.Fatal(err)
	}
	if v, err := d.LayeredView(ctx, "view"); err != nil || v.Mounted {
		t.Errorf("view after the sandbox ended: %+v %v", v, err)
	}
	if f, err := os.Open(path); err == nil {
		fi, _ := f.Stat()
		f.Close()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Ino == v.Ino && uint64(st.Dev) == v.Dev { //nolint:unconvert // Dev's width differs across architectures
			t.Errorf("the driver still holds the ended sandbox's overlay at %s", path)
		}
	}
}

// TestLayeredViewIdleEndRace: the host holds a view of a session's
// overlay (the views lock shared, as core's SessionView takes it, then
// the driver's descriptor opened) when the session's sandbox reaches its
// idle end; the idle end is driven by calling the idle timer's function
// directly. The overlay lives on through the host's descriptor, so the
// session's next command must not mount the upper again: it is refused,
// typed, and no second overlay exists, while the host's write through the
// old view still lands in the layer. Once the view is closed (positive
// control) the next command mounts and reads what the view wrote.
func TestLayeredViewIdleEndRace(t *testing.T) {
	d := testDriver(t, options{})
	needLayered(t, d)
	ctx := context.Background()
	ws := newWorkspace(t)
	l := newLayerDirs(t)
	const S = "idlerace"
	expectOK(t, layRun(t, d, ws, S, spawnCaps, l, `echo one > one.txt`))

	// The host's side, as core.OpenSessionView does it.
	views, err := os.Open(l.Work)
	if err != nil {
		t.Fatal(err)
	}
	defer views.Close()
	if err := syscall.Flock(int(views.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		t.Fatalf("the views lock is free while a sandbox has the layer mounted: %v", err)
	}
	v, err := d.LayeredView(ctx, S)
	if err != nil || !v.Mounted {
		t.Fatalf("view: %+v %v", v, err)
	}
	old, err := os.Open(v.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()

	// The idle end, now.
	d.sessions.mu.Lock()
	var ss *sessionSandbox
	for k, s := range d.sessions.m {
		if k.session == S {
			ss = s
		}
	}
	d.sessions.mu.Unlock()
	if ss == nil {
		t.Fatal("no session sandbox")
	}
	d.idleSession(ss)
	if v, err := d.LayeredView(ctx, S); err != nil || v.Mounted {
		t.Fatalf("control: the sandbox ended, yet the driver has a view: %+v %v", v, err)
	}

	r := layRun(t, d, ws, S, spawnCaps, l, `cat one.txt`)
	var u *driverapi.UnavailableError
	if !errors.As(r.err, &u) || u.Feature != driverapi.FeatureLayeredWorkspace || !strings.Contains(u.Reason, "previous overlay") {
		if nv, _ := d.LayeredView(ctx, S); nv.Mounted && nv.Dev != v.Dev {
			t.Errorf("a second overlay of the upper (dev %d) was mounted while the first (dev %d) is open", nv.Dev, v.Dev)
		}
		t.Fatalf("a command while the old overlay is open: %+v, want a typed refusal", r)
	}
	if nv, err := d.LayeredView(ctx, S); err != nil || nv.Mounted {
		t.Errorf("after the refusal: %+v %v", nv, err)
	}
	// The host's operation through the old overlay goes on into the layer.
	if err := os.WriteFile(filepath.Join(fmt.Sprintf("/proc/self/fd/%d", old.Fd()), "late.txt"), []byte("late\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(l.Upper, "late.txt")); err != nil {
		t.Errorf("the old view's write is not in the upper: %v", err)
	}

	old.Close()
	views.Close()
	r = layRun(t, d, ws, S, spawnCaps, l, `cat one.txt late.txt`)
	expectOK(t, r)
	if r.stdout != "one\nlate\n" {
		t.Errorf("after the view closed, the command reads %q", r.stdout)
	}
	// (Its device number may be the old one's: the old overlay is gone,
	// and anonymous device numbers are reused.)
	if nv, err := d.LayeredView(ctx, S); err != nil || !nv.Mounted {
		t.Errorf("the new sandbox's view: %+v %v", nv, err)
	}
}

// TestLayeredSessionUnprivileged: an unprivileged driver's layered session
// (the supervisor mounts the overlay in the sandbox's user namespace,
// userxattr). A command with no capability writes, deletes, replaces a
// directory and commits with git; the host's directory is untouched while
// the upper layer holds it all, with overlayfs's markers as user xattrs
// (a whiteout, user.overlay.opaque); the command cannot unmount the
// overlay nor see the layer's directory; the supervisor holds no
// CAP_DAC_OVERRIDE once commands run; the next command sees the same
// overlay; a layer made for the initial namespace is refused, typed. The
// control: a live command of the same workspace writes the host.
func TestLayeredSessionUnprivileged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root: the driver mounts the overlay itself (TestLayeredSession); the unprivileged pass runs this one")
	}
	if _, err := os.Stat("/usr/bin/git"); err != nil {
		t.Skip("git is not installed at /usr/bin/git")
	}
	d := testDriver(t, options{SessionSandbox: sessionSandboxAlways})
	needLayered(t, d)
	if !d.layerInNamespace() {
		t.Fatal("unprivileged with layered sessions on, yet not mounted in the sandbox's user namespace")
	}
	caps, err := d.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if caps.Details[driverapi.DetailLayeredUserNS] != "true" {
		t.Errorf("capabilities: %s = %q", driverapi.DetailLayeredUserNS, caps.Details[driverapi.DetailLayeredUserNS])
	}
	ws := newWorkspace(t)
	for p, c := range map[string]string{"a.txt": "host\n", "gone.txt": "g\n", "d/x": "x\n"} {
		os.MkdirAll(filepath.Dir(filepath.Join(ws, p)), 0o755)
		if err := os.WriteFile(filepath.Join(ws, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Refused: a layer made for the initial namespace would be misread.
	bad := newLayerDirs(t)
	bad.UserNS = false
	var ise *driverapi.InvalidSpecError
	if r := layRun(t, d, ws, "bad", spawnCaps, bad, `echo no > no.txt`); !errors.As(r.err, &ise) || ise.Field != "layered.user_ns" {
		t.Errorf("a layer for the initial namespace: %v, want an InvalidSpecError for layered.user_ns", r.err)
	}
	l := newLayerDirs(t)
	script := `set -e
echo session > a.txt
rm gone.txt
rm -r d && mkdir d && echo y > d/y
git init -q -b main . && git add -A && git -c user.name=s -c user.email=s@example.com commit -qm "session commit"
git log --format=%s
grep -E '^CapEff' /proc/self/status | tr -s '\t' ' '
umount ` + ws + ` 2>/dev/null && echo umount=done || echo umount=refused
umount -l ` + ws + ` 2>/dev/null && echo lazy=done || echo lazy=refused
echo layerdir=$(ls -A ` + layerBindPoint + ` 2>/dev/null | wc -l)
cat /proc/1/status 2>/dev/null | grep -E '^CapEff' | tr -s '\t' ' ' | sed 's/^/sup/' || true
echo ran`
	r := layRun(t, d, ws, "lay", spawnCaps, l, script)
	expectOK(t, r)
	for _, want := range []string{"session commit\n", "CapEff: 0000000000000000\n", "umount=refused\n", "lazy=refused\n", "layerdir=0\n", "ran\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inside: no %q in %q (stderr %q)", want, r.stdout, r.stderr)
		}
	}
	// The host untouched.
	for p, c := range map[string]string{"a.txt": "host\n", "gone.txt": "g\n", "d/x": "x\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, p)); err != nil || string(b) != c {
			t.Errorf("host %s: %q %v", p, b, err)
		}
	}
	for _, p := range []string{".git", "d/y"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host has %s: %v", p, err)
		}
	}
	// The upper layer: the command's files, a whiteout, user xattrs.
	if b, err := os.ReadFile(filepath.Join(l.Upper, "a.txt")); err != nil || string(b) != "session\n" {
		t.Errorf("upper a.txt: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(l.Upper, ".git", "HEAD")); err != nil {
		t.Errorf("upper .git/HEAD: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(l.Upper, "gone.txt"), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR || st.Rdev != 0 {
		t.Errorf("upper gone.txt is no whiteout: %+v %v", st, err)
	}
	buf := make([]byte, 8)
	if n, err := syscall.Getxattr(filepath.Join(l.Upper, "d"), "user.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("upper d: user.overlay.opaque = %q, %v", buf[:max(n, 0)], err)
	}
	// The supervisor: its capabilities from outside (bwrap's child).
	if eff, ok := supervisorCapEff(t, d, "lay"); ok && eff&(1<<1) != 0 {
		t.Errorf("the supervisor still holds CAP_DAC_OVERRIDE: CapEff %#x", eff)
	} else if ok && eff&(1<<21) == 0 {
		t.Errorf("control: the supervisor's CapEff %#x lacks CAP_SYS_ADMIN (is this the supervisor?)", eff)
	}
	r = layRun(t, d, ws, "lay", spawnCaps, l, `cat a.txt; ls d; test -e gone.txt || echo gone`)
	expectOK(t, r)
	if r.stdout != "session\ny\ngone\n" || sessionOf(r) != driverapi.SessionSandboxReused {
		t.Errorf("second command: %q %v", r.stdout, r.exit.Details)
	}
	// Positive control: a live command of the workspace writes the host.
	expectOK(t, sessRun(t, d, ws, "live", spawnCaps, `echo live > c.txt`))
	if _, err := os.Stat(filepath.Join(ws, "c.txt")); err != nil {
		t.Errorf("control: a live command did not write the host: %v", err)
	}
	for _, s := range []string{"lay", "live", "bad"} {
		_ = d.ForgetSession(context.Background(), s)
	}
}

// otherLayCaps is a capability set other than spawnCaps that this host
// can enforce (unprivileged, no memory limit: no writable cgroups).
func otherLayCaps() driverapi.Capabilities {
	if os.Geteuid() != 0 {
		return driverapi.Capabilities{SpawnSubprocess: true, FSRead: []string{"/usr/share"}}
	}
	return driverapi.Capabilities{SpawnSubprocess: true, MaxMemoryMB: 512}
}

// supervisorCapEff reads the effective capabilities of session's
// supervisor: the first process below its sandbox's bwrap that is not
// bwrap's own (the sandbox-init binary).
func supervisorCapEff(t *testing.T, d *Driver, session string) (uint64, bool) {
	t.Helper()
	s := &d.sessions
	s.mu.Lock()
	var pid int
	for k, ss := range s.m {
		if k.session == session && ss.sup != nil && ss.sup.sb != nil && ss.sup.sb.cmd != nil && ss.sup.sb.cmd.Process != nil {
			pid = ss.sup.sb.cmd.Process.Pid
		}
	}
	s.mu.Unlock()
	if pid == 0 {
		t.Errorf("no sandbox found for session %q", session)
		return 0, false
	}
	for depth := 0; ; depth++ {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		if err != nil || len(strings.Fields(string(b))) != 1 || depth > 4 {
			t.Errorf("below pid %d: children %q %v", pid, b, err)
			return 0, false
		}
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); !strings.HasSuffix(exe, "/bwrap") {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if !bytes.Contains(cmd, []byte("sandbox-init")) && !bytes.Contains(cmd, []byte("session_supervisor")) {
				t.Logf("the supervisor's command line: %q", cmd)
			}
			break
		}
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Errorf("the supervisor's status: %v", err)
		return 0, false
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return eff, err == nil
		}
	}
	t.Errorf("no CapEff in the supervisor's status")
	return 0, false
}

// TestLayeredOverlayTrial: an unprivileged driver tries the layered
// session's overlay mount at probe time (probeSessionOverlay). With the
// real options the trial passes and a layered command runs (the control);
// with options the kernel refuses (as a kernel that refuses userxattr
// overlays in a user namespace would), the capabilities say why and a
// layered command is refused typed before any sandbox is built (nothing
// ran: no output, nothing in the upper layer, no session sandbox), while
// a live session command of that same driver still runs. The trial
// leaves nothing in the state directory.
func TestLayeredOverlayTrial(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root: the driver mounts the overlay itself and needs no trial; the unprivileged pass runs this one")
	}
	state := t.TempDir()
	d, err := newDriver(config{Options: options{SessionSandbox: sessionSandboxAlways}, InitBinary: driverBin, DriverBinary: driverBin, StateDir: state})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	needLayered(t, d)
	if !d.layerInNamespace() || d.probe().sessionOverlayWhy != "" {
		t.Fatalf("unprivileged with layered sessions on: in the namespace %v, trial %q", d.layerInNamespace(), d.probe().sessionOverlayWhy)
	}
	ws := newWorkspace(t)
	l := newLayerDirs(t)
	r := layRun(t, d, ws, "ok", spawnCaps, l, `echo layered > a.txt; echo ran`)
	expectOK(t, r)
	if r.stdout != "ran\n" {
		t.Errorf("control: %q", r.stdout)
	}
	if b, err := os.ReadFile(filepath.Join(l.Upper, "a.txt")); err != nil || string(b) != "layered\n" {
		t.Errorf("control: upper a.txt %q %v", b, err)
	}
	_ = d.ForgetSession(context.Background(), "ok")

	// Broken options: the mount is refused (EINVAL), as a kernel without
	// userxattr overlays in a user namespace refuses it.
	bstate := t.TempDir()
	b, err := newDriver(config{Options: options{SessionSandbox: sessionSandboxAlways}, InitBinary: driverBin, DriverBinary: driverBin,
		StateDir: bstate, overlayTrialOptions: overlayOptionsUserNS + ",aleph_no_such_option"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if !b.probe().sessionUser {
		t.Fatalf("control: the session sandboxes' own trial failed: %s", b.probe().sessionUserWhy)
	}
	why := b.layeredOffWhy()
	if !strings.Contains(why, "trial overlay mount") || !strings.Contains(why, "invalid argument") || b.LayeredWorkspaces() {
		t.Fatalf("layered with a refused trial mount: %q (on: %v)", why, b.LayeredWorkspaces())
	}
	t.Logf("layered refused: %s", why)
	caps, err := b.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if caps.Details[driverapi.DetailLayeredWorkspace] != why || caps.Details[driverapi.DetailLayeredUserNS] != "" {
		t.Errorf("capabilities: %s = %q, %s = %q", driverapi.DetailLayeredWorkspace, caps.Details[driverapi.DetailLayeredWorkspace],
			driverapi.DetailLayeredUserNS, caps.Details[driverapi.DetailLayeredUserNS])
	}
	bws := newWorkspace(t)
	bl := newLayerDirs(t)
	r = layRun(t, b, bws, "lay", spawnCaps, bl, `echo layered > a.txt; echo ran`)
	var ue *driverapi.UnavailableError
	if !errors.As(r.err, &ue) || ue.Feature != driverapi.FeatureLayeredWorkspace || ue.Reason != why {
		t.Fatalf("a layered command: %v, want the layered_workspace refusal %q", r.err, why)
	}
	expectRefusedLeftNothing(t, r, bl.Upper)
	if _, all := sessionProcs(bws); len(all) != 0 {
		t.Errorf("a session sandbox was built for the refused command: %v", all)
	}
	// Positive control: that driver's live session commands still run.
	expectOK(t, sessRun(t, b, bws, "live", spawnCaps, `echo live > c.txt`))
	if _, err := os.Stat(filepath.Join(bws, "c.txt")); err != nil {
		t.Errorf("control: a live command of that driver did not write the host: %v", err)
	}
	_ = b.ForgetSession(context.Background(), "live")
	// Nothing of either trial left in the state directories.
	for _, dir := range []string{state, bstate} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".overlay-trial-") {
				t.Errorf("left in %s: %s", dir, e.Name())
			}
		}
	}
}
