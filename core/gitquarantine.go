package core

import (
	"context"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Repositories planted for the host's git.
//
// A command can write anything in its workspace, and git, run there later
// by the user (or by a shell prompt that shows the branch), takes for a
// repository any directory that holds HEAD beside objects/ and refs/ (a
// "bare" repository: no .git needed at all), any .git directory of that
// shape, and any .git file ("gitdir: <path>"). Git then reads that
// repository's config, which can name programs to run (core.pager,
// core.fsmonitor, core.sshCommand, a "!" alias, filters, diff drivers...),
// and runs its hooks. The protected set cannot stop this: a bare repository
// needs no protected name, and one in a subdirectory shadows the
// workspace's real .git for git run there.
//
// So after each command the core looks, on the host, for the git-directory
// shapes the command created or changed and neutralises them before the
// host can take them for a repository. It cannot tell a command's writes
// from anything else by content, but it can by time: creating, renaming or
// writing an entry sets the inode's change time (ctime) to the file
// system's clock, and nothing a command can do sets a ctime back (only a
// change of the system clock, which no sandboxed command may make). So
// every entry a git directory is made of that has a ctime at or after the
// command's start was made or changed while it ran.
//
// What is looked at (gitquarantine_linux.go): every directory of the
// workspace, opened with a descriptor relative to its parent and
// O_NOFOLLOW (a symlink is never followed, so a running process swapping
// a directory for a link cannot send the walk out of the workspace), and
// of each only the directory's entry names and, for the few that matter,
// their lstat. A directory is git-shaped when it holds HEAD and one of
// objects, refs or commondir (wider than git's own test, so that no
// variant slips through). It is neutralised when its HEAD, config,
// config.worktree, commondir, hooks directory or any hook changed since
// the start: HEAD is renamed to HEAD.aleph-quarantined, and without HEAD
// git no longer takes the directory for a repository. A HEAD git would
// accept that changed since the start is renamed too where the directory
// is not git-shaped yet, so that a repository cannot be planted over two
// commands (HEAD and config first, objects and refs later). A .git entry that is
// not a directory (a gitfile, or a symlink) that changed since the start
// is renamed to .git.aleph-quarantined. Nothing is deleted: the user can
// look at what the command made and rename it back.
//
// The workspace's own top-level protected entries (its real .git first)
// are not walked: the driver keeps them read-only for the command, and the
// host's own git must keep working there.

// gitQuarantineSuffix ends the new name of every entry the git quarantine
// renamed (HEAD.aleph-quarantined, .git.aleph-quarantined).
const gitQuarantineSuffix = ".aleph-quarantined"

// GitQuarantine is what the scan after one command found and did.
type GitQuarantine struct {
	// Renamed are the entries renamed, workspace-relative, each as
	// "old -> new" (sub/.git/HEAD -> sub/.git/HEAD.aleph-quarantined).
	Renamed []string `json:"renamed,omitempty"`
	// Unreadable are directories the command had made unreadable that
	// were made readable to the owner again so that they could be
	// searched (workspace-relative).
	Unreadable []string `json:"made_readable,omitempty"`
	// Incomplete, when set, says why the scan stopped before it had seen
	// the whole workspace: a repository planted in what it did not see
	// was not neutralised.
	Incomplete string `json:"incomplete,omitempty"`
	// Dirs is how many directories were searched.
	Dirs int `json:"dirs"`
}

// Empty reports whether the scan did nothing worth reporting.
func (q *GitQuarantine) Empty() bool {
	return q == nil || (len(q.Renamed) == 0 && len(q.Unreadable) == 0 && q.Incomplete == "")
}

// Git quarantine bounds: a workspace larger than this is not fully
// searched (GitQuarantine.Incomplete says so).
const (
	gitScanMaxEntries = 4_000_000
	gitScanMaxDepth   = 1024
	gitScanTimeout    = 60 * time.Second
)

// gitScanLimits bound one scan.
type gitScanLimits struct {
	maxEntries int
	maxDepth   int
	timeout    time.Duration
}

func defaultGitScanLimits() gitScanLimits {
	return gitScanLimits{maxEntries: gitScanMaxEntries, maxDepth: gitScanMaxDepth, timeout: gitScanTimeout}
}

// gitMark is the moment a command starts, on the workspace's file
// system's own clock (markGitScan).
type gitMark struct {
	sec, nsec int64
	ok        bool
}

// quarantineGitAfter runs the scan of root for changes since mark,
// skipping the top-level entries in skip. It never fails the command: a
// scan that could not run says why in Incomplete.
func quarantineGitAfter(ctx context.Context, root string, mark gitMark, skip []string, lim gitScanLimits) *GitQuarantine {
	if !gitScanSupported {
		return nil
	}
	if !mark.ok {
		return &GitQuarantine{Incomplete: "the start of the command could not be marked on the workspace's file system"}
	}
	// The scan runs even when the caller gave up on the command: what
	// the command wrote is on the host all the same.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lim.timeout)
	defer cancel()
	return scanGitShapes(ctx, root, mark, skip, lim)
}

// quarantineGit is the scan after one command of the workspace ws. The
// top-level protected entries are skipped when the driver claims to
// protect them: it kept them read-only for the command, and the
// workspace's real .git must keep working for the host.
func (s *WorkspaceSandbox) quarantineGit(ctx context.Context, ws string, mark gitMark, hc driverapi.HostCapabilities) *GitQuarantine {
	var skip []string
	if hc.Has(driverapi.FeatureProtectedPaths) {
		skip = s.cfg.ProtectedEntries()
	}
	lim := s.gitLimits
	if lim.maxEntries == 0 {
		lim = defaultGitScanLimits()
	}
	return quarantineGitAfter(ctx, ws, mark, skip, lim)
}

// GuardFileWrite is the same search for a write of the files API to the
// live workspace ws: it marks the write's start and returns the function
// to call once the file at rel (slash-separated, relative to ws) was
// written. A write makes one file and the directories above it, so only
// the file's directory and the one above it (a hook lies in hooks/) are
// looked at: the HEAD, config, hook or commondir the write added makes
// the directory's HEAD renamed as after a command, and the result says
// so (nil: nothing done). With planted_git = "allow", or where the search
// does not run, it returns nil.
func (s *WorkspaceSandbox) GuardFileWrite(ws string) func(ctx context.Context, rel string) *GitQuarantine {
	if s.gitScanOff || !gitScanSupported {
		return nil
	}
	mark := markGitScan(ws)
	skip := s.cfg.ProtectedEntries()
	return func(ctx context.Context, rel string) *GitQuarantine {
		if !mark.ok {
			return &GitQuarantine{Incomplete: "the start of the write could not be marked on the workspace's file system"}
		}
		dir := path.Dir(path.Clean("/" + filepath.ToSlash(rel)))
		rels := []string{dir}
		if dir != "/" {
			rels = append(rels, path.Dir(dir))
		}
		for i, r := range rels {
			rels[i] = strings.TrimPrefix(r, "/")
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), gitScanTimeout)
		defer cancel()
		gq := scanGitDirs(ctx, ws, mark, skip, rels)
		if gq.Empty() {
			return nil
		}
		return gq
	}
}
