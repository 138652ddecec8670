package gitimport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
)

// Reasons an import refuses something (layer.Refusal.Reason) or does not
// move a branch (layer.RefConflict.Reason). They are stable codes.
const (
	// The host's .git is a file (a worktree's gitfile) or a symlink:
	// not a repository this version imports into.
	ReasonHostGitNotDirectory = "host_git_not_directory"
	// The host had a repository when the layer was made and has none now.
	ReasonHostRepositoryMissing = "host_repository_missing"
	// The session's .git is not a directory (a symlink, a gitfile...).
	ReasonSessionGitNotDirectory = "session_git_not_directory"
	// The session deleted the repository: nothing is deleted on the host.
	ReasonRepositoryDeleted = "repository_not_deleted"
	// The session's repository uses SHA-256 object names.
	ReasonSHA256 = "sha256_repository"
	// A ref whose name breaks git's check-ref-format rules.
	ReasonInvalidRefName = "invalid_ref_name"
	// A ref, HEAD or packed-refs line whose value is not an object id
	// (or is a symbolic ref, a symlink, a device...).
	ReasonInvalidRefValue = "invalid_ref_value"
	// An object that does not hash to its name, is corrupt or too large.
	ReasonInvalidObject = "invalid_object"
	// A ref needs an object neither the session nor the host has, or one
	// that was refused.
	ReasonMissingObjects = "missing_objects"
	// A ref brings a gitlink (mode 160000) or a .gitmodules change:
	// submodules are not imported in this version.
	ReasonSubmodule = "submodule_not_supported"
	// The host's git (index-pack --strict) refused the objects.
	ReasonFsck = "fsck_failed"
	// A branch or tag the session deleted: it is not deleted on the host.
	ReasonRefNotDeleted = "ref_not_deleted"
	// The session moved HEAD to another branch or commit: the host's HEAD
	// is not switched (a detached commit is kept under SessionRef(S, "HEAD")).
	ReasonHeadNotSwitched = "head_not_switched"
	// The host's index held staged changes: it was not reset to the
	// fast-forwarded commit, so that nothing staged on the host is lost.
	ReasonIndexNotReset = "index_not_reset"
	// A file of the session's .git that is never imported (config, hooks,
	// info/attributes, commondir, objects/info/alternates...).
	ReasonGitControlNotImported = "git_control_not_imported"
	// More objects, or larger, than an import takes.
	ReasonTooLarge = "too_large"

	// Conflicts.
	ConflictHostMoved      = "host_branch_moved"
	ConflictNotFastForward = "not_fast_forward"
	ConflictExistsOnHost   = "exists_on_host"
	ConflictTagNotMoved    = "tag_not_moved"
)

var errUnsupported = errors.New("importing a layered session's git is supported on Linux only")

// Limits bound what an import reads from the session. Zero fields take the
// defaults.
type Limits struct {
	MaxObjectSize int64 // one object, inflated (default 512 MiB)
	MaxTotal      int64 // all objects read, inflated (default 4 GiB)
	MaxRefFile    int64 // one loose ref or HEAD (default 4 KiB)
	MaxPackedRefs int64 // packed-refs (default 64 MiB)
	MaxIndexFile  int64 // one pack's .idx (default 1 GiB)
	MaxEntries    int   // entries of one directory, refs in all (default 1,000,000)
}

func (l Limits) withDefaults() Limits {
	if l.MaxObjectSize <= 0 {
		l.MaxObjectSize = 512 << 20
	}
	if l.MaxTotal <= 0 {
		l.MaxTotal = 4 << 30
	}
	if l.MaxRefFile <= 0 {
		l.MaxRefFile = 4 << 10
	}
	if l.MaxPackedRefs <= 0 {
		l.MaxPackedRefs = 64 << 20
	}
	if l.MaxIndexFile <= 0 {
		l.MaxIndexFile = 1 << 30
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = 1_000_000
	}
	return l
}

// Importer implements layer.GitImporter with the host's git. The zero
// value finds git on PATH.
type Importer struct {
	// Git is the path of the host's git; empty: "git" on PATH.
	Git string
	// Limits bound what is read from the session.
	Limits Limits
}

var _ layer.GitImporter = (*Importer)(nil)

// New returns an Importer running the git at gitPath (empty: "git" on PATH).
func New(gitPath string) *Importer { return &Importer{Git: gitPath} }

func (im *Importer) gitBin() (string, error) {
	if im != nil && im.Git != "" {
		return im.Git, nil
	}
	p, err := exec.LookPath("git")
	if err != nil {
		return "", fmt.Errorf("the host's git is needed to import a session's commits: %w", err)
	}
	return p, nil
}

// Snapshot records the host repository's HEAD and branches and tags.
func (im *Importer) Snapshot(ctx context.Context, workspace string) (layer.GitBase, error) {
	gd := filepath.Join(workspace, ".git")
	fi, err := os.Lstat(gd)
	if errors.Is(err, os.ErrNotExist) {
		return layer.GitBase{}, nil
	}
	if err != nil {
		return layer.GitBase{}, fmt.Errorf("looking at the host repository: %w", err)
	}
	if !fi.IsDir() {
		// A worktree's gitfile or a symlink: recorded as existing, and
		// Import refuses it with the reason.
		return layer.GitBase{Exists: true}, nil
	}
	bin, err := im.gitBin()
	if err != nil {
		return layer.GitBase{}, err
	}
	return snapshot(ctx, newHostGit(bin, gd, workspace))
}

func snapshot(ctx context.Context, h *hostGit) (layer.GitBase, error) {
	base := layer.GitBase{Exists: true, Refs: map[string]string{}}
	if out, err := h.run(ctx, nil, "symbolic-ref", "-q", "HEAD"); err == nil {
		base.Head = "ref: " + strings.TrimSpace(string(out))
	} else if out, err := h.run(ctx, nil, "rev-parse", "-q", "--verify", "HEAD"); err == nil {
		base.Head = strings.TrimSpace(string(out))
	}
	out, err := h.run(ctx, nil, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/", "refs/tags/")
	if err != nil {
		return layer.GitBase{}, fmt.Errorf("listing the host repository's refs: %w", err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if id, ref, ok := strings.Cut(l, " "); ok {
			base.Refs[ref] = id
		}
	}
	return base, nil
}

// Import brings the session's commits into the host repository (see
// layer.GitImporter for the contract).
func (im *Importer) Import(ctx context.Context, req layer.GitImportRequest) (layer.GitImportResult, error) {
	r := &importRun{
		ctx:   ctx,
		req:   req,
		lim:   Limits{}.withDefaults(),
		cache: map[oid]object{},
		bad:   map[oid]string{},
		loose: map[oid]string{},
	}
	if im != nil {
		r.lim = im.Limits.withDefaults()
	}
	defer r.close()
	if !upperSupported {
		return layer.GitImportResult{}, errUnsupported
	}
	if err := r.run(im); err != nil {
		return r.res, err
	}
	sort.Slice(r.res.Refused, func(i, j int) bool { return r.res.Refused[i].Path < r.res.Refused[j].Path })
	return r.res, nil
}
