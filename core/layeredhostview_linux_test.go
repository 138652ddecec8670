//go:build linux

package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// viewFake is a driver whose layers are made for a user namespace and that
// opens views of them (driverapi.LayeredViewOpener) as open says, served
// over gRPC as a plugin is.
type viewFake struct {
	*drivertest.FakeDriver
	open func(ctx context.Context, req driverapi.LayeredViewRequest) (driverapi.LayeredView, func(), error)

	mu       sync.Mutex
	reqs     []driverapi.LayeredViewRequest
	released int
}

func (f *viewFake) OpenLayeredView(ctx context.Context, req driverapi.LayeredViewRequest) (driverapi.LayeredView, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	lv, release, err := f.open(ctx, req)
	if err != nil {
		return lv, err
	}
	ended := make(chan struct{})
	go func() {
		<-ctx.Done()
		release()
		f.mu.Lock()
		f.released++
		f.mu.Unlock()
		close(ended)
	}()
	lv.Ended = ended
	return lv, nil
}

func (f *viewFake) counts() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs), f.released
}

// newViewHarness is newHarness over fake, served over gRPC.
func newViewHarness(t *testing.T, fake *viewFake) *harness {
	t.Helper()
	sb, err := NewWorkspaceSandbox(testConfig(t), WithDriver(drivertest.Connect(t, fake)), WithAuditSink(&memSink{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return &harness{sb: sb, fake: fake.FakeDriver}
}

// userNSCaps lists layered workspaces mounted in a user namespace, and
// the view opener when opener is set.
func userNSCaps(opener bool) driverapi.HostCapabilities {
	c := drivertest.FullCapabilities()
	c.Calls = []string{driverapi.CallSessionSandbox, driverapi.CallForgetSession, driverapi.CallLayeredWorkspace}
	if opener {
		c.Calls = append(c.Calls, driverapi.CallLayeredViewOpen)
	}
	c.Details = map[string]string{driverapi.DetailLayeredUserNS: "true", driverapi.DetailLayeredWorkspace: "on: test"}
	return c
}

// userNSLayer runs one layered command of session s1 over a new workspace
// holding host.txt, which makes the session's layer (for a user
// namespace), and returns the workspace and the layer.
func userNSLayer(t *testing.T, sb *WorkspaceSandbox) (string, *layer.Layer) {
	t.Helper()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "host.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Execute(context.Background(), Command{SessionID: "s1", Workspace: ws, Layered: true, Program: "true"}); err != nil {
		t.Fatal(err)
	}
	_, l, err := sb.openLayer("s1")
	if err != nil {
		t.Fatal(err)
	}
	if !l.MountSpec().UserNS {
		t.Fatal("control: the layer is not made for a user namespace")
	}
	return ws, l
}

// viewsLockFree reports whether the layer's views lock can be taken
// exclusively now (and releases it).
func viewsLockFree(t *testing.T, l *layer.Layer) bool {
	t.Helper()
	f, err := os.Open(l.MountSpec().Work)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}

// The files API's way into a layered session whose layer is made for a
// user namespace: a driver without the opener keeps today's refusal; the
// driver's refusal arrives typed; a view that is not the overlay is
// refused and the driver's view ended before the refusal returns; in
// every case the session's lock and the views lock are free afterwards (a
// command of the session runs).
func TestSessionViewUserNSRefusals(t *testing.T) {
	ctx := context.Background()
	t.Run("no opener", func(t *testing.T) {
		h := newHarness(t, testConfig(t), &drivertest.FakeDriver{Caps: userNSCaps(false)})
		_, l := userNSLayer(t, h.sb)
		_, err := h.sb.OpenSessionView(ctx, "s1")
		var u *LayeredUnavailableError
		if !errors.As(err, &u) || !strings.Contains(u.Reason, "user namespace") || !errors.As(err, new(*driverapi.UnsupportedCallError)) {
			t.Fatalf("%v, want today's refusal", err)
		}
		if !viewsLockFree(t, l) {
			t.Error("the views lock is held after the refusal")
		}
		if _, err := h.sb.Execute(ctx, Command{SessionID: "s1", Workspace: l.Workspace(), Layered: true, Program: "true"}); err != nil {
			t.Errorf("a command after the refusal: %v", err)
		}
	})
	t.Run("driver refuses", func(t *testing.T) {
		fake := &viewFake{FakeDriver: &drivertest.FakeDriver{Caps: userNSCaps(true)},
			open: func(context.Context, driverapi.LayeredViewRequest) (driverapi.LayeredView, func(), error) {
				return driverapi.LayeredView{}, nil, &driverapi.UnavailableError{Feature: driverapi.FeatureLayeredWorkspace, Reason: "mounted elsewhere", Fix: "wait"}
			}}
		h := newViewHarness(t, fake)
		ws, l := userNSLayer(t, h.sb)
		_, err := h.sb.OpenSessionView(ctx, "s1")
		var u *LayeredUnavailableError
		var du *driverapi.UnavailableError
		if !errors.As(err, &u) || !errors.As(err, &du) || du.Reason != "mounted elsewhere" || du.Fix != "wait" {
			t.Fatalf("%v, want a LayeredUnavailableError carrying the driver's typed refusal", err)
		}
		if n, _ := fake.counts(); n != 1 {
			t.Fatalf("the driver was asked %d times", n)
		}
		r := fake.reqs[0]
		m := l.MountSpec()
		if r.SessionID != "s1" || r.Workspace != ws || r.Layered.Upper != m.Upper || r.Layered.Work != m.Work || !r.Layered.UserNS ||
			r.Layered.Lock != filepath.Join(l.Dir(), layer.LockFile) {
			t.Errorf("request %+v", r)
		}
		if !viewsLockFree(t, l) {
			t.Error("the views lock is held after the refusal")
		}
		if _, err := h.sb.Execute(ctx, Command{SessionID: "s1", Workspace: ws, Layered: true, Program: "true"}); err != nil {
			t.Errorf("a command after the refusal: %v", err)
		}
	})
	t.Run("not an overlay", func(t *testing.T) {
		plain := t.TempDir()
		fake := &viewFake{FakeDriver: &drivertest.FakeDriver{Caps: userNSCaps(true)},
			open: func(context.Context, driverapi.LayeredViewRequest) (driverapi.LayeredView, func(), error) {
				f, err := os.Open(plain)
				if err != nil {
					return driverapi.LayeredView{}, nil, err
				}
				var st unix.Stat_t
				if err := unix.Fstat(int(f.Fd()), &st); err != nil {
					f.Close()
					return driverapi.LayeredView{}, nil, err
				}
				return driverapi.LayeredView{Mounted: true, Path: fmt.Sprintf("/proc/self/fd/%d", f.Fd()), Dev: uint64(st.Dev), Ino: st.Ino}, func() { f.Close() }, nil //nolint:unconvert // Dev's width differs across architectures
			}}
		h := newViewHarness(t, fake)
		_, l := userNSLayer(t, h.sb)
		_, err := h.sb.OpenSessionView(ctx, "s1")
		if !errors.As(err, new(*LayeredUnavailableError)) {
			t.Fatalf("%v, want a LayeredUnavailableError", err)
		}
		// Ended before the refusal returned: the driver let go of it.
		if asked, released := fake.counts(); asked != 1 || released != 1 {
			t.Errorf("asked %d, released %d when the refusal returned", asked, released)
		}
		if !viewsLockFree(t, l) {
			t.Error("the views lock is held after the refusal")
		}
	})
}

// A layer made for the initial user namespace is never the driver's to
// mount for the host: the host mounts its own view (layer.MountView, root
// only), and the opener is not asked even where the driver has it.
func TestSessionViewInitialNamespaceNotOpener(t *testing.T) {
	fake := &viewFake{FakeDriver: &drivertest.FakeDriver{Caps: userNSCaps(true)},
		open: func(context.Context, driverapi.LayeredViewRequest) (driverapi.LayeredView, func(), error) {
			return driverapi.LayeredView{}, nil, errors.New("asked")
		}}
	delete(fake.Caps.Details, driverapi.DetailLayeredUserNS)
	h := newViewHarness(t, fake)
	ws := t.TempDir()
	if _, err := h.sb.Execute(context.Background(), Command{SessionID: "s1", Workspace: ws, Layered: true, Program: "true"}); err != nil {
		t.Fatal(err)
	}
	v, err := h.sb.OpenSessionView(context.Background(), "s1")
	if err == nil {
		v.Close(context.Background(), false)
	} else if os.Geteuid() == 0 {
		t.Errorf("as root the host's own view: %v", err)
	}
	if asked, _ := fake.counts(); asked != 0 {
		t.Errorf("the opener was asked %d times for a layer of the initial namespace", asked)
	}
}

// The view a driver opens is what the files API reads and writes: as root
// the fake mounts a real overlay as the bwrap driver's helper does (the
// layer's options, userxattr, detached at once). While the view is open
// the views lock is held shared and the driver's view lives; Close ends
// the driver's view before it returns, frees the views lock, and records
// the write (changes lists it). The host's directory is untouched.
func TestSessionViewUserNSOpened(t *testing.T) {
	probe := t.TempDir()
	if err := unix.Mount("tmpfs", probe, "tmpfs", 0, "size=16k"); err != nil {
		t.Skipf("the fake driver mounts the overlay itself, which needs root here: %v", err)
	}
	_ = unix.Unmount(probe, unix.MNT_DETACH)
	ctx := context.Background()
	fake := &viewFake{FakeDriver: &drivertest.FakeDriver{Caps: userNSCaps(true)},
		open: func(_ context.Context, req driverapi.LayeredViewRequest) (driverapi.LayeredView, func(), error) {
			point := t.TempDir()
			data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=nofollow,metacopy=off,index=off,xino=off,userxattr", req.Workspace, req.Layered.Upper, req.Layered.Work)
			if err := unix.Mount("overlay", point, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
				return driverapi.LayeredView{}, nil, &driverapi.UnavailableError{Feature: driverapi.FeatureLayeredWorkspace, Reason: err.Error()}
			}
			f, err := os.Open(point)
			_ = unix.Unmount(point, unix.MNT_DETACH)
			if err != nil {
				return driverapi.LayeredView{}, nil, err
			}
			var st unix.Stat_t
			_ = unix.Fstat(int(f.Fd()), &st)
			return driverapi.LayeredView{Mounted: true, Path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd()), Dev: uint64(st.Dev), Ino: st.Ino}, func() { f.Close() }, nil //nolint:unconvert // Dev's width differs across architectures
		}}
	h := newViewHarness(t, fake)
	ws, l := userNSLayer(t, h.sb)
	v, err := h.sb.OpenSessionView(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	at := func(name string) string { return filepath.Join(fmt.Sprintf("/proc/self/fd/%d", v.Dir.Fd()), name) }
	if b, err := os.ReadFile(at("host.txt")); err != nil || string(b) != "host\n" {
		t.Errorf("the host's file through the view: %q %v", b, err)
	}
	if err := os.WriteFile(at("api.txt"), []byte("api\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if viewsLockFree(t, l) {
		t.Error("the views lock is free while the view is open")
	}
	if _, released := fake.counts(); released != 0 {
		t.Error("the driver's view ended while the files API holds it")
	}
	if err := v.Close(ctx, true); err != nil {
		t.Fatal(err)
	}
	if asked, released := fake.counts(); asked != 1 || released != 1 {
		t.Errorf("asked %d, released %d when Close returned", asked, released)
	}
	if !viewsLockFree(t, l) {
		t.Error("the views lock is held after Close")
	}
	if _, err := os.Lstat(filepath.Join(l.MountSpec().Upper, "api.txt")); err != nil {
		t.Errorf("the write is not in the upper: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "api.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the write reached the host: %v", err)
	}
	chs, err := h.sb.Changes(ctx, "s1")
	if err != nil || len(chs) != 1 || chs[0].Path != "api.txt" || chs[0].Kind != layer.KindAdded {
		t.Errorf("changes %+v %v", chs, err)
	}
}
