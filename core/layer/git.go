package layer

import "context"

// GitImporter brings what a layered session committed into the host's
// repository without ever running git on, or reading as a repository,
// anything the sandboxed command wrote: the session's .git in the upper
// layer is read as data (objects checked against their names, refs and HEAD
// parsed and validated), and only the host's own git, in the host's own
// repository, indexes what was read, the way a fetch indexes untrusted
// data. Package core/layer/gitimport implements it.
//
// The contract:
//   - Snapshot records the host repository's state when a layer is made
//     (the base every later conflict is judged against). A workspace with
//     no repository gives a GitBase with Exists false, not an error.
//   - Import never changes the host's working tree. It adds objects, then
//     updates refs: a branch the session advanced is fast-forwarded when
//     the host's branch is still at the base and the session's commit
//     descends from it; otherwise the session's commit is kept under
//     SessionRef(session, branch) and the branch is reported as a
//     conflict. With no host repository (GitBase.Exists false) and a
//     session repository, it creates one with the host git's defaults and
//     imports into it.
//   - When the branch checked out on the host was fast-forwarded, the
//     host's index is reset to the new commit (as `git reset --mixed`):
//     the working tree, which Apply writes, then shows only the session's
//     uncommitted changes; what the session had staged comes back
//     unstaged (GitImportResult.IndexReset says so).
//   - Anything it cannot import safely (submodules or gitlinks the
//     session added, a SHA-256 repository, a malformed object or ref) is
//     refused, listed in Refused with the reason; the rest still imports.
//   - Errors are for the host side failing (the host's git missing or
//     failing, I/O); nothing the session wrote makes it return an error
//     instead of a refusal.
type GitImporter interface {
	Snapshot(ctx context.Context, workspace string) (GitBase, error)
	Import(ctx context.Context, req GitImportRequest) (GitImportResult, error)
}

// GitBase is the host repository's state when the layer was made. It is
// stored with the layer (JSON) and handed back to Import.
type GitBase struct {
	// Exists is false when the workspace had no repository (.git).
	Exists bool `json:"exists"`
	// Head is what HEAD named: "ref: refs/heads/main" or a commit id.
	Head string `json:"head,omitempty"`
	// Refs maps every ref under refs/heads and refs/tags to its commit.
	Refs map[string]string `json:"refs,omitempty"`
}

// GitImportRequest is one import.
type GitImportRequest struct {
	// Workspace is the host directory (the layer's lower); its .git is the
	// host repository (a .git that is not a directory is refused).
	Workspace string
	// UpperGit is the upper layer's .git directory: data only. It holds
	// only what the session created or changed; objects it refers to that
	// it did not create are in the host repository already.
	UpperGit string
	// Base is what Snapshot recorded when the layer was made.
	Base GitBase
	// Session names the session, for SessionRef.
	Session string
}

// GitImportResult is what an import did.
type GitImportResult struct {
	// Objects is how many objects were added to the host repository.
	Objects int `json:"objects"`
	// Updated are the refs moved (or created) on the host.
	Updated []RefUpdate `json:"updated,omitempty"`
	// Conflicts are the branches the host moved since the base (or that
	// the session rewrote): kept under SessionRef, the host's untouched.
	Conflicts []RefConflict `json:"conflicts,omitempty"`
	// Refused are what was not imported, each with its reason.
	Refused []Refusal `json:"refused,omitempty"`
	// CreatedRepository is true when the host had no repository and one
	// was made.
	CreatedRepository bool `json:"created_repository,omitempty"`
	// IndexReset is true when the host's index was reset to a
	// fast-forwarded HEAD (staged changes come back unstaged).
	IndexReset bool `json:"index_reset,omitempty"`
}

// RefUpdate is one ref moved on the host.
type RefUpdate struct {
	Ref string `json:"ref"`
	Old string `json:"old,omitempty"` // empty: created
	New string `json:"new"`
}

// RefConflict is a branch not moved on the host.
type RefConflict struct {
	Ref        string `json:"ref"`
	SessionRef string `json:"session_ref"` // where the session's commit is kept
	Reason     string `json:"reason"`
}

// SessionRef is where Import keeps a session's commit for a branch it could
// not fast-forward: refs/aleph-sandbox/<session>/<branch without refs/heads/>.
func SessionRef(session, branch string) string {
	const heads = "refs/heads/"
	if len(branch) > len(heads) && branch[:len(heads)] == heads {
		branch = branch[len(heads):]
	}
	return "refs/aleph-sandbox/" + session + "/" + branch
}

// Refusal is something apply (or the git import) did not bring to the host.
type Refusal struct {
	// Path is workspace-relative (slash-separated); for the git import, a
	// ref name or an object id may stand here.
	Path string `json:"path"`
	// Reason is a stable code (RefusedProtected, ...).
	Reason string `json:"reason"`
	// Detail says what was found, for a person.
	Detail string `json:"detail,omitempty"`
}
