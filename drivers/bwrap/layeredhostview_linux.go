//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// The host's view of a layer no session sandbox has mounted (protocol
// 1.7, driverapi.LayeredViewOpener).
//
// Unprivileged, a layer's overlay is mounted with userxattr in a user
// namespace (layered_linux.go): the host, in the initial one, cannot
// mount it, and a Go process cannot enter a user namespace (setns of a
// user namespace refuses a multi-threaded caller). So the driver starts a
// short-lived helper, the init binary's LayeredViewCommand, in a user and
// mount namespace of its own (uid and gid 0 inside mapped to the driver's
// outside: the mounter a session supervisor is), which mounts the overlay
// with the session sandbox's options, opens its root, passes the
// descriptor back over a socket pair and exits. Its mount namespace ends
// with it; the descriptor, kept by the driver, is the overlay's one
// reference, as the host's own detached view is as root (and as root the
// driver does the same with a mount namespace alone, without userxattr).
//
// The locks are a layered command's: the layer's lock shared and the
// upper's flock exclusive, both without waiting and held until the view
// ends, so no session sandbox (of this driver or another process) mounts
// the upper beside the view; the views lock exclusive for the mount only.
// The view ends with the caller's ctx: the descriptor is closed first,
// then the locks are released, then Ended is closed.

// layeredViewHelperTimeout bounds the helper: a mount, an open, a send.
const layeredViewHelperTimeout = 30 * time.Second

// OpenLayeredView implements driverapi.LayeredViewOpener.
func (d *Driver) OpenLayeredView(ctx context.Context, req driverapi.LayeredViewRequest) (_ driverapi.LayeredView, err error) {
	if err := ctx.Err(); err != nil {
		return driverapi.LayeredView{}, err
	}
	if why := d.layeredOffWhy(); why != "" {
		return driverapi.LayeredView{}, layeredRefusal(why)
	}
	l := req.Layered
	if err := l.Validate(); err != nil {
		return driverapi.LayeredView{}, err
	}
	inside := d.layerInNamespace()
	if l.UserNS != inside {
		return driverapi.LayeredView{}, &driverapi.InvalidSpecError{Field: "layered.user_ns",
			Reason: fmt.Sprintf("the layer was made for user_ns=%t, and this driver mounts with user_ns=%t; it would be misread", l.UserNS, inside)}
	}
	if req.Workspace == "" || req.Workspace[0] != '/' || strings.ContainsAny(req.Workspace, ",:\\\n\x00") {
		return driverapi.LayeredView{}, &driverapi.InvalidSpecError{Field: "workspace", Reason: fmt.Sprintf("%q is not an absolute path an overlay's mount options can carry", req.Workspace)}
	}
	for _, p := range []string{l.Upper, l.Work} {
		if driverapi.PathWithin(p, req.Workspace) || driverapi.PathWithin(req.Workspace, p) {
			return driverapi.LayeredView{}, &driverapi.InvalidSpecError{Field: "layered", Reason: fmt.Sprintf("%q overlaps the workspace %q", p, req.Workspace)}
		}
	}

	lock, upper, views, err := takeLayerLocks(&l)
	var busy *layerBusyError
	switch {
	case errors.As(err, &busy) && busy.which == layerLockDiscard:
		return driverapi.LayeredView{}, layeredViewRefusal(fmt.Sprintf("the layer is being discarded (its lock %s is held exclusively): %v", l.Lock, busy.err))
	case errors.As(err, &busy) && busy.which == layerLockUpper:
		return driverapi.LayeredView{}, layeredViewRefusal(fmt.Sprintf("the layer is mounted elsewhere (a session sandbox of the session, in this driver or another process, or another view of it): overlayfs forbids two mounts sharing an upper (%v)", busy.err))
	case errors.As(err, &busy):
		return driverapi.LayeredView{}, layeredViewRefusal(fmt.Sprintf("the host still has an earlier overlay of the layer open; overlayfs forbids two overlays sharing an upper (%v)", busy.err))
	case err != nil:
		return driverapi.LayeredView{}, fmt.Errorf("bwrap driver: layered view: %w", err)
	}
	defer func() {
		if err != nil {
			lock.Close()
			upper.Close()
		}
	}()
	view, err := d.mountLayerView(ctx, req.Workspace, l, inside)
	// The views lock is for the mount alone: the host takes it shared
	// once it has the answer.
	views.Close()
	if err != nil {
		return driverapi.LayeredView{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(view.Fd()), &st); err != nil {
		view.Close()
		return driverapi.LayeredView{}, fmt.Errorf("bwrap driver: layered view: stat: %w", err)
	}
	ended := make(chan struct{})
	go func() {
		<-ctx.Done()
		// The descriptor first: once the upper's flock is released a
		// session sandbox may mount the upper, and this overlay must be
		// gone by then.
		view.Close()
		upper.Close()
		lock.Close()
		close(ended)
	}()
	return driverapi.LayeredView{Mounted: true, Path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), view.Fd()),
		Dev: uint64(st.Dev), Ino: st.Ino, Ended: ended}, nil //nolint:unconvert // Dev's width differs across architectures
}

// layeredViewRefusal is the typed refusal of a view.
func layeredViewRefusal(reason string) error {
	return &driverapi.UnavailableError{Feature: driverapi.FeatureLayeredWorkspace, Reason: reason,
		Fix: "wait for the session's running command (another process's) to end, or reach the session's files through its sandbox while it lives"}
}

// mountLayerView runs the helper and returns the overlay root it passed.
func (d *Driver) mountLayerView(ctx context.Context, workspace string, l driverapi.LayeredWorkspace, inside bool) (_ *os.File, err error) {
	point, err := os.MkdirTemp(d.layerMountParent(), "view-")
	if err != nil {
		return nil, fmt.Errorf("bwrap driver: layered view: mount point: %w", err)
	}
	// Empty again once the helper's mount namespace has ended.
	defer os.Remove(point)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("bwrap driver: layered view: socket pair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "layered-view"), os.NewFile(uintptr(fds[1]), "layered-view-helper")
	defer mine.Close()
	options := overlayOptions
	if inside {
		options = overlayOptionsUserNS
	}
	hctx, cancel := context.WithTimeout(ctx, layeredViewHelperTimeout)
	defer cancel()
	cmd := exec.CommandContext(hctx, d.cfg.InitBinary, sandboxinit.LayeredViewCommand, point, workspace, l.Upper, l.Work, options)
	cmd.Env = []string{}
	cmd.Dir = "/"
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3: sandboxinit.LayeredViewFD
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if inside {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		cmd.SysProcAttr.GidMappingsEnableSetgroups = false
	}
	runErr := cmd.Run()
	theirs.Close()
	if runErr != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, layeredRefusal(fmt.Sprintf("mounting the layer's overlay for the host's view failed (%v): %s", runErr, strings.TrimSpace(stderr.String())))
	}
	// The helper has exited; its one message waits in the socket.
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := unix.Recvmsg(int(mine.Fd()), buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil || n != 1 {
		return nil, fmt.Errorf("bwrap driver: layered view: the helper passed no descriptor (%d bytes, %v)", n, err)
	}
	got := receivedFDs(oob[:oobn])
	if len(got) != 1 {
		for _, fd := range got {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("bwrap driver: layered view: the helper passed %d descriptors, not one", len(got))
	}
	view := os.NewFile(uintptr(got[0]), "layered-view-root")
	var sf unix.Statfs_t
	var st unix.Stat_t
	if unix.Fstatfs(got[0], &sf) != nil || sf.Type != unix.OVERLAYFS_SUPER_MAGIC || unix.Fstat(got[0], &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		view.Close()
		return nil, errors.New("bwrap driver: layered view: the helper passed something else than an overlay's root directory")
	}
	return view, nil
}
