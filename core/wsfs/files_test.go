//go:build linux || darwin

package wsfs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// fileAPI is what both implementations offer: Root's own methods (the
// descriptor code of files_unix.go here) and osRoot's (os.Root, what
// Windows runs). Every test below runs against both.
type fileAPI interface {
	Stat(ctx context.Context, p string) (Info, error)
	Open(ctx context.Context, p string) (*os.File, Info, error)
	Read(ctx context.Context, p string, w io.Writer) (Info, error)
	List(ctx context.Context, p string) ([]Info, error)
	Write(ctx context.Context, p string, src io.Reader, o WriteOptions) (Info, error)
	Remove(ctx context.Context, p string, o RemoveOptions) error
}

// The implementations under test, and where their behaviour differs
// (each difference is also asserted where it shows):
//
//	impl     read through a link   write/remove through  FIFO, device
//	         that stays inside     a link                read
//	unix     followed on Linux     refused (link)        refused (not_regular)
//	         (openat2 BENEATH),
//	         refused on macOS
//	osroot   followed (os.Root)    refused (link)        refused (not_regular)
var impls = []string{"unix", "osroot"}

// followsInsideLinks reports whether impl's reads follow a link that
// stays inside the workspace.
func followsInsideLinks(impl string) bool { return impl == "osroot" || runtime.GOOS == "linux" }

type testRoot struct {
	fileAPI
	Dir  string
	root *Root
}

func eachImpl(t *testing.T, f func(t *testing.T, impl string)) {
	t.Helper()
	for _, impl := range impls {
		t.Run(impl, func(t *testing.T) { f(t, impl) })
	}
}

func newRoot(t *testing.T, impl string) (*testRoot, string) {
	t.Helper()
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	// A secret beside the workspace: what an escape would reach.
	if err := os.WriteFile(filepath.Join(base, "secret"), []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	canon, err := filepath.EvalSymlinks(ws)
	if err != nil {
		t.Fatal(err)
	}
	r := &Root{Dir: canon, Protected: driverapi.DefaultProtectedEntries()}
	var api fileAPI = r
	if impl == "osroot" {
		api = osRoot{r: r}
	}
	return &testRoot{fileAPI: api, Dir: canon, root: r}, base
}

func TestWriteReadListStatRemove(t *testing.T) { eachImpl(t, testWriteReadListStatRemove) }

func testWriteReadListStatRemove(t *testing.T, impl string) {
	r, _ := newRoot(t, impl)
	ctx := context.Background()
	in, err := r.Write(ctx, "a/b/c.txt", strings.NewReader("hello"), WriteOptions{Parents: true, Mode: 0o600})
	if err != nil {
		t.Fatal(err)
	}
	if in.Size != 5 || in.Kind != KindFile || in.Mode != 0o600 {
		t.Fatalf("write info = %+v", in)
	}
	var buf bytes.Buffer
	if _, err := r.Read(ctx, "./a//b/c.txt", &buf); err != nil || buf.String() != "hello" {
		t.Fatalf("read = %q, %v", buf.String(), err)
	}
	if err := os.Symlink("b/c.txt", filepath.Join(r.Dir, "a", "ln")); err != nil {
		t.Fatal(err)
	}
	list, err := r.List(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "b" || list[0].Kind != KindDir || list[1].Name != "ln" || list[1].Kind != KindLink || list[1].Target != "b/c.txt" {
		t.Fatalf("list = %+v", list)
	}
	st, err := r.Stat(ctx, "a/b/c.txt")
	if err != nil || st.Name != "c.txt" || st.Size != 5 || st.ModTime.IsZero() {
		t.Fatalf("stat = %+v, %v", st, err)
	}
	// A file is not listed.
	_, err = r.List(ctx, "a/b/c.txt")
	wantCode(t, err, CodeNotDir)
	// Without parents a missing directory is not_found.
	_, err = r.Write(ctx, "x/y.txt", strings.NewReader("."), WriteOptions{})
	wantCode(t, err, CodeNotFound)
	// A non-empty directory needs recursive.
	wantCode(t, r.Remove(ctx, "a", RemoveOptions{}), CodeNotEmpty)
	if err := r.Remove(ctx, "a", RemoveOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	_, err = r.Stat(ctx, "a")
	wantCode(t, err, CodeNotFound)
	// Overwriting keeps the old mode when none is given.
	if _, err := r.Write(ctx, "m", strings.NewReader("1"), WriteOptions{Mode: 0o750}); err != nil {
		t.Fatal(err)
	}
	if in, err := r.Write(ctx, "m", strings.NewReader("22"), WriteOptions{}); err != nil || in.Mode != 0o750 || in.Size != 2 {
		t.Fatalf("overwrite = %+v, %v", in, err)
	}
}

func TestPathsRefused(t *testing.T) { eachImpl(t, testPathsRefused) }

func testPathsRefused(t *testing.T, impl string) {
	r, _ := newRoot(t, impl)
	ctx := context.Background()
	for _, p := range []string{"/etc/passwd", "../secret", "a/../../secret", "a/..", "x\x00y"} {
		_, err := r.Read(ctx, p, &bytes.Buffer{})
		fe := wantCode(t, err, CodeInvalid)
		if fe.Field != "path" {
			t.Errorf("%q: field %q", p, fe.Field)
		}
		_, err = r.Write(ctx, p, strings.NewReader("x"), WriteOptions{Parents: true})
		wantCode(t, err, CodeInvalid)
	}
	// Positive control: a relative path inside works.
	if _, err := r.Write(ctx, "ok", strings.NewReader("x"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestSymlinkOut(t *testing.T) { eachImpl(t, testSymlinkOut) }

func testSymlinkOut(t *testing.T, impl string) {
	r, base := newRoot(t, impl)
	ctx := context.Background()
	// An absolute link and a relative one, both leading out.
	if err := os.Symlink(filepath.Join(base, "secret"), filepath.Join(r.Dir, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../secret", filepath.Join(r.Dir, "rel")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(base, filepath.Join(r.Dir, "dirout")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"abs", "rel", "dirout/secret"} {
		var buf bytes.Buffer
		_, err := r.Read(ctx, p, &buf)
		wantCode(t, err, CodeLink)
		if strings.Contains(buf.String(), "host secret") {
			t.Fatalf("%s: read the host's secret", p)
		}
	}
	// Writing through a link to a directory outside is refused and writes
	// nothing there.
	_, err := r.Write(ctx, "dirout/planted", strings.NewReader("x"), WriteOptions{})
	wantCode(t, err, CodeLink)
	if _, err := os.Lstat(filepath.Join(base, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a file was planted outside the workspace: %v", err)
	}
	_, err = r.List(ctx, "dirout")
	wantCode(t, err, CodeLink)
	// Writing at a link replaces the link, never its target.
	if _, err := r.Write(ctx, "abs", strings.NewReader("mine"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(base, "secret")); string(b) != "host secret" {
		t.Fatalf("the link's target was written: %q", b)
	}
	// Removing a link removes the link only.
	if err := r.Remove(ctx, "rel", RemoveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "secret")); err != nil {
		t.Fatal("the link's target was removed")
	}
	if err := r.Remove(ctx, "dirout", RemoveOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "secret")); err != nil {
		t.Fatal("a recursive remove of a link followed it")
	}
	// Positive control: a link that stays inside is followed by a read
	// on Linux (openat2 RESOLVE_BENEATH) and by os.Root, refused by the
	// descriptor walk of macOS.
	if err := os.WriteFile(filepath.Join(r.Dir, "target"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("target", filepath.Join(r.Dir, "in")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_, err = r.Read(ctx, "in", &buf)
	if followsInsideLinks(impl) {
		if err != nil || buf.String() != "inside" {
			t.Fatalf("read through an inside link = %q, %v", buf.String(), err)
		}
	} else {
		wantCode(t, err, CodeLink)
	}
}

func TestWriteThroughInsideLinkToProtected(t *testing.T) {
	eachImpl(t, testWriteThroughInsideLinkToProtected)
}

func testWriteThroughInsideLinkToProtected(t *testing.T, impl string) {
	r, _ := newRoot(t, impl)
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(r.Dir, ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(".git", filepath.Join(r.Dir, "g")); err != nil {
		t.Fatal(err)
	}
	_, err := r.Write(ctx, "g/hooks/pre-commit", strings.NewReader("#!/bin/sh\n"), WriteOptions{})
	wantCode(t, err, CodeLink)
	if _, err := os.Lstat(filepath.Join(r.Dir, ".git", "hooks", "pre-commit")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a hook was planted through a link")
	}
}

func TestProtectedEntries(t *testing.T) { eachImpl(t, testProtectedEntries) }

func testProtectedEntries(t *testing.T, impl string) {
	r, _ := newRoot(t, impl)
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(r.Dir, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, ".git", "config"), []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(r.Dir, "sub", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".git/config", ".git/hooks/post-checkout", "sub/.git/config", ".envrc", ".vscode/tasks.json", "deep/.claude/settings.json"} {
		_, err := r.Write(ctx, p, strings.NewReader("x"), WriteOptions{Parents: true})
		fe := wantCode(t, err, CodeProtected)
		if fe.Entry == "" || !strings.Contains(p, fe.Entry) {
			t.Errorf("%s: entry %q", p, fe.Entry)
		}
	}
	if _, err := os.Stat(filepath.Join(r.Dir, "deep")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused write created directories")
	}
	wantCode(t, r.Remove(ctx, ".git/config", RemoveOptions{}), CodeProtected)
	wantCode(t, r.Remove(ctx, ".git", RemoveOptions{Recursive: true}), CodeProtected)
	// A recursive remove of a directory holding one removes nothing.
	if err := os.WriteFile(filepath.Join(r.Dir, "sub", "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantCode(t, r.Remove(ctx, "sub", RemoveOptions{Recursive: true}), CodeProtected)
	if _, err := os.Stat(filepath.Join(r.Dir, "sub", "file")); err != nil {
		t.Fatal("a refused recursive remove removed part of the tree")
	}
	// Reading a protected entry is allowed: a command of the session can
	// read it too.
	var buf bytes.Buffer
	if _, err := r.Read(ctx, ".git/config", &buf); err != nil || buf.String() != "[core]\n" {
		t.Fatalf("read .git/config = %q, %v", buf.String(), err)
	}
	// Positive control: names that merely contain a protected name are
	// written.
	if _, err := r.Write(ctx, "my.git/x.envrc", strings.NewReader("x"), WriteOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
}

func TestSpecialFilesNeverOpened(t *testing.T) { eachImpl(t, testSpecialFilesNeverOpened) }

func testSpecialFilesNeverOpened(t *testing.T, impl string) {
	r, _ := newRoot(t, impl)
	ctx := context.Background()
	fifo := filepath.Join(r.Dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// A FIFO without a writer: opening it for reading without O_NONBLOCK
	// would block forever; the read must answer at once.
	_, err := r.Read(ctx, "fifo", &bytes.Buffer{})
	wantCode(t, err, CodeNotRegular)
	// Nor opened to be listed: it is not a directory.
	_, err = r.List(ctx, "fifo")
	wantCode(t, err, CodeNotDir)
	// A link to a device inside the workspace's view (/dev/zero reached
	// by a link is outside: refused as a link); a device node in the
	// workspace, where mknod is allowed (root).
	dev := filepath.Join(r.Dir, "zero")
	if err := syscall.Mknod(dev, syscall.S_IFCHR|0o666, 1<<8|5); err != nil {
		t.Logf("no device node test: mknod: %v (needs root)", err)
	} else {
		_, err := r.Read(ctx, "zero", &bytes.Buffer{})
		wantCode(t, err, CodeNotRegular)
		list, err := r.List(ctx, ".")
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]Kind{}
		for _, in := range list {
			kinds[in.Name] = in.Kind
		}
		if kinds["zero"] != KindOther || kinds["fifo"] != KindOther {
			t.Fatalf("kinds = %v", kinds)
		}
	}
	_, err = r.Read(ctx, ".", &bytes.Buffer{})
	wantCode(t, err, CodeIsDir)
}

func TestSizeLimits(t *testing.T) { eachImpl(t, testSizeLimits) }

func testSizeLimits(t *testing.T, impl string) {
	r, _ := newRoot(t, impl)
	r.root.Limits = Limits{MaxFileBytes: 10, MaxListEntries: 2, FileKey: "serve.files_max_bytes", ListKey: "serve.files_max_list_entries"}
	ctx := context.Background()
	_, err := r.Write(ctx, "big", strings.NewReader(strings.Repeat("x", 11)), WriteOptions{})
	if core.LimitOf(err) != "serve.files_max_bytes" {
		t.Fatalf("write over the limit: %v", err)
	}
	// The directories made for a refused write go too.
	_, err = r.Write(ctx, "new/deeper/big", strings.NewReader(strings.Repeat("x", 11)), WriteOptions{Parents: true})
	if core.LimitOf(err) != "serve.files_max_bytes" {
		t.Fatalf("write over the limit: %v", err)
	}
	// Nothing left behind: no file, no temporary.
	ents, _ := os.ReadDir(r.Dir)
	if len(ents) != 0 {
		t.Fatalf("a refused write left %v", ents)
	}
	if _, err := r.Write(ctx, "ten", strings.NewReader(strings.Repeat("x", 10)), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "big"), make([]byte, 11), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = r.Read(ctx, "big", &bytes.Buffer{})
	if core.LimitOf(err) != "serve.files_max_bytes" {
		t.Fatalf("read over the limit: %v", err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "third"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = r.List(ctx, ".")
	if core.LimitOf(err) != "serve.files_max_list_entries" {
		t.Fatalf("list over the limit: %v", err)
	}
}

// A reader failing half-way: the target keeps its old content and no
// temporary file is left.
func TestWriteAtomic(t *testing.T) { eachImpl(t, testWriteAtomic) }

func testWriteAtomic(t *testing.T, impl string) {
	r, _ := newRoot(t, impl)
	ctx := context.Background()
	if _, err := r.Write(ctx, "f", strings.NewReader("old"), WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := r.Write(ctx, "f", &failingReader{data: []byte("new-partial")}, WriteOptions{})
	if err == nil {
		t.Fatal("a failing source wrote")
	}
	if b, _ := os.ReadFile(filepath.Join(r.Dir, "f")); string(b) != "old" {
		t.Fatalf("content after a failed write = %q", b)
	}
	ents, _ := os.ReadDir(r.Dir)
	if len(ents) != 1 {
		t.Fatalf("entries after a failed write: %v", ents)
	}
}

type failingReader struct {
	data []byte
	done bool
}

func (f *failingReader) Read(p []byte) (int, error) {
	if !f.done {
		f.done = true
		return copy(p, f.data), nil
	}
	return 0, errors.New("source broke")
}

// A link swapped in and out while reads and writes run: no read ever
// returns the host's secret and no write lands outside the workspace.
func TestSymlinkSwappedMidOperation(t *testing.T) { eachImpl(t, testSymlinkSwappedMidOperation) }

func testSymlinkSwappedMidOperation(t *testing.T, impl string) {
	r, base := newRoot(t, impl)
	ctx := context.Background()
	outside := filepath.Join(base, "outdir")
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "f"), []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(r.Dir, "d")
	real := filepath.Join(r.Dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "f"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tmp := filepath.Join(r.Dir, "swap")
		for i := 0; !stop.Load(); i++ {
			// d alternates between a real directory and a link out.
			_ = os.Remove(tmp)
			if i%2 == 0 {
				_ = os.Symlink(outside, tmp)
			} else {
				_ = os.Mkdir(tmp, 0o755)
				_ = os.WriteFile(filepath.Join(tmp, "f"), []byte("inside"), 0o644)
			}
			_ = os.RemoveAll(d)
			_ = os.Rename(tmp, d)
		}
	}()
	okReads := 0
	for i := 0; i < 3000; i++ {
		var buf bytes.Buffer
		if _, err := r.Read(ctx, "d/f", &buf); err == nil {
			okReads++
		}
		if strings.Contains(buf.String(), "host secret") {
			stop.Store(true)
			wg.Wait()
			t.Fatal("a read through a swapped link returned the host's file")
		}
		_, _ = r.Write(ctx, "d/w", strings.NewReader("x"), WriteOptions{})
	}
	stop.Store(true)
	wg.Wait()
	if _, err := os.Lstat(filepath.Join(outside, "w")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a write through a swapped link landed outside the workspace")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("outside dir holds %v", ents)
	}
	t.Logf("%d of 3000 reads found the inside file", okReads)
	// Positive control, deterministic: with d a real directory again the
	// read and the write go through.
	_ = os.RemoveAll(d)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "f"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := r.Read(ctx, "d/f", &buf); err != nil || buf.String() != "inside" {
		t.Fatalf("control read: %q, %v", buf.String(), err)
	}
	if _, err := r.Write(ctx, "d/w", strings.NewReader("x"), WriteOptions{}); err != nil {
		t.Fatalf("control write: %v", err)
	}
}

// The two implementations side by side: os.Root opens one handle per
// component (and a write's walk an os.Root per directory), the Linux code
// one openat2 for a read. Report ratios of one run, not absolute figures.
func BenchmarkFiles(b *testing.B) {
	ctx := context.Background()
	data := strings.Repeat("x", 4096)
	apis := map[string]fileAPI{}
	for _, impl := range impls {
		r := &Root{Dir: b.TempDir(), Protected: driverapi.DefaultProtectedEntries()}
		apis[impl] = r
		if impl == "osroot" {
			apis[impl] = osRoot{r: r}
		}
		if _, err := apis[impl].Write(ctx, "a/b/c/f", strings.NewReader(data), WriteOptions{Parents: true}); err != nil {
			b.Fatal(err)
		}
	}
	ops := []struct {
		name string
		do   func(api fileAPI) error
	}{
		{"read", func(api fileAPI) error { _, err := api.Read(ctx, "a/b/c/f", io.Discard); return err }},
		{"stat", func(api fileAPI) error { _, err := api.Stat(ctx, "a/b/c/f"); return err }},
		{"write", func(api fileAPI) error {
			_, err := api.Write(ctx, "a/b/c/g", strings.NewReader(data), WriteOptions{})
			return err
		}},
	}
	// Side by side: each operation on one implementation, then the other.
	for _, op := range ops {
		for _, impl := range impls {
			b.Run(op.name+"/"+impl, func(b *testing.B) {
				for b.Loop() {
					if err := op.do(apis[impl]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
