package service

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A socket a sandbox could reach is refused whatever the spelling: through
// a symbolic link to the workspace root, or with the root itself named
// through one. Controls: a sibling directory whose name shares the root's
// prefix, and the directory above the root (a workspace lies below the
// root, so it cannot reach a socket beside it).
func TestServeSocketInsideWorkspaceRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "ws")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(root, link); err != nil {
		t.Skipf("cannot make a symbolic link here: %v", err)
	}
	for _, c := range []struct {
		socket, root string
		refused      bool
	}{
		{filepath.Join(root, "s.sock"), root, true},
		{filepath.Join(root, "not", "yet", "s.sock"), root, true},
		{filepath.Join(link, "s.sock"), root, true},
		{filepath.Join(root, "s.sock"), link, true},
		{filepath.Join(link, "sub", "s.sock"), link, true},
		{filepath.Join(base, "ws-other", "s.sock"), root, false},
		{filepath.Join(base, "s.sock"), root, false},
		{filepath.Join(base, "s.sock"), link, false},
	} {
		err := socketInWorkspaceRoot(c.socket, c.root)
		if (err != nil) != c.refused {
			t.Errorf("socket %s, workspace root %s: refused = %v (%v), want %v", c.socket, c.root, err != nil, err, c.refused)
		}
		if err != nil && !strings.Contains(err.Error(), c.socket) {
			t.Errorf("the refusal does not name the socket %s: %v", c.socket, err)
		}
	}
}
