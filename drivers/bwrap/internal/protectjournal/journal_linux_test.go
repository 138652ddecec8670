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
		f, st, err := j.Create(dir, path, false)
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
