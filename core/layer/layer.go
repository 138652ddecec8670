package layer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Layout of a layer directory (Create makes it, Open reads it).
const (
	// UpperDir is overlayfs's upperdir: what the session wrote.
	UpperDir = "upper"
	// WorkDir is overlayfs's workdir (same file system as UpperDir). Its
	// flock is the layer's views lock (HoldViews): whoever mounts the
	// overlay takes it exclusively for the mount, whoever reaches an
	// overlay of the layer already mounted holds it shared meanwhile.
	WorkDir = "work"
	// StateFile holds the layer's state as JSON: the workspace's identity,
	// the git base and the base records Observe took.
	StateFile = "state"
	// LockFile is held shared (flock) by whoever has the overlay mounted
	// (HoldMounted); Discard takes it exclusively.
	LockFile = "lock"
)

// Defaults of Policy.
const (
	// DefaultMaxFileBytes is the largest file Apply brings to the host
	// unless ApplyOptions.AllowLarge.
	DefaultMaxFileBytes = 64 << 20
	// DefaultHashBytes bounds the content hash Observe records of a host
	// file: a larger one is judged by its stat alone (size, mtime, inode).
	DefaultHashBytes = 16 << 20
	// DefaultMaxTreeEntries bounds the listing Observe records of a host
	// directory the session deleted or replaced; a larger tree cannot be
	// judged unchanged, so deleting it is a conflict.
	DefaultMaxTreeEntries = 100_000
	// maxDiffBytes: a text file larger than this is named in Diff as
	// binary rather than diffed (the diff's cost is quadratic at worst).
	maxDiffBytes = 8 << 20
)

// Policy is what a layer is created with (stored in its state).
type Policy struct {
	// Protected is the top-level protected set (core's
	// Config.ProtectedEntries()); empty means
	// driverapi.DefaultProtectedEntries(). Apply refuses these names at
	// any depth (see protectedName).
	Protected []string `json:"protected,omitempty"`
	// MaxFileBytes: larger files are refused by Apply unless
	// ApplyOptions.AllowLarge; 0 means DefaultMaxFileBytes.
	MaxFileBytes int64 `json:"max_file_bytes,omitempty"`
	// HashBytes bounds Observe's content hash; 0 means DefaultHashBytes.
	HashBytes int64 `json:"hash_bytes,omitempty"`
	// MaxTreeEntries bounds a deleted directory's recorded listing; 0
	// means DefaultMaxTreeEntries.
	MaxTreeEntries int `json:"max_tree_entries,omitempty"`
	// Session names the session (for the git import's SessionRef).
	Session string `json:"session,omitempty"`
	// UserNS: the overlay is mounted in a user namespace, with userxattr,
	// so overlayfs keeps its markers in user.overlay.* and
	// trusted.overlay.* ones are foreign (refused); without it the
	// reverse.
	UserNS bool `json:"user_ns,omitempty"`
}

func (p Policy) withDefaults() Policy {
	if len(p.Protected) == 0 {
		p.Protected = driverapi.DefaultProtectedEntries()
	}
	if p.MaxFileBytes <= 0 {
		p.MaxFileBytes = DefaultMaxFileBytes
	}
	if p.HashBytes <= 0 {
		p.HashBytes = DefaultHashBytes
	}
	if p.MaxTreeEntries <= 0 {
		p.MaxTreeEntries = DefaultMaxTreeEntries
	}
	return p
}

// Kinds of Change.
const (
	KindAdded    = "added"
	KindModified = "modified"
	KindDeleted  = "deleted"
	// KindTypeChanged: the path exists on both sides with different types
	// (file -> dir, file -> symlink, ...).
	KindTypeChanged = "type_changed"
)

// Entry types (Change.Type, Change.OldType).
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeFIFO    = "fifo"
	TypeSocket  = "socket"
	TypeChar    = "char_device"
	TypeBlock   = "block_device"
)

// Change is one difference between what the session sees (the upper layer
// over the workspace) and the workspace.
type Change struct {
	// Path is workspace-relative, slash-separated.
	Path string `json:"path"`
	Kind string `json:"kind"`
	// Type is the session's entry type (empty when deleted); OldType the
	// host's (empty when added).
	Type    string `json:"type,omitempty"`
	OldType string `json:"old_type,omitempty"`
	// Mode and OldMode are permission bits with set-id and sticky bits
	// (mode & 07777).
	Mode    uint32 `json:"mode,omitempty"`
	OldMode uint32 `json:"old_mode,omitempty"`
	// Size is the session's size of a regular file.
	Size int64 `json:"size,omitempty"`
	// Target is the session's symlink target.
	Target string `json:"target,omitempty"`
}

// ApplyOptions tune one Apply.
type ApplyOptions struct {
	// AllowLarge applies files over Policy.MaxFileBytes.
	AllowLarge bool
}

// ApplyResult is what one Apply did.
type ApplyResult struct {
	// Applied are the paths brought to the host (workspace-relative).
	Applied []string `json:"applied"`
	// Refused are the paths not brought, each with a reason code.
	Refused []Refusal `json:"refused"`
	// Conflicts are the paths whose host version changed since the
	// session's base: not applied, the host's version kept.
	Conflicts []string `json:"conflicts"`
	// Git is the git import's result, when it ran.
	Git *GitImportResult `json:"git,omitempty"`
}

// Clean reports whether everything asked was applied.
func (r ApplyResult) Clean() bool { return len(r.Refused) == 0 && len(r.Conflicts) == 0 }

// Reason codes of a Refusal made by Apply. Stable: clients branch on them.
const (
	// RefusedProtected: a name of the protected set (tool configs, agent
	// instructions, .envrc...) at any depth, in any letter case.
	RefusedProtected = "protected"
	// RefusedInsideGit: inside a .git directory (the top-level one is
	// brought by the git import, as objects and refs only).
	RefusedInsideGit = "inside_git"
	// RefusedGitShaped: a directory git would take for a repository (HEAD
	// beside objects, refs or commondir), or in one, or a .git that is not
	// a directory (a gitfile or a link).
	RefusedGitShaped = "git_shaped"
	// RefusedSetID: a set-user-id or set-group-id file or directory.
	RefusedSetID = "setid"
	// RefusedDevice: a character or block device.
	RefusedDevice = "device"
	// RefusedFIFO: a named pipe.
	RefusedFIFO = "fifo"
	// RefusedSocket: a unix socket.
	RefusedSocket = "socket"
	// RefusedSymlinkEscape: a symlink whose target, resolved lexically
	// from the link's directory, leads out of the workspace.
	RefusedSymlinkEscape = "symlink_escape"
	// RefusedHardLink: a file with more links than the layer holds names
	// for: linked to something outside the layer.
	RefusedHardLink = "hardlink_outside"
	// RefusedTooLarge: over Policy.MaxFileBytes (ApplyOptions.AllowLarge
	// brings it).
	RefusedTooLarge = "too_large"
	// RefusedOverlayXattr: an upper entry carrying overlayfs metadata this
	// engine does not read (redirect, metacopy, xattr whiteouts): what
	// the session saw there cannot be told from the upper layer alone.
	RefusedOverlayXattr = "overlay_xattr"
	// RefusedParent: below a directory that was not applied.
	RefusedParent = "parent_not_applied"
	// RefusedUnobserved: no base was recorded (Observe did not run after
	// the command that changed it), so a host change cannot be told from
	// the session's: not applied.
	RefusedUnobserved = "unobserved"
	// RefusedNoChange: a path asked for that the session did not change.
	RefusedNoChange = "no_change"
	// RefusedGitUnavailable: the session changed .git but the layer has
	// no git importer.
	RefusedGitUnavailable = "git_import_unavailable"
	// RefusedUnreadable: the upper entry could not be read.
	RefusedUnreadable = "unreadable"
	// RefusedHostError: writing the host failed for this path (the error
	// is in Detail); the host's version is kept.
	RefusedHostError = "host_error"
)

// GitRefusalPrefix starts the Path of a refusal made by the git import.
const GitRefusalPrefix = ".git:"

// ErrUnsupported: layered workspaces need Linux's overlayfs.
var ErrUnsupported = errors.New("layered workspaces are supported on Linux only (overlayfs); use a live workspace here")

// ErrLayerMounted: the layer's overlay is mounted (HoldMounted is held),
// so its directories must not be removed.
var ErrLayerMounted = errors.New("the layer's overlay is mounted; unmount it (end the session's sandbox) first")

// ErrWorkspaceReplaced: the workspace directory is not the one the layer
// was made over (another directory, or a link, now stands at its path).
var ErrWorkspaceReplaced = errors.New("the workspace directory was replaced since the layer was made")

// WorkspaceReplacedError says what changed; it matches ErrWorkspaceReplaced.
type WorkspaceReplacedError struct {
	Workspace string
	Detail    string
}

func (e *WorkspaceReplacedError) Error() string {
	return fmt.Sprintf("workspace %s: %s; nothing was applied (apply to the directory the session ran over, or discard the layer)", e.Workspace, e.Detail)
}

func (e *WorkspaceReplacedError) Is(target error) bool { return target == ErrWorkspaceReplaced }

// ErrBadPath: a path given to Diff or Apply is not a clean
// workspace-relative path.
var ErrBadPath = errors.New("bad path")

// PathError is a path given to Diff or Apply that is not a clean
// workspace-relative path; it matches ErrBadPath.
type PathError struct {
	Path   string
	Reason string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("path %q: %s; give slash-separated paths relative to the workspace, without \"..\"", e.Path, e.Reason)
}

func (e *PathError) Is(target error) bool { return target == ErrBadPath }

// ErrBadLayer: the layer directory is not one Create made (missing or
// unreadable state), or Create was given bad arguments.
var ErrBadLayer = errors.New("bad layer")

// LayerError says what is wrong with a layer directory; it matches
// ErrBadLayer.
type LayerError struct {
	Dir    string
	Reason string
	Err    error
}

func (e *LayerError) Error() string {
	s := fmt.Sprintf("layer %s: %s", e.Dir, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *LayerError) Unwrap() error { return e.Err }

func (e *LayerError) Is(target error) bool { return target == ErrBadLayer }

// cleanRel checks a caller-given path: workspace-relative, slash-separated,
// no "." or ".." component, no empty component. A trailing slash is
// dropped.
func cleanRel(p string) (string, error) {
	q := strings.TrimSuffix(p, "/")
	switch {
	case q == "":
		return "", &PathError{Path: p, Reason: "empty"}
	case strings.HasPrefix(q, "/"):
		return "", &PathError{Path: p, Reason: "absolute"}
	case strings.ContainsRune(q, 0):
		return "", &PathError{Path: p, Reason: "holds a NUL byte"}
	}
	for _, c := range strings.Split(q, "/") {
		switch c {
		case "":
			return "", &PathError{Path: p, Reason: "has an empty component"}
		case ".", "..":
			return "", &PathError{Path: p, Reason: "has a \".\" or \"..\" component (leads out of the workspace or is not clean)"}
		}
	}
	return q, nil
}

// under reports whether p is root or below it (slash paths).
func under(p, root string) bool {
	return p == root || strings.HasPrefix(p, root+"/")
}
