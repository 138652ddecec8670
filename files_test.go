package alephsandbox_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/wsfs"
)

// The runtime's files API: a file written in a session is in that
// session's workspace (where its commands run), read back whole and as a
// stream; the configured protected set and size limit hold, typed; every
// operation reaches the configured audit log.
func TestRuntimeFiles(t *testing.T) {
	cfg := testConfig(t)
	cfg.Serve.FilesMaxBytes = 64
	cfg.Sandbox.Protected.Add = []string{"deploy.key"}
	rt, _ := newRuntime(t, cfg)
	ctx := context.Background()
	in, err := rt.WriteFile(ctx, "s", "notes/todo.txt", strings.NewReader("ship it"), alephsandbox.WriteFileOptions{Parents: true})
	if err != nil || in.Size != 7 {
		t.Fatalf("write: %+v, %v", in, err)
	}
	ws, err := rt.WorkspacePath("s")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "notes", "todo.txt")); string(b) != "ship it" {
		t.Fatalf("on disk: %q", b)
	}
	if b, err := rt.ReadFile(ctx, "s", "notes/todo.txt"); err != nil || string(b) != "ship it" {
		t.Fatalf("read: %q, %v", b, err)
	}
	f, info, err := rt.OpenFile(ctx, "s", "notes/todo.txt")
	if err != nil || info.Kind != wsfs.KindFile {
		t.Fatalf("open: %+v, %v", info, err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "ship it" {
		t.Fatalf("streamed: %q", b)
	}
	list, err := rt.ListFiles(ctx, "s", ".")
	if err != nil || len(list) != 1 || list[0].Name != "notes" || list[0].Kind != wsfs.KindDir {
		t.Fatalf("list: %+v, %v", list, err)
	}
	// The configured addition to the protected set is refused too.
	_, err = rt.WriteFile(ctx, "s", "deploy.key", strings.NewReader("k"), alephsandbox.WriteFileOptions{})
	var fe *alephsandbox.FileError
	if !errors.As(err, &fe) || fe.Code != wsfs.CodeProtected || fe.Entry != "deploy.key" {
		t.Fatalf("protected write: %v", err)
	}
	_, err = rt.WriteFile(ctx, "s", "big", strings.NewReader(strings.Repeat("x", 65)), alephsandbox.WriteFileOptions{})
	if core.LimitOf(err) != "serve.files_max_bytes" {
		t.Fatalf("over the limit: %v", err)
	}
	if err := rt.RemoveFile(ctx, "s", "notes", alephsandbox.RemoveFileOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.StatFile(ctx, "s", "notes"); wsfs.CodeOf(err) != wsfs.CodeNotFound {
		t.Fatalf("stat after remove: %v", err)
	}
	log, err := os.ReadFile(cfg.Sandbox.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"op":"write"`, `"op":"read"`, `"op":"remove"`, `"reason":"file_refused"`, `"reason":"file_access"`} {
		if !strings.Contains(string(log), want) {
			t.Errorf("audit log lacks %s", want)
		}
	}
}
