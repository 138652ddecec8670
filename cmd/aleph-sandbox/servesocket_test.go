package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
