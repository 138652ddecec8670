//go:build linux

package bwrap

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The file system of a layer's upper directory, for an unprivileged
// driver.
//
// The probe's overlay trial (probeSessionOverlay) says whether the kernel
// mounts a userxattr overlay in a session sandbox's user namespace at all,
// and it runs on the driver's state directory. A layer's upper and work
// directories are in the host's data directory, which may be another file
// system, and overlayfs refuses some as an upper in a user namespace (one
// without user xattrs, a FUSE or network file system, an overlayfs with
// nothing left to stack on, a read-only mount). Unchecked, such a layer
// failed the session sandbox's build: closed (the supervisor's mount
// failed before any command ran), but with an untyped setup error that
// named neither the cause nor the fix. So before a layered command's
// sandbox is built the driver runs the same trial on the upper's file
// system when it is not the one the probe tried, and refuses the command
// with a typed layered_workspace refusal that says why and what to change
// when the trial fails.
//
// A success is kept for the driver's life, per file system (device,
// type and id: a device number reused within the driver's life by another
// file system of another type is tried again); a failure is not kept, so
// the next layered command tries again (the user may have fixed it). What
// a kept success may get wrong, a file system replaced under the same
// identity, costs what it cost before: the sandbox's build fails, closed.
// The successes are not written to the probe cache: its record would be
// rewritten after the probe, when a setup failure may already have
// removed it (forgetProbeCache), bringing back what that removal dropped.
// A long-lived driver (serve) tries each file system once; a driver
// process per command (the CLI's one-shot exec, where unprivileged
// session sandboxes are off unless session_sandbox = "always") tries it
// at each layered command whose data directory is not on its state
// directory's file system.

// fsIdentity names a mounted file system: its device, its type (statfs
// f_type) and its id (f_fsid).
type fsIdentity struct {
	dev   uint64
	typ   uint32
	fsid0 int32
	fsid1 int32
}

// fsIdentityOf is the identity of the file system holding the directory
// at path (not following a final link: the driver opens the layer's
// directories with O_NOFOLLOW and refuses a link there anyway).
func fsIdentityOf(path string) (fsIdentity, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fsIdentity{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fsIdentity{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	var sf unix.Statfs_t
	if err := unix.Fstatfs(fd, &sf); err != nil {
		return fsIdentity{}, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	// Magic numbers are 32 bits; f_type is wider or signed on some
	// architectures.
	//nolint:unconvert // Dev's and Type's widths differ across architectures
	return fsIdentity{dev: uint64(st.Dev), typ: uint32(sf.Type), fsid0: sf.Fsid.Val[0], fsid1: sf.Fsid.Val[1]}, nil
}

// fsTypeName names the file system types a data directory is likely to
// be on, for the refusal's reason.
func fsTypeName(typ uint32) string {
	switch typ {
	case unix.EXT4_SUPER_MAGIC:
		return "ext2/3/4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	case unix.FUSE_SUPER_MAGIC:
		return "FUSE"
	case unix.NFS_SUPER_MAGIC:
		return "NFS"
	case unix.SMB2_SUPER_MAGIC, unix.CIFS_SUPER_MAGIC:
		return "SMB/CIFS"
	case unix.F2FS_SUPER_MAGIC:
		return "f2fs"
	case unix.MSDOS_SUPER_MAGIC:
		return "FAT"
	}
	return fmt.Sprintf("type %#x", typ)
}

// upperFSTrials are the file systems the driver tried a layer's upper on
// (beyond the probe's), with success. Guarded by mu; tries counts the
// trials run (what tests check the caching by).
type upperFSTrials struct {
	mu    sync.Mutex
	ok    map[fsIdentity]bool
	tries int
}

func (u *upperFSTrials) confirmed(id fsIdentity) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.ok[id]
}

// count is how many trials ran.
func (u *upperFSTrials) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.tries
}

func (u *upperFSTrials) record(id fsIdentity, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.tries++
	if !ok {
		return
	}
	if u.ok == nil {
		u.ok = map[fsIdentity]bool{}
	}
	u.ok[id] = true
}

// layerFSFix is the way out of a layer on a file system the session
// sandbox cannot mount the overlay on (in a user namespace);
// upperFSFix, out of one the driver itself (root) cannot.
const (
	dataDirFix = "point the data directory (sandbox.workspace_root, whose .layers holds them) there, or run the session as a live (not layered) one"
	layerFSFix = "keep layers on a file system overlayfs accepts as an upper layer in a user namespace (ext4, xfs, btrfs, tmpfs): " + dataDirFix
	upperFSFix = "keep layers on a file system overlayfs accepts as an upper layer (ext4, xfs, btrfs, tmpfs): " + dataDirFix
)

// checkUpperFS refuses, typed, a layer whose upper directory's file system
// the session sandbox's supervisor could not mount the overlay on (see
// above). For an unprivileged driver that mounts in the sandbox's user
// namespace only.
func (d *Driver) checkUpperFS(ctx context.Context, l *driverapi.LayeredWorkspace) error {
	up, err := fsIdentityOf(l.Upper)
	if err != nil {
		return fmt.Errorf("bwrap driver: layered workspace: upper: %w", err)
	}
	work, err := fsIdentityOf(l.Work)
	if err != nil {
		return fmt.Errorf("bwrap driver: layered workspace: work: %w", err)
	}
	if work != up {
		// overlayfs needs both on one mount; the kernel would refuse it
		// at the build, untyped.
		return &driverapi.UnavailableError{Feature: driverapi.FeatureLayeredWorkspace,
			Reason: fmt.Sprintf("the layer's upper directory %s and work directory %s are on two file systems (a mount inside the layer's directory?); overlayfs needs both on one", l.Upper, l.Work),
			Fix:    "remove what is mounted in the layer's directory, or discard the session's layer"}
	}
	h := d.probe()
	if h.sessionOverlayTried && h.sessionOverlayFS == up {
		return nil
	}
	if d.upperFS.confirmed(up) {
		return nil
	}
	// The trial's directories go beside the upper, in the layer's
	// directory (the host's data directory, the user's own), and are
	// checked to be on the upper's file system. Never in the upper itself:
	// what is there is the session's.
	opts := overlayOptionsUserNS
	if d.cfg.upperTrialOptions != "" {
		opts = d.cfg.upperTrialOptions
	}
	terr := runOverlayTrial(ctx, h.bwrap, d.cfg.InitBinary, filepath.Dir(l.Upper), &up, opts, h.guard, h.procCover)
	if ctx.Err() != nil {
		// Cancelled, not refused by the kernel: nothing is kept.
		return fmt.Errorf("bwrap driver: layered workspace: the trial overlay mount on the upper's file system: %w", ctx.Err())
	}
	d.upperFS.record(up, terr == nil)
	if terr != nil {
		return &driverapi.UnavailableError{Feature: driverapi.FeatureLayeredWorkspace,
			Reason: fmt.Sprintf("unprivileged, and the layer's upper directory %s is on a file system (%s) where a trial overlay mount in a session sandbox's user namespace failed: %v",
				l.Upper, fsTypeName(up.typ), terr),
			Fix: layerFSFix}
	}
	return nil
}
