//go:build !linux

package layer

import "context"

// Layered workspaces need overlayfs: everything here refuses with
// ErrUnsupported on other systems.

// Create refuses: layered workspaces are Linux-only.
func Create(ctx context.Context, dir, workspace string, g GitImporter, p Policy) (*Layer, error) {
	return nil, ErrUnsupported
}

// Open refuses: layered workspaces are Linux-only.
func Open(dir string, g GitImporter) (*Layer, error) { return nil, ErrUnsupported }

// HoldMounted refuses: layered workspaces are Linux-only.
func (l *Layer) HoldMounted() (func(), error) { return nil, ErrUnsupported }

// Discard refuses: layered workspaces are Linux-only.
func (l *Layer) Discard(ctx context.Context) error { return ErrUnsupported }

// Observe refuses: layered workspaces are Linux-only.
func (l *Layer) Observe(ctx context.Context) error { return ErrUnsupported }

// Changes refuses: layered workspaces are Linux-only.
func (l *Layer) Changes(ctx context.Context) ([]Change, error) { return nil, ErrUnsupported }

// Diff refuses: layered workspaces are Linux-only.
func (l *Layer) Diff(ctx context.Context, paths ...string) (string, error) {
	return "", ErrUnsupported
}

// Apply refuses: layered workspaces are Linux-only.
func (l *Layer) Apply(ctx context.Context, paths []string, opt ApplyOptions) (ApplyResult, error) {
	return ApplyResult{}, ErrUnsupported
}

// MountView refuses: layered workspaces are Linux-only.
func (l *Layer) MountView(ctx context.Context) (*View, error) { return nil, ErrUnsupported }

// UpperBytes refuses: layered workspaces are Linux-only.
func (l *Layer) UpperBytes(ctx context.Context) (int64, error) { return 0, ErrUnsupported }

func (l *Layer) Unused() (bool, error) { return false, ErrUnsupported }

// HoldViews refuses: layered workspaces are Linux-only.
func (l *Layer) HoldViews(ctx context.Context) (func(), error) { return nil, ErrUnsupported }
