//go:build linux

// Package overlaytest holds the tests' fixture of a directory overlayfs
// refuses as an upper layer: the way to prove, as root, what a layered
// session does with a data directory on such a file system.
package overlaytest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// RefusedUpper mounts an overlay in a new temporary directory and returns
// its merged directory, where the kernel refuses the upper of another
// overlay (proved by a mount by hand, the control). It skips the test
// when no overlay can be mounted (not root, no overlayfs) or when this
// kernel takes such an upper. The mount goes with the test.
func RefusedUpper(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	for _, p := range []string{"l", "u", "w", "m", "l2", "m2"} {
		if err := os.Mkdir(filepath.Join(base, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	m := filepath.Join(base, "m")
	if err := unix.Mount("overlay", m, "overlay", 0, fmt.Sprintf("lowerdir=%s/l,upperdir=%s/u,workdir=%s/w", base, base, base)); err != nil {
		t.Skipf("no overlay to put a data directory on: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(m, unix.MNT_DETACH) })
	probe := filepath.Join(m, ".probe")
	for _, p := range []string{"u", "w"} {
		if err := os.MkdirAll(filepath.Join(probe, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("overlay", filepath.Join(base, "m2"), "overlay", 0, fmt.Sprintf("lowerdir=%s/l2,upperdir=%s/u,workdir=%s/w", base, probe, probe)); err == nil {
		_ = unix.Unmount(filepath.Join(base, "m2"), unix.MNT_DETACH)
		t.Skip("this kernel takes an upper on an overlay: nothing to refuse here")
	}
	if err := os.RemoveAll(probe); err != nil {
		t.Fatal(err)
	}
	return m
}
