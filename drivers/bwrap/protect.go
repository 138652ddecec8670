package bwrap

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Protected entries: the design.
//
// A protected entry is a path that host tools trust: the top-level set
// (driverapi.DefaultProtectedEntries, or the list in the profile request) in
// the workspace and in every fs_write grant, every .git found below them,
// and <path>/.git for every submodule an index records. Inside the sandbox
// an existing protected entry is read-only and cannot be removed, renamed
// or replaced; a missing one cannot be created.
//
// Existing entries are bound read-only onto themselves: a mount point can
// be neither written through, nor unlinked, nor renamed (EBUSY). The
// directories between a grant root and a nested entry (sub for sub/.git)
// are bound read-write onto themselves ("anchors"): otherwise `mv sub x &&
// mkdir sub` would carry the read-only mount away and leave sub/.git free
// to be created. A gitfile is a regular file and is protected the same way.
//
// Missing entries are the hard part. Nothing can be mounted on a name that
// does not exist, and every name created under the workspace bind is created
// on the host: bwrap itself makes the mount point on the host when told to
// bind onto a missing path. Landlock cannot name a file that does not exist
// (its rules attach to existing inodes; refusing creation in the parent
// directory would refuse every new top-level file), and seccomp sees path
// pointers, not paths (a user-notification supervisor could read them, but
// only racily). So a missing entry gets a mount point on the host: an empty,
// read-only regular file, and bwrap binds /dev/null (read-only, nodev) onto
// it. Inside, the entry is then a character device: neither a directory
// (go's VCS stamping only takes a .git directory for a repository) nor a
// regular file (git reads a regular .git as a gitfile and dies on an empty
// one; a device it skips, and goes on looking upwards, finding nothing), so
// a workspace that is not a repository is not taken for one; mkdir, creat,
// symlink and rename onto it fail (EEXIST, EBUSY), and nothing can be put
// below it (ENOTDIR).
//
// The host mount point must not outlive the command, whatever ends it
// (protect_linux.go): it is removed after the command on every path the
// driver survives, and each is journaled (in the driver's state directory,
// not in the workspace) before it is created, so that the next driver start
// removes what a killed driver left. While the command runs it is visible on
// the host as an empty, read-only file; that is the price of having no other
// way to block the name.

// protectTarget is one protected path of one command.
type protectTarget struct {
	path string // absolute host path
	top  bool   // a top-level entry of a grant root (else found by the scan)
}

// protection is what one command's sandbox binds for its protected
// entries, computed before every run (the tree changes between commands).
type protection struct {
	existing []string // bound read-only onto themselves (pinned)
	missing  []string // placeholders on the host, /dev/null bound onto them
	anchors  []string // directories bound read-write onto themselves
}

// protMount is one mount of a protection: its destination and bwrap args.
type protMount struct {
	path string
	args []string
}

// mounts are the bwrap mounts for pr, anchors first; BwrapFlags sorts them
// with the others, parents before children. bind renders a bind of a host
// path (pinned where pinPaths opened it).
func (pr *protection) mounts(bind func(ro bool, src, dest string) []string) []protMount {
	if pr == nil {
		return nil
	}
	var ms []protMount
	for _, a := range pr.anchors {
		ms = append(ms, protMount{a, bind(false, a, a)})
	}
	for _, e := range pr.existing {
		ms = append(ms, protMount{e, bind(true, e, e)})
	}
	for _, p := range pr.missing {
		ms = append(ms, protMount{p, []string{"--ro-bind", "/dev/null", p}})
	}
	return ms
}

// pinned are the host paths of pr that pinPaths opens.
func (pr *protection) pinned() []string {
	if pr == nil {
		return nil
	}
	return append(append([]string{}, pr.anchors...), pr.existing...)
}

// Scan bounds. A tree the scan cannot finish within them is refused, not
// half protected.
const (
	defaultProtectedScanMaxEntries = 500_000
	defaultProtectedScanTimeout    = 3 * time.Second
	// maxIndexBytes bounds one git index read for gitlinks.
	maxIndexBytes = 512 << 20
	// maxGitfileBytes bounds a gitfile ("gitdir: ..." line).
	maxGitfileBytes = 4096
)

// scanLimitError: the protected-entry scan did not finish within its bounds.
type scanLimitError struct {
	Root   string
	Reason string
}

func (e *scanLimitError) Error() string {
	return fmt.Sprintf("bwrap driver: the search for .git entries under %s %s: grant a smaller tree, or raise "+
		"sandbox.linux.protected_scan_max_entries / protected_scan_timeout_ms", e.Root, e.Reason)
}

// scanLimits bound one command's scan.
type scanLimits struct {
	maxEntries int
	deadline   time.Time
}

// scanner collects the protected targets of a plan.
type scanner struct {
	lim     scanLimits
	visited int
	roots   []string
	topSet  []string
	targets map[string]protectTarget
	repos   map[string]bool // git dirs whose index was read
	// note, when set, is told every path whose state the scan's result
	// depends on, before the scan reads it: each directory it lists, each
	// .git it looks at (gitfile: a regular .git file, whose content names
	// a git directory through links the scan resolves) and each git index
	// it reads. A session sandbox keeps their identities to tell, per
	// command, that a new scan would find the same targets
	// (sessionprotect_linux.go).
	note func(path string, gitfile bool)
}

// scanProtected finds every protected path of plan p: the top-level set in
// the workspace and each fs_write grant, every .git below them (a directory
// or a gitfile, not descended into), the git directory a gitfile names when
// it lies in a writable root, and <path>/.git for every gitlink recorded in
// each repository's index (or the first missing directory on the way there).
func scanProtected(p launchPlan, lim scanLimits) ([]protectTarget, error) {
	return scanProtectedNoting(p, lim, nil)
}

// scanProtectedNoting is scanProtected telling note what it depends on
// (scanner.note).
func scanProtectedNoting(p launchPlan, lim scanLimits, note func(path string, gitfile bool)) ([]protectTarget, error) {
	s := &scanner{lim: lim, topSet: p.Protected, targets: map[string]protectTarget{}, repos: map[string]bool{}, note: note}
	s.roots = append([]string{p.Workspace}, p.FSWrite...)
	if p.layered != nil {
		// A layered command's workspace is its overlay: nothing in it is
		// the host's until apply, which refuses the protected set
		// (layered_linux.go).
		s.roots = slices.Clone(p.FSWrite)
	}
	for _, r := range s.roots {
		for _, name := range p.Protected {
			s.targets[filepath.Join(r, name)] = protectTarget{path: filepath.Join(r, name), top: true}
		}
	}
	for _, r := range s.roots {
		if err := s.walk(r); err != nil {
			return nil, err
		}
		if err := s.repo(r, filepath.Join(r, ".git")); err != nil {
			return nil, err
		}
	}
	out := make([]protectTarget, 0, len(s.targets))
	for _, t := range s.targets {
		if !s.insideOther(t.path) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

func (s *scanner) tick(root string) error {
	s.visited++
	if s.visited > s.lim.maxEntries {
		return &scanLimitError{Root: root, Reason: fmt.Sprintf("visited more than %d entries", s.lim.maxEntries)}
	}
	if s.visited&255 == 0 && !s.lim.deadline.IsZero() && time.Now().After(s.lim.deadline) {
		return &scanLimitError{Root: root, Reason: "did not finish in time"}
	}
	return nil
}

// walk visits root's tree without following symlinks, reading directories
// without a stat per entry (the type comes from getdents).
func (s *scanner) walk(root string) error {
	stack := []string{root}
	for len(stack) > 0 {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s.note != nil {
			s.note(dir, false)
		}
		f, err := os.Open(dir)
		if err != nil {
			// Unreadable to the driver: the sandbox (same uid or fewer
			// rights) cannot read it either, nor find a repository there.
			continue
		}
		ents, err := f.ReadDir(-1)
		f.Close()
		if err != nil && len(ents) == 0 {
			continue
		}
		for _, e := range ents {
			if err := s.tick(root); err != nil {
				return err
			}
			name := e.Name()
			path := filepath.Join(dir, name)
			if dir == root && s.isTop(name) {
				continue // protected wholesale
			}
			if name == ".git" {
				if dir != root {
					s.targets[path] = protectTarget{path: path}
					if err := s.repo(dir, path); err != nil {
						return err
					}
				}
				continue // never descended into
			}
			if e.Type().IsDir() {
				stack = append(stack, path)
			}
		}
	}
	return nil
}

func (s *scanner) isTop(name string) bool {
	for _, n := range s.topSet {
		if n == name {
			return true
		}
	}
	return false
}

// repo reads the repository whose worktree is work and whose .git entry is
// dotgit: the git directory it names, and the gitlinks of its index.
func (s *scanner) repo(work, dotgit string) error {
	if s.note != nil {
		s.note(dotgit, false)
	}
	fi, err := os.Lstat(dotgit)
	if err != nil || fi.Mode()&fs.ModeSymlink != 0 {
		return nil // missing (a placeholder will cover it) or refused later
	}
	gitdir := dotgit
	if fi.Mode().IsRegular() {
		gitdir = readGitfile(dotgit)
		if gitdir == "" {
			return nil // an empty or foreign file (a placeholder): noted above
		}
		if s.note != nil {
			s.note(dotgit, true)
		}
		// A git directory named by a gitfile and lying in a writable root
		// is as dangerous as a .git directory (its config runs code).
		if real, err := filepath.EvalSymlinks(gitdir); err == nil {
			gitdir = real
			if s.inRoots(real) && !s.covered(real) {
				s.targets[real] = protectTarget{path: real}
			}
		}
	} else if !fi.IsDir() {
		return nil
	}
	if s.repos[gitdir] {
		return nil
	}
	s.repos[gitdir] = true
	if s.note != nil {
		s.note(gitdir, false)
		s.note(filepath.Join(gitdir, "index"), false)
		shared, _ := filepath.Glob(filepath.Join(gitdir, "sharedindex.*"))
		for _, f := range shared {
			s.note(f, false)
		}
	}
	links, err := indexGitlinks(gitdir, s.lim.deadline)
	if err != nil {
		var sl *scanLimitError
		if errors.As(err, &sl) {
			sl.Root = work
			return sl
		}
		return &driverapi.InvalidSpecError{Field: "workspace", Reason: fmt.Sprintf(
			"cannot read the git index of %s to find its submodules: %v (fix or remove the index)", work, err)}
	}
	for _, l := range links {
		if t, ok := firstMissing(work, filepath.Join(l, ".git")); ok {
			s.targets[t] = protectTarget{path: t}
		}
	}
	return nil
}

// firstMissing is the path to protect for rel below work: rel itself when
// its parent directories exist, else the first missing one (creating it is
// the only way to create rel). A symlink or non-directory on the way stops
// it: the target is then that entry, refused or bound as it is.
func firstMissing(work, rel string) (string, bool) {
	cur := work
	parts := strings.Split(rel, "/")
	for i, part := range parts {
		cur = filepath.Join(cur, part)
		if i == len(parts)-1 {
			return cur, true
		}
		fi, err := os.Lstat(cur)
		if err != nil || !fi.IsDir() {
			return cur, true
		}
	}
	return cur, true
}

func (s *scanner) inRoots(p string) bool {
	for _, r := range s.roots {
		if driverapi.PathWithin(p, r) {
			return true
		}
	}
	return false
}

// insideOther: p lies strictly within another target (read-only already).
func (s *scanner) insideOther(p string) bool {
	for t := range s.targets {
		if t != p && driverapi.PathWithin(p, t) {
			return true
		}
	}
	return false
}

// covered: p lies within a target already (read-only wholesale).
func (s *scanner) covered(p string) bool {
	for t := range s.targets {
		if driverapi.PathWithin(p, t) {
			return true
		}
	}
	return false
}

// readGitfile returns the absolute git directory a gitfile names, or "".
func readGitfile(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxGitfileBytes))
	line, _, _ := strings.Cut(string(b), "\n")
	dir, ok := strings.CutPrefix(strings.TrimRight(line, "\r"), "gitdir: ")
	if !ok || dir == "" || strings.IndexByte(dir, 0) >= 0 {
		return ""
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(filepath.Dir(path), dir)
	}
	return filepath.Clean(dir)
}

// indexGitlinks returns the gitlink (submodule, mode 160000) paths recorded
// in gitdir's index, and in its shared index when the index is split.
// Hashes of both lengths (SHA-1, SHA-256) are tried: an index parsed with
// the wrong one fails its structure checks at the first entry.
func indexGitlinks(gitdir string, deadline time.Time) ([]string, error) {
	path := filepath.Join(gitdir, "index")
	links, shared, err := parseIndexFile(path, 20, deadline)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		var sl *scanLimitError
		if errors.As(err, &sl) {
			return nil, err
		}
		links, shared, err = parseIndexFile(path, 32, deadline)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if shared != "" {
		more, _, err := parseIndexFile(filepath.Join(gitdir, "sharedindex."+shared), len(shared)/2, deadline)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		links = append(links, more...)
	}
	return links, nil
}

func parseIndexFile(path string, hashLen int, deadline time.Time) ([]string, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	if !fi.Mode().IsRegular() {
		return nil, "", fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > maxIndexBytes {
		return nil, "", fmt.Errorf("%s is larger than %d bytes", path, maxIndexBytes)
	}
	return parseIndex(bufio.NewReaderSize(io.LimitReader(f, maxIndexBytes), 64<<10), fi.Size(), hashLen, deadline)
}

// errIndex is a malformed index.
var errIndex = errors.New("malformed git index")

// parseIndex reads a git index (versions 2 to 4) of size bytes from r and
// returns the paths of its gitlink entries and, for a split index, the hex
// name of its shared index. Only what finding gitlinks needs is checked:
// the header, each entry's layout, the name encoding; not the checksum.
func parseIndex(r *bufio.Reader, size int64, hashLen int, deadline time.Time) ([]string, string, error) {
	var hdr [12]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, "", fmt.Errorf("%w: short header", errIndex)
	}
	if string(hdr[:4]) != "DIRC" {
		return nil, "", fmt.Errorf("%w: bad signature", errIndex)
	}
	version := binary.BigEndian.Uint32(hdr[4:8])
	if version < 2 || version > 4 {
		return nil, "", fmt.Errorf("%w: version %d", errIndex, version)
	}
	count := int64(binary.BigEndian.Uint32(hdr[8:12]))
	fixed := 40 + hashLen + 2
	if count*int64(fixed) > size {
		return nil, "", fmt.Errorf("%w: %d entries cannot fit in %d bytes", errIndex, count, size)
	}
	var links []string
	var prev []byte
	read := int64(12)
	buf := make([]byte, fixed+2)
	for i := int64(0); i < count; i++ {
		if i&4095 == 4095 && !deadline.IsZero() && time.Now().After(deadline) {
			return nil, "", &scanLimitError{Reason: "did not finish reading a git index in time"}
		}
		if _, err := io.ReadFull(r, buf[:fixed]); err != nil {
			return nil, "", fmt.Errorf("%w: entry %d truncated", errIndex, i)
		}
		n := int64(fixed)
		mode := binary.BigEndian.Uint32(buf[24:28])
		flags := binary.BigEndian.Uint16(buf[fixed-2 : fixed])
		if flags&0x4000 != 0 {
			if version < 3 {
				return nil, "", fmt.Errorf("%w: extended flags in version 2", errIndex)
			}
			if _, err := io.ReadFull(r, buf[fixed:fixed+2]); err != nil {
				return nil, "", fmt.Errorf("%w: entry %d truncated", errIndex, i)
			}
			n += 2
		}
		nameLen := int(flags & 0xfff)
		var name []byte
		if version == 4 {
			strip, k, err := readIndexVarint(r)
			if err != nil || strip > uint64(len(prev)) {
				return nil, "", fmt.Errorf("%w: entry %d: bad name prefix", errIndex, i)
			}
			n += int64(k)
			suffix, err := r.ReadBytes(0)
			if err != nil || len(suffix) > 4096 {
				return nil, "", fmt.Errorf("%w: entry %d: bad name", errIndex, i)
			}
			n += int64(len(suffix))
			name = append(append([]byte{}, prev[:len(prev)-int(strip)]...), suffix[:len(suffix)-1]...)
		} else {
			raw, err := r.ReadBytes(0)
			if err != nil || len(raw) > 4096 {
				return nil, "", fmt.Errorf("%w: entry %d: bad name", errIndex, i)
			}
			name = raw[:len(raw)-1]
			n += int64(len(raw))
			if nameLen < 0xfff && len(name) != nameLen {
				return nil, "", fmt.Errorf("%w: entry %d: name length %d, flags say %d", errIndex, i, len(name), nameLen)
			}
			// 1 to 8 NUL bytes end the entry at a multiple of 8; one was
			// the name's terminator.
			pad := (8 - n%8) % 8
			for ; pad > 0; pad-- {
				if b, err := r.ReadByte(); err != nil || b != 0 {
					return nil, "", fmt.Errorf("%w: entry %d: bad padding", errIndex, i)
				}
				n++
			}
		}
		if version == 4 && nameLen < 0xfff && len(name) != nameLen {
			return nil, "", fmt.Errorf("%w: entry %d: name length %d, flags say %d", errIndex, i, len(name), nameLen)
		}
		read += n
		prev = name
		if mode&0o170000 == 0o160000 {
			if p, ok := cleanIndexPath(string(name)); ok {
				links = append(links, p)
			}
		}
	}
	// Extensions follow until the trailing checksum; only "link" (split
	// index) matters: its first hashLen bytes name the shared index.
	shared := ""
	for size-read > int64(hashLen) {
		var eh [8]byte
		if _, err := io.ReadFull(r, eh[:]); err != nil {
			break
		}
		read += 8
		el := int64(binary.BigEndian.Uint32(eh[4:8]))
		if el > size-read {
			return nil, "", fmt.Errorf("%w: extension %q overruns the file", errIndex, eh[:4])
		}
		if string(eh[:4]) == "link" && el >= int64(hashLen) {
			h := make([]byte, hashLen)
			if _, err := io.ReadFull(r, h); err != nil {
				break
			}
			if !bytes.Equal(h, make([]byte, hashLen)) {
				shared = hex.EncodeToString(h)
			}
			el -= int64(hashLen)
			read += int64(hashLen)
		}
		if _, err := io.CopyN(io.Discard, r, el); err != nil {
			break
		}
		read += el
	}
	return links, shared, nil
}

// readIndexVarint reads git's offset varint (index v4 name prefixes).
func readIndexVarint(r *bufio.Reader) (uint64, int, error) {
	c, err := r.ReadByte()
	if err != nil {
		return 0, 0, err
	}
	n := 1
	v := uint64(c & 127)
	for c&128 != 0 {
		if n > 9 {
			return 0, n, errIndex
		}
		if c, err = r.ReadByte(); err != nil {
			return 0, n, err
		}
		n++
		v = ((v + 1) << 7) | uint64(c&127)
	}
	return v, n, nil
}

// cleanIndexPath accepts a relative, clean, slash-separated index path
// (git refuses others as well).
func cleanIndexPath(p string) (string, bool) {
	if p == "" || strings.HasPrefix(p, "/") || strings.IndexByte(p, 0) >= 0 {
		return "", false
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." || strings.EqualFold(c, ".git") {
			return "", false
		}
	}
	return p, true
}
