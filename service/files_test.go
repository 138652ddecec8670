package service_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/wsfs"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	"github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1/hostv1connect"
	"github.com/aleph-sandbox/aleph-sandbox/service/client"
)

type auditRecords struct {
	mu   sync.Mutex
	recs []core.AuditRecord
}

func (a *auditRecords) Record(_ context.Context, r core.AuditRecord) error {
	a.mu.Lock()
	a.recs = append(a.recs, r)
	a.mu.Unlock()
	return nil
}

func (a *auditRecords) files() []core.AuditRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []core.AuditRecord
	for _, r := range a.recs {
		if r.File != nil {
			out = append(out, r)
		}
	}
	return out
}

// fileServer is a service over a real runtime (a stand-in driver: the
// files API never runs a command) with small file limits.
func fileServer(t *testing.T) (hostv1connect.ServiceClient, *alephsandbox.Runtime, *auditRecords) {
	t.Helper()
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	cfg := core.DefaultConfig()
	cfg.Sandbox.WorkspaceRoot = filepath.Join(t.TempDir(), "ws")
	cfg.Sandbox.AuditLog = ""
	cfg.Serve.FilesMaxBytes = 1 << 20
	cfg.Serve.FilesMaxListEntries = 50
	audit := &auditRecords{}
	rt, err := alephsandbox.New(cfg, alephsandbox.WithDriver(drivertest.Connect(t, &drivertest.FakeDriver{})),
		alephsandbox.WithoutGrantStore(), alephsandbox.WithAuditSink(audit))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	srv, err := service.New(service.Options{Host: rt, Broker: service.NewBroker(false, nil),
		Limits: cfg.Serve.Limits(cfg.Sandbox.MaxOutputBytes)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hostv1connect.NewServiceClient(http.DefaultClient, hs.URL), rt, audit
}

func detail(t *testing.T, err error) (connect.Code, *hostv1.ErrorDetail) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a connect error", err)
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*hostv1.ErrorDetail); ok {
				return ce.Code(), ed
			}
		}
	}
	t.Fatalf("error %v has no ErrorDetail", err)
	return 0, nil
}

func readAll(ctx context.Context, c hostv1connect.ServiceClient, session, path string) ([]byte, *hostv1.FileInfo, error) {
	st, err := c.ReadFile(ctx, connect.NewRequest(&hostv1.ReadFileRequest{Session: session, Path: path}))
	if err != nil {
		return nil, nil, err
	}
	defer st.Close()
	var buf bytes.Buffer
	var info *hostv1.FileInfo
	for st.Receive() {
		if st.Msg().GetInfo() != nil {
			info = st.Msg().GetInfo()
		}
		buf.Write(st.Msg().GetData())
	}
	return buf.Bytes(), info, st.Err()
}

// The whole API over the wire: a write (parents, mode) is read back, listed,
// described and removed, in the session's own workspace (the runtime's
// WorkspacePath), and each operation is audited.
func TestFilesRoundTrip(t *testing.T) {
	c, rt, audit := fileServer(t)
	ctx := context.Background()
	w, err := c.WriteFile(ctx, connect.NewRequest(&hostv1.WriteFileRequest{Session: "s1", Path: "src/a.txt", Data: []byte("hello"), Mode: 0o600, Parents: true}))
	if err != nil {
		t.Fatal(err)
	}
	if w.Msg.GetInfo().GetSize() != 5 || w.Msg.GetInfo().GetMode() != 0o600 || w.Msg.GetInfo().GetKind() != "file" {
		t.Fatalf("write answer %+v", w.Msg)
	}
	ws, err := rt.WorkspacePath("s1")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "src", "a.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("on disk: %q, %v", b, err)
	}
	data, info, err := readAll(ctx, c, "s1", "src/a.txt")
	if err != nil || string(data) != "hello" || info.GetSize() != 5 {
		t.Fatalf("read = %q %+v %v", data, info, err)
	}
	l, err := c.ListFiles(ctx, connect.NewRequest(&hostv1.ListFilesRequest{Session: "s1"}))
	if err != nil || len(l.Msg.GetEntries()) != 1 || l.Msg.GetEntries()[0].GetName() != "src" || l.Msg.GetEntries()[0].GetKind() != "dir" {
		t.Fatalf("list = %+v, %v", l, err)
	}
	st, err := c.StatFile(ctx, connect.NewRequest(&hostv1.StatFileRequest{Session: "s1", Path: "src/a.txt"}))
	if err != nil || st.Msg.GetInfo().GetMtimeUnixMs() == 0 {
		t.Fatalf("stat = %+v, %v", st, err)
	}
	// Another session does not see it.
	if _, _, err := readAll(ctx, c, "s2", "src/a.txt"); err == nil {
		t.Fatal("another session read s1's file")
	} else if code, d := detail(t, err); code != connect.CodeNotFound || d.GetReasonCode() != "not_found" {
		t.Fatalf("other session: %v %+v", code, d)
	}
	if _, err := c.RemoveFile(ctx, connect.NewRequest(&hostv1.RemoveFileRequest{Session: "s1", Path: "src", Recursive: true})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "src")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after remove: %v", err)
	}
	ops := map[string]int{}
	for _, r := range audit.files() {
		ops[r.File.Op]++
		if r.SessionID == "" || r.Reason == "" {
			t.Fatalf("audit record %+v", r)
		}
	}
	for _, op := range []string{"write", "read", "list", "stat", "remove"} {
		if ops[op] == 0 {
			t.Errorf("no audit record of %s (%v)", op, ops)
		}
	}
	// The sessions the files API made are the service's, as Execute's are.
	ss, err := c.Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{Action: &hostv1.SessionsRequest_List{List: &hostv1.ListSessions{}}}))
	if err != nil || len(ss.Msg.GetSessions()) == 0 || ss.Msg.GetSessions()[0].GetWorkspace() != ws {
		t.Fatalf("sessions = %+v, %v", ss, err)
	}
}

// Refusals are typed on the wire: the field or entry at fault, the limit's
// name; each beside an allowed operation of the same kind.
func TestFilesRefusalsTyped(t *testing.T) {
	c, rt, audit := fileServer(t)
	ctx := context.Background()
	ws, err := rt.WorkspacePath("s")
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(path string, data []byte) error {
		_, err := c.WriteFile(ctx, connect.NewRequest(&hostv1.WriteFileRequest{Session: "s", Path: path, Data: data, Parents: true}))
		return err
	}
	cases := []struct {
		name   string
		err    error
		code   connect.Code
		reason string
		field  string
		rule   string
	}{
		{"absolute", write("/etc/x", []byte("x")), connect.CodeInvalidArgument, "invalid_request", "path", ""},
		{"dotdot", write("../x", []byte("x")), connect.CodeInvalidArgument, "invalid_request", "path", ""},
		{"protected", write(".git/hooks/pre-commit", []byte("x")), connect.CodePermissionDenied, "protected_entry", "path", ".git"},
		{"tool config", write(".vscode/tasks.json", []byte("x")), connect.CodePermissionDenied, "protected_entry", "path", ".vscode"},
		{"size", write("big", make([]byte, 1<<20+1)), connect.CodeResourceExhausted, "resource_exhausted", "serve.files_max_bytes", ""},
		{"empty path", write("", nil), connect.CodeInvalidArgument, "invalid_request", "path", ""},
	}
	_, _, linkErr := readAll(ctx, c, "s", "out")
	cases = append(cases, struct {
		name   string
		err    error
		code   connect.Code
		reason string
		field  string
		rule   string
	}{"link out", linkErr, connect.CodePermissionDenied, "link_refused", "path", ""})
	_, rmErr := c.RemoveFile(ctx, connect.NewRequest(&hostv1.RemoveFileRequest{Session: "s", Path: ".git", Recursive: true}))
	cases = append(cases, struct {
		name   string
		err    error
		code   connect.Code
		reason string
		field  string
		rule   string
	}{"remove protected", rmErr, connect.CodePermissionDenied, "protected_entry", "path", ".git"})
	_, _, nfErr := readAll(ctx, c, "s", "missing")
	cases = append(cases, struct {
		name   string
		err    error
		code   connect.Code
		reason string
		field  string
		rule   string
	}{"not found", nfErr, connect.CodeNotFound, "not_found", "path", ""})
	for _, tc := range cases {
		if tc.err == nil {
			t.Errorf("%s: allowed", tc.name)
			continue
		}
		code, d := detail(t, tc.err)
		if code != tc.code || d.GetReasonCode() != tc.reason || d.GetField() != tc.field || d.GetRule() != tc.rule {
			t.Errorf("%s: %v %+v (%v), want %v %s field %s rule %s", tc.name, code, d, tc.err, tc.code, tc.reason, tc.field, tc.rule)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "host" {
		t.Fatal("the host's file changed")
	}
	if _, err := os.Stat(filepath.Join(ws, ".git", "hooks")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused write created .git/hooks")
	}
	// Positive controls: the protected entry is readable, a file of the
	// limit's exact size is written, a relative path works.
	if data, _, err := readAll(ctx, c, "s", ".git/HEAD"); err != nil || !strings.HasPrefix(string(data), "ref:") {
		t.Fatalf("read .git/HEAD = %q, %v", data, err)
	}
	if err := write("exact", make([]byte, 1<<20)); err != nil {
		t.Fatalf("a file of the limit's size: %v", err)
	}
	// The session header is checked like every other call's.
	req := connect.NewRequest(&hostv1.StatFileRequest{Session: "s", Path: "exact"})
	req.Header().Set(service.SessionHeader, "other")
	if _, err := c.StatFile(ctx, req); err == nil {
		t.Fatal("a header naming another session was accepted")
	} else if code, d := detail(t, err); code != connect.CodeInvalidArgument || d.GetField() != service.FieldSessionHeader {
		t.Fatalf("header mismatch: %v %+v", code, d)
	}
	req.Header().Set(service.SessionHeader, "s")
	if _, err := c.StatFile(ctx, req); err != nil {
		t.Fatalf("a matching header: %v", err)
	}
	refused := 0
	for _, r := range audit.files() {
		if r.Reason == core.ReasonFileRefused {
			refused++
		}
	}
	if refused < 5 {
		t.Fatalf("%d refusals audited, want every refused operation", refused)
	}
}

// A file bigger than one request goes in parts under one upload_id and
// appears whole, atomically, after the last part; a part out of order is
// refused, and an upload refused at its first part (a protected entry)
// leaves nothing.
func TestFilesUploadInParts(t *testing.T) {
	c, rt, _ := fileServer(t)
	ctx := context.Background()
	ws, err := rt.WorkspacePath("s")
	if err != nil {
		t.Fatal(err)
	}
	part := func(id, path string, off int64, data []byte, more bool) (*connect.Response[hostv1.WriteFileResponse], error) {
		return c.WriteFile(ctx, connect.NewRequest(&hostv1.WriteFileRequest{Session: "s", Path: path, Data: data, UploadId: id, Offset: off, More: more}))
	}
	a, b := bytes.Repeat([]byte("a"), 300<<10), bytes.Repeat([]byte("b"), 300<<10)
	if r, err := part("u1", "big", 0, a, true); err != nil || r.Msg.GetReceived() != int64(len(a)) {
		t.Fatalf("first part: %+v, %v", r, err)
	}
	if _, err := os.Stat(filepath.Join(ws, "big")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the file appeared before its last part")
	}
	if _, err := part("u1", "big", 5, b, true); err == nil {
		t.Fatal("a part at the wrong offset was taken")
	} else if _, d := detail(t, err); d.GetField() != "offset" {
		t.Fatalf("wrong offset: %+v", d)
	}
	r, err := part("u1", "big", int64(len(a)), b, false)
	if err != nil || r.Msg.GetInfo().GetSize() != int64(len(a)+len(b)) {
		t.Fatalf("last part: %+v, %v", r, err)
	}
	got, err := os.ReadFile(filepath.Join(ws, "big"))
	if err != nil || !bytes.Equal(got, append(append([]byte{}, a...), b...)) {
		t.Fatalf("the uploaded file: %d bytes, %v", len(got), err)
	}
	if _, err := part("u1", "big", int64(len(a)+len(b)), b, false); err == nil {
		t.Fatal("a part of a finished upload was taken")
	} else if _, d := detail(t, err); d.GetReasonCode() != "upload_unknown" {
		t.Fatalf("finished upload: %+v", d)
	}
	if _, err := part("u2", ".git/config", 0, a, true); err == nil {
		t.Fatal("an upload into .git was taken")
	} else if _, d := detail(t, err); d.GetReasonCode() != "protected_entry" {
		t.Fatalf("protected upload: %+v", d)
	}
	ents, _ := os.ReadDir(ws)
	if len(ents) != 1 {
		t.Fatalf("workspace holds %v, want only big", ents)
	}
}

// The Go client (what `mcp --host` runs its file tools on) is the
// runtime's files API over the wire: a file over one request goes as an
// upload and streams back whole; refusals come back as the runtime's
// typed errors.
func TestFilesGoClient(t *testing.T) {
	c, _, _ := fileServer(t)
	p := &client.Pipeline{C: c}
	ctx := context.Background()
	// 1 MiB: the client's part size, so an upload of a full part and an
	// empty last one; the service's limit is 1 MiB too.
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<20/16)
	in, err := p.WriteFile(ctx, "g", "d/f", bytes.NewReader(data), alephsandbox.WriteFileOptions{Parents: true})
	if err != nil || in.Size != int64(len(data)) {
		t.Fatalf("write: %+v, %v", in, err)
	}
	f, info, err := p.OpenFile(ctx, "g", "d/f")
	if err != nil || info.Size != int64(len(data)) {
		t.Fatalf("open: %+v, %v", info, err)
	}
	got, err := io.ReadAll(f)
	f.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
	_, err = p.WriteFile(ctx, "g", ".git/config", strings.NewReader("x"), alephsandbox.WriteFileOptions{Parents: true})
	var fe *alephsandbox.FileError
	if !errors.As(err, &fe) || fe.Code != wsfs.CodeProtected || fe.Entry != ".git" {
		t.Fatalf("protected: %v", err)
	}
	if _, err := p.StatFile(ctx, "g", "nope"); wsfs.CodeOf(err) != wsfs.CodeNotFound {
		t.Fatalf("stat missing: %v", err)
	}
	_, err = p.WriteFile(ctx, "g", "huge", bytes.NewReader(make([]byte, 1<<20+1)), alephsandbox.WriteFileOptions{})
	if core.LimitOf(err) != "serve.files_max_bytes" {
		t.Fatalf("over the limit: %v", err)
	}
	if list, err := p.ListFiles(ctx, "g", "d"); err != nil || len(list) != 1 || list[0].Name != "f" {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if err := p.RemoveFile(ctx, "g", "d", alephsandbox.RemoveFileOptions{Recursive: true}); err != nil {
		t.Fatal(err)
	}
}

// The files API's calls are counted in /metrics by op and reason code.
func TestFilesMetrics(t *testing.T) {
	t.Setenv("XDG_DATA_HOME", t.TempDir())
	cfg := core.DefaultConfig()
	cfg.Sandbox.WorkspaceRoot = filepath.Join(t.TempDir(), "ws")
	cfg.Sandbox.AuditLog = ""
	rt, err := alephsandbox.New(cfg, alephsandbox.WithDriver(drivertest.Connect(t, &drivertest.FakeDriver{})), alephsandbox.WithoutGrantStore())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	srv, err := service.New(service.Options{Host: rt, Broker: service.NewBroker(false, nil)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	c := hostv1connect.NewServiceClient(http.DefaultClient, hs.URL)
	ctx := context.Background()
	if _, err := c.WriteFile(ctx, connect.NewRequest(&hostv1.WriteFileRequest{Session: "m", Path: "a", Data: []byte("x")})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFile(ctx, connect.NewRequest(&hostv1.WriteFileRequest{Session: "m", Path: ".git/x", Data: []byte("x"), Parents: true})); err == nil {
		t.Fatal("a write into .git was taken")
	}
	ms := httptest.NewServer(srv.MetricsHandler())
	t.Cleanup(ms.Close)
	resp, err := http.Get(ms.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`aleph_sandbox_file_operations_total{op="write",reason_code="ok"} 1`,
		`aleph_sandbox_file_operations_total{op="write",reason_code="protected_entry"} 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
}

// TestFilesAPINamedWorkspace: a call naming a workspace reaches that
// directory, as Execute's workspace does, with the checks Execute's gets:
// read, list, stat and remove are served there (the session's own
// workspace does not have the file: the control that the name is what
// was reached); a write lands there and is searched for a planted
// repository, while the same write without a workspace lands in the
// session's own; a relative name, a name through a link, another
// session's workspace under the root, the sandbox's own state and the
// service's own directory are refused, each with its field.
func TestFilesAPINamedWorkspace(t *testing.T) {
	c, rt, audit := fileServer(t)
	ctx := context.Background()
	named := t.TempDir()
	if err := os.WriteFile(filepath.Join(named, "a.txt"), []byte("named\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := c.ReadFile(ctx, connect.NewRequest(&hostv1.ReadFileRequest{Session: "nw", Path: "a.txt", Workspace: named}))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for st.Receive() {
		buf.Write(st.Msg().GetData())
	}
	st.Close()
	if st.Err() != nil || buf.String() != "named\n" {
		t.Fatalf("read in the named workspace: %q %v", buf.String(), st.Err())
	}
	if _, _, err := readAll(ctx, c, "nw", "a.txt"); err == nil {
		t.Fatal("control: the session's own workspace has a.txt too, so the name reached nothing")
	}
	l, err := c.ListFiles(ctx, connect.NewRequest(&hostv1.ListFilesRequest{Session: "nw", Workspace: named}))
	if err != nil || len(l.Msg.GetEntries()) != 1 || l.Msg.GetEntries()[0].GetName() != "a.txt" {
		t.Fatalf("list = %+v, %v", l, err)
	}
	if s, err := c.StatFile(ctx, connect.NewRequest(&hostv1.StatFileRequest{Session: "nw", Path: "a.txt", Workspace: named})); err != nil || s.Msg.GetInfo().GetSize() != 6 {
		t.Fatalf("stat = %+v, %v", s, err)
	}

	// A write there lands there, whole or in parts, and is searched for
	// a planted repository as a command's writes are (a HEAD git accepts
	// is renamed); without the name it lands in the session's own
	// workspace.
	for i, part := range []bool{false, true} {
		name := fmt.Sprintf("b%d.txt", i)
		req := &hostv1.WriteFileRequest{Session: "nw", Path: name, Data: []byte("x"), Workspace: named}
		if part {
			req.UploadId, req.More = "named-upload-1", false
		}
		if _, err := c.WriteFile(ctx, connect.NewRequest(req)); err != nil {
			t.Fatalf("a write (upload %v) to the named workspace: %v", part, err)
		}
		if b, err := os.ReadFile(filepath.Join(named, name)); err != nil || string(b) != "x" {
			t.Fatalf("the write (upload %v) did not land in the named workspace: %q %v", part, b, err)
		}
	}
	if _, err := c.WriteFile(ctx, connect.NewRequest(&hostv1.WriteFileRequest{Session: "nw", Path: "r/HEAD", Data: []byte("ref: refs/heads/main\n"), Parents: true, Workspace: named})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(named, "r", "HEAD.aleph-quarantined")); err != nil {
		t.Fatalf("a HEAD written to the named workspace was not renamed aside: %v", err)
	}
	quarantined := false
	for _, r := range audit.files() {
		if r.File.Op == "write" && r.File.Path == "r/HEAD" && r.File.GitQuarantine != nil && len(r.File.GitQuarantine.Renamed) == 1 {
			quarantined = true
		}
	}
	if !quarantined {
		t.Errorf("the write whose HEAD was renamed is not audited so: %+v", audit.files())
	}
	if _, err := c.WriteFile(ctx, connect.NewRequest(&hostv1.WriteFileRequest{Session: "nw", Path: "b.txt", Data: []byte("x")})); err != nil {
		t.Fatalf("control: the write to the session's own workspace: %v", err)
	}
	own, err := rt.WorkspacePath("nw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(own, "b.txt")); err != nil {
		t.Fatalf("control: b.txt is not in the session's own workspace: %v", err)
	}

	if _, err := c.RemoveFile(ctx, connect.NewRequest(&hostv1.RemoveFileRequest{Session: "nw", Path: "a.txt", Workspace: named})); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(named, "a.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("remove in the named workspace: %v", err)
	}

	// The checks of Execute's workspace.
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(named, link); err != nil {
		t.Fatal(err)
	}
	other, err := rt.WorkspacePath("someone-else")
	if err != nil {
		t.Fatal(err)
	}
	for name, ws := range map[string]string{
		"relative":                "rel/dir",
		"not clean":               named + "/../" + filepath.Base(named),
		"through a link":          link,
		"another session's":       other,
		"the sandbox's own state": filepath.Dir(other),
		"missing":                 filepath.Join(named, "nope"),
	} {
		_, err := c.StatFile(ctx, connect.NewRequest(&hostv1.StatFileRequest{Session: "nw", Path: ".", Workspace: ws}))
		if err == nil {
			t.Errorf("%s workspace %s: served", name, ws)
			continue
		}
		if code, d := detail(t, err); code != connect.CodeInvalidArgument || d.GetField() != "workspace" {
			t.Errorf("%s workspace %s: %v %+v (%v)", name, ws, code, d, err)
		}
		t.Logf("%s: %v", name, err)
	}
	// The service's own directory (service.checkPath), as for Execute.
	prot := t.TempDir()
	srv, err := service.New(service.Options{Host: rt, Broker: service.NewBroker(false, nil), Protected: []string{prot}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	c2 := hostv1connect.NewServiceClient(http.DefaultClient, hs.URL)
	_, err = c2.ListFiles(ctx, connect.NewRequest(&hostv1.ListFilesRequest{Session: "nw", Workspace: prot}))
	if code, d := detail(t, err); code != connect.CodePermissionDenied || d.GetReasonCode() != "protected_path" || d.GetField() != "workspace" {
		t.Errorf("the service's own directory: %v %+v", code, d)
	}
	if _, err := c2.ListFiles(ctx, connect.NewRequest(&hostv1.ListFilesRequest{Session: "nw", Workspace: named})); err != nil {
		t.Errorf("control: another workspace through the same server: %v", err)
	}
}
