//go:build !linux && !darwin

package wsfs

import (
	"context"
	"io"
	"os"
)

// The files API needs descriptor-relative opens that never follow a link
// out of the workspace; this platform's are not written yet, so every
// call is refused rather than done with path strings that a link could
// redirect.

func unsupported(op, p string) error {
	return &Error{Op: op, Path: p, Code: CodeUnsupported, Reason: "the files API is not available on this platform yet (Linux and macOS only); use a command (cat, tee) in the sandbox"}
}

// Stat is refused on this platform.
func (r *Root) Stat(_ context.Context, p string) (Info, error) { return Info{}, unsupported("stat", p) }

// Open is refused on this platform.
func (r *Root) Open(_ context.Context, p string) (*os.File, Info, error) {
	return nil, Info{}, unsupported("read", p)
}

// Read is refused on this platform.
func (r *Root) Read(_ context.Context, p string, _ io.Writer) (Info, error) {
	return Info{}, unsupported("read", p)
}

// List is refused on this platform.
func (r *Root) List(_ context.Context, p string) ([]Info, error) { return nil, unsupported("list", p) }

// Write is refused on this platform.
func (r *Root) Write(_ context.Context, p string, _ io.Reader, _ WriteOptions) (Info, error) {
	return Info{}, unsupported("write", p)
}

// Remove is refused on this platform.
func (r *Root) Remove(_ context.Context, p string, _ RemoveOptions) error {
	return unsupported("remove", p)
}

// IsTemp reports whether name is a write's temporary file.
func IsTemp(name string) bool {
	return len(name) >= len(tempPrefix) && name[:len(tempPrefix)] == tempPrefix
}
