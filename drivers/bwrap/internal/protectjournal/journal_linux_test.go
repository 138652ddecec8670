//go:build linux

package protectjournal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/ownertag"
)

// TestPlaceholderRecordBecomesIntent: removing a placeholder turns its
// record into an intent of the remover before the file goes, so a new
// placeholder that gets the freed inode number keeps its record, and a
// remover that dies in between leaves an intent recovery acts on.
func TestPlaceholderRecordBecomesIntent(t *testing.T) {
	j := New(t.TempDir(), ownertag.Self(), hclog.NewNullLogger())
	ws := t.TempDir()
	dir, err := j.Dir()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(ws, ".envrc")
	newPlaceholder := func() *unix.Stat_t {
		f, st, err := j.Create(dir, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if _, err := os.Stat(filepath.Join(dir, RecordName(st))); err != nil {
			t.Fatalf("control: no record: %v", err)
		}
		return st
	}
	// The ordinary removal: file, record and intent all gone.
	st := newPlaceholder()
	tomb := j.TombName(dir)
	if Remove(dir, path, st, tomb) {
		t.Fatal("held")
	}
	for _, p := range []string{path, filepath.Join(dir, RecordName(st)), tomb} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left: %v", p, err)
		}
	}
	// A remover that died after the record became its intent: the next
	// driver start removes the placeholder and the intent.
	st = newPlaceholder()
	pst, _ := ownertag.StartTime(os.Getpid())
	dead := filepath.Join(dir, fmt.Sprintf("intent-%d-%d-r1", os.Getpid(), pst+1))
	if err := os.Rename(filepath.Join(dir, RecordName(st)), dead); err != nil {
		t.Fatal(err)
	}
	j.Recover(2*time.Second, false)
	for _, p := range []string{path, dead} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after recovery, %s left: %v", p, err)
		}
	}
}

// TestCreateNeverShowsAnUnlockedPlaceholder: a placeholder appears at its
// path already locked and recorded. A dead driver's janitor removes an
// empty read-only file that an intent of its driver names when nobody
// holds it and no record names it (removeUnrecorded); were a new
// placeholder visible at the path a moment before its maker locked and
// recorded it, that janitor could remove it under the maker, whose
// sandbox then finds its protected entry gone ("no such file or
// directory" at the hand-over). The remover here runs all the time beside
// the creates, as the janitors of several killed drivers do.
//
// Both ways of making one are run: unnamed and then linked (where the file
// system has O_TMPFILE), and in place, looked at again once locked.
func TestCreateNeverShowsAnUnlockedPlaceholder(t *testing.T) {
	j := New(t.TempDir(), ownertag.Self(), hclog.NewNullLogger())
	for _, tc := range []struct {
		name   string
		create func(dir, path string) (*os.File, *unix.Stat_t, error)
	}{
		{"unnamed then linked", func(dir, path string) (*os.File, *unix.Stat_t, error) {
			f, st, err := createHidden(dir, path, nil)
			if errors.Is(err, errNoTmpfile) {
				t.Skip("this file system has no O_TMPFILE; the in-place case covers it")
			}
			return f, st, err
		}},
		{"in place", func(dir, path string) (*os.File, *unix.Stat_t, error) { return createInPlace(dir, path, nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) { createRace(t, j, tc.create) })
	}
}

func createRace(t *testing.T, j *Journal, create func(dir, path string) (*os.File, *unix.Stat_t, error)) {
	dir, err := j.Dir()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), ".opencode")
	stop := make(chan struct{})
	removed := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				removed <- n
				return
			default:
			}
			if _, err := os.Lstat(path); err == nil {
				removeUnrecorded(dir, path)
				if _, err := os.Lstat(path); err != nil {
					n++
				}
			}
		}
	}()
	const rounds = 3000
	lost := 0
	for i := 0; i < rounds; i++ {
		f, st, err := create(dir, path)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			close(stop)
			<-removed
			t.Fatal(err)
		}
		if !StillSame(path, st) {
			lost++
		}
		RemoveHeld(dir, path, f, st, j.TombName(dir))
	}
	close(stop)
	n := <-removed
	if lost > 0 {
		t.Errorf("%d of %d new placeholders were removed by a recovery before their maker used them (the remover removed %d files)", lost, rounds, n)
	}
	// Control: the same remover does remove an unrecorded placeholder
	// nobody holds (what it is for), so the loop above was not vacuous.
	if err := os.WriteFile(path, nil, PlaceholderPerm); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(path, PlaceholderPerm)
	removeUnrecorded(dir, path)
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("control: an unrecorded, unheld placeholder was not removed: %v", err)
	}
}

// TestRecoveryKeepsTheRecordOfAPlaceholderNotLinkedYet: another driver
// process's recovery, running beside a command's placeholder set-up, never
// leaves a new placeholder without its record. It drops a record whose
// inode is at none of its paths; two ways that hit a live placeholder's:
// a placeholder recorded before it was linked (its record looked dead for
// that moment), and a record read just before its placeholder was removed,
// dropped by name after a new placeholder got the freed inode number and
// so the same record name. Unrecognised, a placeholder was bound by a
// second command as a user's file, holding no lock, and that sandbox lost
// it when its maker removed it ("protected .continue: no such file or
// directory" at a hand-over, under serve's load). The control: a record
// of a placeholder never linked, that no live intent names, is dropped.
func TestRecoveryKeepsTheRecordOfAPlaceholderNotLinkedYet(t *testing.T) {
	state := t.TempDir()
	maker := New(state, ownertag.Self(), hclog.NewNullLogger())
	// Another driver process: its tag is another live process's (the
	// parent's), so intents of the maker are another's to it.
	pst, err := ownertag.StartTime(os.Getppid())
	if err != nil {
		t.Skipf("cannot read the parent's start time: %v", err)
	}
	other := New(state, fmt.Sprintf("%d-%d", os.Getppid(), pst), hclog.NewNullLogger())
	dir, err := maker.Dir()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), ".continue")
	stop := make(chan struct{})
	passes := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				passes <- n
				return
			default:
			}
			other.recoverPass(dir)
			n++
		}
	}()
	const rounds = 2000
	unrecorded := 0
	for i := 0; i < rounds; i++ {
		f, st, err := maker.Create(dir, path, nil)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			close(stop)
			<-passes
			t.Fatal(err)
		}
		var now unix.Stat_t
		if unix.Lstat(path, &now) == nil && !IsPlaceholder(dir, path, &now) {
			unrecorded++
		}
		RemoveHeld(dir, path, f, st, maker.TombName(dir))
	}
	close(stop)
	n := <-passes
	if unrecorded > 0 {
		t.Errorf("%d of %d new placeholders lost their record to another process's recovery (%d passes)", unrecorded, rounds, n)
	}
	// Control: the record of a placeholder never linked, whose maker's
	// intent is gone, is dropped by the same recovery pass.
	fd, err := unix.Open(filepath.Dir(path), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, PlaceholderPerm)
	if err != nil {
		t.Skipf("no O_TMPFILE here, so nothing is recorded before it is linked: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(dir, RecordName(&st))
	if err := os.WriteFile(rec, []byte(path), 0o600); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	other.recoverPass(dir)
	if _, err := os.Lstat(rec); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("control: the record of a placeholder never linked, named by no intent, was kept: %v", err)
	}
}

// TestPlaceholderBatch: the placeholders of one intent share one record
// file (the later records are links to the first), each recognised at its
// own path only; removing one leaves the other's record, and recovery
// removes the other with its record. The control: an empty read-only file
// of the user's at a path the batch lists, but not made by it, is not
// taken for a placeholder.
func TestPlaceholderBatch(t *testing.T) {
	j := New(t.TempDir(), ownertag.Self(), hclog.NewNullLogger())
	ws := t.TempDir()
	dir, err := j.Dir()
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := filepath.Join(ws, ".envrc"), filepath.Join(ws, ".git"), filepath.Join(ws, ".vscode")
	batch := NewBatch([]string{a, b, c})
	var sts []*unix.Stat_t
	for _, p := range []string{a, b} {
		f, st, err := j.Create(dir, p, batch)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		sts = append(sts, st)
	}
	// The user's own empty read-only file at the third listed path.
	if err := os.WriteFile(c, nil, PlaceholderPerm); err != nil {
		t.Fatal(err)
	}
	var ra, rb, rc unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, RecordName(sts[0])), &ra); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Join(dir, RecordName(sts[1])), &rb); err != nil {
		t.Fatal(err)
	}
	if ra.Ino != rb.Ino || ra.Nlink != 2 {
		t.Errorf("records not one file: inodes %d and %d, %d links", ra.Ino, rb.Ino, ra.Nlink)
	}
	for i, p := range []string{a, b} {
		if !IsPlaceholder(dir, p, sts[i]) {
			t.Errorf("%s not recognised", p)
		}
	}
	var cst unix.Stat_t
	if err := unix.Lstat(c, &cst); err != nil {
		t.Fatal(err)
	}
	if IsPlaceholder(dir, c, &cst) || unix.Stat(filepath.Join(dir, RecordName(&cst)), &rc) == nil {
		t.Errorf("the user's %s taken for a placeholder", c)
	}
	// One removed: the other's record stays, and names it still.
	if Remove(dir, a, sts[0], j.TombName(dir)) {
		t.Fatal("held")
	}
	if _, err := os.Lstat(a); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left: %v", a, err)
	}
	if !IsPlaceholder(dir, b, sts[1]) {
		t.Errorf("%s no longer recognised after %s went", b, a)
	}
	// Recovery (as after a driver's death) removes the other and its
	// record; the user's file stays.
	j.Recover(2*time.Second, false)
	for _, p := range []string{b, filepath.Join(dir, RecordName(sts[1]))} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after recovery, %s left: %v", p, err)
		}
	}
	if _, err := os.Lstat(c); err != nil {
		t.Errorf("the user's %s removed: %v", c, err)
	}
}

// BenchmarkPlaceholders is one command's placeholders as the driver makes
// them (protect_linux.go): one intent for twenty missing entries, each
// made, locked and recorded, the intent dropped, then each removed under
// its lock. cpu_us/command is this process's CPU (user and system) per
// command. Set ALEPH_BENCH_PLACEHOLDER_DIR to a directory to make the
// workspaces there (the file system's own cost of a new file varies with
// where it lands).
func BenchmarkPlaceholders(b *testing.B) {
	j := New(b.TempDir(), ownertag.Self(), hclog.NewNullLogger())
	dir, err := j.Dir()
	if err != nil {
		b.Fatal(err)
	}
	ws, err := os.MkdirTemp(os.Getenv("ALEPH_BENCH_PLACEHOLDER_DIR"), "placeholders-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(ws) })
	var paths []string
	for i := range 20 {
		paths = append(paths, filepath.Join(ws, fmt.Sprintf(".entry%d", i)))
	}
	cpu := func() time.Duration {
		var ru unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	c0 := cpu()
	for b.Loop() {
		intent, err := j.WriteIntent(dir, paths)
		if err != nil {
			b.Fatal(err)
		}
		batch := NewBatch(paths)
		var files []*os.File
		var sts []*unix.Stat_t
		for _, p := range paths {
			f, st, err := j.Create(dir, p, batch)
			if err != nil {
				b.Fatal(err)
			}
			files, sts = append(files, f), append(sts, st)
		}
		os.Remove(intent)
		for i, p := range paths {
			if RemoveHeld(dir, p, files[i], sts[i], j.TombName(dir)) {
				b.Fatal("held")
			}
		}
	}
	b.ReportMetric(float64((cpu()-c0).Microseconds())/float64(b.N), "cpu_us/command")
}
