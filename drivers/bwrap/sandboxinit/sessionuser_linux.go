//go:build linux

package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Session sandboxes of an unprivileged launcher (InitSpec.SessionUser).
//
// Unprivileged, bwrap makes its mounts as uid 0 of a first user namespace
// and, by default, runs the sandbox in a second one nested in it that maps
// the user's uid: that one holds no capability over the sandbox's mount
// namespace (owned by the first), so nothing inside could make a command's
// protected-entry mounts. For a session sandbox the launcher asks bwrap for
// uid and gid 0 instead (--uid 0 --gid 0, and no --disable-userns, which
// would force the nested namespace back), keeping CAP_SYS_ADMIN,
// CAP_SETPCAP and CAP_SETFCAP: the supervisor is then uid 0 of the
// namespace that owns the session's mounts, and makes the nested user
// namespace itself, one per command:
//
//   - spawnChild clones each command's sandbox-init with CLONE_NEWUSER as
//     well as CLONE_NEWPID and CLONE_NEWNS. The kernel makes the user
//     namespace first, so the command's PID and mount namespaces are owned
//     by the new one, whose only mapping is SessionUser's uid and gid to
//     the first namespace's 0 (the user outside: the command sees the uid
//     it sees without a session). The sandbox-init gets CAP_SYS_ADMIN and
//     CAP_SETPCAP of that namespace alone (ambient, across its exec) for
//     its hand-over mounts and its capability drop, then drops every
//     capability on every thread and checks none is left, as in any
//     prepared sandbox (dropBoundingAllThreads, clearCapabilitiesAllThreads:
//     they read the bounding set and securebits, which a new user namespace
//     resets, so nothing the supervisor did for its children is assumed).
//   - What a command holds: no capability in its own user namespace, and
//     none in the first, which owns the session's mounts (its /tmp, bwrap's
//     read-only binds and /proc covers): those reach the command's mount
//     namespace as copies the kernel locks (made in a more privileged
//     namespace: they cannot be unmounted, nor their read-only, nosuid or
//     nodev flags cleared, from it or from any namespace below it). Its
//     protected entries are mounts of its own namespace, held by the
//     capability drop exactly as a root driver's session sandbox holds
//     them. The per-command sandbox-init itself never holds a capability
//     in the first namespace.
//   - Nothing of a command reaches the supervisor: it lives in a user
//     namespace above the command's, and the kernel's ptrace check for
//     processes of different user namespaces asks CAP_SYS_PTRACE in the
//     target's (the supervisor's), which a command cannot hold, even with
//     the same uid outside; the command's PID namespace has no number for
//     it either, and it is not dumpable.
//   - Further user namespaces: a command's seccomp filter denies them
//     (unshare, setns, clone with CLONE_NEWUSER), as in a root driver's
//     sandbox; bwrap's --disable-userns cannot be had here (it puts the
//     sandbox in the nested namespace, without mount rights: tested). One
//     made anyway would hold capabilities only over namespaces of its own,
//     where the session's mounts and the protected entries are locked.
//   - CAP_SETFCAP: the kernel lets a namespace map its parent's uid 0 only
//     when its creator held CAP_SETFCAP in the parent (or the writer of
//     the map does); the supervisor writes the map, and keeps it for that.
//     It never sets a file capability; no command's code ever runs with
//     it (the sandbox-init it starts is in the nested namespace, where the
//     supervisor's capabilities do not follow).
//   - Not done here: the fork path (its raw clone would need the same user
//     namespace and a map written before the reaper mounts), so each
//     command gets a sandbox-init of its own.
//   - A layered session's overlay (SessionOverlay) is mounted here, by the
//     supervisor, before it takes any command: see mountSessionOverlay.

// sessionUserTrialChild is the trial's second step (the child's argv[2]).
const sessionUserTrialChild = "child"

// SessionOverlayTrialArg, as SessionUserTrialCommand's first argument,
// asks for the layered session's trial instead: TARGET LAYER UPPER WORK
// OPTIONS follow, as in SessionOverlay.
const SessionOverlayTrialArg = "overlay"

// sessionUserAttr sets sys up to start a child in a user namespace of its
// own mapping u's ids to this namespace's 0, with sessionUserCaps.
func sessionUserAttr(u *SessionUser, sys *syscall.SysProcAttr) {
	sys.Cloneflags |= unix.CLONE_NEWUSER
	sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: u.UID, HostID: 0, Size: 1}}
	sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: u.GID, HostID: 0, Size: 1}}
	// setgroups denied: an unprivileged gid map requires it, and the
	// command's groups stay the one it has.
	sys.GidMappingsEnableSetgroups = false
	// What a command's sandbox-init needs in its own user namespace: its
	// hand-over mounts, then its capability drop.
	sys.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SETPCAP}
}

// SessionUserTrial runs SessionUserTrialCommand (args exclude it).
func SessionUserTrial(args []string) int {
	var err error
	switch {
	case len(args) == 1 && args[0] == sessionUserTrialChild:
		err = sessionUserTrialMount()
	case len(args) == 2:
		err = sessionUserTrialSpawn(args)
	case len(args) == 6 && args[0] == SessionOverlayTrialArg:
		err = sessionOverlayTrial(&SessionOverlay{Target: args[1], Layer: args[2], Upper: args[3], Work: args[4], Options: args[5]})
	default:
		err = errors.New("usage: " + SessionUserTrialCommand + " UID GID | " + SessionOverlayTrialArg + " TARGET LAYER UPPER WORK OPTIONS")
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "aleph-sandbox: %s: %v\n", SessionUserTrialCommand, err)
		return SandboxInitExitCode
	}
	return 0
}

// sessionUserTrialSpawn starts the child as spawnChild would and waits.
func sessionUserTrialSpawn(args []string) error {
	var u SessionUser
	if _, err := fmt.Sscan(args[0]+" "+args[1], &u.UID, &u.GID); err != nil {
		return fmt.Errorf("ids %q: %w", args, err)
	}
	attr := &syscall.ProcAttr{Dir: "/", Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}}
	sessionUserAttr(&u, attr.Sys)
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"aleph-sandbox-init", SessionUserTrialCommand, sessionUserTrialChild}, attr)
	if err != nil {
		return fmt.Errorf("a child in a user namespace of its own: %w", err)
	}
	var ws unix.WaitStatus
	for {
		_, err = unix.Wait4(pid, &ws, 0, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("wait: %w", err)
	}
	if !ws.Exited() || ws.ExitStatus() != 0 {
		return fmt.Errorf("the child failed (wait status %#x)", uint32(ws))
	}
	return nil
}

// sessionUserTrialMount is the child: what a command's sandbox-init does
// first (its mounts made private, a mount of its own), then the drop.
func sessionUserTrialMount() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("private mounts: %w", err)
	}
	if err := unix.Mount("trial", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=16k"); err != nil {
		return fmt.Errorf("a mount in the child's namespace: %w", err)
	}
	return dropCapabilities()
}

// sessionOverlayTrial is what a layered session's supervisor does first
// (mountSessionOverlay, with the options the launcher passes it), run in a
// trial sandbox built with the supervisor's flags, then a write and a
// removal through the overlay (a copy-up and a whiteout, both made with
// the mounter's credentials in the user namespace). A kernel that refuses
// userxattr overlays in a user namespace, or an LSM that refuses the
// mount, fails it here, at probe time, and not in a session's build.
func sessionOverlayTrial(o *SessionOverlay) error {
	if err := mountSessionOverlay(o); err != nil {
		return err
	}
	if err := os.WriteFile(o.Target+"/written", []byte("ok\n"), 0o600); err != nil {
		return fmt.Errorf("a write through the overlay: %w", err)
	}
	if err := os.Remove(o.Target + "/lower"); err != nil {
		return fmt.Errorf("a removal through the overlay (a whiteout): %w", err)
	}
	if _, err := os.Lstat(o.Target + "/lower"); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("the removed file is still there: %v", err)
	}
	return nil
}

// mountSessionOverlay mounts a layered session's overlay at the workspace
// (o.Target) in the session sandbox's mount namespace, then unmounts the
// layer directory's bind and gives up CAP_DAC_OVERRIDE. It runs first
// thing in the supervisor, before any command exists; if it fails the
// supervisor ends and no command of the session runs (never over the
// workspace bwrap bound below, which is read-only besides).
//
// Why it is safe:
//   - The overlay is mounted by uid 0 of the session's user namespace
//     (the driver's uid outside), with userxattr: overlayfs keeps its
//     whiteout and opaque markers in user.overlay.*, which is what the
//     host's layer engine reads for such a layer (core/layer, Policy.UserNS);
//     nosuid and nodev, so a set-id file or device a command makes means
//     nothing even inside; redirect_dir=nofollow, metacopy=off, index=off,
//     xino=off as for a root driver (core/layer.MountSpec says why).
//   - Every command's mount namespace is a copy of this one made by a
//     clone in a user namespace below it: the overlay reaches it as a
//     locked mount, which no command can unmount or uncover (tested:
//     umount fails), so the workspace below is never the command's.
//   - The layer directory's bind (upper and work) is unmounted before any
//     command exists: overlayfs keeps its own references, and a command
//     never sees the upper directory, which it must not write beside the
//     overlay (undefined in overlayfs) nor read as the layer's truth.
//   - CAP_DAC_OVERRIDE is needed for the mount alone (overlayfs makes
//     work/work mode 0000 and the mounter must reach it: EACCES without
//     it). bwrap gives it to the supervisor only (the launcher adds it to
//     the session sandbox of a layered session alone); it is dropped here
//     from the effective, permitted and inheritable sets of every thread
//     and from the bounding set, before passCapabilitiesAmbient, which
//     would otherwise pass it on as ambient, and before any child is
//     started. A command's sandbox-init lives in a user namespace of its
//     own and holds nothing of the supervisor's anyway.
func mountSessionOverlay(o *SessionOverlay) error {
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,%s", o.Target, o.Upper, o.Work, o.Options)
	if err := unix.Mount("overlay", o.Target, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("mount the session's overlay at %s: %w", o.Target, err)
	}
	if err := unix.Unmount(o.Layer, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount the layer's directory at %s: %w", o.Layer, err)
	}
	return dropDACOverride()
}

// openSessionOverlayRoot opens the root of the overlay just mounted at
// target, for the launcher (the host's files API reaches the session's
// view through it while the session sandbox lives: the driver's
// LayeredView). Opened right after the mount, before any command exists,
// so the path cannot have been shaped by a command; checked to be the
// overlay's root, not the workspace below it. Close-on-exec: it is sent on
// the lifeline and closed before any child is started.
func openSessionOverlayRoot(target string) (int, error) {
	fd, err := unix.Open(target, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the session's overlay at %s: %w", target, err)
	}
	var sf unix.Statfs_t
	if err := unix.Fstatfs(fd, &sf); err != nil || sf.Type != unix.OVERLAYFS_SUPER_MAGIC {
		unix.Close(fd)
		return -1, fmt.Errorf("the session's overlay at %s is not an overlay once mounted (statfs: %v)", target, err)
	}
	return fd, nil
}

// dropDACOverride removes CAP_DAC_OVERRIDE from every thread's effective,
// permitted and inheritable sets and from the bounding set, and checks it
// is gone from this thread's.
func dropDACOverride() error {
	const c = unix.CAP_DAC_OVERRIDE
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := new([2]unix.CapUserData)
	if err := unix.Capget(hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	bit := uint32(1) << (c % 32)
	data[c/32].Effective &^= bit
	data[c/32].Permitted &^= bit
	data[c/32].Inheritable &^= bit
	err := allThreads("capset", unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(hdr)
	runtime.KeepAlive(data)
	if err != nil {
		return fmt.Errorf("drop CAP_DAC_OVERRIDE: %w", err)
	}
	if err := allThreads("PR_CAPBSET_DROP", unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); err != nil {
		return fmt.Errorf("drop CAP_DAC_OVERRIDE from the bounding set: %w", err)
	}
	hdr = &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capget(hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if (data[c/32].Effective|data[c/32].Permitted|data[c/32].Inheritable)&bit != 0 {
		return errors.New("CAP_DAC_OVERRIDE is still held after its drop")
	}
	return nil
}
