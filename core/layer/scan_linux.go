//go:build linux

package layer

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// entry is one entry of the upper layer (or a host entry an opaque
// directory hides), compared with the host's entry at its path.
type entry struct {
	Change
	name    string
	changed bool
	up      unix.Stat_t // the upper entry (not for a deletion)
	upOK    bool
	// problem: the upper entry carries overlayfs metadata this engine
	// does not read (RefusedOverlayXattr says why).
	problem string
	// gitTop: the top-level .git directory, collapsed into one entry.
	gitTop bool
}

// scanner walks the upper layer beside the host's tree.
type scanner struct {
	ctx     context.Context
	own     string // this mount's xattr prefix for overlayfs markers
	foreign string
	changed []*entry
	// links counts, per inode, the names of a regular upper file with
	// more than one link found in the upper layer.
	links map[uint64]int
	// visit, when set, sees every upper entry (and hidden host entry)
	// with the host directory holding its path (-1: none).
	visit func(e *entry, lowParent int)
	// ba, bb are the buffers of content comparisons.
	ba, bb []byte
}

func (l *Layer) newScanner(ctx context.Context) *scanner {
	s := &scanner{ctx: ctx, own: "trusted.overlay.", foreign: "user.overlay.", links: map[uint64]int{}}
	if l.st.Policy.UserNS {
		s.own, s.foreign = s.foreign, s.own
	}
	return s
}

func (s *scanner) run(ufd, wfd int) error {
	if err := s.dir(ufd, wfd, "", false, 0); err != nil {
		return err
	}
	sort.Slice(s.changed, func(i, j int) bool { return s.changed[i].Path < s.changed[j].Path })
	return nil
}

// maxDepth bounds the walk (the upper layer is the session's to shape).
const maxDepth = 4096

// markers reads the overlayfs xattrs of the upper entry name of fd: the
// directory's opacity, and a problem when it carries markers this engine
// does not read (redirect, metacopy, xattr whiteouts, the "x" opacity of
// directories holding xattr whiteouts) or markers of the other namespace
// (a command can write user.overlay.* through a mount that uses
// trusted.overlay.*: they mean nothing to that mount and must not be read
// as if they did).
func (s *scanner) markers(fd int, name string, isDir bool) (opaque bool, problem string) {
	names, err := listXattrs(fd, name)
	if err != nil {
		return false, fmt.Sprintf("its xattrs cannot be read: %v", err)
	}
	for _, x := range names {
		switch {
		case strings.HasPrefix(x, s.foreign):
			return false, fmt.Sprintf("carries %s, an overlayfs marker this mount does not use", x)
		case !strings.HasPrefix(x, s.own):
		case x == s.own+"opaque":
			v, _ := getXattr(fd, name, x)
			if !isDir || v != "y" {
				return false, fmt.Sprintf("carries %s=%q (only \"y\" on a directory is read)", x, v)
			}
			opaque = true
		case x == s.own+"redirect", x == s.own+"metacopy", x == s.own+"whiteout", x == s.own+"whiteouts":
			return false, fmt.Sprintf("carries %s, which this engine does not read (the overlay must be mounted with redirect_dir=nofollow,metacopy=off)", x)
		}
	}
	return opaque, ""
}

// dir compares the upper directory ufd with the host's directory lfd (-1:
// none) at rel. hidden: the host's entries here are hidden from the
// session (this directory or one above it is opaque).
func (s *scanner) dir(ufd, lfd int, rel string, hidden bool, depth int) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	if depth > maxDepth {
		return fmt.Errorf("upper layer nests deeper than %d levels at %s", maxDepth, rel)
	}
	ents, err := readDirFd(ufd)
	if err != nil {
		return fmt.Errorf("read upper %q: %w", rel, err)
	}
	seen := make(map[string]bool, len(ents))
	for _, de := range ents {
		seen[de.name] = true
		p := de.name
		if rel != "" {
			p = rel + "/" + de.name
		}
		up, err := lstatAt(ufd, de.name)
		if err != nil {
			continue // gone since the listing
		}
		e := &entry{Change: Change{Path: p}, name: de.name, up: up, upOK: true}
		var low unix.Stat_t
		lowOK := false
		if lfd >= 0 {
			if st, err := lstatAt(lfd, de.name); err == nil {
				low, lowOK = st, true
			}
		}
		if lowOK {
			e.OldType, e.OldMode = typeOf(&low), uint32(low.Mode)&0o7777
		}
		if isWhiteout(&up) {
			if !lowOK {
				continue // a whiteout over nothing hides nothing
			}
			e.upOK = false
			e.Kind, e.changed = KindDeleted, true
			s.add(e, lfd)
			continue
		}
		e.Type, e.Mode = typeOf(&up), uint32(up.Mode)&0o7777
		isDir := up.Mode&unix.S_IFMT == unix.S_IFDIR
		opaque, problem := s.markers(ufd, de.name, isDir)
		e.problem = problem
		switch {
		case !lowOK:
			e.Kind, e.changed = KindAdded, true
		case e.Type != e.OldType:
			e.Kind, e.changed = KindTypeChanged, true
		case problem != "":
			e.Kind, e.changed = KindModified, true
		}
		if up.Mode&unix.S_IFMT == unix.S_IFREG {
			e.Size = up.Size
			if up.Nlink > 1 {
				s.links[uint64(up.Ino)]++
			}
		}
		if up.Mode&unix.S_IFMT == unix.S_IFLNK {
			e.Target, _ = readlinkAt(ufd, de.name)
		}
		if !isDir {
			if !e.changed && s.differs(ufd, lfd, de.name, &up, &low, e.Target) {
				e.Kind, e.changed = KindModified, true
			}
			s.add(e, lfd)
			continue
		}
		// A directory.
		if !e.changed && (e.Mode != e.OldMode || opaque) {
			// An opaque directory over a host directory: the session
			// removed it and made a new one; its mode may equal the
			// host's, and what it hides is listed below.
			if e.Mode != e.OldMode {
				e.Kind, e.changed = KindModified, true
			}
		}
		if depth == 0 && de.name == ".git" && problem == "" {
			// The repository: the git import reads it as data; one entry
			// says it changed.
			e.gitTop = true
			if !e.changed {
				cfd, err := openDirAt(ufd, de.name)
				if err == nil {
					if sub, err := readDirFd(cfd); err != nil || len(sub) > 0 {
						e.Kind, e.changed = KindModified, true
					}
					unix.Close(cfd)
				}
			}
			s.add(e, lfd)
			continue
		}
		s.add(e, lfd)
		cfd, err := openDirAt(ufd, de.name)
		if err != nil {
			continue // replaced since the stat; the next scan sees it
		}
		clfd := -1
		if lowOK && e.OldType == TypeDir {
			if fd, err := openDirAt(lfd, de.name); err == nil {
				clfd = fd
			}
		}
		err = s.dir(cfd, clfd, p, hidden || opaque, depth+1)
		unix.Close(cfd)
		if clfd >= 0 {
			unix.Close(clfd)
		}
		if err != nil {
			return err
		}
	}
	if hidden && lfd >= 0 {
		// The host's entries the session does not see here: deleted.
		lents, err := readDirFd(lfd)
		if err != nil {
			return fmt.Errorf("read host %q: %w", rel, err)
		}
		for _, de := range lents {
			if seen[de.name] {
				continue
			}
			low, err := lstatAt(lfd, de.name)
			if err != nil {
				continue
			}
			p := de.name
			if rel != "" {
				p = rel + "/" + de.name
			}
			e := &entry{Change: Change{Path: p, Kind: KindDeleted, OldType: typeOf(&low), OldMode: uint32(low.Mode) & 0o7777}, name: de.name, changed: true}
			s.add(e, lfd)
		}
	}
	return nil
}

func (s *scanner) add(e *entry, lfd int) {
	if s.visit != nil {
		s.visit(e, lfd)
	}
	if e.changed {
		s.changed = append(s.changed, e)
	}
}

// differs reports whether the upper entry name (not a directory) differs
// from the host's of the same type.
func (s *scanner) differs(ufd, lfd int, name string, up, low *unix.Stat_t, target string) bool {
	if uint32(up.Mode)&0o7777 != uint32(low.Mode)&0o7777 {
		return true
	}
	switch up.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		if up.Size != low.Size {
			return true
		}
		uf, _, err := openFileAt(ufd, name)
		if err != nil {
			return true
		}
		defer uf.Close()
		lf, _, err := openFileAt(lfd, name)
		if err != nil {
			return true
		}
		defer lf.Close()
		if s.ba == nil {
			s.ba, s.bb = make([]byte, 32<<10), make([]byte, 32<<10)
		}
		same, err := sameContent(uf, lf, s.ba, s.bb)
		return err != nil || !same
	case unix.S_IFLNK:
		lt, err := readlinkAt(lfd, name)
		return err != nil || lt != target
	case unix.S_IFCHR, unix.S_IFBLK:
		return up.Rdev != low.Rdev
	}
	return false
}
