package alephsandbox

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/wsfs"
)

// FileInfo describes one entry of a session's workspace: Name, Kind
// ("file", "dir", "link", "other"), Size, Mode (permission bits), ModTime
// and, for a link, its Target.
type FileInfo = wsfs.Info

// FileError is a refused or failed file operation; its Code says what to
// branch on (wsfs.CodeNotFound, CodeProtected naming Entry, CodeInvalid
// naming Field, CodeLink...). A size or list limit is a *core.LimitError
// instead, naming the configuration key.
type FileError = wsfs.Error

// WriteFileOptions shape WriteFile: Mode (0: keep an existing file's, or
// 0o644) and Parents (create missing directories).
type WriteFileOptions = wsfs.WriteOptions

// RemoveFileOptions shape RemoveFile: Recursive removes a directory with
// what it holds.
type RemoveFileOptions = wsfs.RemoveOptions

// FileHost is the files API over sessions' workspaces: paths are relative
// to the session's workspace, which is created on first use as Execute
// creates it. Every rule is wsfs's (a link never leads out, protected
// entries are never written or removed, a FIFO or device is never opened,
// sizes bounded by [serve] files_max_bytes and files_max_list_entries,
// writes atomic), and every operation is audited.
type FileHost interface {
	// OpenFile opens a regular file for reading (the caller closes it):
	// large files are read as a stream.
	OpenFile(ctx context.Context, session, path string) (io.ReadCloser, FileInfo, error)
	// WriteFile replaces or creates a file with what src holds, at most
	// files_max_bytes, atomically.
	WriteFile(ctx context.Context, session, path string, src io.Reader, opts WriteFileOptions) (FileInfo, error)
	ListFiles(ctx context.Context, session, path string) ([]FileInfo, error)
	StatFile(ctx context.Context, session, path string) (FileInfo, error)
	RemoveFile(ctx context.Context, session, path string, opts RemoveFileOptions) error
}

var _ FileHost = (*Runtime)(nil)

// fileRoot is the session's workspace as the files API sees it, the
// session and its workspace made as Execute makes them, and the function
// that releases it (changed: the operation wrote or removed something).
//
// A layered session's files are its view: the overlay its commands see
// (core's OpenSessionView says how it is reached without ever writing the
// upper layer of a mounted overlay). Reads see the session's files over
// the host's, deletions and opaque directories honoured by overlayfs
// itself; writes and removes land in the layer and never on the host,
// which changes only on Apply. wsfs's rules hold there as on a live
// workspace: its root is the overlay's root, so no link leads out of the
// view, protected entries are not written, no FIFO or device is opened.
func (r *Runtime) fileRoot(ctx context.Context, session, named string) (*wsfs.Root, func(changed bool), error) {
	if r.ws == nil {
		return nil, nil, ErrDisabled
	}
	// A file call is use of the session as a command is, for every
	// process sharing the workspace root: held until it is done, its
	// stamp set (core's UseSession), so no idle expiry removes the
	// workspace under it.
	release, err := r.ws.UseSession(ctx, session)
	if err != nil {
		return nil, nil, err
	}
	root, done, err := r.openFileRoot(ctx, session, named)
	if err != nil {
		release()
		return nil, nil, err
	}
	return root, func(changed bool) {
		done(changed)
		release()
	}, nil
}

// openFileRoot is fileRoot once the session is held.
func (r *Runtime) openFileRoot(ctx context.Context, session, named string) (*wsfs.Root, func(changed bool), error) {
	var dir string
	var err error
	if named != "" {
		dir, err = r.ws.FileWorkspace(session, named)
	} else {
		dir, err = r.ws.WorkspacePath(session)
	}
	if err != nil {
		return nil, nil, err
	}
	root := &wsfs.Root{Dir: dir, Protected: r.files.protected, Limits: r.files.limits}
	layered, err := r.ws.SessionLayered(session)
	if err != nil {
		return nil, nil, err
	}
	if !layered {
		return root, func(bool) {}, nil
	}
	v, err := r.ws.OpenSessionView(ctx, session)
	if err != nil {
		return nil, nil, err
	}
	root.DirFile = v.Dir
	return root, func(changed bool) {
		// A base not recorded is not lost safety: Apply refuses such an
		// entry (unobserved) until a later command's Observe records it.
		_ = v.Close(ctx, changed)
	}, nil
}

// audit records one file operation: refusals (a protected entry, a link,
// a bad path, a limit) apart from failures.
func (r *Runtime) auditFile(ctx context.Context, session, op, path string, n int64, err error) {
	r.auditFileQ(ctx, session, op, path, n, err, nil)
}

// auditFileQ is auditFile with what the write's search for planted git
// repositories did.
func (r *Runtime) auditFileQ(ctx context.Context, session, op, path string, n int64, err error, gq *core.GitQuarantine) {
	if r.ws == nil {
		return
	}
	refused := false
	if err != nil {
		switch wsfs.CodeOf(err) {
		case wsfs.CodeProtected, wsfs.CodeLink, wsfs.CodeInvalid, wsfs.CodeNotRegular, wsfs.CodeChanged:
			refused = true
		}
		var ic *core.InvalidCommandError
		if core.LimitOf(err) != "" || errors.As(err, &ic) || errors.Is(err, core.ErrLayeredMode) {
			// A limit, or a workspace named that the checks refuse.
			refused = true
		}
	}
	r.ws.RecordFile(ctx, session, core.FileAudit{Op: op, Path: path, Bytes: n, GitQuarantine: gq}, refused, err)
}

// OpenFile implements FileHost. The read is audited when the file is
// opened (its size then).
func (r *Runtime) OpenFile(ctx context.Context, session, path string) (io.ReadCloser, FileInfo, error) {
	return r.openFile(ctx, session, "", path)
}

func (r *Runtime) openFile(ctx context.Context, session, named, path string) (io.ReadCloser, FileInfo, error) {
	root, done, err := r.fileRoot(ctx, session, named)
	if err != nil {
		return nil, FileInfo{}, err
	}
	f, in, err := root.Open(ctx, path)
	r.auditFile(ctx, session, "read", path, in.Size, err)
	if err != nil {
		done(false)
		return nil, FileInfo{}, err
	}
	// The open file is bounded as well: one growing while it is read
	// stops at the limit. A layered session's view is held until it is
	// closed.
	return &boundedFile{ReadCloser: f, left: root.Limits.MaxFileBytes, root: root, path: path, done: done}, in, nil
}

// boundedFile ends a read at files_max_bytes with the limit's error.
type boundedFile struct {
	io.ReadCloser
	left int64
	root *wsfs.Root
	path string
	done func(changed bool)
}

func (b *boundedFile) Close() error {
	err := b.ReadCloser.Close()
	if b.done != nil {
		b.done(false)
		b.done = nil
	}
	return err
}

func (b *boundedFile) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, _ := b.ReadCloser.Read(one[:]); n > 0 {
			return 0, &core.LimitError{Limit: b.root.Limits.FileKey, Value: b.root.Limits.MaxFileBytes,
				Reason: "read " + b.path + ": the file grew past the limit while it was read"}
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// ReadFile reads a whole file of a session's workspace.
func (r *Runtime) ReadFile(ctx context.Context, session, path string) ([]byte, error) {
	f, _, err := r.OpenFile(ctx, session, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteFile implements FileHost.
func (r *Runtime) WriteFile(ctx context.Context, session, path string, src io.Reader, opts WriteFileOptions) (FileInfo, error) {
	return r.writeFile(ctx, session, "", path, src, opts)
}

func (r *Runtime) writeFile(ctx context.Context, session, named, path string, src io.Reader, opts WriteFileOptions) (FileInfo, error) {
	if r.ws != nil {
		// A layered session's layer at its disk limit takes no more
		// (checked before the view is opened, which holds the session's
		// lock).
		if layered, err := r.ws.SessionLayered(session); err == nil && layered {
			if err := r.ws.CheckLayerSpace(ctx, session); err != nil {
				r.auditFile(ctx, session, "write", path, 0, err)
				return FileInfo{}, err
			}
		}
	}
	root, done, err := r.fileRoot(ctx, session, named)
	if err != nil {
		return FileInfo{}, err
	}
	// What is written to a live workspace is searched for a git
	// repository it plants, as what a command writes is (core's
	// GuardFileWrite): a HEAD, config or hook written into a directory is
	// neutralised before the host's git can take it for a repository. A
	// layered session's writes land in its layer, which Apply judges.
	var guard func(context.Context, string) *core.GitQuarantine
	if r.ws != nil && root.DirFile == nil {
		guard = r.ws.GuardFileWrite(root.Dir)
	}
	in, err := root.Write(ctx, path, src, opts)
	done(err == nil)
	var gq *core.GitQuarantine
	if guard != nil && err == nil {
		gq = guard(ctx, path)
	}
	r.auditFileQ(ctx, session, "write", path, in.Size, err, gq)
	return in, err
}

// ListFiles implements FileHost.
func (r *Runtime) ListFiles(ctx context.Context, session, path string) ([]FileInfo, error) {
	return r.listFiles(ctx, session, "", path)
}

func (r *Runtime) listFiles(ctx context.Context, session, named, path string) ([]FileInfo, error) {
	root, done, err := r.fileRoot(ctx, session, named)
	if err != nil {
		return nil, err
	}
	out, err := root.List(ctx, path)
	done(false)
	r.auditFile(ctx, session, "list", path, 0, err)
	return out, err
}

// StatFile implements FileHost.
func (r *Runtime) StatFile(ctx context.Context, session, path string) (FileInfo, error) {
	return r.statFile(ctx, session, "", path)
}

func (r *Runtime) statFile(ctx context.Context, session, named, path string) (FileInfo, error) {
	root, done, err := r.fileRoot(ctx, session, named)
	if err != nil {
		return FileInfo{}, err
	}
	in, err := root.Stat(ctx, path)
	done(false)
	r.auditFile(ctx, session, "stat", path, 0, err)
	return in, err
}

// RemoveFile implements FileHost.
func (r *Runtime) RemoveFile(ctx context.Context, session, path string, opts RemoveFileOptions) error {
	return r.removeFile(ctx, session, "", path, opts)
}

func (r *Runtime) removeFile(ctx context.Context, session, named, path string, opts RemoveFileOptions) error {
	root, done, err := r.fileRoot(ctx, session, named)
	if err != nil {
		return err
	}
	err = root.Remove(ctx, path, opts)
	done(err == nil)
	r.auditFile(ctx, session, "remove", path, 0, err)
	return err
}

// WorkspaceFileHost is implemented by hosts whose files API reaches a
// workspace the caller names, as Execute does for Command.Workspace
// (*Runtime).
type WorkspaceFileHost interface {
	// FilesIn is the files API with every call reaching workspace (an
	// absolute directory; "" is the session's own) instead of the
	// session's own workspace. Each call checks it as Execute checks a
	// named workspace (core's FileWorkspace): an existing directory named
	// without a link, not the sandbox's own state, not another session's
	// workspace under the root; on a layered session only its layer's
	// workspace, reached through the session's view. Every call is
	// served there; a write to a live workspace is searched for a planted
	// git repository as a command's writes are (core's GuardFileWrite).
	FilesIn(workspace string) FileHost
}

var _ WorkspaceFileHost = (*Runtime)(nil)

// FilesIn implements WorkspaceFileHost.
func (r *Runtime) FilesIn(workspace string) FileHost {
	if workspace == "" {
		return r
	}
	return namedFiles{r: r, ws: workspace}
}

// namedFiles is the files API over a workspace the caller named.
type namedFiles struct {
	r  *Runtime
	ws string
}

func (n namedFiles) OpenFile(ctx context.Context, session, path string) (io.ReadCloser, FileInfo, error) {
	return n.r.openFile(ctx, session, n.ws, path)
}

func (n namedFiles) WriteFile(ctx context.Context, session, path string, src io.Reader, opts WriteFileOptions) (FileInfo, error) {
	return n.r.writeFile(ctx, session, n.ws, path, src, opts)
}

func (n namedFiles) ListFiles(ctx context.Context, session, path string) ([]FileInfo, error) {
	return n.r.listFiles(ctx, session, n.ws, path)
}

func (n namedFiles) StatFile(ctx context.Context, session, path string) (FileInfo, error) {
	return n.r.statFile(ctx, session, n.ws, path)
}

func (n namedFiles) RemoveFile(ctx context.Context, session, path string, opts RemoveFileOptions) error {
	return n.r.removeFile(ctx, session, n.ws, path, opts)
}

// fileConfig is what the files API takes from the configuration.
type fileConfig struct {
	protected []string
	limits    wsfs.Limits
}

func fileConfigOf(cfg core.Config) fileConfig {
	l := cfg.Serve.Limits(cfg.Sandbox.MaxOutputBytes)
	return fileConfig{protected: cfg.ProtectedEntries(), limits: wsfs.Limits{
		MaxFileBytes: l.FilesMaxBytes, MaxListEntries: l.FilesMaxListEntries,
		FileKey: "serve.files_max_bytes", ListKey: "serve.files_max_list_entries",
	}}
}
