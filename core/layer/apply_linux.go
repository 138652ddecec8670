//go:build linux

package layer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Apply brings the session's changes to the host: all of them (paths
// empty) or those at or below the given workspace-relative paths. Each
// file is applied atomically (a temporary file written beside it, then
// renamed over it), through descriptors opened beneath the workspace
// without following any link. What must never reach the host is refused,
// each with a reason code (Refused*); a path whose host entry changed
// since Observe recorded it is a conflict: not applied, the host's version
// kept. When paths is empty or names .git, the git import runs first.
//
// Apply never writes the upper layer, so it is safe while the overlay is
// mounted (overlayfs leaves changes to a mounted upper layer undefined): an
// applied entry stays in the upper layer, the host now holds the same, and
// Changes no longer lists it since it lists only what differs from the
// host. Its base is re-recorded as the host's new entry, so a later host
// edit there is a conflict for any later apply. Writing the lower layer
// under a mounted overlay is what the user's own edits do all the time;
// with redirect_dir=nofollow, metacopy=off and index=off overlayfs keeps
// no state about the lower that a change could contradict, and the
// session sees the host's new entry where it has none of its own.
//
// Errors are for what stops the whole apply (the workspace replaced, the
// layer unreadable, the git import failing); a path that could not be
// written is refused with RefusedHostError.
func (l *Layer) Apply(ctx context.Context, paths []string, opt ApplyOptions) (ApplyResult, error) {
	res := ApplyResult{Applied: []string{}, Refused: []Refusal{}, Conflicts: []string{}}
	var sel []string
	for _, p := range paths {
		c, err := cleanRel(p)
		if err != nil {
			return res, err
		}
		sel = append(sel, c)
	}
	wfd, err := l.openWorkspace()
	if err != nil {
		return res, err
	}
	defer unix.Close(wfd)
	ufd, err := l.openUpper()
	if err != nil {
		return res, err
	}
	defer unix.Close(ufd)
	s := l.newScanner(ctx)
	if err := s.run(ufd, wfd); err != nil {
		return res, err
	}

	all := len(sel) == 0
	wantGit := all
	matched := make([]bool, len(sel))
	var chosen []*entry
	var gitEntry *entry
	for _, e := range s.changed {
		if e.gitTop {
			gitEntry = e
			continue
		}
		take := all
		for i, p := range sel {
			if under(e.Path, p) {
				take, matched[i] = true, true
			} else if under(p, e.Path) && e.Type == TypeDir && (e.Kind == KindAdded || e.Kind == KindTypeChanged) {
				// A directory the asked path needs on the host.
				take = true
			}
		}
		if take {
			chosen = append(chosen, e)
		}
	}
	for i, p := range sel {
		if isGitPath(p) {
			wantGit = true
			if gitEntry != nil {
				matched[i] = true
			}
		}
		if !matched[i] {
			res.Refused = append(res.Refused, Refusal{Path: p, Reason: RefusedNoChange, Detail: "the session changed nothing at or below this path"})
		}
	}

	if wantGit && gitEntry != nil {
		if l.git == nil {
			res.Refused = append(res.Refused, Refusal{Path: ".git", Reason: RefusedGitUnavailable, Detail: "the session changed the repository but no git importer was given; files inside .git are never copied"})
		} else {
			gr, err := l.git.Import(ctx, GitImportRequest{
				Workspace: l.st.Workspace,
				UpperGit:  filepath.Join(l.dir, UpperDir, ".git"),
				Base:      l.st.Git,
				Session:   l.st.Policy.Session,
			})
			if err != nil {
				return res, fmt.Errorf("git import: %w", err)
			}
			res.Git = &gr
			for _, r := range gr.Refused {
				r.Path = GitRefusalPrefix + r.Path
				res.Refused = append(res.Refused, r)
			}
		}
	}

	a := &applier{l: l, wfd: wfd, ufd: ufd, s: s, opt: opt, shapes: map[string]bool{}}
	var failed []string // entries not applied: nothing below them is
	for _, e := range chosen {
		if err := ctx.Err(); err != nil {
			_ = l.save()
			return res, err
		}
		if f := failedAncestor(failed, e.Path); f != "" {
			res.Refused = append(res.Refused, Refusal{Path: e.Path, Reason: RefusedParent, Detail: f + " was not applied"})
			failed = append(failed, e.Path)
			continue
		}
		if reason, detail := a.check(e); reason != "" {
			res.Refused = append(res.Refused, Refusal{Path: e.Path, Reason: reason, Detail: detail})
			failed = append(failed, e.Path)
			continue
		}
		base, ok := l.st.Base[e.Path]
		if !ok {
			res.Refused = append(res.Refused, Refusal{Path: e.Path, Reason: RefusedUnobserved, Detail: "no base was recorded for it (Observe did not run after the command that changed it), so a host change there cannot be ruled out"})
			failed = append(failed, e.Path)
			continue
		}
		err := a.apply(e, base)
		switch {
		case errors.Is(err, errConflict):
			res.Conflicts = append(res.Conflicts, e.Path)
			failed = append(failed, e.Path)
		case err != nil:
			res.Refused = append(res.Refused, Refusal{Path: e.Path, Reason: RefusedHostError, Detail: err.Error()})
			failed = append(failed, e.Path)
		default:
			res.Applied = append(res.Applied, e.Path)
		}
	}
	if err := l.save(); err != nil {
		return res, fmt.Errorf("layer %s: save state: %w", l.dir, err)
	}
	return res, nil
}

func failedAncestor(failed []string, p string) string {
	for _, f := range failed {
		if p != f && under(p, f) {
			return f
		}
	}
	return ""
}

// errConflict: the host's entry is not the base.
var errConflict = errors.New("the host's entry changed since the session's base")

type applier struct {
	l        *Layer
	wfd, ufd int
	s        *scanner
	opt      ApplyOptions
	shapes   map[string]bool // directory -> git-shaped
}

// protectedName reports whether the component c is in the protected set.
// The set binds at any depth, not only the top level where the driver
// enforces it on a live workspace: editors open subdirectories as
// projects (a nested .vscode/tasks.json runs there), direnv loads a
// nested .envrc, agent CLIs read instructions from the directory they
// start in. Letter case is ignored: on a case-insensitive file system
// (a workspace shared with macOS or Windows) .VSCode is .vscode.
func (a *applier) protectedName(c string) bool {
	for _, p := range a.l.st.Policy.Protected {
		if strings.EqualFold(c, p) {
			return true
		}
	}
	return false
}

// check returns why e must not reach the host ("" when it may).
func (a *applier) check(e *entry) (string, string) {
	if e.problem != "" {
		return RefusedOverlayXattr, e.problem
	}
	comps := strings.Split(e.Path, "/")
	for i, c := range comps {
		last := i == len(comps)-1
		if strings.EqualFold(c, ".git") {
			if last && e.upOK && e.Type != TypeDir {
				return RefusedGitShaped, "a .git that is not a directory (a gitfile or a link) makes git read a repository elsewhere"
			}
			if i == 0 {
				return RefusedInsideGit, "the repository is brought by the git import, as objects and refs only; its files are never copied"
			}
			return RefusedInsideGit, "a nested repository's files are never copied: the host's git would run what its config names"
		}
		if a.protectedName(c) {
			return RefusedProtected, fmt.Sprintf("%q is a protected name (tool configuration or instructions that run code or steer an agent)", c)
		}
	}
	// A directory git takes for a repository: refused with everything in
	// it, on either side (what the host has and what the session adds).
	dirs := []string{""}
	for i := range comps[:len(comps)-1] {
		dirs = append(dirs, strings.Join(comps[:i+1], "/"))
	}
	if e.Type == TypeDir {
		dirs = append(dirs, e.Path)
	}
	for _, d := range dirs {
		if a.gitShaped(d) {
			where := d
			if where == "" {
				where = "the workspace's top"
			}
			return RefusedGitShaped, fmt.Sprintf("%s holds HEAD beside objects, refs or commondir: git takes it for a repository and runs what its config names", where)
		}
	}
	if !e.upOK {
		return "", "" // a deletion: nothing of the session's is written
	}
	switch e.up.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return RefusedFIFO, "a named pipe"
	case unix.S_IFSOCK:
		return RefusedSocket, "a unix socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return RefusedDevice, fmt.Sprintf("a device node (%d:%d)", unix.Major(uint64(e.up.Rdev)), unix.Minor(uint64(e.up.Rdev)))
	}
	if e.up.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
		// Not applied without the bits either: a set-id file the session
		// made is a request for privilege; dropping the bits silently
		// would hand the user something other than what they reviewed.
		return RefusedSetID, fmt.Sprintf("mode %04o has the set-user-id or set-group-id bit", uint32(e.up.Mode)&0o7777)
	}
	switch e.up.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		if why := a.linkEscapes(e.Path, e.Target); why != "" {
			return RefusedSymlinkEscape, why
		}
	case unix.S_IFREG:
		if e.up.Nlink > 1 && uint64(a.s.links[uint64(e.up.Ino)]) < uint64(e.up.Nlink) {
			// Every name of an inode the session made is in the upper
			// layer; a link count above them means a name elsewhere.
			return RefusedHardLink, fmt.Sprintf("%d links, %d of them in the layer", e.up.Nlink, a.s.links[uint64(e.up.Ino)])
		}
		if e.up.Size > a.l.st.Policy.MaxFileBytes && !a.opt.AllowLarge {
			return RefusedTooLarge, fmt.Sprintf("%d bytes, over the limit of %d (apply with AllowLarge to bring it)", e.up.Size, a.l.st.Policy.MaxFileBytes)
		}
	}
	return "", ""
}

// linkEscapes says why a symlink target leads out of the workspace ("" if
// it does not). It is resolved lexically from the link's directory: a
// relative target that climbs above the top is refused; an absolute
// target is accepted only when it names a path inside the workspace's
// host path (the session may see the workspace at another path: such a
// link then points elsewhere on the host and is refused, never followed).
// Links already on the host are not the session's and are not judged.
func (a *applier) linkEscapes(p, target string) string {
	if target == "" {
		return "an empty target"
	}
	if strings.HasPrefix(target, "/") {
		t := path.Clean(target)
		ws := filepath.ToSlash(a.l.st.Workspace)
		if !under(t, ws) {
			return fmt.Sprintf("absolute target %q is outside the workspace %s", target, ws)
		}
		return ""
	}
	dir, _ := splitRel(p)
	j := path.Join(dir, target)
	if j == ".." || strings.HasPrefix(j, "../") {
		return fmt.Sprintf("target %q leads out of the workspace", target)
	}
	return ""
}

// gitShaped reports whether the directory d holds HEAD together with
// objects, refs or commondir, counting the host's entries and the
// session's (a name is there if either side has it): strict on purpose,
// so neither a repository the session makes nor one it completes on the
// host slips through.
func (a *applier) gitShaped(d string) bool {
	if v, ok := a.shapes[d]; ok {
		return v
	}
	has := func(name string) bool {
		for _, root := range []int{a.ufd, a.wfd} {
			fd, err := openDirPath(root, d)
			if err != nil {
				continue
			}
			st, err := lstatAt(fd, name)
			unix.Close(fd)
			if err == nil && !isWhiteout(&st) {
				return true
			}
		}
		return false
	}
	v := has("HEAD") && (has("objects") || has("refs") || has("commondir"))
	a.shapes[d] = v
	return v
}

// hostMatches reports whether the host's entry name of pfd (-1: its
// directory is missing) is still the base.
func (a *applier) hostMatches(pfd int, name string, b Base, needTree bool) bool {
	if pfd < 0 {
		return !b.Exists
	}
	st, err := lstatAt(pfd, name)
	if err != nil {
		return errors.Is(err, unix.ENOENT) && !b.Exists
	}
	if !b.Exists {
		return false
	}
	cur := baseOf(&st)
	if cur.Type != b.Type || cur.Mode != b.Mode || cur.Ino != b.Ino {
		return false
	}
	switch cur.Type {
	case TypeDir:
		// A directory is judged by what it is, not by its times (which
		// its children's changes move); when the session deletes or
		// replaces it, by every entry below it.
		if !needTree {
			return true
		}
		if !b.Listed || b.TreeIncomplete {
			// Never listed (Observe did not run after the command that
			// deleted it), or too large to list: not judged unchanged.
			return false
		}
		now, inc := a.l.listTree(pfd, name)
		if inc || len(now) != len(b.Tree) {
			return false
		}
		want := make(map[string]TreeEntry, len(b.Tree))
		for _, t := range b.Tree {
			want[t.Path] = t
		}
		for _, t := range now {
			if want[t.Path] != t {
				return false
			}
		}
		return true
	case TypeSymlink:
		t, err := readlinkAt(pfd, name)
		return err == nil && t == b.Target && cur.CtimeNs == b.CtimeNs
	}
	if cur.Size != b.Size || cur.MtimeNs != b.MtimeNs || cur.CtimeNs != b.CtimeNs {
		return false
	}
	if b.Hash != "" && hashAt(pfd, name) != b.Hash {
		return false
	}
	return true
}

func (a *applier) hook(stage, p string) {
	if a.l.hook != nil {
		a.l.hook(stage, p)
	}
}

// apply brings one entry to the host.
func (a *applier) apply(e *entry, base Base) error {
	dir, name := splitRel(e.Path)
	a.hook("parent", e.Path)
	pfd, err := openDirPath(a.wfd, dir)
	if err != nil {
		if errors.Is(err, unix.ENOENT) && !base.Exists {
			return fmt.Errorf("its directory %q is missing on the host: %w", dir, errConflict)
		}
		// A directory on the way replaced by a link (ELOOP, ENOTDIR) or
		// removed: never followed, nothing written.
		return fmt.Errorf("open the host directory %q without following links: %w", dir, err)
	}
	defer unix.Close(pfd)
	// Deleting or replacing a host directory removes all in it: judged
	// against the listing of all in it.
	needTree := !e.upOK || e.Kind == KindTypeChanged
	if !a.hostMatches(pfd, name, base, needTree) {
		return errConflict
	}
	a.hook("write", e.Path)
	if err := a.write(pfd, e, base); err != nil {
		return err
	}
	// The host's entry is now the session's: the base of later applies.
	if e.upOK {
		a.l.st.Base[e.Path] = a.l.recordBase(pfd, name, false)
	} else {
		a.l.st.Base[e.Path] = Base{}
	}
	return nil
}

func (a *applier) write(pfd int, e *entry, base Base) error {
	_, name := splitRel(e.Path)
	if !e.upOK {
		return removeTreeAt(pfd, name)
	}
	if e.Kind == KindTypeChanged {
		if err := removeTreeAt(pfd, name); err != nil {
			return fmt.Errorf("remove the host's %s: %w", e.OldType, err)
		}
		base = Base{}
	}
	perm := uint32(e.up.Mode) & 0o1777 // set-id bits were refused above
	switch e.up.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if base.Exists {
			return chmodDirAt(pfd, name, perm)
		}
		if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
			if errors.Is(err, unix.EEXIST) {
				return errConflict
			}
			return err
		}
		return chmodDirAt(pfd, name, perm)
	case unix.S_IFLNK:
		tmp := tempName()
		if err := unix.Symlinkat(e.Target, pfd, tmp); err != nil {
			return err
		}
		return a.rename(pfd, tmp, name, base.Exists)
	case unix.S_IFREG:
		return a.copyFile(pfd, e, perm, base.Exists)
	}
	return fmt.Errorf("cannot apply a %s", e.Type)
}

// copyFile writes the session's file e into a temporary file of the host
// directory pfd and renames it over the target.
func (a *applier) copyFile(pfd int, e *entry, perm uint32, replace bool) error {
	dir, name := splitRel(e.Path)
	udfd, err := openDirPath(a.ufd, dir)
	if err != nil {
		return fmt.Errorf("open the upper directory %q: %w", dir, err)
	}
	src, st, err := openFileAt(udfd, name)
	unix.Close(udfd)
	if err != nil {
		return fmt.Errorf("open the session's file: %w", err)
	}
	defer src.Close()
	if st.Size > a.l.st.Policy.MaxFileBytes && !a.opt.AllowLarge {
		return fmt.Errorf("grew to %d bytes since it was listed, over the limit", st.Size)
	}
	// The mode written is the one checked (the session may still change
	// the upper entry): never a set-id bit. The file is not fsynced, as
	// git does not fsync the files its checkout writes: the rename makes
	// it appear whole or not at all to every reader; durability across a
	// crash is the file system's (ext4 flushes a file renamed over
	// another). An fsync per file cost seconds per hundred files on a
	// busy disk here, and a syncfs flushes everyone's writes.
	tmp := tempName()
	dfd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	dst := newFile(dfd, tmp)
	var r io.Reader = src
	limit := a.l.st.Policy.MaxFileBytes
	if !a.opt.AllowLarge {
		r = io.LimitReader(src, limit+1)
	}
	n, err := io.Copy(dst, r)
	if err == nil && !a.opt.AllowLarge && n > limit {
		err = fmt.Errorf("grew over the limit of %d bytes while being copied", limit)
	}
	if err == nil {
		err = unix.Fchmod(dfd, perm)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = unix.Unlinkat(pfd, tmp, 0)
		return err
	}
	return a.rename(pfd, tmp, name, replace)
}

// rename moves tmp over name in pfd; when the host had no entry there, it
// must still have none (RENAME_NOREPLACE: one made since is a conflict).
func (a *applier) rename(pfd int, tmp, name string, replace bool) error {
	var err error
	if replace {
		err = unix.Renameat(pfd, tmp, pfd, name)
	} else {
		err = unix.Renameat2(pfd, tmp, pfd, name, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EEXIST) {
			err = errConflict
		}
	}
	if err != nil {
		_ = unix.Unlinkat(pfd, tmp, 0)
	}
	return err
}

// tempName names a temporary entry of an apply (in the target's own
// directory, so the rename is atomic).
func tempName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return ".aleph-apply-" + hex.EncodeToString(b)
}
