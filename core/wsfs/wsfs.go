// Package wsfs reads and writes files of a session's workspace from the
// host, for the files API (the runtime's Files, the service's file calls,
// the clients' files and MCP's read_file, write_file, list_files).
//
// The host process is not sandboxed, so every rule the sandbox would
// enforce on a command is enforced here, next to each operation:
//
//   - A path is relative to the workspace: absolute paths, ".." components
//     and NUL bytes are refused before anything is opened.
//   - A link never leads out. On Linux a read resolves its path with
//     openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS) from a descriptor of
//     the workspace, so a link, even one swapped in mid-operation, is
//     followed only while it stays beneath the workspace; on macOS every
//     component is opened with O_NOFOLLOW from its parent's descriptor
//     and a link is not followed at all; elsewhere (Windows) a read goes
//     through os.Root, which follows a link only while it stays beneath
//     the workspace as well (files_osroot.go). A write or a remove follows no
//     link anywhere (a link in the middle of the path is refused, a link
//     as the last component is replaced or removed, never its target), so
//     a link inside the workspace cannot lead a write into a protected
//     entry either.
//   - Protected entries (the configured protected set: .git, tool
//     configs...) are never written, created or removed, at any depth, as
//     the Linux driver keeps them read-only at any depth. Reading them is
//     allowed: a sandboxed command of the session can read them too.
//   - A FIFO, device or socket is never opened: it is looked at through
//     an O_PATH descriptor (Linux), fstatat (macOS) or os.Root's Stat
//     (elsewhere) first, and the file opened afterwards (O_NONBLOCK) must
//     be the same regular file. On Windows a reparse point other than a
//     symbolic link is not opened either.
//   - On Windows, a name that Windows reads as another one (a trailing
//     dot or space, a stream, a device name, an 8.3 short name for a
//     write or remove) is refused (winnames.go).
//   - Sizes are bounded (Limits): a bigger file is a *core.LimitError
//     naming the configuration key.
//   - A write is atomic: the data goes to a temporary file in the same
//     directory, which is renamed over the target only once complete; a
//     failed write leaves nothing behind.
package wsfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// Kind is what an entry is.
type Kind string

// The kinds of Info.Kind.
const (
	KindFile  Kind = "file"
	KindDir   Kind = "dir"
	KindLink  Kind = "link"
	KindOther Kind = "other"
)

// Info describes one entry, without following it when it is a link.
type Info struct {
	// Name is the entry's name (for Stat, the last component of the path;
	// "." for the workspace itself).
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Size is the file's length in bytes (a link's: its target's length).
	Size int64 `json:"size"`
	// Mode is the permission bits (0o7777).
	Mode    uint32    `json:"mode"`
	ModTime time.Time `json:"mtime"`
	// Target is a link's target, as stored (only for KindLink).
	Target string `json:"target,omitempty"`
}

// Code says what kind of error an *Error is, for callers that branch on it.
type Code string

// The codes of Error.
const (
	// CodeInvalid: the path or an option is malformed (Field names it).
	CodeInvalid Code = "invalid_argument"
	// CodeNotFound: the path, or a directory on it, does not exist.
	CodeNotFound Code = "not_found"
	// CodeProtected: the path is or lies inside a protected entry
	// (Entry names it), which is never written or removed.
	CodeProtected Code = "protected"
	// CodeLink: the path goes through a link where none is followed
	// (a write's or remove's directories; any link on macOS), or a link
	// that leads out of the workspace.
	CodeLink Code = "link_refused"
	// CodeNotRegular: a read of something that is not a regular file (a
	// FIFO, device or socket is never opened).
	CodeNotRegular Code = "not_regular"
	// CodeIsDir: a read or write of a directory.
	CodeIsDir Code = "is_directory"
	// CodeNotDir: a list of something that is not a directory, or a path
	// through a file.
	CodeNotDir Code = "not_directory"
	// CodeNotEmpty: a remove of a non-empty directory without recursive.
	CodeNotEmpty Code = "not_empty"
	// CodeChanged: the entry changed while it was being opened (a swap
	// mid-operation); nothing was read or written.
	CodeChanged Code = "changed"
	// CodeUnsupported: the files API cannot reach this workspace on this
	// platform (a layered session's view, reached on Linux only).
	CodeUnsupported Code = "unsupported"
)

// Error is a refused or failed file operation.
type Error struct {
	Op   string // read, write, list, stat, remove
	Path string // as the caller gave it
	Code Code
	// Field is the request field at fault for CodeInvalid ("path", "mode").
	Field string
	// Entry is the protected entry for CodeProtected.
	Entry  string
	Reason string
	Err    error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s %q: %s", e.Op, e.Path, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// CodeOf is err's Code, or "" when it is not an *Error.
func CodeOf(err error) Code {
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Code
	}
	return ""
}

// Limits bound what one operation reads, writes or lists.
type Limits struct {
	// MaxFileBytes bounds a file read or written; LimitKey names it in
	// the error.
	MaxFileBytes int64
	// MaxListEntries bounds the entries of one list.
	MaxListEntries int
	// FileKey and ListKey are the configuration keys of the two limits,
	// named in a *core.LimitError.
	FileKey, ListKey string
}

// Root is a session's workspace, as the files API sees it.
type Root struct {
	// Dir is the workspace, absolute and canonical (it is opened once per
	// operation; it is trusted, every path below it is not).
	Dir string
	// DirFile, when set, is the workspace already open (a layered
	// session's view: its overlay's root, which has no host path); it is
	// used instead of Dir and stays the caller's to close. Linux only.
	DirFile *os.File
	// Protected are the protected entry names (core.Config.ProtectedEntries).
	Protected []string
	Limits    Limits
}

// WriteOptions shape a write.
type WriteOptions struct {
	// Mode is the new file's permission bits; 0 keeps an existing file's
	// mode, or 0o644 for a new file.
	Mode fs.FileMode
	// Parents creates the missing directories on the way (0o755).
	Parents bool
}

// RemoveOptions shape a remove.
type RemoveOptions struct {
	// Recursive removes a directory and what it holds; without it only
	// an empty directory is removed.
	Recursive bool
}

// split checks p and returns its components ("." and empty ones dropped;
// none for the workspace itself).
func split(op, p string) ([]string, error) {
	bad := func(reason string) error {
		return &Error{Op: op, Path: p, Code: CodeInvalid, Field: "path", Reason: reason}
	}
	switch {
	case strings.IndexByte(p, 0) >= 0:
		return nil, bad("contains a NUL byte")
	case strings.HasPrefix(p, "/") || (runtime.GOOS == "windows" && (strings.HasPrefix(p, `\`) || (len(p) >= 2 && p[1] == ':'))):
		return nil, bad("must be relative to the session's workspace (an absolute path names the host's files, which the files API never reaches)")
	}
	sep := func(r rune) bool { return r == '/' || (runtime.GOOS == "windows" && r == '\\') }
	var out []string
	for _, c := range strings.FieldsFunc(p, sep) {
		switch c {
		case ".":
			continue
		case "..":
			return nil, bad("must not contain \"..\": name the entry by its path from the workspace")
		}
		if len(c) > 255 {
			return nil, bad(fmt.Sprintf("component %.20q... is longer than 255 bytes", c))
		}
		out = append(out, c)
	}
	return out, nil
}

// protectedIn is the first protected entry among comps, or "". Names are
// compared as the platform's file system does (case-insensitively on
// macOS and Windows, whose default file systems fold case).
func (r *Root) protectedIn(comps []string) string {
	for _, c := range comps {
		for _, p := range r.Protected {
			if c == p || (runtime.GOOS != "linux" && strings.EqualFold(c, p)) {
				return p
			}
		}
	}
	return ""
}

func (r *Root) refuseProtected(op, p string, comps []string) error {
	if e := r.protectedIn(comps); e != "" {
		return &Error{Op: op, Path: p, Code: CodeProtected, Entry: e,
			Reason: fmt.Sprintf("%s is a protected entry (the sandbox keeps it read-only so host tools never run what a command planted there): it is never written or removed", e)}
	}
	return nil
}

func (r *Root) maxFile() int64 {
	if r.Limits.MaxFileBytes > 0 {
		return r.Limits.MaxFileBytes
	}
	return DefaultMaxFileBytes
}

func (r *Root) maxList() int {
	if r.Limits.MaxListEntries > 0 {
		return r.Limits.MaxListEntries
	}
	return DefaultMaxListEntries
}

// Defaults of Limits.
const (
	DefaultMaxFileBytes   = 64 << 20
	DefaultMaxListEntries = 10000
)

// tempPrefix starts the name of a write's temporary file.
const tempPrefix = ".aleph-write-"

func nameOf(comps []string) string {
	if len(comps) == 0 {
		return "."
	}
	return comps[len(comps)-1]
}

func (r *Root) fileLimit(reason string) error {
	key := r.Limits.FileKey
	if key == "" {
		key = "serve.files_max_bytes"
	}
	return &core.LimitError{Limit: key, Value: r.maxFile(), Reason: reason}
}

// readWith copies the regular file at p, opened by open, to w, bounded
// by the limit (a file growing while it is read stops there).
func (r *Root) readWith(ctx context.Context, p string, w io.Writer, open func(context.Context, string) (*os.File, Info, error)) (Info, error) {
	f, in, err := open(ctx, p)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(ctxReader{ctx, f}, r.maxFile()+1))
	if err != nil {
		return in, &Error{Op: "read", Path: p, Reason: "reading failed", Err: err}
	}
	if n > r.maxFile() {
		return in, r.fileLimit(fmt.Sprintf("read %q: the file grew past the limit while it was read", p))
	}
	in.Size = n
	return in, nil
}

// ctxReader stops a copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// IsTemp reports whether name is a write's temporary file (a crashed
// write may leave one).
func IsTemp(name string) bool { return strings.HasPrefix(name, tempPrefix) }
