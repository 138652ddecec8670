package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
)

// sandboxBinaries are the programs of a real installation the end-to-end
// tests run: the CLI, the Linux driver and the in-sandbox init.
var sandboxBinaries = []string{"aleph-sandbox", "aleph-driver-bwrap", "aleph-sandbox-init"}

// builtBinaries builds sandboxBinaries once per test process, as `make
// build` does (CGO_ENABLED=0), into a directory TestMain removes. Each
// harness used to run its own `go build` (about 30 per pass of this package,
// each linking three binaries); installBinaries gives each its own
// directory of links to these instead, so the paths a test looks for in
// /proc (its own bin directory) stay its own.
var builtBinaries = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "aleph-cli-test-bin-")
	if err != nil {
		return "", err
	}
	builtDir.Store(&dir)
	// Sandboxes run as other users bind these too.
	if err := os.Chmod(dir, 0o755); err != nil {
		return dir, err
	}
	args := []string{"build", "-o", dir + "/"}
	for _, b := range sandboxBinaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return dir, fmt.Errorf("go build: %v\n%s", err, out)
	}
	return dir, nil
})

// builtDir is the directory builtBinaries made, once it has run.
var builtDir atomic.Pointer[string]

// removeBuiltBinaries removes what builtBinaries made, if it ran.
func removeBuiltBinaries() {
	if dir := builtDir.Load(); dir != nil {
		_ = os.RemoveAll(*dir)
	}
}

// installBinaries puts the three programs in dst (made if missing): hard
// links to the ones built once, or copies where a link cannot be made.
func installBinaries(t testing.TB, dst string) {
	t.Helper()
	src, err := builtBinaries()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range sandboxBinaries {
		from, to := filepath.Join(src, b), filepath.Join(dst, b)
		if err := os.Link(from, to); err == nil {
			continue
		}
		if err := copyExecutable(from, to); err != nil {
			t.Fatal(err)
		}
	}
}

func copyExecutable(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
