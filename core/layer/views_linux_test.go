//go:build linux

package layer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLayerViewsLock: while a view of an overlay of the layer is held
// (HoldViews), MountView refuses with ErrLayerBusy and mounts nothing;
// released, it mounts (positive control), and its exclusive hold lasts
// only for the mount: views are taken while its view is open. A holder
// waiting on a mounter gives up with its context. Discard refuses while a
// view is held, and removes the layer once none is.
func TestLayerViewsLock(t *testing.T) {
	requireOverlay(t, 0)
	f := newFixture(t, map[string]string{"a.txt": "a\n"}, 0, Policy{})
	ctx := context.Background()
	release, err := f.l.HoldViews(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Shared: a second holder is let in.
	release2, err := f.l.HoldViews(ctx)
	if err != nil {
		t.Fatalf("a second view holder: %v", err)
	}
	release2()
	if v, err := f.l.MountView(ctx); !errors.Is(err, ErrLayerBusy) {
		if v != nil {
			v.Close()
		}
		t.Fatalf("MountView while a view is held: %v, want ErrLayerBusy", err)
	}
	if ents, _ := filepath.Glob(filepath.Join(f.l.Dir(), ".view-*")); len(ents) != 0 {
		t.Errorf("a refused MountView left %v", ents)
	}
	if err := f.l.Discard(ctx); !errors.Is(err, ErrLayerMounted) {
		t.Fatalf("Discard while a view is held: %v, want ErrLayerMounted", err)
	}
	release()

	v, err := f.l.MountView(ctx)
	if err != nil {
		t.Fatalf("MountView once the views are released: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join("/proc/self/fd", strconv.Itoa(int(v.Dir.Fd())), "a.txt")); err != nil || string(b) != "a\n" {
		t.Errorf("through the view: %q %v", b, err)
	}
	release, err = f.l.HoldViews(ctx)
	if err != nil {
		t.Fatalf("a view holder while MountView's view is open: %v", err)
	}
	release()
	v.Close()

	// A mounter's exclusive hold, as the driver takes it for its mount:
	// a holder waits, and gives up with its context.
	// (The context is cancelled before the call: no timing.)
	work, err := os.Open(f.l.MountSpec().Work)
	if err != nil {
		t.Fatal(err)
	}
	defer work.Close()
	if err := unix.Flock(int(work.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.l.HoldViews(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("HoldViews under a mounter's lock: %v, want the context's error", err)
	}
	work.Close()
	// The control of the refused Discard above.
	if err := f.l.Discard(ctx); err != nil {
		t.Fatalf("Discard with no view held: %v", err)
	}
	if _, err := os.Lstat(f.l.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the layer is still there: %v", err)
	}
}
