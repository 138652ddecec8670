package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"time"

	"connectrpc.com/connect"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/wsfs"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// The reason codes of the files API's errors (ErrorDetail.reason_code).
const (
	// ReasonNotFound: the path, or a directory on it, does not exist.
	ReasonNotFound = "not_found"
	// ReasonProtectedEntry: the path is or holds a protected entry
	// (ErrorDetail.rule names it), never written or removed.
	ReasonProtectedEntry = "protected_entry"
	// ReasonLinkRefused: the path goes through a link leading out of the
	// workspace, or one a write or remove would have to follow.
	ReasonLinkRefused = "link_refused"
	// ReasonNotRegular: a read of a FIFO, device or socket (never opened).
	ReasonNotRegular = "not_regular"
	// ReasonUploadUnknown: a part for an upload_id with no upload under
	// way (never started, finished, or dropped after 60 s without a part).
	ReasonUploadUnknown = "upload_unknown"
)

// readChunk is the data of one ReadFileResponse: well under every
// message limit, large enough that a big file takes few messages.
const readChunk = 256 << 10

// uploadIdle is how long an upload waits for its next part before it is
// dropped (its temporary file removed).
const uploadIdle = 60 * time.Second

// fileError is the status of a failed file operation: the reason code to
// match on, the field at fault, and for a protected entry the entry (in
// rule).
func (s *Server) fileError(ctx context.Context, err error) error {
	var fe *wsfs.Error
	if core.LimitOf(err) != "" {
		return withDetail(connect.CodeResourceExhausted, err,
			&hostv1.ErrorDetail{ReasonCode: ReasonResourceExhausted, Field: core.LimitOf(err)})
	}
	if !errors.As(err, &fe) {
		_, rerr := s.result(ctx, nil, err)
		return rerr
	}
	d := &hostv1.ErrorDetail{ReasonCode: string(fe.Code), Field: "path"}
	code := connect.CodeFailedPrecondition
	switch fe.Code {
	case wsfs.CodeInvalid:
		code, d.ReasonCode, d.Field = connect.CodeInvalidArgument, ReasonInvalidRequest, fe.Field
	case wsfs.CodeNotFound:
		code, d.ReasonCode = connect.CodeNotFound, ReasonNotFound
	case wsfs.CodeProtected:
		code, d.ReasonCode, d.Rule = connect.CodePermissionDenied, ReasonProtectedEntry, fe.Entry
	case wsfs.CodeLink:
		code, d.ReasonCode = connect.CodePermissionDenied, ReasonLinkRefused
	case wsfs.CodeNotRegular:
		d.ReasonCode = ReasonNotRegular
	case wsfs.CodeChanged:
		code = connect.CodeAborted
	case wsfs.CodeUnsupported:
		code = connect.CodeUnimplemented
	case "":
		code, d.ReasonCode = connect.CodeInternal, "file_failed"
	}
	return withDetail(code, err, d)
}

func fileInfoMsg(in wsfs.Info) *hostv1.FileInfo {
	return &hostv1.FileInfo{Name: in.Name, Kind: string(in.Kind), Size: in.Size, Mode: in.Mode,
		MtimeUnixMs: in.ModTime.UnixMilli(), Target: in.Target}
}

// fileSession checks the session of a file call and admits it as Execute
// admits a command's (serve.max_sessions): the call makes the session
// and its workspace if they do not exist yet.
func (s *Server) fileSession(session string) error {
	if err := checkSession("session", session); err != nil {
		return err
	}
	return s.admit(session)
}

// files is the files API for a call naming workspace: the session's own
// ("") or the one the caller named, after the checks Execute's workspace
// gets here (absolute and clean, clear of the service's own directories;
// the runtime checks the rest as for a command).
func (s *Server) files(workspace string) (alephsandbox.FileHost, error) {
	if workspace == "" {
		return s.host, nil
	}
	if !filepath.IsAbs(workspace) || filepath.Clean(workspace) != workspace {
		return nil, invalid("workspace", fmt.Sprintf("%q is not an absolute, clean path", workspace))
	}
	if err := s.checkPath("workspace", workspace); err != nil {
		return nil, err
	}
	wh, ok := s.host.(alephsandbox.WorkspaceFileHost)
	if !ok {
		return nil, withDetail(connect.CodeUnimplemented, errors.New("this host's files API does not reach a workspace the caller names"),
			&hostv1.ErrorDetail{ReasonCode: ReasonInvalidRequest, Field: "workspace"})
	}
	return wh.FilesIn(workspace), nil
}

// ReadFile implements the service.
func (s *Server) ReadFile(ctx context.Context, req *connect.Request[hostv1.ReadFileRequest], stream *connect.ServerStream[hostv1.ReadFileResponse]) (err error) {
	ctx, end, err := s.streamRequest(ctx, req.Header(), req.Msg)
	if err != nil {
		return err
	}
	defer end()
	defer func() { err = s.endedDuring(ctx, req.Msg, err) }()
	defer func() { s.metrics.file("read", err) }()
	m := req.Msg
	if err := s.fileSession(m.GetSession()); err != nil {
		return err
	}
	h, err := s.files(m.GetWorkspace())
	if err != nil {
		return err
	}
	f, in, err := h.OpenFile(ctx, m.GetSession(), m.GetPath())
	s.log.Info("file", "op", "read", "session", m.GetSession(), "path", m.GetPath(), "size", in.Size, "error", err)
	if err != nil {
		return s.fileError(ctx, err)
	}
	defer f.Close()
	inc := s.remember(ctx, m.GetSession())
	if err := stream.Send(&hostv1.ReadFileResponse{Info: fileInfoMsg(in), NodeId: s.nodeID, SessionIncarnation: inc}); err != nil {
		return err
	}
	buf := make([]byte, readChunk)
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			// Send returns once the chunk is on the connection: a client
			// that does not read holds the read back, nothing piles up.
			if err := stream.Send(&hostv1.ReadFileResponse{Data: buf[:n]}); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return s.fileError(ctx, rerr)
		}
		if err := ctx.Err(); err != nil {
			return s.fileError(ctx, err)
		}
	}
}

// ListFiles implements the service.
func (s *Server) ListFiles(ctx context.Context, req *connect.Request[hostv1.ListFilesRequest]) (_ *connect.Response[hostv1.ListFilesResponse], err error) {
	defer func() { s.metrics.file("list", err) }()
	m := req.Msg
	if err := s.fileSession(m.GetSession()); err != nil {
		return nil, err
	}
	h, err := s.files(m.GetWorkspace())
	if err != nil {
		return nil, err
	}
	list, err := h.ListFiles(ctx, m.GetSession(), m.GetPath())
	if err != nil {
		return nil, s.fileError(ctx, err)
	}
	resp := &hostv1.ListFilesResponse{Entries: make([]*hostv1.FileInfo, 0, len(list)), NodeId: s.nodeID, SessionIncarnation: s.remember(ctx, m.GetSession())}
	for _, in := range list {
		resp.Entries = append(resp.Entries, fileInfoMsg(in))
	}
	return connect.NewResponse(resp), nil
}

// StatFile implements the service.
func (s *Server) StatFile(ctx context.Context, req *connect.Request[hostv1.StatFileRequest]) (_ *connect.Response[hostv1.StatFileResponse], err error) {
	defer func() { s.metrics.file("stat", err) }()
	m := req.Msg
	if err := s.fileSession(m.GetSession()); err != nil {
		return nil, err
	}
	h, err := s.files(m.GetWorkspace())
	if err != nil {
		return nil, err
	}
	in, err := h.StatFile(ctx, m.GetSession(), m.GetPath())
	if err != nil {
		return nil, s.fileError(ctx, err)
	}
	return connect.NewResponse(&hostv1.StatFileResponse{Info: fileInfoMsg(in), NodeId: s.nodeID, SessionIncarnation: s.remember(ctx, m.GetSession())}), nil
}

// RemoveFile implements the service.
func (s *Server) RemoveFile(ctx context.Context, req *connect.Request[hostv1.RemoveFileRequest]) (_ *connect.Response[hostv1.RemoveFileResponse], err error) {
	defer func() { s.metrics.file("remove", err) }()
	m := req.Msg
	if err := s.fileSession(m.GetSession()); err != nil {
		return nil, err
	}
	h, err := s.files(m.GetWorkspace())
	if err != nil {
		return nil, err
	}
	err = h.RemoveFile(ctx, m.GetSession(), m.GetPath(), alephsandbox.RemoveFileOptions{Recursive: m.GetRecursive()})
	s.log.Info("file", "op", "remove", "session", m.GetSession(), "path", m.GetPath(), "error", err)
	if err != nil {
		return nil, s.fileError(ctx, err)
	}
	return connect.NewResponse(&hostv1.RemoveFileResponse{NodeId: s.nodeID, SessionIncarnation: s.remember(ctx, m.GetSession())}), nil
}

// WriteFile implements the service: the whole file in one request, or
// one part of an upload.
func (s *Server) WriteFile(ctx context.Context, req *connect.Request[hostv1.WriteFileRequest]) (_ *connect.Response[hostv1.WriteFileResponse], err error) {
	defer func() { s.metrics.file("write", err) }()
	m := req.Msg
	if err := s.fileSession(m.GetSession()); err != nil {
		return nil, err
	}
	if m.GetMode() > 0o7777 {
		return nil, invalid("mode", fmt.Sprintf("%#o has bits beyond the permission bits (0o7777)", m.GetMode()))
	}
	opts := alephsandbox.WriteFileOptions{Mode: fs.FileMode(m.GetMode()), Parents: m.GetParents()}
	h, err := s.files(m.GetWorkspace())
	if err != nil {
		return nil, err
	}
	if m.GetUploadId() == "" {
		if m.GetOffset() != 0 || m.GetMore() {
			return nil, invalid("upload_id", "required with offset or more (a file in parts names its upload)")
		}
		in, err := h.WriteFile(ctx, m.GetSession(), m.GetPath(), bytes.NewReader(m.GetData()), opts)
		s.log.Info("file", "op", "write", "session", m.GetSession(), "path", m.GetPath(), "size", len(m.GetData()), "error", err)
		if err != nil {
			return nil, s.fileError(ctx, err)
		}
		return connect.NewResponse(&hostv1.WriteFileResponse{Info: fileInfoMsg(in), Received: in.Size,
			NodeId: s.nodeID, SessionIncarnation: s.remember(ctx, m.GetSession())}), nil
	}
	return s.writePart(ctx, m, h, opts)
}

// upload is a file being written in parts: one WriteFile of the runtime
// runs for the whole upload, reading the parts from a pipe, so the parts
// land in one temporary file renamed into place after the last, and an
// upload dropped half-way leaves nothing behind.
type upload struct {
	session, path string
	// workspace is the one the first part named ("": the session's own).
	workspace string
	pw        *io.PipeWriter
	next      int64
	idle      *time.Timer
	done      chan struct{}
	info      wsfs.Info
	err       error
	// busy serializes the parts of one upload.
	busy chan struct{}
}

func (s *Server) writePart(ctx context.Context, m *hostv1.WriteFileRequest, h alephsandbox.FileHost, opts alephsandbox.WriteFileOptions) (*connect.Response[hostv1.WriteFileResponse], error) {
	id := m.GetUploadId()
	if len(id) > 256 {
		return nil, invalid("upload_id", "longer than 256 bytes")
	}
	s.mu.Lock()
	u, ok := s.uploads[id]
	switch {
	case !ok && m.GetOffset() != 0:
		s.mu.Unlock()
		return nil, withDetail(connect.CodeNotFound, fmt.Errorf("no upload %q is under way (never started, finished, or dropped after %s without a part): start again at offset 0", id, uploadIdle),
			&hostv1.ErrorDetail{ReasonCode: ReasonUploadUnknown, Field: "upload_id"})
	case !ok && len(s.uploads) >= s.limits.FilesMaxUploads:
		s.mu.Unlock()
		return nil, exhausted("serve.files_max_uploads", int64(s.limits.FilesMaxUploads),
			fmt.Sprintf("%d uploads are under way already: finish one first", len(s.uploads)))
	case !ok:
		u = s.startUpload(id, m.GetSession(), m.GetPath(), m.GetWorkspace(), h, opts)
	}
	s.mu.Unlock()
	if u.session != m.GetSession() || u.path != m.GetPath() || u.workspace != m.GetWorkspace() {
		return nil, invalid("upload_id", "names the upload of another session, path or workspace")
	}
	select {
	case u.busy <- struct{}{}:
	case <-ctx.Done():
		return nil, s.fileError(ctx, ctx.Err())
	}
	defer func() { <-u.busy }()
	if m.GetOffset() != u.next {
		return nil, invalid("offset", fmt.Sprintf("%d is not where the upload is: the next part starts at %d", m.GetOffset(), u.next))
	}
	u.idle.Reset(uploadIdle)
	if len(m.GetData()) > 0 {
		n, err := u.pw.Write(m.GetData())
		u.next += int64(n)
		if err != nil {
			// The write ended (refused, a limit, dropped): its error is
			// the answer.
			<-u.done
			s.endUpload(id, u)
			if u.err == nil {
				u.err = err
			}
			return nil, s.fileError(ctx, u.err)
		}
	}
	if m.GetMore() {
		// The session is made with the file, after the last part: a part
		// names its incarnation only when it holds one already.
		return connect.NewResponse(&hostv1.WriteFileResponse{Received: u.next, NodeId: s.nodeID, SessionIncarnation: s.incarnation(u.session)}), nil
	}
	_ = u.pw.Close()
	<-u.done
	s.endUpload(id, u)
	s.log.Info("file", "op", "write", "session", u.session, "path", u.path, "size", u.next, "upload", true, "error", u.err)
	if u.err != nil {
		return nil, s.fileError(ctx, u.err)
	}
	return connect.NewResponse(&hostv1.WriteFileResponse{Info: fileInfoMsg(u.info), Received: u.next,
		NodeId: s.nodeID, SessionIncarnation: s.remember(ctx, u.session)}), nil
}

// errUploadDropped ends an upload whose next part did not come in time.
var errUploadDropped = errors.New("the upload was dropped: its next part did not come in time")

// startUpload starts the runtime's write of a new upload (s.mu held).
func (s *Server) startUpload(id, session, path, workspace string, h alephsandbox.FileHost, opts alephsandbox.WriteFileOptions) *upload {
	pr, pw := io.Pipe()
	u := &upload{session: session, path: path, workspace: workspace, pw: pw, done: make(chan struct{}), busy: make(chan struct{}, 1)}
	u.idle = time.AfterFunc(uploadIdle, func() {
		// The write sees the error and removes its temporary file.
		_ = pw.CloseWithError(errUploadDropped)
		<-u.done
		s.endUpload(id, u)
	})
	s.uploads[id] = u
	go func() {
		defer close(u.done)
		// Not the part's context: the write outlives each part's call.
		u.info, u.err = h.WriteFile(context.Background(), session, path, pr, opts)
		// A part blocked in Write returns now.
		_ = pr.CloseWithError(errors.Join(u.err, io.ErrClosedPipe))
	}()
	return u
}

func (s *Server) endUpload(id string, u *upload) {
	u.idle.Stop()
	s.mu.Lock()
	if s.uploads[id] == u {
		delete(s.uploads, id)
	}
	s.mu.Unlock()
}
