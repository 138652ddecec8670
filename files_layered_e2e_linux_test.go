//go:build linux

package alephsandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	"github.com/aleph-sandbox/aleph-sandbox/core/wsfs"
)

// TestFilesAPILayeredView: the files API on a layered session reads and
// writes the session's view, through the real driver and sandbox (as
// root), both while the session's sandbox lives (the driver's view of its
// overlay) and after it ended (a view this process mounts):
//   - a command writes, the files API reads it (the host does not have it);
//   - the files API writes, a command of the session reads it;
//   - the files API removes a host file: the session no longer sees it,
//     the host keeps it; list and stat agree;
//   - changes lists the files API's writes and removal; the host is
//     untouched before apply (control: after apply it has them);
//   - wsfs's rules hold in the view: a link out is refused, a protected
//     entry is not written.
func TestFilesAPILayeredView(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the host's own view of a layer needs root (unprivileged, the overlay lives in the session sandbox's user namespace and the files API is refused: TestFilesAPILayeredUnprivileged)")
	}
	rt, _ := bwrapRuntime(t)
	ctx := context.Background()
	ws := t.TempDir()
	for name, body := range map[string]string{"host.txt": "host\n", "gone.txt": "keep\n", "d/inner.txt": "inner\n"} {
		os.MkdirAll(filepath.Dir(filepath.Join(ws, name)), 0o755)
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const S = "lview"
	run := func(script string) string {
		t.Helper()
		out, err := rt.Execute(ctx, core.Command{SessionID: S, Workspace: ws, Layered: true, Program: "/bin/sh", Args: []string{"-c", script}})
		if err != nil {
			var u *core.LayeredUnavailableError
			if errors.As(err, &u) {
				t.Skipf("layered sessions unavailable here: %v", err)
			}
			t.Fatalf("%s: %v", script, err)
		}
		if out.Exit.ExitCode != 0 {
			t.Fatalf("%s: exit %d: %s", script, out.Exit.ExitCode, out.Stderr)
		}
		return string(out.Stdout)
	}
	// A command writes; the files API reads it through the live sandbox's
	// overlay.
	run("echo from-command > made.txt; echo session > host.txt")
	if b, err := rt.ReadFile(ctx, S, "made.txt"); err != nil || string(b) != "from-command\n" {
		t.Fatalf("read of a command's file: %q %v", b, err)
	}
	if b, err := rt.ReadFile(ctx, S, "host.txt"); err != nil || string(b) != "session\n" {
		t.Fatalf("read of a file the session changed: %q %v", b, err)
	}
	if b, err := rt.ReadFile(ctx, S, "d/inner.txt"); err != nil || string(b) != "inner\n" {
		t.Fatalf("read of a host file the session did not touch: %q %v", b, err)
	}
	// The files API writes and removes; a command reads.
	if _, err := rt.WriteFile(ctx, S, "api.txt", strings.NewReader("from-api\n"), wsfs.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := rt.RemoveFile(ctx, S, "gone.txt", wsfs.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := run("read -r x < api.txt; echo $x; test -e gone.txt && echo still-there || echo gone-in-session"); got != "from-api\ngone-in-session\n" {
		t.Errorf("the session after the files API's write and remove: %q", got)
	}
	if _, err := rt.StatFile(ctx, S, "gone.txt"); wsfs.CodeOf(err) != wsfs.CodeNotFound {
		t.Errorf("stat of a removed file: %v", err)
	}
	names := listNames(t, rt, S)
	if !names["api.txt"] || !names["made.txt"] || names["gone.txt"] || !names["d"] {
		t.Errorf("list of the view: %v", names)
	}
	// wsfs's rules in the view: a link out refused (control: a link
	// inside is read), a protected entry not written.
	if err := os.Symlink("/etc/hostname", filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("made.txt", filepath.Join(ws, "in")); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.ReadFile(ctx, S, "out"); wsfs.CodeOf(err) != wsfs.CodeLink {
		t.Errorf("read through a link out of the view: %v", err)
	}
	if b, err := rt.ReadFile(ctx, S, "in"); err != nil || string(b) != "from-command\n" {
		t.Errorf("read through a link inside the view (control): %q %v", b, err)
	}
	if _, err := rt.WriteFile(ctx, S, ".git/config", strings.NewReader("x"), wsfs.WriteOptions{Parents: true}); wsfs.CodeOf(err) != wsfs.CodeProtected {
		t.Errorf("write of a protected entry: %v", err)
	}
	// Naming the layer's workspace reaches the same view, writes included
	// (they land in the layer, never on the host); naming another is
	// refused, not served from the host's directory.
	if b, err := rt.FilesIn(ws).StatFile(ctx, S, "made.txt"); err != nil || b.Size != int64(len("from-command\n")) {
		t.Errorf("stat through the named layer workspace: %+v %v", b, err)
	}
	if _, err := rt.FilesIn(ws).WriteFile(ctx, S, "named.txt", strings.NewReader("named\n"), wsfs.WriteOptions{}); err != nil {
		t.Errorf("write through the named layer workspace: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(ws, "named.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the write through the named layer workspace reached the host: %v", err)
	}
	var lm *core.LayeredModeError
	if _, err := rt.FilesIn(t.TempDir()).StatFile(ctx, S, "."); !errors.As(err, &lm) {
		t.Errorf("another workspace named for a layered session: %v, want a LayeredModeError", err)
	}
	if err := rt.RemoveFile(ctx, S, "named.txt", wsfs.RemoveOptions{}); err != nil {
		t.Errorf("control: the named write is in the view: %v", err)
	}

	// The session's sandbox ends: the files API mounts a view of its own.
	if lv, err := rt.Driver().LayeredView(ctx, S); err != nil || !lv.Mounted {
		t.Fatalf("the driver's view while the sandbox lives: %+v %v", lv, err)
	}
	if err := rt.Driver().ForgetSession(ctx, S); err != nil {
		t.Fatal(err)
	}
	if lv, err := rt.Driver().LayeredView(ctx, S); err != nil || lv.Mounted {
		t.Fatalf("the driver's view after the sandbox ended: %+v %v", lv, err)
	}
	if b, err := rt.ReadFile(ctx, S, "api.txt"); err != nil || string(b) != "from-api\n" {
		t.Fatalf("read with no sandbox: %q %v", b, err)
	}
	if _, err := rt.WriteFile(ctx, S, "later.txt", strings.NewReader("later\n"), wsfs.WriteOptions{}); err != nil {
		t.Fatalf("write with no sandbox: %v", err)
	}
	if _, err := rt.StatFile(ctx, S, "gone.txt"); wsfs.CodeOf(err) != wsfs.CodeNotFound {
		t.Errorf("stat of a removed file with no sandbox: %v", err)
	}
	if got := run("read -r x < later.txt; echo $x"); got != "later\n" {
		t.Errorf("a command reads the files API's write made with no sandbox: %q", got)
	}

	// The host is untouched; changes lists the files API's work.
	for _, p := range []string{"made.txt", "api.txt", "later.txt"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("host has %s before apply", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "gone.txt")); string(b) != "keep\n" {
		t.Errorf("host gone.txt before apply: %q", b)
	}
	chs, err := rt.Changes(ctx, S)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, c := range chs {
		kinds[c.Path] = c.Kind
	}
	for p, k := range map[string]string{"api.txt": layer.KindAdded, "later.txt": layer.KindAdded, "gone.txt": layer.KindDeleted, "host.txt": layer.KindModified} {
		if kinds[p] != k {
			t.Errorf("changes: %s is %q, want %q (%v)", p, kinds[p], k, kinds)
		}
	}
	// Control: apply brings them.
	res, err := rt.Apply(ctx, S, []string{"api.txt", "later.txt", "gone.txt"}, layer.ApplyOptions{})
	if err != nil || !res.Clean() {
		t.Fatalf("apply: %+v %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "api.txt")); string(b) != "from-api\n" {
		t.Errorf("host api.txt after apply: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(ws, "gone.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host gone.txt after apply: %v", err)
	}
	if err := rt.Discard(ctx, S); err != nil {
		t.Fatal(err)
	}
}

func listNames(t *testing.T, rt interface {
	ListFiles(context.Context, string, string) ([]wsfs.Info, error)
}, s string) map[string]bool {
	t.Helper()
	l, err := rt.ListFiles(context.Background(), s, ".")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range l {
		out[e.Name] = true
	}
	return out
}

// TestLayerDiskLimit: sandbox.layer_max_bytes, measured on the layer.
// Under the limit a layered command and the files API write (the positive
// control); a command that writes past it succeeds (the limit is measured
// between commands), and then the session's next command and the files
// API's writes are refused, typed (the limit's key), while reads and
// removes still work; removing the big file makes room again. Another
// layered session and the host are unaffected.
func TestLayerDiskLimit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("run as root (the files API writes the layer through the host's own view, which an unprivileged host has not: TestFilesAPILayeredUnprivileged)")
	}
	const limit = 1 << 20
	rt, _ := bwrapRuntimeWith(t, func(c *core.Config) { c.Sandbox.LayerMaxBytes = limit })
	ctx := context.Background()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "host.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(s, script string) error {
		t.Helper()
		out, err := rt.Execute(ctx, core.Command{SessionID: s, Workspace: ws, Layered: true, Program: "/bin/sh", Args: []string{"-c", script}})
		if err == nil && out.Exit.ExitCode != 0 {
			t.Fatalf("%s: exit %d: %s", script, out.Exit.ExitCode, out.Stderr)
		}
		var u *core.LayeredUnavailableError
		if errors.As(err, &u) {
			t.Skipf("layered sessions unavailable here: %v", err)
		}
		return err
	}
	// 1.5 MiB in 1 KiB lines, shell builtins only (no spawn).
	const fill = `i=0; while [ $i -lt 1536 ]; do printf '%1023s\n' x >> big; i=$((i+1)); done`
	if err := run("full", "echo small > small.txt"); err != nil {
		t.Fatalf("a command under the limit: %v", err)
	}
	if _, err := rt.WriteFile(ctx, "full", "api.txt", strings.NewReader("x"), wsfs.WriteOptions{}); err != nil {
		t.Fatalf("a files API write under the limit: %v", err)
	}
	if err := run("full", fill); err != nil {
		t.Fatalf("the command that fills the layer: %v", err)
	}
	err := run("full", "echo more > more.txt")
	if core.LimitOf(err) != core.LayerLimitKey || !strings.Contains(err.Error(), "raise it") {
		t.Fatalf("a command over the limit: %v", err)
	}
	if _, err := rt.WriteFile(ctx, "full", "more.txt", strings.NewReader("x"), wsfs.WriteOptions{}); core.LimitOf(err) != core.LayerLimitKey {
		t.Fatalf("a files API write over the limit: %v", err)
	}
	if b, err := rt.ReadFile(ctx, "full", "small.txt"); err != nil || string(b) != "small\n" {
		t.Errorf("a read over the limit: %q %v", b, err)
	}
	// Another session is not affected; nor is the host.
	if err := run("other", "echo other > other.txt"); err != nil {
		t.Errorf("another layered session: %v", err)
	}
	for _, p := range []string{"big", "more.txt", "other.txt"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
			t.Errorf("the host has %s", p)
		}
	}
	// Removing the big file makes room.
	if err := rt.RemoveFile(ctx, "full", "big", wsfs.RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := run("full", "echo more > more.txt"); err != nil {
		t.Errorf("a command once room was made: %v", err)
	}
	for _, s := range []string{"full", "other"} {
		if err := rt.Discard(ctx, s); err != nil {
			t.Error(err)
		}
	}
}

// TestFilesAPILayeredUnprivileged: as an unprivileged user the session's
// overlay is mounted by its sandbox's supervisor in the sandbox's user
// namespace; while that sandbox lives the files API reaches the overlay
// through the root the supervisor opened and sent to the driver: it reads
// what the session's commands wrote, its write is seen by the session's
// next command and listed by changes, and the host's directory is
// untouched (never served from it or from the upper layer). Control: the
// command ran and wrote its layer (changes lists its file). With no
// sandbox running the driver mounts a view for the host
// (TestFilesAPILayeredUnprivilegedNoSandbox).
func TestFilesAPILayeredUnprivileged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root: the host mounts its own view (TestFilesAPILayeredView); the unprivileged pass runs this one")
	}
	rt, _ := bwrapRuntime(t)
	ctx := context.Background()
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "host.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const S = "lunpriv"
	out, err := rt.Execute(ctx, core.Command{SessionID: S, Workspace: ws, Layered: true, Program: "/bin/sh", Args: []string{"-c", "echo session > host.txt; echo made > made.txt"}})
	if err != nil {
		var u *core.LayeredUnavailableError
		if errors.As(err, &u) {
			t.Skipf("layered sessions unavailable here: %v", err)
		}
		t.Fatal(err)
	}
	if out.Exit.ExitCode != 0 {
		t.Fatalf("exit %d: %s", out.Exit.ExitCode, out.Stderr)
	}
	chs, err := rt.Changes(ctx, S)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{}
	for _, c := range chs {
		kinds[c.Path] = c.Kind
	}
	if kinds["made.txt"] != layer.KindAdded || kinds["host.txt"] != layer.KindModified || len(kinds) != 2 {
		t.Fatalf("control: changes %v", kinds)
	}
	// The session's sandbox lives (its idle limit has not passed): the
	// files API reaches its overlay through the root the supervisor
	// opened, and sees what the session's commands see.
	for p, want := range map[string]string{"host.txt": "session\n", "made.txt": "made\n"} {
		b, err := rt.ReadFile(ctx, S, p)
		if err != nil || string(b) != want {
			t.Errorf("files API read of %s: %q %v, want %q (the session's view)", p, b, err, want)
		}
	}
	if _, err := rt.WriteFile(ctx, S, "api.txt", strings.NewReader("x\n"), wsfs.WriteOptions{}); err != nil {
		t.Fatalf("files API write: %v", err)
	}
	out, err = rt.Execute(ctx, core.Command{SessionID: S, Workspace: ws, Layered: true, Program: "/bin/cat", Args: []string{"api.txt"}})
	if err != nil || out.Exit.ExitCode != 0 || string(out.Stdout) != "x\n" {
		t.Errorf("the session's next command reads the files API's write: %q %v %+v", out.Stdout, err, out.Exit)
	}
	chs, err = rt.Changes(ctx, S)
	if err != nil {
		t.Fatal(err)
	}
	kinds = map[string]string{}
	for _, c := range chs {
		kinds[c.Path] = c.Kind
	}
	if kinds["api.txt"] != layer.KindAdded || len(kinds) != 3 {
		t.Errorf("changes after the files API's write: %v", kinds)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "host.txt")); string(b) != "host\n" {
		t.Errorf("host host.txt: %q", b)
	}
	for _, p := range []string{"made.txt", "api.txt"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("host has %s: %v", p, err)
		}
	}
	if err := rt.Discard(ctx, S); err != nil {
		t.Errorf("discard: %v", err)
	}
}

// TestLayeredForgetAndDeleteUnprivileged: an unprivileged layered
// session's layer goes when the session is forgotten or deleted, although
// overlayfs left its work/work directory at mode 0000 after the mount in
// the sandbox's user namespace (a plain recursive removal fails on it).
// Control: before, the layer holds the command's file and that directory.
func TestLayeredForgetAndDeleteUnprivileged(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root: the driver mounts in the initial namespace; the unprivileged pass runs this one")
	}
	var root string
	rt, _ := bwrapRuntimeWith(t, func(c *core.Config) { root = c.Sandbox.WorkspaceRoot })
	ctx := context.Background()
	for _, end := range []string{"forget", "delete"} {
		t.Run(end, func(t *testing.T) {
			S := "lend-" + end
			ws := t.TempDir()
			out, err := rt.Execute(ctx, core.Command{SessionID: S, Workspace: ws, Layered: true, Program: "/bin/sh", Args: []string{"-c", "echo x > made.txt"}})
			if err != nil {
				if errors.As(err, new(*core.LayeredUnavailableError)) {
					t.Skipf("layered sessions unavailable here: %v", err)
				}
				t.Fatal(err)
			}
			if out.Exit.ExitCode != 0 {
				t.Fatalf("exit %d: %s", out.Exit.ExitCode, out.Stderr)
			}
			dir := filepath.Join(root, core.LayersDirName, core.SessionDirName(S))
			if b, err := os.ReadFile(filepath.Join(dir, layer.UpperDir, "made.txt")); err != nil || string(b) != "x\n" {
				t.Fatalf("control: the upper holds %q %v", b, err)
			}
			st, err := os.Lstat(filepath.Join(dir, layer.WorkDir, "work"))
			if err != nil || st.Mode().Perm() != 0 {
				t.Fatalf("control: work/work is %v %v, want mode 0000 (what the removal must cope with)", st, err)
			}
			if end == "forget" {
				rt.ForgetSession(S)
			} else if err := rt.DeleteSession(S); err != nil {
				t.Fatalf("delete: %v", err)
			}
			if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the layer is left after %s: %v", end, err)
			}
			if _, err := os.Lstat(filepath.Join(ws, "made.txt")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the host has the discarded file: %v", err)
			}
		})
	}
}
