//go:build linux

package layer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// MountView mounts the layer's overlay for the host's file operations
// when no session sandbox has it mounted: the files API reads and writes
// a layered session's view through overlayfs, never its upper directory
// directly (what it would have to emulate: whiteouts, opaque directories,
// copy-up), and never while another overlay of the same upper exists
// (two overlays sharing an upper are undefined).
//
// It takes what the bwrap driver takes to mount (the layer's lock shared,
// the upper directory's flock exclusive, non-blocking), so while the view
// is open no driver mounts the upper and Discard refuses; a layer mounted
// elsewhere gives ErrLayerBusy. The overlay is mounted on a fresh
// directory of the layer's, its root opened, and the mount detached at
// once: the one reference left is the returned descriptor, and nothing of
// it stays in the host's mount table. It needs the right to mount
// (CAP_SYS_ADMIN): layers made for a user namespace are refused.
func (l *Layer) MountView(ctx context.Context) (_ *View, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m := l.MountSpec()
	if m.UserNS {
		return nil, &LayerError{Dir: l.dir, Reason: "the layer was made for a user namespace; the host mounts views in the initial one only"}
	}
	data, err := m.Data()
	if err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(l.dir+"/"+LockFile, os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &LayerError{Dir: l.dir, Reason: "the lock cannot be opened", Err: err}
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		return nil, ErrLayerMounted
	}
	upper, err := os.OpenFile(m.Upper, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &LayerError{Dir: l.dir, Reason: "the upper directory cannot be opened", Err: err}
	}
	defer func() {
		if err != nil {
			upper.Close()
		}
	}()
	if err := unix.Flock(int(upper.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("%w (the session's sandbox in another process, e.g. a one-shot exec): %v", ErrLayerBusy, err)
	}
	// The views lock, exclusively for the mount: no overlay of the upper
	// may be open anywhere while a new one is mounted (HoldViews).
	views, err := os.OpenFile(m.Work, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &LayerError{Dir: l.dir, Reason: "the work directory cannot be opened", Err: err}
	}
	defer views.Close()
	if err := unix.Flock(int(views.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return nil, fmt.Errorf("%w (a view of an overlay of the layer that has ended is still open there): %v", ErrLayerBusy, err)
	}
	point, err := os.MkdirTemp(l.dir, ".view-")
	if err != nil {
		return nil, &LayerError{Dir: l.dir, Reason: "a mount point cannot be made", Err: err}
	}
	defer os.Remove(point)
	if err := unix.Mount("overlay", point, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return nil, &LayerError{Dir: l.dir, Reason: "mounting the overlay failed (the host needs the right to mount: root)", Err: err}
	}
	dir, oerr := os.OpenFile(point, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if uerr := unix.Unmount(point, unix.MNT_DETACH); uerr != nil && oerr == nil {
		dir.Close()
		return nil, &LayerError{Dir: l.dir, Reason: "detaching the view's mount failed", Err: uerr}
	}
	if oerr != nil {
		return nil, &LayerError{Dir: l.dir, Reason: "the overlay's root cannot be opened", Err: oerr}
	}
	return &View{Dir: dir, lock: lock, upper: upper}, nil
}

// HoldViews takes the layer's views lock (the flock of its work
// directory) shared and returns its release. Whoever reaches an overlay of
// the layer that someone else mounted (the files API through a session
// sandbox's overlay, core's SessionView) holds it from before it asks
// where that overlay is until it has closed every descriptor of it.
//
// Why: such a descriptor keeps its overlay alive after the sandbox that
// mounted it has ended (its idle end, its death, forget), and a command
// of the session would then mount the upper again: two overlays of one
// upper, which overlayfs leaves undefined. Every mounter (the bwrap
// driver, MountView) takes the lock exclusively, without waiting, for
// its mount, so none mounts while a view is held; it is released once
// the mount is made, so views of the current overlay are taken and
// commands run in it meanwhile. A mounter holds it only across one
// mount(2), so the wait here is short; it is polled to honour ctx.
func (l *Layer) HoldViews(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(l.MountSpec().Work, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &LayerError{Dir: l.dir, Reason: "the work directory cannot be opened", Err: err}
	}
	wait := time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, &LayerError{Dir: l.dir, Reason: "the views lock cannot be taken", Err: err}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}
