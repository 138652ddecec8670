//go:build linux

package core

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// auditFullChild names the role of a re-executed test binary: the audit
// writer that fills its filesystem ("tmpfs") or its file size limit
// ("fsize"), in a process of its own so the limit or the mount touches
// nothing else.
const auditFullChild = "ALEPH_TEST_AUDIT_FULL_CHILD"

// The audit log on a full filesystem keeps every record whole: a record
// that does not fit is removed again, not left glued to the next one, the
// failure is counted, and with audit_on_failure = "closed" commands are
// refused (and do not run) until a record can be written again. Run on a
// 16 KiB tmpfs in a private mount namespace (root) and under RLIMIT_FSIZE
// (any user).
func TestAuditRecordsWholeOnFullFilesystem(t *testing.T) {
	if mode := os.Getenv(auditFullChild); mode != "" {
		auditFullChildMain(t, mode, os.Getenv(auditFullChild+"_DIR"))
		return
	}
	run := func(t *testing.T, mode string, wrap ...string) {
		dir := t.TempDir()
		args := append(wrap, os.Args[0], "-test.run=^TestAuditRecordsWholeOnFullFilesystem$", "-test.v", "-test.count=1")
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), auditFullChild+"="+mode, auditFullChild+"_DIR="+dir)
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("AUDIT-CHILD-OK")) {
			t.Fatalf("child (%s): %v\n%s", mode, err, out)
		}
	}
	t.Run("fsize", func(t *testing.T) { run(t, "fsize") })
	t.Run("tmpfs", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("mounting a tmpfs in a private mount namespace needs root; the fsize case covers this user")
		}
		unshare, err := exec.LookPath("unshare")
		if err != nil {
			t.Skip("no unshare(1) on this host")
		}
		// The child mounts the tmpfs over its own directory, in a mount
		// namespace nobody else sees.
		run(t, "tmpfs", unshare, "--mount", "--propagation", "private")
	})
}

func auditFullChildMain(t *testing.T, mode, dir string) {
	// A write past RLIMIT_FSIZE sends SIGXFSZ, whose default is to end
	// the process; ignored, the write fails with EFBIG instead.
	signal.Ignore(syscall.SIGXFSZ)
	filler := filepath.Join(dir, "filler")
	switch mode {
	case "tmpfs":
		if err := unix.Mount("none", dir, "tmpfs", 0, "size=16k,mode=0700"); err != nil {
			t.Fatalf("mount tmpfs: %v", err)
		}
		// Room to free later: a file taking part of the space.
		if err := os.WriteFile(filler, bytes.Repeat([]byte("x"), 8192), 0o600); err != nil {
			t.Fatal(err)
		}
	case "fsize":
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: 8192, Max: unix.RLIM_INFINITY}); err != nil {
			t.Fatal(err)
		}
	}
	log := filepath.Join(dir, "audit.jsonl")
	js, err := OpenJSONLinesSink(log)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Sandbox.AuditOnFailure = AuditFailClosed
	fake := &drivertest.FakeDriver{Stdout: []byte("ok")}
	sb, err := NewWorkspaceSandbox(cfg, WithDriver(drivertest.Connect(t, fake)), WithAuditSink(js))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	ctx := context.Background()
	cmd := Command{SessionID: "full", Program: "/bin/echo", Args: strings.Fields(strings.Repeat("some arguments ", 20))}
	// Positive control: records are written while there is room.
	if _, err := sb.Execute(ctx, cmd); err != nil {
		t.Fatalf("a command with room for its record: %v", err)
	}
	wrote := 0
	for i := 0; sb.AuditFailures() == 0; i++ {
		if i > 1000 {
			t.Fatal("the audit log never filled")
		}
		if _, err := sb.Execute(ctx, cmd); err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		wrote++
	}
	runs := fake.Runs()
	_, err = sb.Execute(ctx, cmd)
	if !errors.Is(err, ErrAuditUnavailable) {
		t.Fatalf("failing closed: want ErrAuditUnavailable, got %v", err)
	}
	if r, _ := FailureReason(err); r != ReasonAuditUnavailable {
		t.Fatalf("reason %q, want %q", r, ReasonAuditUnavailable)
	}
	if fake.Runs() != runs {
		t.Fatal("a command refused for the audit ran anyway")
	}
	checkWholeLines(t, log, wrote)
	// Room again: the refusal's record is written (the probe), and the
	// next command runs.
	switch mode {
	case "tmpfs":
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	case "fsize":
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sb.Execute(ctx, cmd); !errors.Is(err, ErrAuditUnavailable) {
		t.Fatalf("the probe command: want ErrAuditUnavailable, got %v", err)
	}
	if _, err := sb.Execute(ctx, cmd); err != nil {
		t.Fatalf("with room again the command must run: %v", err)
	}
	if fake.Runs() != runs+1 {
		t.Fatalf("runs %d, want %d", fake.Runs(), runs+1)
	}
	checkWholeLines(t, log, wrote+2)
	t.Log("AUDIT-CHILD-OK")
}

// checkWholeLines asserts every line of the log is one JSON record, the
// last one ended, and there are more than min of them.
func checkWholeLines(t *testing.T, path string, min int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatalf("the log does not end with a whole line: %q", b[max(0, len(b)-80):])
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var rec AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d is not a whole record (%v): %q", n+1, err, sc.Text())
		}
		n++
	}
	if n < min {
		t.Fatalf("%d records, want at least %d", n, min)
	}
}
