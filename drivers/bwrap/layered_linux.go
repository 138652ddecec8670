//go:build linux

package bwrap

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Layered workspaces (protocol 1.4, driverapi.LayeredWorkspace): the
// design.
//
// A layered command runs only in its session's sandbox, whose bwrap binds
// an overlay at the workspace's path instead of the workspace itself. The
// driver mounts that overlay on a mount point of its own (a fresh
// directory of the driver's), bwrap binds it into the session sandbox's
// mount namespace while it builds it, and the driver then detaches its
// own mount and removes the directory: the one mount left is the
// sandbox's, which ends with it. The overlay is thus mounted once per
// session sandbox (overlayfs forbids two mounts sharing an upper) and
// never seen on the host after the sandbox is built.
//
// Several capability sets of one session would need several session
// sandboxes and so several mounts of the one upper: the second is refused
// (typed) while the first's sandbox lives. One sandbox per layered session
// whatever the profile was the other choice, but a session sandbox is one
// network namespace and one set of grant mounts: sharing it between a
// command granted network and one that was not is exactly what session
// sandboxes promise never to do. A layered session whose capability set
// changes must wait for (or forget) the first set's sandbox.
//
// Inside the overlay the workspace's protected entries get neither
// read-only mounts nor placeholders (scanProtected leaves the workspace
// out): everything there is the session's, .git included, and nothing
// reaches the host but through the host's apply, which refuses the
// protected set. Placeholders would be written into the upper layer and
// show as the session's changes.
//
// The mount options are the ones the host's layer engine reads correctly
// (core/layer.MountSpec, which says why each): redirect_dir=nofollow,
// metacopy=off, index=off, xino=off; nosuid and nodev besides, so a set-id
// file or device the command makes means nothing even inside.
//
// Unprivileged, the driver cannot mount an overlay in the initial user
// namespace. The session sandbox's supervisor, uid 0 of the sandbox's own
// user namespace (sessionuser_linux.go), mounts it instead, with
// userxattr (the layer is made with LayeredWorkspace.UserNS, so the host
// reads user.overlay.* markers): bwrap binds the workspace read-only at
// its path (the lower) and the layer's directory (upper and work: one
// mount, as overlayfs wants) at layerBindPoint, and gives the supervisor
// CAP_DAC_OVERRIDE besides; the supervisor mounts the overlay over the
// workspace, unmounts the layer's directory and drops CAP_DAC_OVERRIDE
// before it starts any command (sandboxinit's mountSessionOverlay says
// why that is safe). The driver takes the same locks as when it mounts
// itself, for the sandbox's life (the views lock until the supervisor has
// mounted). The host's view of such an overlay (LayeredView) is its root
// as the supervisor opened it right after the mount, before any command
// existed, and sent with its readiness on the lifeline: the same overlay
// the commands see, reached by a descriptor, never by a path in the
// sandbox's mount namespace (through the supervisor's root it would be a
// path the session's commands shape). With no sandbox of the session
// mounting the layer, the driver mounts the overlay for the host in a
// helper's own user namespace (OpenLayeredView,
// layeredhostview_linux.go), under the same locks.

// overlayOptions must match core/layer.MountSpec.Options (without
// userxattr when this driver mounts in the initial user namespace; with
// it, overlayOptionsUserNS, when the supervisor mounts in the sandbox's).
const (
	overlayOptions       = "redirect_dir=nofollow,metacopy=off,index=off,xino=off"
	overlayOptionsUserNS = overlayOptions + ",userxattr"
)

// layerInNamespace: the session supervisor mounts the overlay in the
// sandbox's user namespace (an unprivileged driver whose session
// sandboxes run as that namespace's uid 0), not the driver.
func (d *Driver) layerInNamespace() bool {
	return os.Geteuid() != 0 && d.probe().sessionUser
}

// layeredOffWhy says why this driver refuses RunSpec.Layered here, or "".
func (d *Driver) layeredOffWhy() string {
	if why := d.sessionOffWhy(); why != "" {
		return "layered workspaces need session sandboxes, and they are off: " + why
	}
	if os.Geteuid() != 0 && !d.layerInNamespace() {
		return "unprivileged, and the session sandboxes have no user namespace of their own to mount the overlay in"
	}
	if !overlayAvailable() {
		return "the kernel offers no overlay file system (overlay is not in /proc/filesystems; load the overlay module)"
	}
	if why := d.probe().sessionOverlayWhy; why != "" && d.layerInNamespace() {
		// Refused here, before any sandbox is built, rather than by the
		// session sandbox's build failing (probeSessionOverlay).
		return "unprivileged, and " + why
	}
	return ""
}

// LayeredWorkspaces implements driverapi.LayeredWorkspacer.
func (d *Driver) LayeredWorkspaces() bool { return d.layeredOffWhy() == "" }

// overlayAvailable reports whether overlay is a registered file system.
func overlayAvailable() bool {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[len(f)-1] == "overlay" {
			return true
		}
	}
	return false
}

// layeredRefusal is the error for a layered command this driver cannot run.
func layeredRefusal(reason string) error {
	return &driverapi.UnavailableError{Feature: driverapi.FeatureLayeredWorkspace, Reason: reason,
		Fix: "run the session as a live (not layered) one, or run it where session sandboxes and overlayfs are available (root, the bwrap tier)"}
}

// overlayMountRefusal is the refusal of a layered command whose overlay
// this driver (as root) could not mount: the kernel's answer with the
// upper's file system, and the way out. The usual cause is a data
// directory on a file system overlayfs will not take as an upper (NFS,
// FUSE, another overlay), which the kernel answers EINVAL without
// saying so.
func overlayMountRefusal(upper string, err error) error {
	fs := "a file system that could not be read"
	if id, ierr := fsIdentityOf(upper); ierr == nil {
		fs = fsTypeName(id.typ)
	}
	return &driverapi.UnavailableError{Feature: driverapi.FeatureLayeredWorkspace,
		Reason: fmt.Sprintf("mounting the overlay failed: %v (the layer's upper directory %s is on %s)", err, upper, fs),
		Fix:    upperFSFix}
}

// checkLayered refuses a layered spec this driver cannot honour for plan.
func (d *Driver) checkLayered(ctx context.Context, plan launchPlan, spec driverapi.RunSpec) error {
	l := spec.Layered
	if why := d.layeredOffWhy(); why != "" {
		return layeredRefusal(why)
	}
	inside := d.layerInNamespace()
	if l.UserNS && !inside {
		return &driverapi.InvalidSpecError{Field: "layered.user_ns", Reason: "this driver mounts the overlay as root in the initial user namespace (trusted.overlay.* markers); a layer made for a user namespace would be misread"}
	}
	if !l.UserNS && inside {
		return &driverapi.InvalidSpecError{Field: "layered.user_ns", Reason: "this driver is unprivileged and mounts the overlay in the session sandbox's user namespace (user.overlay.* markers, " + driverapi.DetailLayeredUserNS + "); a layer made for the initial namespace would be misread"}
	}
	if inside {
		if filepath.Dir(l.Upper) != filepath.Dir(l.Work) || l.Upper == l.Work {
			return &driverapi.InvalidSpecError{Field: "layered", Reason: "upper and work must be two directories of one layer directory (it is bound into the session sandbox as one mount)"}
		}
		if driverapi.PathWithin(plan.Workspace, layerBindPoint) || driverapi.PathWithin(layerBindPoint, plan.Workspace) {
			return &driverapi.InvalidSpecError{Field: "workspace", Reason: fmt.Sprintf("%q overlaps %s, where the session sandbox has the layer until the overlay is mounted", plan.Workspace, layerBindPoint)}
		}
		for _, p := range []string{plan.Workspace, l.Upper, l.Work} {
			if strings.ContainsAny(p, ",:\\\n") {
				return &driverapi.InvalidSpecError{Field: "layered", Reason: fmt.Sprintf("%q holds a comma, colon, backslash or newline, which overlay mount options cannot carry", p)}
			}
		}
	}
	if spec.Tty != nil {
		return layeredRefusal("a command with a terminal runs in a sandbox of its own, never in the session's, so it cannot see the session's overlay")
	}
	if plan.ProxySocket != "" {
		return layeredRefusal("a command with network through the host's proxy (allow_hosts) runs in a sandbox of its own, never in the session's, so it cannot see the session's overlay")
	}
	for _, p := range []string{l.Upper, l.Work} {
		if driverapi.PathWithin(p, plan.Workspace) || driverapi.PathWithin(plan.Workspace, p) {
			return &driverapi.InvalidSpecError{Field: "layered", Reason: fmt.Sprintf("%q overlaps the workspace %q; keep layers in the data directory", p, plan.Workspace)}
		}
	}
	if inside {
		// Last: it may run a trial sandbox, which the refusals above
		// need not wait for.
		return d.checkUpperFS(ctx, l)
	}
	return nil
}

// mountedLayer is a layer's overlay mounted on the driver's own mount
// point until the session sandbox has bound it.
type mountedLayer struct {
	point string
	lock  *os.File
	// upper holds an exclusive flock on the upper directory while the
	// overlay is mounted: a second mount of it by another driver process
	// (another CLI process's command of the session) is refused.
	upper *os.File

	// mu guards view, read by LayeredView while the sandbox may end.
	mu sync.Mutex
	// view is the overlay's root directory, opened before the driver's
	// own mount is detached: the same overlay (one superblock) the
	// sandbox has bound, which the host's file operations reach through
	// LayeredView. It is closed when the sandbox ends (release), so it
	// never keeps the overlay alive past its sandbox on the driver's side.
	view     *os.File
	dev, ino uint64

	// mounting holds the views lock exclusively while the session
	// supervisor mounts the overlay (an unprivileged driver's layer,
	// mounted in the sandbox's user namespace): from mountLayer until the
	// supervisor reports the mount done (mounted) or the build fails
	// (release). As for the driver's own mount, no overlay of the upper is
	// open on the host while a new one is mounted.
	mounting *os.File
}

// mounted takes what the session supervisor sent with its readiness: the
// root of the overlay it mounted in the sandbox's namespace, as the
// session's view for the host (LayeredView), the same overlay the
// session's commands see. It ends the views lock taken for the mount. A
// descriptor that is not an overlay's directory is not kept (the host then
// has no view: the files API refuses the session, typed).
func (m *mountedLayer) mounted(fds []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, fd := range fds {
		var st unix.Stat_t
		var sf unix.Statfs_t
		if m.view == nil && m.point == "" && unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR &&
			unix.Fstatfs(fd, &sf) == nil && sf.Type == unix.OVERLAYFS_SUPER_MAGIC {
			m.view, m.dev, m.ino = os.NewFile(uintptr(fd), "session-overlay"), uint64(st.Dev), st.Ino //nolint:unconvert // Dev's width differs across architectures
			continue
		}
		unix.Close(fd)
	}
	if m.mounting != nil {
		m.mounting.Close()
		m.mounting = nil
	}
}

// mountLayer takes the layer's lock (shared) and mounts its overlay over
// workspace on a fresh directory of the driver's.
func (d *Driver) mountLayer(workspace string, l *driverapi.LayeredWorkspace) (_ *mountedLayer, err error) {
	lock, upper, views, err := takeLayerLocks(l)
	var busy *layerBusyError
	switch {
	case errors.As(err, &busy) && busy.which == layerLockDiscard:
		return nil, layeredRefusal(fmt.Sprintf("the layer is being discarded (its lock %s is held exclusively): %v", l.Lock, busy.err))
	case errors.As(err, &busy) && busy.which == layerLockUpper:
		return nil, layeredRefusal(fmt.Sprintf("the layer is mounted by another process (a command of the session running there, or the host's files API writing the session's view): overlayfs forbids two mounts sharing an upper (%v)", busy.err))
	case errors.As(err, &busy):
		// The views lock: the host holds it shared while it has an
		// overlay of this upper open through LayeredView, and such an
		// overlay outlives its sandbox as long as the host's descriptor
		// does (the sandbox ended on its idle limit during a file
		// operation). A mount now would make two overlays of one upper,
		// which overlayfs leaves undefined, so the command is refused;
		// the host's operation is short (one file call) and the next
		// command mounts.
		return nil, layeredRefusal(fmt.Sprintf("the host still has the layer's previous overlay open (a files-API operation begun before the session's sandbox ended); overlayfs forbids two overlays sharing an upper, so the command was not run: run it again once that operation has ended (%v)", busy.err))
	case err != nil:
		return nil, fmt.Errorf("bwrap driver: layered workspace: %w", err)
	}
	defer func() {
		if err != nil {
			lock.Close()
			upper.Close()
		}
	}()
	if d.layerInNamespace() {
		// The session supervisor mounts it (the design above); the locks
		// are held for the sandbox's life all the same, and the views
		// lock until the supervisor has mounted it (mounted).
		return &mountedLayer{lock: lock, upper: upper, mounting: views}, nil
	}
	defer views.Close()
	point, err := os.MkdirTemp(d.layerMountParent(), "layer-")
	if err != nil {
		return nil, fmt.Errorf("bwrap driver: layered workspace: mount point: %w", err)
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,%s", workspace, l.Upper, l.Work, overlayOptions)
	if strings.ContainsAny(workspace, ",:\\\n") {
		os.Remove(point)
		return nil, &driverapi.InvalidSpecError{Field: "workspace", Reason: fmt.Sprintf("%q holds a comma, colon, backslash or newline, which overlay mount options cannot carry; a layered session needs a workspace path without them", workspace)}
	}
	if err := unix.Mount("overlay", point, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		os.Remove(point)
		return nil, overlayMountRefusal(l.Upper, err)
	}
	return &mountedLayer{point: point, lock: lock, upper: upper}, nil
}

// Which of a layer's locks another holder has (layerBusyError).
const (
	layerLockDiscard = "lock"  // the layer's lock, exclusively: it is being discarded
	layerLockUpper   = "upper" // the upper's flock: another mount of it
	layerLockViews   = "views" // the views lock: a host view of an earlier overlay is open
)

// layerBusyError: one of a layer's locks is held by someone else (which,
// err is flock's answer).
type layerBusyError struct {
	which string
	err   error
}

func (e *layerBusyError) Error() string { return e.which + " lock held: " + e.err.Error() }

// takeLayerLocks takes what every mount of a layer's overlay takes, each
// without waiting: the layer's lock shared (it is not being discarded),
// the upper directory's flock exclusively (no other mount of that upper,
// in this driver process or another, and no host view of it: overlayfs
// forbids two mounts sharing an upper), and the views lock (the work
// directory's flock) exclusively, which the caller holds for the mount
// alone (core/layer.HoldViews). The first two are held for the mount's
// life. On error nothing is held; a *layerBusyError says which lock
// someone else has.
func takeLayerLocks(l *driverapi.LayeredWorkspace) (lock, upper, views *os.File, err error) {
	opened := []*os.File{}
	defer func() {
		if err != nil {
			closeAll(opened)
		}
	}()
	for _, step := range []struct {
		which, name, path string
		flags, how        int
	}{
		{layerLockDiscard, "lock", l.Lock, os.O_RDWR, unix.LOCK_SH},
		{layerLockUpper, "upper", l.Upper, os.O_RDONLY | unix.O_DIRECTORY, unix.LOCK_EX},
		{layerLockViews, "work", l.Work, os.O_RDONLY | unix.O_DIRECTORY, unix.LOCK_EX},
	} {
		f, err := os.OpenFile(step.path, step.flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", step.name, err)
		}
		opened = append(opened, f)
		if err := unix.Flock(int(f.Fd()), step.how|unix.LOCK_NB); err != nil {
			return nil, nil, nil, &layerBusyError{which: step.which, err: err}
		}
	}
	return opened[0], opened[1], opened[2], nil
}

// layerMountParent is where the driver makes its mount points: its state
// directory when it has one, else the temporary directory.
func (d *Driver) layerMountParent() string {
	if dir := d.cfg.StateDir; dir != "" && filepath.IsAbs(dir) {
		if st, err := os.Stat(dir); err == nil && st.IsDir() {
			return dir
		}
	}
	return os.TempDir()
}

// detach removes the driver's own mount (the session sandbox keeps its
// bind of it) and the mount point.
func (m *mountedLayer) detach() {
	if m.point == "" {
		return
	}
	m.mu.Lock()
	if m.view == nil {
		// A directory descriptor, not O_PATH: the host reopens it through
		// /proc/<pid>/fd/<n> to read and write. O_NOFOLLOW: the point is
		// the driver's own directory, never a link.
		if f, err := os.OpenFile(m.point, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			var st unix.Stat_t
			var sf unix.Statfs_t
			if unix.Fstat(int(f.Fd()), &st) == nil && unix.Fstatfs(int(f.Fd()), &sf) == nil && sf.Type == unix.OVERLAYFS_SUPER_MAGIC {
				m.view, m.dev, m.ino = f, uint64(st.Dev), st.Ino //nolint:unconvert // Dev's width differs across architectures
			} else {
				f.Close()
			}
		}
	}
	m.mu.Unlock()
	_ = unix.Unmount(m.point, unix.MNT_DETACH)
	_ = os.Remove(m.point)
	m.point = ""
}

// release detaches the mount if it still is and drops the lock: the
// session sandbox is gone.
func (m *mountedLayer) release() {
	m.detach()
	m.mu.Lock()
	if m.view != nil {
		m.view.Close()
		m.view = nil
	}
	if m.mounting != nil {
		m.mounting.Close()
		m.mounting = nil
	}
	m.mu.Unlock()
	if m.lock != nil {
		m.lock.Close()
		m.lock = nil
	}
	if m.upper != nil {
		m.upper.Close()
		m.upper = nil
	}
}

// LayeredView implements driverapi.LayeredViewer: the host reaches the
// session's overlay through the descriptor the driver keeps of it
// (mountedLayer.view), as /proc/<pid>/fd/<n>. That path names the one
// overlay the sandbox has bound, never a path inside the sandbox's mount
// namespace: a command of the session could rename the directories on
// such a path or put links there, and the host would be led elsewhere.
func (d *Driver) LayeredView(_ context.Context, sessionID string) (driverapi.LayeredView, error) {
	s := &d.sessions
	s.mu.Lock()
	var found []*sessionSandbox
	for k, ss := range s.m {
		if k.session == sessionID && k.layer != "" && ss.layer != nil {
			found = append(found, ss)
		}
	}
	s.mu.Unlock()
	for _, ss := range found {
		ss.mu.Lock()
		gone := ss.gone
		ss.mu.Unlock()
		if gone {
			continue
		}
		m := ss.layer
		m.mu.Lock()
		v := driverapi.LayeredView{}
		if m.view != nil {
			v = driverapi.LayeredView{Mounted: true, Path: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), m.view.Fd()), Dev: m.dev, Ino: m.ino}
		}
		m.mu.Unlock()
		if v.Mounted {
			return v, nil
		}
	}
	return driverapi.LayeredView{}, nil
}
