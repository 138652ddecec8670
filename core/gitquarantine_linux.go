//go:build linux

package core

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// gitScanSupported: the scan runs on this system.
const gitScanSupported = true

// markGitScan takes the moment a command starts on root's file system's
// own clock: it sets root's ctime (a chmod to its own mode changes nothing
// but the ctime) and reads it back. Comparing ctimes with the host's wall
// clock instead would need a margin for the kernel's coarse timestamp
// clock and for file systems that keep whole seconds; the file system's
// own reading needs none. When root cannot be chmodded (not its owner),
// the wall clock is used, taken back to a whole two seconds (the coarsest
// ctime a Linux file system keeps) and one more second for the coarse
// clock: a wider window only makes more entries candidates.
func markGitScan(root string) gitMark {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return gitMark{}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && unix.Fchmod(fd, st.Mode&0o7777) == nil && unix.Fstat(fd, &st) == nil {
		return gitMark{sec: int64(st.Ctim.Sec), nsec: int64(st.Ctim.Nsec), ok: true}
	}
	t := time.Now().Truncate(2 * time.Second).Add(-time.Second)
	return gitMark{sec: t.Unix(), nsec: int64(t.Nanosecond()), ok: true}
}

// since reports whether ts is at or after the mark.
func (m gitMark) since(ts unix.Timespec) bool {
	sec, nsec := int64(ts.Sec), int64(ts.Nsec) // int32 fields on 32-bit builds
	return sec > m.sec || sec == m.sec && nsec >= m.nsec
}

type gitScan struct {
	ctx     context.Context
	mark    gitMark
	skip    map[string]bool
	lim     gitScanLimits
	entries int
	res     GitQuarantine
	buf     []byte
	euid    int
}

// errScanStop ends the walk (Incomplete says why).
var errScanStop = errors.New("scan stopped")

func scanGitShapes(ctx context.Context, root string, mark gitMark, skip []string, lim gitScanLimits) *GitQuarantine {
	g := &gitScan{ctx: ctx, mark: mark, skip: map[string]bool{}, lim: lim, buf: make([]byte, 32<<10), euid: os.Geteuid()}
	for _, s := range skip {
		g.skip[s] = true
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		g.res.Incomplete = fmt.Sprintf("the workspace could not be opened: %v", err)
		return &g.res
	}
	if err := g.dir(fd, "", 0); err != nil && g.res.Incomplete == "" {
		g.res.Incomplete = err.Error()
	}
	sort.Strings(g.res.Renamed)
	sort.Strings(g.res.Unreadable)
	return &g.res
}

// dirEntry is one name read from a directory, with its d_type.
type dirEntry struct {
	name string
	typ  uint8
}

// readDir lists the directory fd (getdents64: names and types, no stat).
func (g *gitScan) readDir(fd int) ([]dirEntry, error) {
	var out []dirEntry
	for {
		n, err := unix.Getdents(fd, g.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		for off := 0; off+19 <= n; {
			reclen := int(binary.NativeEndian.Uint16(g.buf[off+16:]))
			if reclen == 0 || off+reclen > n {
				break
			}
			typ := g.buf[off+18]
			nameb := g.buf[off+19 : off+reclen]
			for i, c := range nameb {
				if c == 0 {
					nameb = nameb[:i]
					break
				}
			}
			off += reclen
			name := string(nameb)
			if name == "." || name == ".." {
				continue
			}
			g.entries++
			if g.entries > g.lim.maxEntries {
				g.res.Incomplete = fmt.Sprintf("the workspace holds more than %d entries; the rest was not searched for planted git repositories", g.lim.maxEntries)
				return nil, errScanStop
			}
			out = append(out, dirEntry{name, typ})
		}
	}
}

// dir searches the directory fd (rel from the root; fd is closed here).
func (g *gitScan) dir(fd int, rel string, depth int) error {
	defer unix.Close(fd)
	if err := g.ctx.Err(); err != nil {
		g.res.Incomplete = fmt.Sprintf("the search for planted git repositories ran out of time (%s) after %d directories; the rest was not searched", g.lim.timeout, g.res.Dirs)
		return errScanStop
	}
	g.res.Dirs++
	ents, err := g.readDir(fd)
	if err != nil {
		return err
	}
	has := map[string]bool{}
	var subdirs []string
	dotGit := uint8(0xff)
	for _, e := range ents {
		typ := e.typ
		if typ == unix.DT_UNKNOWN {
			var st unix.Stat_t
			if unix.Fstatat(fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				typ = unix.DT_DIR
			} else {
				typ = unix.DT_REG
			}
		}
		switch e.name {
		case "HEAD", "objects", "refs", "commondir":
			has[e.name] = true
		case ".git":
			dotGit = typ
		}
		if typ == unix.DT_DIR && !(depth == 0 && g.skip[e.name]) {
			subdirs = append(subdirs, e.name)
		}
	}
	g.check(fd, rel, depth, has, dotGit)
	if depth+1 > g.lim.maxDepth && len(subdirs) > 0 {
		g.res.Incomplete = fmt.Sprintf("the workspace nests directories deeper than %d levels (at %s); what lies deeper was not searched for planted git repositories", g.lim.maxDepth, rel)
		return errScanStop
	}
	for _, name := range subdirs {
		cfd, err := g.openDir(fd, rel, name)
		if err != nil {
			continue // gone, or replaced by a non-directory: nothing to search
		}
		if err := g.dir(cfd, path.Join(rel, name), depth+1); err != nil {
			return err
		}
	}
	return nil
}

// check neutralises what makes the directory fd (rel, at depth, holding
// the names in has and a .git of type dotGit, 0xff for none) a repository
// planted since the mark.
func (g *gitScan) check(fd int, rel string, depth int, has map[string]bool, dotGit uint8) {
	// A .git that is not a directory: a gitfile naming a git directory
	// anywhere, or a symlink to one. Git follows either.
	if dotGit != 0xff && dotGit != unix.DT_DIR && !(depth == 0 && g.skip[".git"]) && g.changed(fd, ".git") && !emptyFile(fd, ".git") {
		g.neutralise(fd, rel, ".git")
	}
	switch {
	case has["HEAD"] && (has["objects"] || has["refs"] || has["commondir"]) && g.repoChanged(fd):
		g.neutralise(fd, rel, "HEAD")
	case has["HEAD"] && g.changed(fd, "HEAD") && headLike(fd):
		// A HEAD a git directory would accept, new or changed in a
		// directory that is not git-shaped yet. Left, it would let a
		// repository be planted over two commands: HEAD and config by the
		// first (no objects or refs: no repository, nothing to
		// neutralise), objects and refs by the second (a repository now,
		// but its HEAD and config older than the second's start), or
		// renamed into place, which keeps the directories' birth times. A
		// HEAD neutralised when it appears leaves no directory git can
		// take for a repository later without writing a HEAD again, which
		// is then new.
		g.neutralise(fd, rel, "HEAD")
	}
}

// scanGitDirs checks only the directories rels of root (slash-separated,
// relative, "" for root itself), each without its subdirectories: after
// a write that made one file and the directories above it, only the
// file's directory and the one above it (a hook lies in hooks/) can have
// become, or been changed as, a repository. Each is reached from root by
// descriptors, never following a link.
func scanGitDirs(ctx context.Context, root string, mark gitMark, skip []string, rels []string) *GitQuarantine {
	g := &gitScan{ctx: ctx, mark: mark, skip: map[string]bool{}, lim: defaultGitScanLimits(), buf: make([]byte, 32<<10), euid: os.Geteuid()}
	for _, s := range skip {
		g.skip[s] = true
	}
	for _, rel := range rels {
		fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			g.res.Incomplete = fmt.Sprintf("the workspace could not be opened: %v", err)
			break
		}
		depth, at := 0, ""
		for _, name := range strings.Split(rel, "/") {
			if name == "" || fd < 0 {
				continue
			}
			cfd, err := g.openDir(fd, at, name)
			unix.Close(fd)
			fd, at, depth = cfd, path.Join(at, name), depth+1
			if err != nil {
				fd = -1
			}
		}
		if fd < 0 {
			continue // gone, or not a directory: nothing there to check
		}
		g.res.Dirs++
		ents, err := g.readDir(fd)
		if err == nil {
			has, dotGit := map[string]bool{}, uint8(0xff)
			for _, e := range ents {
				switch e.name {
				case "HEAD", "objects", "refs", "commondir":
					has[e.name] = true
				case ".git":
					dotGit = e.typ
					var st unix.Stat_t
					if dotGit == unix.DT_UNKNOWN && unix.Fstatat(fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
						dotGit = unix.DT_DIR
					}
				}
			}
			g.check(fd, at, depth, has, dotGit)
		}
		unix.Close(fd)
	}
	sort.Strings(g.res.Renamed)
	sort.Strings(g.res.Unreadable)
	return &g.res
}

// openDir opens the subdirectory name of fd without following a symlink.
// A directory the command made unreadable (mode 0100 still lets git in by
// name) is made readable to its owner, when that is this process's user,
// and searched: otherwise a mode would hide a repository from the search.
func (g *gitScan) openDir(fd int, rel, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC | unix.O_NONBLOCK
	cfd, err := unix.Openat(fd, name, flags, 0)
	if !errors.Is(err, unix.EACCES) {
		return cfd, err
	}
	// O_PATH needs no permission on the directory itself; the chmod goes
	// through the descriptor's /proc link, which names the inode opened,
	// never a path a running process could swap.
	pfd, perr := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if perr != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if unix.Fstat(pfd, &st) != nil || int(st.Uid) != g.euid {
		return -1, err
	}
	if unix.Chmod("/proc/self/fd/"+strconv.Itoa(pfd), (st.Mode&0o7777)|0o700) != nil {
		return -1, err
	}
	g.res.Unreadable = append(g.res.Unreadable, path.Join(rel, name))
	return unix.Openat(fd, name, flags, 0)
}

// changed reports whether the entry name of fd (not followed) changed
// since the mark. An entry that cannot be read counts as changed.
func (g *gitScan) changed(fd int, name string) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return !errors.Is(err, unix.ENOENT)
	}
	return g.mark.since(st.Ctim)
}

// repoChanged reports whether what makes the git-shaped directory fd a
// repository that runs programs changed since the mark: its HEAD (new
// means the repository is new), its config files, commondir (which takes
// the config from elsewhere), its hooks directory or any hook in it.
// Other entries (objects, refs, the index) change whenever the host's own
// git works in it and run nothing.
func (g *gitScan) repoChanged(fd int) bool {
	for _, n := range []string{"HEAD", "config", "config.worktree", "commondir", "hooks"} {
		if g.changed(fd, n) {
			return true
		}
	}
	hfd, err := unix.Openat(fd, "hooks", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		// No hooks directory, or not one that can be searched: a hooks
		// entry that is a symlink or a file changed is caught above.
		return errors.Is(err, unix.EACCES)
	}
	defer unix.Close(hfd)
	ents, err := g.readDir(hfd)
	if err != nil {
		return true
	}
	for _, e := range ents {
		if g.changed(hfd, e.name) {
			return true
		}
	}
	return false
}

// neutralise renames the entry name of fd (HEAD or .git) to a name git
// does not look at, never over an existing entry.
func (g *gitScan) neutralise(fd int, rel, name string) {
	from := path.Join(rel, name)
	for i := 0; i < 100; i++ {
		to := name + gitQuarantineSuffix
		if i > 0 {
			to += "." + strconv.Itoa(i)
		}
		err := g.rename(fd, name, to)
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			// A directory the command made read-only: its owner may
			// make it writable again (through the descriptor).
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil && int(st.Uid) == g.euid && unix.Fchmod(fd, (st.Mode&0o7777)|0o700) == nil {
				err = g.rename(fd, name, to)
			}
		}
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
			continue
		}
		if err != nil {
			if !errors.Is(err, unix.ENOENT) {
				g.res.Incomplete = fmt.Sprintf("%s could not be renamed out of git's way: %v", from, err)
			}
			return
		}
		g.res.Renamed = append(g.res.Renamed, from+" -> "+path.Join(rel, to))
		return
	}
	g.res.Incomplete = fmt.Sprintf("%s could not be renamed out of git's way: every quarantine name is taken", from)
}

// rename renames within fd without replacing an existing entry.
func (g *gitScan) rename(fd int, from, to string) error {
	err := unix.Renameat2(fd, from, fd, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// A file system without RENAME_NOREPLACE: check, then rename
		// (the command has ended; a process still running could only
		// make the rename replace its own entry).
		var st unix.Stat_t
		if unix.Fstatat(fd, to, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return unix.EEXIST
		}
		err = unix.Renameat(fd, from, fd, to)
	}
	return err
}

// headLike reports whether the HEAD entry of fd is one git would accept as
// a git directory's HEAD (validate_headref): a symbolic link (git's old
// form), or a regular file that starts "ref: " or with a hexadecimal
// object id. Anything else (a README's "HEAD" of another tool, a
// directory) is left alone. An entry that cannot be read counts as one.
func headLike(fd int) bool {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, "HEAD", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return !errors.Is(err, unix.ENOENT)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return true
	case unix.S_IFREG:
	default:
		return false
	}
	hfd, err := unix.Openat(fd, "HEAD", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return true
	}
	defer unix.Close(hfd)
	var b [64]byte
	n, err := unix.Read(hfd, b[:])
	if err != nil {
		return true
	}
	return looksLikeHeadRef(b[:max(n, 0)])
}

// looksLikeHeadRef: the start of a HEAD file's content is a symbolic ref
// ("ref:", git skips the blanks after it) or an object id (40 hexadecimal
// digits for SHA-1, 64 for SHA-256: the first 40 are checked; git's hex
// parser takes either case).
func looksLikeHeadRef(b []byte) bool {
	if len(b) >= 4 && string(b[:4]) == "ref:" {
		return true
	}
	if len(b) < 40 {
		return false
	}
	for _, c := range b[:40] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// emptyFile reports whether name of fd is an empty regular file: git
// refuses an empty gitfile ("invalid gitfile format") and runs nothing,
// and it is what the Linux driver leaves on the host, while a command
// runs, in place of a missing protected .git below the workspace root (a
// neighbouring command's walk must not rename it from under the driver).
func emptyFile(fd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0
}
