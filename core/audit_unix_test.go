//go:build unix

package core

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// An audit log that is a FIFO with nobody reading it is refused at once
// (it used to block the opener until a reader came); a device is refused
// too. Control: a regular file opens and takes a record.
func TestAuditLogMustBeARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/null"} {
		done := make(chan error, 1)
		go func() {
			s, err := OpenJSONLinesSink(p)
			if s != nil {
				s.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "not a regular file") && !strings.Contains(err.Error(), "no such device") {
				t.Fatalf("%s: want a refusal, got %v", p, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: opening the audit log blocked", p)
		}
	}
	f := filepath.Join(dir, "audit.jsonl")
	s, err := OpenJSONLinesSink(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Record(context.Background(), AuditRecord{CommandID: "c1"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if b, _ := os.ReadFile(f); !strings.Contains(string(b), `"c1"`) {
		t.Fatalf("record not written: %q", b)
	}
}
