//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// TestOpenLayeredView: the view the driver mounts for the host of a layer
// no session sandbox has mounted (as root and, in the unprivileged pass,
// in a user namespace of the helper's own with userxattr):
//   - while the session's sandbox has the layer mounted, it is refused,
//     typed (the upper's flock), as it is while the host holds the views
//     lock of an earlier overlay;
//   - once the sandbox ended, the view reads what the session wrote, a
//     write through it lands in the upper and not on the host, a removal
//     hides a host file the host keeps;
//   - while it is open a command of the session is refused, typed, and
//     ran not: nothing it would write reaches the upper;
//   - once its context ended (Ended closed): no helper process is left,
//     the driver holds no descriptor of an overlay, and (control) the
//     session's next command mounts and sees the view's write and removal.
func TestOpenLayeredView(t *testing.T) {
	d := testDriver(t, options{})
	needLayered(t, d)
	ctx := context.Background()
	ws := newWorkspace(t)
	if err := os.WriteFile(filepath.Join(ws, "host.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := newLayerDirs(t)
	const S = "hostview"
	req := driverapi.LayeredViewRequest{SessionID: S, Workspace: ws, Layered: *l}
	expectOK(t, layRun(t, d, ws, S, spawnCaps, l, `echo one > one.txt`))

	// The sandbox lives: refused.
	vctx, end := context.WithCancel(ctx)
	_, err := d.OpenLayeredView(vctx, req)
	end()
	var u *driverapi.UnavailableError
	if !errors.As(err, &u) || u.Feature != driverapi.FeatureLayeredWorkspace || !strings.Contains(u.Reason, "mounted elsewhere") {
		t.Fatalf("a view while the session's sandbox has the layer: %v, want a typed refusal", err)
	}
	if err := d.ForgetSession(ctx, S); err != nil {
		t.Fatal(err)
	}

	// The host holds the views lock (an earlier overlay still open): refused.
	views, err := os.Open(l.Work)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(views.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	vctx, end = context.WithCancel(ctx)
	_, err = d.OpenLayeredView(vctx, req)
	end()
	if !errors.As(err, &u) || !strings.Contains(u.Reason, "earlier overlay") {
		t.Fatalf("a view while the views lock is held: %v, want a typed refusal", err)
	}
	views.Close()

	vctx, end = context.WithCancel(ctx)
	defer end()
	v, err := d.OpenLayeredView(vctx, req)
	if err != nil {
		t.Fatalf("open a view: %v", err)
	}
	if !v.Mounted || v.Ended == nil || v.Path != fmt.Sprintf("/proc/%d/fd/%s", os.Getpid(), filepath.Base(v.Path)) {
		t.Fatalf("view %+v", v)
	}
	root, err := os.Open(v.Path)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	var sf unix.Statfs_t
	if unix.Fstat(int(root.Fd()), &st) != nil || unix.Fstatfs(int(root.Fd()), &sf) != nil || sf.Type != unix.OVERLAYFS_SUPER_MAGIC ||
		uint64(st.Dev) != v.Dev || st.Ino != v.Ino { //nolint:unconvert // Dev's width differs across architectures
		t.Fatalf("the view's path opens dev %d ino %d fs %#x, want an overlay with dev %d ino %d", st.Dev, st.Ino, sf.Type, v.Dev, v.Ino)
	}
	at := func(name string) string { return filepath.Join(fmt.Sprintf("/proc/self/fd/%d", root.Fd()), name) }
	if b, err := os.ReadFile(at("one.txt")); err != nil || string(b) != "one\n" {
		t.Errorf("the session's file through the view: %q %v", b, err)
	}
	if b, err := os.ReadFile(at("host.txt")); err != nil || string(b) != "host\n" {
		t.Errorf("the host's file through the view: %q %v", b, err)
	}
	if err := os.WriteFile(at("api.txt"), []byte("api\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(at("host.txt")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(l.Upper, "api.txt")); err != nil {
		t.Errorf("the view's write is not in the upper: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "api.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the view's write reached the host: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "host.txt")); err != nil || string(b) != "host\n" {
		t.Errorf("the host's file after the view removed it: %q %v", b, err)
	}
	if n := helperProcesses(t); n != 0 {
		t.Errorf("%d helper processes left while the view is open", n)
	}
	if n := overlayDescriptors(t, v.Dev); n < 2 {
		t.Errorf("control: %d descriptors of the view's overlay in this process, want the driver's and the test's", n)
	}

	// A command of the session while the view is open: refused, not run.
	r := layRun(t, d, ws, S, spawnCaps, l, `echo ran > ran.txt`)
	if !errors.As(r.err, &u) || u.Feature != driverapi.FeatureLayeredWorkspace {
		t.Fatalf("a command while the view is open: %+v, want a typed refusal", r)
	}
	if _, err := os.Lstat(filepath.Join(l.Upper, "ran.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused command ran: %v", err)
	}

	root.Close()
	end()
	<-v.Ended
	if n := overlayDescriptors(t, v.Dev); n != 0 {
		t.Errorf("%d descriptors of the view's overlay left after it ended", n)
	}
	if n := helperProcesses(t); n != 0 {
		t.Errorf("%d helper processes left after the view ended", n)
	}
	if m, _ := filepath.Glob(filepath.Join(d.layerMountParent(), "view-*")); len(m) != 0 {
		t.Errorf("mount points left: %v", m)
	}
	r = layRun(t, d, ws, S, spawnCaps, l, `cat one.txt api.txt; test ! -e host.txt && echo gone`)
	expectOK(t, r)
	if r.stdout != "one\napi\ngone\n" {
		t.Errorf("the next command reads %q", r.stdout)
	}
	if err := d.ForgetSession(ctx, S); err != nil {
		t.Error(err)
	}
}

// helperProcesses counts the processes running the layered-view helper
// that are this process's children.
func helperProcesses(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The parent pid follows the command name's closing parenthesis.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		if cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmd), sandboxinit.LayeredViewCommand) {
			n++
		}
	}
	return n
}

// overlayDescriptors counts this process's descriptors of an overlay with
// device dev.
func overlayDescriptors(t *testing.T, dev uint64) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		var st syscall.Stat_t
		var sf unix.Statfs_t
		p := filepath.Join("/proc/self/fd", e.Name())
		if syscall.Stat(p, &st) == nil && unix.Statfs(p, &sf) == nil && sf.Type == unix.OVERLAYFS_SUPER_MAGIC && uint64(st.Dev) == dev { //nolint:unconvert // Dev's width differs across architectures
			n++
		}
	}
	return n
}
