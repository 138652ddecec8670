//go:build linux

package sandboxinit

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// LayeredViewFD is the descriptor LayeredViewCommand passes the overlay's
// root over: one end of a unix socket pair the driver made.
const LayeredViewFD = 3

// LayeredView runs LayeredViewCommand (args exclude it): TARGET LOWER
// UPPER WORK OPTIONS.
//
// It runs as uid 0 of a user namespace of its own whose one mapping is the
// driver's uid (and gid) outside, in a mount namespace owned by it: the
// overlay is mounted as a session sandbox's supervisor mounts it (the same
// mount data, userxattr, nosuid and nodev), so the host's view and the
// session's commands read and write the layer alike. Why that is safe:
//
//   - It holds capabilities over its own namespaces only: over files
//     outside, it is the driver's user (an inode's owner maps to its 0
//     only where the driver owns it), which is what mounting needs
//     (overlayfs's work/work is mode 0000: CAP_DAC_OVERRIDE over the
//     driver's own directory, nothing else).
//   - Its mount namespace is a copy of the driver's; every mount is made
//     private first, and the kernel makes the copy's mounts slaves of
//     the driver's at most, so the overlay never appears in any mount
//     table but this process's, which ends with it. The descriptor it
//     passes is then the overlay's one reference, as a detached mount
//     of the host's own view (core/layer.MountView) is.
//   - The root is opened O_NOFOLLOW and checked to be an overlayfs
//     directory before it is passed; the driver checks it again.
//   - It runs no code but this: the init binary, started by the driver
//     with arguments the driver built and a closed environment.
func LayeredView(args []string) int {
	if err := layeredView(args); err != nil {
		fmt.Fprintf(os.Stderr, "aleph-sandbox: %s: %v\n", LayeredViewCommand, err)
		return SandboxInitExitCode
	}
	return 0
}

func layeredView(args []string) error {
	if len(args) != 5 {
		return errors.New("usage: " + LayeredViewCommand + " TARGET LOWER UPPER WORK OPTIONS")
	}
	target, lower, upper, work, options := args[0], args[1], args[2], args[3], args[4]
	sock := os.NewFile(LayeredViewFD, "layered-view-socket")
	if sock == nil {
		return errors.New("no socket at descriptor 3")
	}
	defer sock.Close()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("private mounts: %w", err)
	}
	data := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,%s", lower, upper, work, options)
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("mount the layer's overlay: %w", err)
	}
	fd, err := unix.Open(target, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the overlay's root: %w", err)
	}
	defer unix.Close(fd)
	var sf unix.Statfs_t
	if err := unix.Fstatfs(fd, &sf); err != nil || sf.Type != unix.OVERLAYFS_SUPER_MAGIC {
		return fmt.Errorf("what was opened at %s is not the overlay (statfs type %#x, %v)", target, sf.Type, err)
	}
	// Detached here already: the descriptor is what keeps it.
	if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the overlay: %w", err)
	}
	if err := unix.Sendmsg(int(sock.Fd()), []byte{'v'}, unix.UnixRights(fd), nil, 0); err != nil {
		return fmt.Errorf("pass the overlay's root: %w", err)
	}
	return nil
}
