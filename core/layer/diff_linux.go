//go:build linux

package layer

import (
	"context"
	"io"
	"strings"

	"golang.org/x/sys/unix"
)

// Diff is a unified diff, in git's format (so `git apply` takes it on the
// host), of the session's changes to regular files and symlinks at or
// below paths (all when none): binary files are named ("Binary files a/x
// and b/x differ"), as are text files over 8 MiB; directories, FIFOs,
// sockets and devices are not in it (Changes lists them), nor is .git
// (the git import brings it), nor entries carrying overlayfs metadata
// this engine does not read.
func (l *Layer) Diff(ctx context.Context, paths ...string) (string, error) {
	var sel []string
	for _, p := range paths {
		c, err := cleanRel(p)
		if err != nil {
			return "", err
		}
		sel = append(sel, c)
	}
	wfd, err := l.openWorkspace()
	if err != nil {
		return "", err
	}
	defer unix.Close(wfd)
	ufd, err := l.openUpper()
	if err != nil {
		return "", err
	}
	defer unix.Close(ufd)
	s := l.newScanner(ctx)
	if err := s.run(ufd, wfd); err != nil {
		return "", err
	}
	var out strings.Builder
	for _, e := range s.changed {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if e.gitTop || e.problem != "" {
			continue
		}
		take := len(sel) == 0
		for _, p := range sel {
			if under(e.Path, p) {
				take = true
			}
		}
		if !take {
			continue
		}
		var a, b diffSide
		if e.OldType == TypeDir {
			// The host's directory is deleted or replaced: each file in it.
			if e.Kind == KindDeleted || e.Kind == KindTypeChanged {
				l.diffHostTree(wfd, e.Path, &out)
			}
		} else if e.Kind != KindAdded {
			a = readSide(wfd, e.Path, e.OldType)
		}
		if e.upOK && e.Type != TypeDir {
			b = readSide(ufd, e.Path, e.Type)
		}
		out.WriteString(gitFileDiff(e.Path, a, b))
	}
	return out.String(), nil
}

// readSide reads the entry rel below root (a file or a link; anything else
// has no side in a diff).
func readSide(root int, rel, typ string) diffSide {
	if typ != TypeFile && typ != TypeSymlink {
		return diffSide{}
	}
	dir, name := splitRel(rel)
	dfd, err := openDirPath(root, dir)
	if err != nil {
		return diffSide{}
	}
	defer unix.Close(dfd)
	return readSideAt(dfd, name)
}

func readSideAt(dfd int, name string) diffSide {
	st, err := lstatAt(dfd, name)
	if err != nil {
		return diffSide{}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		t, err := readlinkAt(dfd, name)
		if err != nil {
			return diffSide{}
		}
		return diffSide{exists: true, mode: gitModeSymlink, content: []byte(t)}
	case unix.S_IFREG:
		side := diffSide{exists: true, mode: gitMode(false, uint32(st.Mode))}
		if st.Size > maxDiffBytes {
			side.binary = true
			return side
		}
		f, _, err := openFileAt(dfd, name)
		if err != nil {
			side.binary = true
			return side
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxDiffBytes+1))
		if err != nil || len(b) > maxDiffBytes || isBinary(b) {
			side.binary = true
			return side
		}
		side.content = b
		return side
	}
	return diffSide{}
}

// diffHostTree writes the deletion of every file and link below the host
// directory rel.
func (l *Layer) diffHostTree(wfd int, rel string, out *strings.Builder) {
	dfd, err := openDirPath(wfd, rel)
	if err != nil {
		return
	}
	defer unix.Close(dfd)
	ents, err := readDirFd(dfd)
	if err != nil {
		return
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.name)
	}
	sortStrings(names)
	for _, n := range names {
		p := rel + "/" + n
		st, err := lstatAt(dfd, n)
		if err != nil {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			l.diffHostTree(wfd, p, out)
			continue
		}
		out.WriteString(gitFileDiff(p, readSideAt(dfd, n), diffSide{}))
	}
}
