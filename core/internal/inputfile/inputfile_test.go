package inputfile

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestReadRegular(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(p, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	// At the limit: read.
	if b, err := Read(p, 10); err != nil || string(b) != "0123456789" {
		t.Fatalf("Read at the limit: %q, %v", b, err)
	}
	// One byte over: refused, naming the limit.
	_, err := Read(p, 9)
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Limit != 9 || !strings.Contains(err.Error(), "9 byte limit") {
		t.Fatalf("Read over the limit: %v", err)
	}
	// A missing file keeps its os error.
	if _, err := Read(filepath.Join(t.TempDir(), "none"), 10); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}

// readSoon fails the test if Read does not return within a few seconds
// (a hang is the bug being tested).
func readSoon(t *testing.T, path string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := Read(path, 1<<20); done <- err }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("Read(%s) did not return", path)
		return nil
	}
}

func TestReadRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	cases := map[string]string{dir: "a directory"}
	if runtime.GOOS != "windows" {
		cases["/dev/zero"] = "a character device"
		cases[mkfifo(t, dir)] = "a FIFO"
		// A symbolic link to a device is judged by its target.
		link := filepath.Join(dir, "link")
		if err := os.Symlink("/dev/zero", link); err != nil {
			t.Fatal(err)
		}
		cases[link] = "a character device"
	}
	for path, kind := range cases {
		err := readSoon(t, path)
		var nr *NotRegularError
		if !errors.As(err, &nr) || !strings.Contains(err.Error(), kind) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v, want a refusal naming %s", path, err, kind)
		}
	}
}
