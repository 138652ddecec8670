package main

import (
	"bytes"
	"context"
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

// serve refuses such a socket before it listens: nothing is left behind.
func TestServeRefusesSocketThroughLinkToWorkspaceRoot(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	base := t.TempDir()
	root := filepath.Join(base, "ws")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(root, link); err != nil {
		t.Skipf("cannot make a symbolic link here: %v", err)
	}
	cfg := filepath.Join(base, "config.toml")
	if err := os.WriteFile(cfg, []byte("[sandbox]\nworkspace_root = \""+link+"\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(root, "s.sock")
	var out, errb bytes.Buffer
	code := runServe(context.Background(), []string{"--config", cfg, "--listen", "unix:" + sock}, stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
	if code == 0 || !strings.Contains(errb.String(), "workspace root") {
		t.Fatalf("exit %d, stderr %q: want a refusal naming the workspace root", code, errb.String())
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Fatalf("the refused socket was created: %v", err)
	}
}
