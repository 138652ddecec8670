//go:build linux

package bwrap

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// walkDirFingerprint is the fingerprint as it was taken before statWalk:
// filepath.WalkDir and a Lstat per path. statWalk must give the same one
// (the views' records and names were made with it).
func walkDirFingerprint(root string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		putStat(h, p, &st)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

func statWalkFingerprint(root string) (string, error) {
	h := sha256.New()
	err := statWalk(root, func(p string, st *unix.Stat_t) { putStat(h, p, st) })
	return hex.EncodeToString(h.Sum(nil)), err
}

func TestStatWalkIsWalkDirsOrder(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"b/z", "b/a/deep", "a", "B"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"b/x", "b/a/deep/f", "a.txt", "a/1", "b-"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Links are recorded, never followed: one to a directory, one dangling.
	if err := os.Symlink("b", filepath.Join(dir, "link-dir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("missing", filepath.Join(dir, "b/dangling")); err != nil {
		t.Fatal(err)
	}
	roots := []string{dir, filepath.Join(dir, "b"), filepath.Join(dir, "link-dir"), filepath.Join(dir, "a.txt")}
	roots = append(roots, (&launchPlan{System: systemReadSet()}).etcEntries()...)
	var seen int
	for _, root := range roots {
		want, werr := walkDirFingerprint(root)
		got, gerr := statWalkFingerprint(root)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%s: WalkDir error %v, statWalk error %v", root, werr, gerr)
		}
		if werr == nil {
			seen++
		}
		if got != want {
			t.Errorf("%s: statWalk's fingerprint %s differs from WalkDir's %s", root, got, want)
		}
	}
	// The link to a directory is not descended into: its fingerprint is
	// the link's alone (positive control: the directory's differs).
	viaLink, err := statWalkFingerprint(filepath.Join(dir, "link-dir"))
	if err != nil {
		t.Fatal(err)
	}
	direct, err := statWalkFingerprint(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if viaLink == direct {
		t.Error("a link to a directory was walked as the directory")
	}
	if seen < 4 {
		t.Fatalf("only %d roots walked", seen)
	}
	// An entry that is gone is an error, as it was.
	if _, err := statWalkFingerprint(filepath.Join(dir, "gone")); err == nil {
		t.Error("a missing root gave a fingerprint")
	}
}

// BenchmarkEtcFingerprint walks the /etc read set's directories (what the
// deep fingerprint walks), WalkDir's way and statWalk's, in turn in one run: the ratio
// new_over_walkdir is statWalk's time over WalkDir's.
func BenchmarkEtcFingerprint(b *testing.B) {
	var dirs []string
	for _, e := range (&launchPlan{System: systemReadSet()}).etcEntries() {
		if fi, err := os.Lstat(e); err == nil && fi.IsDir() {
			dirs = append(dirs, e)
		}
	}
	// A view's copy of them, when one is where the driver keeps views: its
	// entries lie deeper, as the view fingerprint walks them.
	if views, _ := filepath.Glob(filepath.Join(defaultStateDir(), "etc-views", "*", "etc")); len(views) > 0 {
		dirs = append(dirs, views[0])
	}
	if len(dirs) == 0 {
		b.Skip("no /etc directory in the read set on this host")
	}
	walk := func(f func(string) (string, error)) {
		for _, e := range dirs {
			if _, err := f(e); err != nil {
				b.Fatal(err)
			}
		}
	}
	var oldT, newT int64
	for i := 0; i < b.N; i++ {
		t0 := nanotime()
		walk(walkDirFingerprint)
		t1 := nanotime()
		walk(statWalkFingerprint)
		t2 := nanotime()
		oldT += t1 - t0
		newT += t2 - t1
	}
	b.ReportMetric(float64(newT)/float64(oldT), "new_over_walkdir")
}

func nanotime() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
