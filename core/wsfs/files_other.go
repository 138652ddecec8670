//go:build !linux && !darwin

package wsfs

import (
	"context"
	"io"
	"os"
	"runtime"
)

// Off Linux and macOS (Windows first) the files API goes through os.Root
// (files_osroot.go): traversal that never leaves the workspace, with the
// rules of wsfs enforced on top of it. Windows' names that open something
// other than their text (device names, streams, trailing dots and spaces,
// 8.3 short names) are refused there as well.

func (r *Root) osRoot() osRoot { return osRoot{r: r, windows: runtime.GOOS == "windows"} }

// Stat describes the entry at p, not following it when it is a link.
func (r *Root) Stat(ctx context.Context, p string) (Info, error) { return r.osRoot().Stat(ctx, p) }

// Open opens the regular file at p for reading; the caller closes it.
func (r *Root) Open(ctx context.Context, p string) (*os.File, Info, error) {
	return r.osRoot().Open(ctx, p)
}

// Read copies the regular file at p to w.
func (r *Root) Read(ctx context.Context, p string, w io.Writer) (Info, error) {
	return r.osRoot().Read(ctx, p, w)
}

// List describes the entries of the directory at p, sorted by name.
func (r *Root) List(ctx context.Context, p string) ([]Info, error) { return r.osRoot().List(ctx, p) }

// Write replaces (or creates) the regular file at p, atomically.
func (r *Root) Write(ctx context.Context, p string, src io.Reader, o WriteOptions) (Info, error) {
	return r.osRoot().Write(ctx, p, src, o)
}

// Remove removes the entry at p (a link itself, never its target).
func (r *Root) Remove(ctx context.Context, p string, o RemoveOptions) error {
	return r.osRoot().Remove(ctx, p, o)
}
