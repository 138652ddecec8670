package wsfs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func wantCode(t *testing.T, err error, code Code) *Error {
	t.Helper()
	var fe *Error
	if !errors.As(err, &fe) || fe.Code != code {
		t.Fatalf("error = %v (%T), want code %s", err, err, code)
	}
	return fe
}

// TestWinNameProblem: the files API refuses what internal/winnames says
// Windows reads as something else, on reads and writes alike, and an 8.3
// short-name shape on writes and removes only (internal/winnames' own
// test holds the whole table of names).
func TestWinNameProblem(t *testing.T) {
	for _, tc := range []struct {
		name      string
		read, mut bool // refused on a read; refused on a write or remove
	}{
		{"file.txt", false, false},
		{".git", false, false}, // protected, which is another check
		{".git.", true, true},
		{".git::$INDEX_ALLOCATION", true, true},
		{"nul.txt", true, true},
		{"GIT~1", false, true},
		{"SCRIPT~2.BAT", false, true},
	} {
		if got := winNameProblem(tc.name, false) != ""; got != tc.read {
			t.Errorf("%q on a read: refused = %v, want %v (%s)", tc.name, got, tc.read, winNameProblem(tc.name, false))
		}
		if got := winNameProblem(tc.name, true) != ""; got != tc.mut {
			t.Errorf("%q on a write: refused = %v, want %v (%s)", tc.name, got, tc.mut, winNameProblem(tc.name, true))
		}
	}
}

func TestCheckWinNames(t *testing.T) {
	err := checkWinNames("write", "a/.git./hooks/x", []string{"a", ".git.", "hooks", "x"}, true)
	fe := wantCode(t, err, CodeInvalid)
	if fe.Field != "path" || !strings.Contains(fe.Reason, `".git."`) {
		t.Fatalf("error = %+v", fe)
	}
	if err := checkWinNames("write", "a/b/c.txt", []string{"a", "b", "c.txt"}, true); err != nil {
		t.Fatalf("plain names refused: %v", err)
	}
}

func TestPermBitsRoundTrip(t *testing.T) {
	for _, b := range []uint32{0o644, 0o600, 0o755, 0o1777, 0o4755, 0o2750, 0} {
		if got := permBits(fileMode(b)); got != b {
			t.Errorf("%#o -> %v -> %#o", b, fileMode(b), got)
		}
	}
}

// The osRoot with Windows' name rules, run here: the names are refused
// before anything is opened, so what Windows would make of them never
// matters; the same calls with plain names are the positive control.
func TestOSRootWindowsNames(t *testing.T) {
	base := t.TempDir()
	r := &Root{Dir: base, Protected: driverapi.DefaultProtectedEntries()}
	o := osRoot{r: r, windows: true}
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(base, ".git", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{".git./hooks/pre-commit", ".git /config", ".git::$INDEX_ALLOCATION/config", "GIT~1/config", "NUL", "sub/con.txt", "a?b"} {
		_, err := o.Write(ctx, p, strings.NewReader("x"), WriteOptions{Parents: true})
		wantCode(t, err, CodeInvalid)
		wantCode(t, o.Remove(ctx, p, RemoveOptions{Recursive: true}), CodeInvalid)
	}
	// Nothing was made by the refusals.
	if ents, _ := os.ReadDir(filepath.Join(base, ".git", "hooks")); len(ents) != 0 {
		t.Fatalf("a refused write planted %v", ents)
	}
	if ents, _ := os.ReadDir(base); len(ents) != 1 {
		t.Fatalf("a refused write left %v", ents)
	}
	_, err := o.Read(ctx, "f.", &bytes.Buffer{})
	wantCode(t, err, CodeInvalid)
	// A short-name shape is not refused by name on a read (reading .git
	// is allowed anyway): here it does not exist, or on a Windows volume
	// with 8.3 names it is .git, a directory.
	_, err = o.Read(ctx, "GIT~1", &bytes.Buffer{})
	if c := CodeOf(err); c != CodeNotFound && c != CodeIsDir {
		t.Fatalf("read GIT~1: %v", err)
	}
	// Positive control: plain names go through the same osRoot.
	if _, err := o.Write(ctx, "sub/file.txt", strings.NewReader("x"), WriteOptions{Parents: true}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := o.Read(ctx, "sub/file.txt", &buf); err != nil || buf.String() != "x" {
		t.Fatalf("read = %q, %v", buf.String(), err)
	}
	if err := o.Remove(ctx, "sub", RemoveOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
}

// A layered session's view is reached by descriptor, on Linux only:
// osRoot refuses it rather than use Dir, which is not that view.
func TestOSRootRefusesDirFile(t *testing.T) {
	base := t.TempDir()
	d, err := os.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	o := osRoot{r: &Root{Dir: base, DirFile: d}}
	_, err = o.Stat(context.Background(), ".")
	wantCode(t, err, CodeUnsupported)
	// Control: the same root without DirFile is served.
	o.r.DirFile = nil
	if _, err := o.Stat(context.Background(), "."); err != nil {
		t.Fatal(err)
	}
}

// os.Root's refusal of a path leaving the root is matched by its text
// (the error is not exported): this fails if the text changes.
func TestOSRootEscapeText(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_, err = root.Stat("../ws")
	if err == nil || !strings.Contains(err.Error(), errEscapes) {
		t.Fatalf("os.Root's escape error = %v, want it to contain %q", err, errEscapes)
	}
	if CodeOf(osErr("stat", "x", err)) != CodeLink {
		t.Fatalf("escape mapped to %v", osErr("stat", "x", err))
	}
	// Control: a not-found is not an escape.
	_, err = root.Stat("missing")
	if !errors.Is(err, os.ErrNotExist) || CodeOf(osErr("stat", "x", err)) != CodeNotFound {
		t.Fatalf("missing = %v", err)
	}
}

// A write over a read-only file replaces it (as on Unix); with Windows'
// rules on, the read-only attribute is cleared first, and the mode kept.
func TestOSRootReplacesReadOnly(t *testing.T) {
	for _, win := range []bool{false, true} {
		base := t.TempDir()
		o := osRoot{r: &Root{Dir: base}, windows: win}
		ctx := context.Background()
		if _, err := o.Write(ctx, "ro", strings.NewReader("old"), WriteOptions{Mode: 0o444}); err != nil {
			t.Fatal(err)
		}
		in, err := o.Write(ctx, "ro", strings.NewReader("new"), WriteOptions{})
		if err != nil {
			t.Fatalf("windows=%v: %v", win, err)
		}
		if b, _ := os.ReadFile(filepath.Join(base, "ro")); string(b) != "new" || in.Mode&0o200 != 0 {
			t.Fatalf("windows=%v: content %q, mode %#o", win, b, in.Mode)
		}
	}
}
