package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/wsfs"
	"github.com/aleph-sandbox/aleph-sandbox/service"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

var (
	_ alephsandbox.FileHost          = (*Pipeline)(nil)
	_ alephsandbox.WorkspaceFileHost = (*Pipeline)(nil)
)

// FilesIn implements alephsandbox.WorkspaceFileHost: every call names
// workspace (absolute; "" is the session's own) as the service's
// requests' workspace field, and the service checks it as it checks a
// command's (the runtime's rules: a write to a live named workspace is
// refused, a layered session reaches only its layer's workspace).
func (h *Pipeline) FilesIn(workspace string) alephsandbox.FileHost {
	return remoteFiles{h: h, workspace: workspace}
}

// remoteFiles is the files API of the service over one workspace.
type remoteFiles struct {
	h         *Pipeline
	workspace string
}

// OpenFile implements alephsandbox.FileHost: the file streams from the
// service as it is read.
func (h *Pipeline) OpenFile(ctx context.Context, session, path string) (io.ReadCloser, wsfs.Info, error) {
	return remoteFiles{h: h}.OpenFile(ctx, session, path)
}

// WriteFile implements alephsandbox.FileHost: one request, or the parts
// of one upload for a file over writeChunk (atomic on the service).
func (h *Pipeline) WriteFile(ctx context.Context, session, path string, src io.Reader, opts alephsandbox.WriteFileOptions) (wsfs.Info, error) {
	return remoteFiles{h: h}.WriteFile(ctx, session, path, src, opts)
}

// ListFiles implements alephsandbox.FileHost.
func (h *Pipeline) ListFiles(ctx context.Context, session, path string) ([]wsfs.Info, error) {
	return remoteFiles{h: h}.ListFiles(ctx, session, path)
}

// StatFile implements alephsandbox.FileHost.
func (h *Pipeline) StatFile(ctx context.Context, session, path string) (wsfs.Info, error) {
	return remoteFiles{h: h}.StatFile(ctx, session, path)
}

// RemoveFile implements alephsandbox.FileHost.
func (h *Pipeline) RemoveFile(ctx context.Context, session, path string, opts alephsandbox.RemoveFileOptions) error {
	return remoteFiles{h: h}.RemoveFile(ctx, session, path, opts)
}

// writeChunk is the data of one WriteFile request: a bigger file goes in
// parts of one upload, each well under the service's request bound.
const writeChunk = 1 << 20

// fileErr is a file call's error status as the runtime's error of the
// same meaning (*wsfs.Error, *core.LimitError), so a front end reports it
// as it does in-process.
func fileErr(op, path string, err error) error {
	d := Detail(err)
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	fe := &wsfs.Error{Op: op, Path: path, Reason: msg}
	switch d.GetReasonCode() {
	case service.ReasonResourceExhausted:
		// The message ends with "(limit KEY = VALUE; ...)": the value is
		// read back from it, the reason is what comes before.
		le := &core.LimitError{Limit: d.GetField(), Reason: msg}
		if i := strings.LastIndex(msg, " (limit "); i >= 0 {
			if _, serr := fmt.Sscanf(msg[i:], " (limit "+d.GetField()+" = %d;", &le.Value); serr == nil {
				le.Reason = msg[:i]
			}
		}
		return le
	case service.ReasonInvalidRequest:
		fe.Code, fe.Field = wsfs.CodeInvalid, d.GetField()
	case service.ReasonNotFound:
		fe.Code = wsfs.CodeNotFound
	case service.ReasonProtectedEntry:
		fe.Code, fe.Entry = wsfs.CodeProtected, d.GetRule()
	case service.ReasonLinkRefused:
		fe.Code = wsfs.CodeLink
	case service.ReasonNotRegular:
		fe.Code = wsfs.CodeNotRegular
	case string(wsfs.CodeIsDir), string(wsfs.CodeNotDir), string(wsfs.CodeNotEmpty), string(wsfs.CodeChanged):
		fe.Code = wsfs.Code(d.GetReasonCode())
	case string(core.ReasonInvalidCommand):
		// A workspace the call names that the checks refuse (or a write
		// to a live one): the runtime's error for it.
		return &core.InvalidCommandError{Field: d.GetField(), Reason: msg}
	case service.ReasonLayeredMode:
		return layerErr(err)
	default:
		return err
	}
	return fe
}

func infoFrom(m *hostv1.FileInfo) wsfs.Info {
	return wsfs.Info{Name: m.GetName(), Kind: wsfs.Kind(m.GetKind()), Size: m.GetSize(), Mode: m.GetMode(),
		ModTime: time.UnixMilli(m.GetMtimeUnixMs()).UTC(), Target: m.GetTarget()}
}

func (r remoteFiles) OpenFile(ctx context.Context, session, path string) (io.ReadCloser, wsfs.Info, error) {
	ctx, cancel := context.WithCancel(ctx)
	req := connect.NewRequest(&hostv1.ReadFileRequest{Session: session, Path: path, Workspace: r.workspace})
	st, err := r.h.C.ReadFile(ctx, req)
	if err != nil {
		cancel()
		return nil, wsfs.Info{}, fileErr("read", path, err)
	}
	if !st.Receive() {
		err := st.Err()
		_ = st.Close()
		cancel()
		if err == nil {
			err = errors.New("the service ended the read without describing the file")
		}
		return nil, wsfs.Info{}, fileErr("read", path, err)
	}
	info := infoFrom(st.Msg().GetInfo())
	return &remoteFile{st: st, cancel: cancel, path: path}, info, nil
}

type remoteFile struct {
	st interface {
		Receive() bool
		Msg() *hostv1.ReadFileResponse
		Err() error
		Close() error
	}
	cancel context.CancelFunc
	buf    []byte
	path   string
}

func (f *remoteFile) Read(p []byte) (int, error) {
	for len(f.buf) == 0 {
		if !f.st.Receive() {
			if err := f.st.Err(); err != nil {
				return 0, fileErr("read", f.path, err)
			}
			return 0, io.EOF
		}
		f.buf = f.st.Msg().GetData()
	}
	n := copy(p, f.buf)
	f.buf = f.buf[n:]
	return n, nil
}

func (f *remoteFile) Close() error {
	f.cancel()
	return f.st.Close()
}

func (r remoteFiles) WriteFile(ctx context.Context, session, path string, src io.Reader, opts alephsandbox.WriteFileOptions) (wsfs.Info, error) {
	var id string
	var off int64
	buf := make([]byte, writeChunk)
	for {
		n, rerr := io.ReadFull(src, buf)
		if rerr != nil && !errors.Is(rerr, io.EOF) && !errors.Is(rerr, io.ErrUnexpectedEOF) {
			return wsfs.Info{}, rerr
		}
		last := rerr != nil
		if !last && id == "" {
			// More than one chunk: an upload.
			var b [16]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		req := connect.NewRequest(&hostv1.WriteFileRequest{Session: session, Path: path, Data: buf[:n],
			Mode: uint32(opts.Mode), Parents: opts.Parents, UploadId: id, Offset: off, More: !last, Workspace: r.workspace})
		resp, err := r.h.C.WriteFile(ctx, req)
		if err != nil {
			return wsfs.Info{}, fileErr("write", path, err)
		}
		off += int64(n)
		if last {
			return infoFrom(resp.Msg.GetInfo()), nil
		}
	}
}

func (r remoteFiles) ListFiles(ctx context.Context, session, path string) ([]wsfs.Info, error) {
	req := connect.NewRequest(&hostv1.ListFilesRequest{Session: session, Path: path, Workspace: r.workspace})
	resp, err := r.h.C.ListFiles(ctx, req)
	if err != nil {
		return nil, fileErr("list", path, err)
	}
	out := make([]wsfs.Info, 0, len(resp.Msg.GetEntries()))
	for _, e := range resp.Msg.GetEntries() {
		out = append(out, infoFrom(e))
	}
	return out, nil
}

func (r remoteFiles) StatFile(ctx context.Context, session, path string) (wsfs.Info, error) {
	req := connect.NewRequest(&hostv1.StatFileRequest{Session: session, Path: path, Workspace: r.workspace})
	resp, err := r.h.C.StatFile(ctx, req)
	if err != nil {
		return wsfs.Info{}, fileErr("stat", path, err)
	}
	return infoFrom(resp.Msg.GetInfo()), nil
}

func (r remoteFiles) RemoveFile(ctx context.Context, session, path string, opts alephsandbox.RemoveFileOptions) error {
	req := connect.NewRequest(&hostv1.RemoveFileRequest{Session: session, Path: path, Recursive: opts.Recursive, Workspace: r.workspace})
	if _, err := r.h.C.RemoveFile(ctx, req); err != nil {
		return fileErr("remove", path, err)
	}
	return nil
}
