//go:build linux

package core

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRemoveSessionHomeNeverFollowsSwappedLinks: while the HOME of a
// session is removed, a process of the session swaps (RENAME_EXCHANGE) a
// directory of the HOME with a symbolic link to a directory outside every
// grant, over and over. The removal has to make a read-only directory
// writable to empty it, and one that fails (a file it cannot remove)
// is tried again: no attempt may change the mode of, or remove anything
// in, the link's target. Control: without the swaps the HOME, read-only
// directories included, is removed.
func TestRemoveSessionHomeNeverFollowsSwappedLinks(t *testing.T) {
	cfg := testConfig(t)
	cfg.Sandbox.Session.Home = HomeSession
	home := filepath.Join(cfg.Sandbox.WorkspaceRoot, HomesDirName, SessionDirName("s"))
	target := t.TempDir()
	if err := os.Chmod(target, 0o755); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(target, "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Control: a read-only tree is removed.
	ro := filepath.Join(home, "go", "mod", "m@v1")
	if err := os.MkdirAll(ro, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "f.go"), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{ro, filepath.Dir(ro)} {
		if err := os.Chmod(d, 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveSessionHome(cfg, "s"); err != nil {
		t.Fatalf("control: %v", err)
	}
	if _, err := os.Lstat(home); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("control: the HOME is still there: %v", err)
	}

	// The attack: a process of the session keeps planting d (a
	// read-only directory with a subdirectory: removing it takes a chmod)
	// and l (a link to target), and keeps swapping them, while the HOME
	// is removed again and again. As root nothing is read-only: a mount
	// point the removal cannot take keeps each removal failing, so that
	// a fallback that chmods runs.
	d, l, n := filepath.Join(home, "d"), filepath.Join(home, "l"), filepath.Join(home, "n")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		stuck := filepath.Join(home, "stuck")
		if err := os.Mkdir(stuck, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", stuck, "tmpfs", 0, "size=64k"); err != nil {
			t.Skipf("as root the test needs a mount point in the HOME: %v", err)
		}
		t.Cleanup(func() { _ = unix.Unmount(stuck, unix.MNT_DETACH) })
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if os.Mkdir(n, 0o700) == nil {
				_ = os.Mkdir(filepath.Join(n, "sub"), 0o700)
				_ = os.Chmod(n, 0o500) // n is a fresh directory: no link
				if unix.Renameat2(unix.AT_FDCWD, n, unix.AT_FDCWD, d, unix.RENAME_NOREPLACE) != nil {
					_ = os.Chmod(n, 0o700)
					_ = os.RemoveAll(n)
				}
			}
			_ = os.Symlink(target, l)
			_ = unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, l, unix.RENAME_EXCHANGE)
		}
	}()
	for range 3000 {
		_ = os.MkdirAll(home, 0o700)
		_ = RemoveSessionHome(cfg, "s")
		if st, err := os.Stat(target); err != nil || st.Mode().Perm() != 0o755 {
			break
		}
		if _, err := os.Stat(keep); err != nil {
			break
		}
	}
	close(stop)
	wg.Wait()
	// Once nothing races it, the removal finishes (read-only planted
	// directories included).
	if err := RemoveSessionHome(cfg, "s"); err != nil && os.Geteuid() != 0 {
		t.Errorf("after the race: %v", err)
	}
	st, err := os.Stat(target)
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("the link's target outside the HOME was changed: %v %v", st.Mode(), err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("a file in the link's target was removed: %v", err)
	}
}
