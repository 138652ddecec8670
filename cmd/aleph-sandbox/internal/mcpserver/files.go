package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/wsfs"
)

// The file tools' names (docs/mcp.md).
const (
	ToolReadFile  = "read_file"
	ToolWriteFile = "write_file"
	ToolListFiles = "list_files"
)

// DefaultReadFileBytes is how much of a file read_file returns when
// max_bytes is not given: a model's context is the bound, not the
// service's files_max_bytes.
const DefaultReadFileBytes = 256 << 10

// ReadFileArgs are read_file's arguments.
type ReadFileArgs struct {
	Path     string `json:"path" jsonschema:"the file, relative to the session's workspace (the directory run_command runs in)"`
	MaxBytes int64  `json:"max_bytes,omitempty" jsonschema:"return at most this many bytes (default 262144); the rest is reported as truncated"`
}

// ReadFileResult is read_file's structured result.
type ReadFileResult struct {
	Path string `json:"path"`
	// Content is the file's text, or its bytes in base64 when they are not
	// UTF-8 (Encoding says which).
	Content   string `json:"content"`
	Encoding  string `json:"encoding"`
	Size      int64  `json:"size"`
	Truncated bool   `json:"truncated"`
	FileError
}

// FileError is what a file tool reports when it was refused: the reason
// code (not_found, protected_entry, link_refused, not_regular,
// invalid_request, resource_exhausted...) and, for a protected entry,
// the entry.
type FileError struct {
	Error      string `json:"error,omitempty"`
	ReasonCode string `json:"reason_code,omitempty"`
	Entry      string `json:"entry,omitempty"`
}

// WriteFileArgs are write_file's arguments.
type WriteFileArgs struct {
	Path     string `json:"path" jsonschema:"the file, relative to the session's workspace; missing directories are created"`
	Content  string `json:"content" jsonschema:"the new content of the file (it replaces the old one, atomically)"`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (the default) or base64 (content is then the bytes in base64)"`
	Mode     uint32 `json:"mode,omitempty" jsonschema:"permission bits as a number, e.g. 493 for 0755; default: keep an existing file's, or 0644"`
}

// WriteFileResult is write_file's structured result.
type WriteFileResult struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	FileError
}

// ListFilesArgs are list_files's arguments.
type ListFilesArgs struct {
	Path string `json:"path,omitempty" jsonschema:"the directory, relative to the session's workspace (default: the workspace itself)"`
}

// FileEntry is one entry of list_files.
type FileEntry struct {
	Name string `json:"name"`
	// Kind is file, dir, link or other.
	Kind   string `json:"kind"`
	Size   int64  `json:"size"`
	Mode   uint32 `json:"mode"`
	MTime  string `json:"mtime"`
	Target string `json:"target,omitempty"`
}

// ListFilesResult is list_files's structured result.
type ListFilesResult struct {
	Path    string      `json:"path"`
	Entries []FileEntry `json:"entries"`
	FileError
}

// fileError is the tool error of a refused or failed file operation.
func fileError(err error) FileError {
	fe := FileError{Error: err.Error(), ReasonCode: "file_failed"}
	var we *wsfs.Error
	switch {
	case errors.As(err, new(*core.InvalidCommandError)):
		// A session or a named workspace refused (its name, a workspace
		// another session holds, one reaching the sandbox's own state):
		// the caller's request, as the service's files API says it.
		fe.ReasonCode = "invalid_request"
	case core.LimitOf(err) != "":
		fe.ReasonCode = string(core.ReasonResourceExhausted)
	case errors.As(err, &we):
		fe.ReasonCode, fe.Entry = string(we.Code), we.Entry
		switch we.Code {
		case wsfs.CodeProtected:
			fe.ReasonCode = "protected_entry"
		case wsfs.CodeInvalid:
			fe.ReasonCode = "invalid_request"
		}
	default:
		// Core's other failures (a layered session's view unavailable, a
		// closed runtime, a driver's failure) by core's reason codes, as
		// run_command gives them.
		if code, _ := core.FailureReason(err); code != "" {
			fe.ReasonCode = string(code)
		}
	}
	return fe
}

func toolError(msg string, structured any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}, StructuredContent: structured}
}

// addFileTools registers read_file, write_file and list_files on the
// session's workspace. Every rule is the files API's (wsfs): paths
// relative to the workspace, no link leading out, protected entries never
// written, no FIFO or device opened, sizes bounded, writes atomic,
// every operation audited.
func addFileTools(s *mcp.Server, cfg Config, files alephsandbox.FileHost) {
	no := false
	mcp.AddTool(s, &mcp.Tool{
		Name: ToolReadFile,
		Description: "Read a file of the sandbox session's workspace (the directory run_command runs in). " +
			"Text comes back as text, other bytes in base64. Links leading out of the workspace are refused.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in ReadFileArgs) (*mcp.CallToolResult, ReadFileResult, error) {
		res := ReadFileResult{Path: in.Path}
		max := in.MaxBytes
		if max <= 0 {
			max = DefaultReadFileBytes
		}
		f, info, err := files.OpenFile(ctx, cfg.Session, in.Path)
		if err != nil {
			res.FileError = fileError(err)
			return toolError("read_file: "+err.Error(), res), res, nil
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, max))
		if err != nil {
			res.FileError = fileError(err)
			return toolError("read_file: "+err.Error(), res), res, nil
		}
		res.Size, res.Truncated = info.Size, info.Size > int64(len(b))
		if utf8.Valid(b) {
			res.Content, res.Encoding = string(b), "utf-8"
		} else {
			res.Content, res.Encoding = base64.StdEncoding.EncodeToString(b), "base64"
		}
		text := res.Content
		if res.Encoding == "base64" {
			text = "(binary, base64) " + text
		}
		if res.Truncated {
			text += fmt.Sprintf("\n[truncated: %d of %d bytes shown; give max_bytes for more]", len(b), info.Size)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, res, nil
	})
	yes := true
	mcp.AddTool(s, &mcp.Tool{
		Name: ToolWriteFile,
		Description: "Write a file of the sandbox session's workspace, replacing it atomically and creating missing directories. " +
			"Protected entries (.git, editor and agent tool configs such as .vscode or .envrc) are never written.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in WriteFileArgs) (*mcp.CallToolResult, WriteFileResult, error) {
		res := WriteFileResult{Path: in.Path}
		data := []byte(in.Content)
		switch strings.ToLower(in.Encoding) {
		case "", "utf-8", "utf8":
		case "base64":
			b, err := base64.StdEncoding.DecodeString(in.Content)
			if err != nil {
				res.FileError = FileError{Error: "content is not base64: " + err.Error(), ReasonCode: "invalid_request"}
				return toolError("write_file: "+res.Error, res), res, nil
			}
			data = b
		default:
			res.FileError = FileError{Error: fmt.Sprintf("encoding %q: want utf-8 or base64", in.Encoding), ReasonCode: "invalid_request"}
			return toolError("write_file: "+res.Error, res), res, nil
		}
		info, err := files.WriteFile(ctx, cfg.Session, in.Path, strings.NewReader(string(data)),
			alephsandbox.WriteFileOptions{Mode: fs.FileMode(in.Mode), Parents: true})
		if err != nil {
			res.FileError = fileError(err)
			return toolError("write_file: "+err.Error(), res), res, nil
		}
		res.Size = info.Size
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("wrote %d bytes to %s", info.Size, in.Path)}}}, res, nil
	})
	mcp.AddTool(s, &mcp.Tool{
		Name:        ToolListFiles,
		Description: "List a directory of the sandbox session's workspace: name, kind (file, dir, link, other), size, mode, mtime.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in ListFilesArgs) (*mcp.CallToolResult, ListFilesResult, error) {
		p := in.Path
		if p == "" {
			p = "."
		}
		res := ListFilesResult{Path: p, Entries: []FileEntry{}}
		list, err := files.ListFiles(ctx, cfg.Session, p)
		if err != nil {
			res.FileError = fileError(err)
			return toolError("list_files: "+err.Error(), res), res, nil
		}
		var b strings.Builder
		for _, e := range list {
			res.Entries = append(res.Entries, FileEntry{Name: e.Name, Kind: string(e.Kind), Size: e.Size, Mode: e.Mode,
				MTime: e.ModTime.Format("2006-01-02T15:04:05Z07:00"), Target: e.Target})
			fmt.Fprintf(&b, "%-5s %10d %s", e.Kind, e.Size, e.Name)
			if e.Target != "" {
				b.WriteString(" -> " + e.Target)
			}
			b.WriteByte('\n')
		}
		if len(list) == 0 {
			b.WriteString("(empty)")
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, res, nil
	})
}
