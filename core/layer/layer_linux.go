//go:build linux

package layer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Create makes a layer in dir (which must not exist, or be empty) over the
// workspace: dir/upper and dir/work for the overlay, dir/state with the
// workspace's identity, the git base from g.Snapshot (g may be nil: no git
// import) and the policy. On error nothing is left behind.
func Create(ctx context.Context, dir, workspace string, g GitImporter, p Policy) (*Layer, error) {
	if !filepath.IsAbs(dir) || !filepath.IsAbs(workspace) {
		return nil, &LayerError{Dir: dir, Reason: fmt.Sprintf("the layer directory and the workspace (%s) must be absolute paths", workspace)}
	}
	dir, workspace = filepath.Clean(dir), filepath.Clean(workspace)
	wfd, err := unix.Open(workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &LayerError{Dir: dir, Reason: fmt.Sprintf("the workspace %s cannot be opened as a directory", workspace), Err: err}
	}
	var wst unix.Stat_t
	err = unix.Fstat(wfd, &wst)
	unix.Close(wfd)
	if err != nil {
		return nil, &LayerError{Dir: dir, Reason: "the workspace cannot be read", Err: err}
	}
	// The layer must not lie in the workspace: the session would see its
	// own upper layer through the overlay (and overlayfs refuses an upper
	// inside its lower).
	if rd, err := filepath.EvalSymlinks(filepath.Dir(dir)); err == nil {
		if rw, err := filepath.EvalSymlinks(workspace); err == nil && (under(rd, rw) || under(filepath.Join(rd, filepath.Base(dir)), rw)) {
			return nil, &LayerError{Dir: dir, Reason: fmt.Sprintf("lies inside the workspace %s; keep layers in the data directory", workspace)}
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if !errors.Is(err, os.ErrExist) {
			return nil, &LayerError{Dir: dir, Reason: "cannot be created", Err: err}
		}
		if ents, rerr := os.ReadDir(dir); rerr != nil || len(ents) > 0 {
			return nil, &LayerError{Dir: dir, Reason: "exists and is not empty; give a new directory", Err: rerr}
		}
	}
	l := &Layer{dir: dir, git: g}
	fail := func(reason string, err error) (*Layer, error) {
		_ = removeLayerDir(dir)
		return nil, &LayerError{Dir: dir, Reason: reason, Err: err}
	}
	// The merged root takes the upper root's mode: the workspace's.
	if err := os.Mkdir(filepath.Join(dir, UpperDir), os.FileMode(wst.Mode&0o777)); err != nil {
		return fail("cannot make the upper directory", err)
	}
	if err := os.Chmod(filepath.Join(dir, UpperDir), os.FileMode(wst.Mode&0o777)); err != nil {
		return fail("cannot set the upper directory's mode", err)
	}
	if err := os.Mkdir(filepath.Join(dir, WorkDir), 0o700); err != nil {
		return fail("cannot make the work directory", err)
	}
	if f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_CREATE|os.O_RDWR, 0o600); err != nil {
		return fail("cannot make the lock file", err)
	} else {
		f.Close()
	}
	p = p.withDefaults()
	l.st = state{Version: stateVersion, Workspace: workspace, Dev: uint64(wst.Dev), Ino: uint64(wst.Ino), Policy: p, Base: map[string]Base{}}
	if g != nil {
		base, err := g.Snapshot(ctx, workspace)
		if err != nil {
			return fail("the git snapshot failed", err)
		}
		l.st.Git = base
	}
	if err := l.save(); err != nil {
		return fail("cannot write the state", err)
	}
	return l, nil
}

// Open reads the layer Create made in dir. g is the git importer Apply
// uses (nil: changes to .git are refused with RefusedGitUnavailable).
func Open(dir string, g GitImporter) (*Layer, error) {
	dir = filepath.Clean(dir)
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		return nil, &LayerError{Dir: dir, Reason: "has no readable state (not a layer Create made?)", Err: err}
	}
	l := &Layer{dir: dir, git: g}
	if err := json.Unmarshal(b, &l.st); err != nil {
		return nil, &LayerError{Dir: dir, Reason: "its state is not valid JSON", Err: err}
	}
	if l.st.Version != stateVersion {
		return nil, &LayerError{Dir: dir, Reason: fmt.Sprintf("its state has version %d; this build reads version %d", l.st.Version, stateVersion)}
	}
	if !filepath.IsAbs(l.st.Workspace) {
		return nil, &LayerError{Dir: dir, Reason: "its state names no workspace"}
	}
	l.st.Policy = l.st.Policy.withDefaults()
	if l.st.Base == nil {
		l.st.Base = map[string]Base{}
	}
	return l, nil
}

// save writes the state atomically (a temporary file renamed over it).
func (l *Layer) save() error {
	b, err := json.Marshal(&l.st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(l.dir, StateFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(l.dir, StateFile))
}

// openWorkspace opens the workspace and checks it is the directory the
// layer was made over.
func (l *Layer) openWorkspace() (int, error) {
	fd, err := unix.Open(l.st.Workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &WorkspaceReplacedError{Workspace: l.st.Workspace, Detail: fmt.Sprintf("cannot be opened as a directory (%v)", err)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("workspace %s: %w", l.st.Workspace, err)
	}
	if uint64(st.Dev) != l.st.Dev || uint64(st.Ino) != l.st.Ino {
		unix.Close(fd)
		return -1, &WorkspaceReplacedError{Workspace: l.st.Workspace, Detail: fmt.Sprintf("is another directory now (device %d inode %d, the layer was made over device %d inode %d)", st.Dev, st.Ino, l.st.Dev, l.st.Ino)}
	}
	return fd, nil
}

// openUpper opens the upper layer's root.
func (l *Layer) openUpper() (int, error) {
	fd, err := unix.Open(filepath.Join(l.dir, UpperDir), dirFlags, 0)
	if err != nil {
		return -1, &LayerError{Dir: l.dir, Reason: "its upper directory cannot be opened", Err: err}
	}
	return fd, nil
}

// HoldMounted marks the layer mounted until release is called: whoever
// mounts the overlay holds it (a shared flock on dir/lock, so it works
// across processes and ends with the holder), and Discard refuses with
// ErrLayerMounted meanwhile.
func (l *Layer) HoldMounted() (release func(), err error) {
	f, err := os.OpenFile(filepath.Join(l.dir, LockFile), os.O_RDWR, 0)
	if err != nil {
		return nil, &LayerError{Dir: l.dir, Reason: "its lock file cannot be opened", Err: err}
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("layer %s: lock: %w", l.dir, err)
	}
	return func() { f.Close() }, nil
}

// Discard drops the layer: its directory is removed by descriptor, never
// following a link the session made in its upper layer. The host never saw
// any of it. Refused with ErrLayerMounted while the overlay is mounted or
// a view of it is held (HoldViews).
func (l *Layer) Discard(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(l.dir, LockFile), os.O_RDWR, 0)
	if err == nil {
		defer f.Close()
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			if errors.Is(err, unix.EWOULDBLOCK) {
				return fmt.Errorf("layer %s: %w", l.dir, ErrLayerMounted)
			}
			return fmt.Errorf("layer %s: lock: %w", l.dir, err)
		}
	}
	// An overlay of the layer may outlive its mount while a view of it is
	// open (HoldViews): that counts as mounted too.
	// Fails closed as the lock above does: a views lock that cannot be
	// taken cannot show that no view is open.
	w, err := os.OpenFile(filepath.Join(l.dir, WorkDir), os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case err == nil:
		defer w.Close()
		if err := unix.Flock(int(w.Fd()), unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("layer %s: %w (a view of its overlay is open)", l.dir, ErrLayerMounted)
		} else if err != nil {
			return fmt.Errorf("layer %s: views lock: %w", l.dir, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("layer %s: views lock: %w", l.dir, err)
	}
	if err := removeLayerDir(l.dir); err != nil {
		return fmt.Errorf("discard layer %s: %w", l.dir, err)
	}
	return nil
}

// removeLayerDir removes dir (a host path of the data directory) and all
// in it by descriptor.
func removeLayerDir(dir string) error {
	pfd, err := unix.Open(filepath.Dir(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return removeTreeAt(pfd, filepath.Base(dir))
}

// Observe records, for every entry of the upper layer not recorded yet,
// the host's entry at its path now: the base a conflict is judged against
// ("a host file changed since the session read it"). Call it after each
// command of the session. Its cost grows with the upper layer, not the
// workspace.
func (l *Layer) Observe(ctx context.Context) error {
	wfd, err := l.openWorkspace()
	if err != nil {
		return err
	}
	defer unix.Close(wfd)
	ufd, err := l.openUpper()
	if err != nil {
		return err
	}
	defer unix.Close(ufd)
	added := false
	s := l.newScanner(ctx)
	s.visit = func(e *entry, lowParent int) {
		if e.gitTop {
			return
		}
		tree := e.Kind == KindDeleted || e.Kind == KindTypeChanged
		if b, ok := l.st.Base[e.Path]; ok {
			// A host directory first seen as the parent of the session's
			// changes (no listing) that the session has now deleted or
			// replaced: its listing is taken now, so that deleting it is
			// judged against every entry in it from here on.
			if tree && b.Exists && b.Type == TypeDir && !b.Listed && lowParent >= 0 {
				b.Tree, b.TreeIncomplete = l.listTree(lowParent, e.name)
				b.Listed = true
				l.st.Base[e.Path] = b
				added = true
			}
			return
		}
		l.st.Base[e.Path] = l.recordBase(lowParent, e.name, tree)
		added = true
	}
	if err := s.run(ufd, wfd); err != nil {
		return err
	}
	if !added {
		return nil
	}
	if err := l.save(); err != nil {
		return fmt.Errorf("layer %s: save state: %w", l.dir, err)
	}
	return nil
}

// recordBase stats the host's entry name of the directory lowParent (-1:
// the directory does not exist on the host).
func (l *Layer) recordBase(lowParent int, name string, tree bool) Base {
	if lowParent < 0 {
		return Base{}
	}
	st, err := lstatAt(lowParent, name)
	if err != nil {
		return Base{}
	}
	b := baseOf(&st)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if st.Size <= l.st.Policy.HashBytes {
			b.Hash = hashAt(lowParent, name)
		}
	case unix.S_IFLNK:
		b.Target, _ = readlinkAt(lowParent, name)
	case unix.S_IFDIR:
		if tree {
			b.Tree, b.TreeIncomplete = l.listTree(lowParent, name)
			b.Listed = true
		}
	}
	return b
}

func baseOf(st *unix.Stat_t) Base {
	return Base{Exists: true, Type: typeOf(st), Mode: uint32(st.Mode) & 0o7777, Size: st.Size, MtimeNs: nsec(st.Mtim), CtimeNs: nsec(st.Ctim), Ino: uint64(st.Ino)}
}

// hashAt is the SHA-256 of the regular file name of fd ("" when it cannot
// be read: the stat alone then judges it).
func hashAt(fd int, name string) string {
	f, _, err := openFileAt(fd, name)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// listTree lists the host directory name of fd, bounded.
func (l *Layer) listTree(fd int, name string) ([]TreeEntry, bool) {
	var out []TreeEntry
	incomplete := false
	var walk func(dfd int, rel string)
	walk = func(dfd int, rel string) {
		ents, err := readDirFd(dfd)
		if err != nil {
			incomplete = true
			return
		}
		for _, e := range ents {
			if len(out) >= l.st.Policy.MaxTreeEntries {
				incomplete = true
				return
			}
			st, err := lstatAt(dfd, e.name)
			if err != nil {
				incomplete = true
				continue
			}
			p := e.name
			if rel != "" {
				p = rel + "/" + e.name
			}
			out = append(out, treeEntryOf(p, &st))
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				cfd, err := openDirAt(dfd, e.name)
				if err != nil {
					incomplete = true
					continue
				}
				walk(cfd, p)
				unix.Close(cfd)
			}
		}
	}
	dfd, err := openDirAt(fd, name)
	if err != nil {
		return nil, true
	}
	defer unix.Close(dfd)
	walk(dfd, "")
	return out, incomplete
}

func treeEntryOf(p string, st *unix.Stat_t) TreeEntry {
	te := TreeEntry{Path: p, Type: typeOf(st), Mode: uint32(st.Mode) & 0o7777, MtimeNs: nsec(st.Mtim), CtimeNs: nsec(st.Ctim), Ino: uint64(st.Ino)}
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		te.Size = st.Size
	}
	return te
}

// Changes lists what the session changed, sorted by path. It reads the
// upper layer (and, for each of its entries, the host's entry at the same
// path): its cost grows with the changes, not the workspace. A copied-up
// file whose content and mode equal the host's is not a change; the
// top-level .git is one entry when anything in it changed (the git import
// brings it, see GitImporter).
func (l *Layer) Changes(ctx context.Context) ([]Change, error) {
	ents, err := l.scan(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Change, 0, len(ents))
	for _, e := range ents {
		out = append(out, e.Change)
	}
	return out, nil
}

// scan reads the changed entries (sorted).
func (l *Layer) scan(ctx context.Context) ([]*entry, error) {
	wfd, err := l.openWorkspace()
	if err != nil {
		return nil, err
	}
	defer unix.Close(wfd)
	ufd, err := l.openUpper()
	if err != nil {
		return nil, err
	}
	defer unix.Close(ufd)
	s := l.newScanner(ctx)
	if err := s.run(ufd, wfd); err != nil {
		return nil, err
	}
	return s.changed, nil
}

// isGitPath: the top-level .git or inside it.
func isGitPath(p string) bool { return p == ".git" || strings.HasPrefix(p, ".git/") }
