//go:build linux

package alephsandbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	"github.com/aleph-sandbox/aleph-sandbox/core/wsfs"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// TestFilesAPILayeredUnprivilegedNoSandbox: as an unprivileged user, the
// files API reaches a layered session none of whose sandboxes has the
// layer mounted through a view the driver mounts for it (its helper's own
// user namespace, userxattr), through the real driver and sandbox:
//   - a runtime runs a command of the session and closes (its sandbox
//     ends, as after a one-shot CLI command); a second runtime reads the
//     command's files, writes one and removes a host file: the write lands
//     in the upper, the host's directory is untouched, changes lists both;
//   - while a read holds the view open, a command of the session from a
//     third runtime (another driver process) is refused, typed, and did
//     not run; the driver holds a descriptor of the overlay meanwhile
//     (control), no helper process is left;
//   - once the read is closed, the driver holds no descriptor of an
//     overlay, and the refused command runs and sees the write and the
//     removal.
//
// As root the host mounts its own view (TestFilesAPILayeredView).
func TestFilesAPILayeredUnprivilegedNoSandbox(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root: the host mounts its own view (TestFilesAPILayeredView); the unprivileged pass runs this one")
	}
	if testing.Short() {
		t.Skip("builds the driver and runs the real sandbox; skipped with -short")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap (bwrap) is not installed: this test runs real sandboxed processes")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin+"/",
		"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-driver-bwrap",
		"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox-init")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	driverPath := filepath.Join(bin, "aleph-driver-bwrap")
	cfg := testConfig(t)
	cfg.Sandbox.Driver = driverPath
	newRT := func() *alephsandbox.Runtime {
		t.Helper()
		rt, err := alephsandbox.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt.Close() })
		return rt
	}
	ctx := context.Background()
	ws := t.TempDir()
	for name, body := range map[string]string{"host.txt": "host\n", "gone.txt": "keep\n"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const S = "lnosandbox"
	exe := func(rt *alephsandbox.Runtime, script string) (*core.Output, error) {
		return rt.Execute(ctx, core.Command{SessionID: S, Workspace: ws, Layered: true, Program: "/bin/sh", Args: []string{"-c", script}})
	}

	rt1 := newRT()
	out, err := exe(rt1, "echo session > host.txt; echo made > made.txt")
	if err != nil {
		if errors.As(err, new(*core.LayeredUnavailableError)) {
			t.Skipf("layered sessions unavailable here: %v", err)
		}
		t.Fatal(err)
	}
	if out.Exit.ExitCode != 0 {
		t.Fatalf("exit %d: %s", out.Exit.ExitCode, out.Stderr)
	}
	if err := rt1.Close(); err != nil {
		t.Fatal(err)
	}

	rt2 := newRT()
	for p, want := range map[string]string{"made.txt": "made\n", "host.txt": "session\n", "gone.txt": "keep\n"} {
		if b, err := rt2.ReadFile(ctx, S, p); err != nil || string(b) != want {
			t.Fatalf("files API read of %s: %q %v, want %q", p, b, err, want)
		}
	}
	if _, err := rt2.WriteFile(ctx, S, "api.txt", strings.NewReader("api\n"), wsfs.WriteOptions{}); err != nil {
		t.Fatalf("files API write: %v", err)
	}
	if err := rt2.RemoveFile(ctx, S, "gone.txt", alephsandbox.RemoveFileOptions{}); err != nil {
		t.Fatalf("files API remove: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "host.txt")); string(b) != "host\n" {
		t.Errorf("host host.txt: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "gone.txt")); string(b) != "keep\n" {
		t.Errorf("host gone.txt: %q", b)
	}
	for _, p := range []string{"made.txt", "api.txt"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host has %s: %v", p, err)
		}
	}
	chs, err := rt2.Changes(ctx, S)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, c := range chs {
		kinds[c.Path] = c.Kind
	}
	if kinds["made.txt"] != layer.KindAdded || kinds["api.txt"] != layer.KindAdded || kinds["host.txt"] != layer.KindModified ||
		kinds["gone.txt"] != layer.KindDeleted || len(kinds) != 4 {
		t.Fatalf("changes %v", kinds)
	}

	// A read holds the view open. (The session's commands use shell
	// builtins alone: they are not granted subprocesses.)
	drv := childrenRunning(os.Getpid(), driverPath)
	if len(drv) != 1 {
		t.Fatalf("driver processes of this test: %v, want the second runtime's alone", drv)
	}
	rc, _, err := rt2.OpenFile(ctx, S, "api.txt")
	if err != nil {
		t.Fatal(err)
	}
	if n := overlayFDs(t, drv[0]); n != 1 {
		t.Errorf("control: the driver holds %d descriptors of an overlay while the view is open, want 1", n)
	}
	if h := childrenRunning(drv[0], ""); len(h) != 0 {
		t.Errorf("the driver has child processes while the view is open (its helper?): %v", h)
	}
	rt3 := newRT()
	_, err = exe(rt3, "echo ran > ran.txt")
	var u *driverapi.UnavailableError
	if !errors.As(err, &u) || u.Feature != driverapi.FeatureLayeredWorkspace {
		t.Fatalf("a command of another process while the view is open: %v, want a typed refusal", err)
	}
	if b, err := io.ReadAll(rc); err != nil || string(b) != "api\n" {
		t.Errorf("the read through the view: %q %v", b, err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	if n := overlayFDs(t, drv[0]); n != 0 {
		t.Errorf("the driver holds %d descriptors of an overlay after the view ended", n)
	}
	out, err = exe(rt3, `for f in made.txt api.txt host.txt; do while IFS= read -r l; do echo "$l"; done < $f; done; [ ! -e gone.txt ] && echo gone; [ ! -e ran.txt ] && echo notran`)
	if err != nil || out.Exit.ExitCode != 0 {
		t.Fatalf("the command once the view ended: %v %+v %s", err, out.Exit, out.Stderr)
	}
	if got := string(out.Stdout); got != "made\napi\nsession\ngone\nnotran\n" {
		t.Errorf("the command once the view ended reads %q", got)
	}
	if err := rt3.Discard(ctx, S); err != nil {
		t.Errorf("discard: %v", err)
	}
}

// childrenRunning lists the processes whose parent is ppid and, when exe
// is set, whose executable is exe.
func childrenRunning(ppid int, exe string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(ppid) {
			continue
		}
		if exe != "" {
			if p, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); p != exe {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}

// overlayFDs counts pid's descriptors of an overlay.
func overlayFDs(t *testing.T, pid int) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		var sf unix.Statfs_t
		if unix.Statfs(filepath.Join(dir, e.Name()), &sf) == nil && sf.Type == unix.OVERLAYFS_SUPER_MAGIC {
			n++
		}
	}
	return n
}
