package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestBenchSweepsKilledBenchDirs: a private serve directory whose bench
// is gone (killed, or its pid since reused by another process) is removed
// by the next bench; one whose bench runs, one without an owner and one of
// another name are kept.
func TestBenchSweepsKilledBenchDirs(t *testing.T) {
	tmp := t.TempDir()
	mk := func(name, owner string) string {
		t.Helper()
		dir := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(dir, "run"), 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(dir, benchOwnerFile), []byte(owner+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	// A process that ran and is gone: its identity taken while it lived.
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	deadID, ok := processIdentity(c.Process.Pid)
	if !ok {
		t.Fatal("no identity for a live child")
	}
	_ = c.Process.Kill()
	_ = c.Wait()
	me, ok := processIdentity(os.Getpid())
	if !ok {
		t.Fatal("no identity for this process")
	}
	dead := mk(benchServePrefix+"dead", deadID)
	pidReused := mk(benchServePrefix+"reused", strconv.Itoa(os.Getpid())+" 1")
	live := mk(benchServePrefix+"live", me)
	noOwner := mk(benchServePrefix+"noowner", "")
	other := mk("other-dir", deadID)

	sweepBenchDirs(tmp)

	for _, tc := range []struct {
		dir  string
		kept bool
	}{{dead, false}, {pidReused, false}, {live, true}, {noOwner, true}, {other, true}} {
		_, err := os.Stat(tc.dir)
		if kept := err == nil; kept != tc.kept {
			t.Errorf("%s: kept = %v, want %v", filepath.Base(tc.dir), kept, tc.kept)
		}
	}
}

// TestBenchDirMarkedByItsOwner: the directory bench makes names this
// process, so that a concurrent bench's sweep keeps it (the control of the
// test above, through markBenchDir itself).
func TestBenchDirMarkedByItsOwner(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, benchServePrefix+"x")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := markBenchDir(dir); err != nil {
		t.Fatal(err)
	}
	sweepBenchDirs(tmp)
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a running bench's directory was swept: %v", err)
	}
}
