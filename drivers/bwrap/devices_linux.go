//go:build linux

package bwrap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Device nodes bound into the sandbox are immutable from inside.
//
// bwrap's --dev makes a tmpfs /dev and bind-mounts the host's null, zero,
// full, random, urandom and tty into it. Those are the host's inodes: a
// command running as root (the root driver: uid 0, every capability dropped)
// owns them, and chmod, chown, utimes and setxattr need ownership, not a
// capability. `chmod 000 /dev/null` inside would break every non-root
// process on the host. `--remount-ro /dev` does not reach them (each is a
// mount of its own), and bwrap's own read-only binds and --remount-ro add
// nodev, which makes the device unusable.
//
// So the root driver forks bwrap from a thread in a mount namespace of its
// own in which each of those device nodes is a read-only bind mount of
// itself, without nodev. bwrap's --dev binds them from there; a bind mount
// keeps the read-only flag of its source, and bwrap's remount with device
// access keeps the flags it finds. Inside, chmod and the rest get EROFS,
// while opening the device for writing still works: a read-only mount
// refuses writes to the filesystem (metadata, regular files), not I/O on
// a character device (do_dentry_open takes no write access for special
// files). Nothing done in that namespace reaches the host: everything in it
// is made a slave first (it receives mounts, never sends).
//
// An unprivileged driver needs none of this: bwrap runs the command in a
// user namespace where the host's root, owner of the device nodes, is not
// mapped, so the same calls get EPERM (tested as such).

// bwrapDevNodes are the device nodes bwrap 0.8's --dev binds from the host.
func bwrapDevNodes() []string {
	return []string{"null", "zero", "full", "random", "urandom", "tty"}
}

// readOnlyDevicesNeeded says whether the sandbox's device nodes must be
// protected by startWithReadOnlyDevices: only when the command may own
// them, that is when bwrap runs as root without a user namespace of its
// own in between (the root driver).
func readOnlyDevicesNeeded(viaNsenter bool) bool {
	return os.Geteuid() == 0 && !viaNsenter
}

// startWithReadOnlyDevices runs start (which forks bwrap) on the calling
// thread after moving that thread into a private mount namespace in which
// the host device nodes bwrap binds are read-only, and moves the thread
// back afterwards. The caller holds runtime.LockOSThread for the child's
// whole life and never unlocks it (startSandbox): if moving back fails the
// thread keeps the private namespace and dies with its goroutine.
func startWithReadOnlyDevices(start func() error) error {
	own, err := os.Open("/proc/thread-self/ns/mnt")
	if err != nil {
		return fmt.Errorf("read-only device nodes: this thread's mount namespace: %w", err)
	}
	defer own.Close()
	// CLONE_NEWNS unshares the thread's fs_struct too (root, cwd, umask):
	// only this thread changes namespace.
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("read-only device nodes: a private mount namespace for bwrap: %w", err)
	}
	setupErr := readOnlyDevices()
	var startErr error
	if setupErr == nil {
		startErr = start()
	}
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNS); err != nil {
		// The thread stays in the private namespace, which holds nothing
		// but read-only copies of device mounts; it exits with its
		// goroutine (locked, never unlocked).
		return errors.Join(setupErr, startErr, fmt.Errorf("read-only device nodes: leave the private mount namespace: %w", err))
	}
	if setupErr != nil {
		return setupErr
	}
	return startErr
}

// readOnlyDevices, in a fresh private mount namespace, makes everything a
// slave of the host's mounts and each device node bwrap binds a read-only
// bind mount of itself (device access kept: no MS_NODEV).
func readOnlyDevices() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("read-only device nodes: make / a slave: %w", err)
	}
	for _, n := range bwrapDevNodes() {
		p := filepath.Join("/dev", n)
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			// bwrap fails on a missing node itself, with its own message.
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("read-only device nodes: bind %s: %w", p, err)
		}
		if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("read-only device nodes: remount %s read-only: %w", p, err)
		}
	}
	return nil
}
