package appcontainer

import (
	"fmt"
	"strings"
)

// FileInfo is what the planner needs to know of a path.
type FileInfo struct {
	Exists  bool
	IsDir   bool
	Reparse bool // symbolic link, junction or any other reparse point
}

// FS is the file system as the planner sees it; tests use a map.
type FS interface {
	// Lstat describes path without following a final reparse point. A
	// missing path is FileInfo{} and no error.
	Lstat(path string) (FileInfo, error)
}

// ReparsePointError refuses a plan: a path the sandbox could have written
// is a symlink or junction, so an ACL applied "to the workspace" could
// land somewhere else, or a protected directory could be a link to an
// unprotected one.
type ReparsePointError struct {
	Path string // the reparse point
	For  string // the path being protected or granted
}

func (e *ReparsePointError) Error() string {
	if e.Path == e.For {
		return fmt.Sprintf("refusing to run: %s is a symbolic link or junction; a sandboxed path must be a real directory", e.Path)
	}
	return fmt.Sprintf("refusing to run: %s, on the way to %s, is a symbolic link or junction", e.Path, e.For)
}

// CheckReparsePoints walks every path the plan protects or grants and
// refuses a reparse point at the path itself, or at any component on the
// way that lies in a sandbox-writable tree (the workspace and the fs_write
// grants: where an earlier command could have planted a link). Links
// above those trees belong to the host and are trusted.
func CheckReparsePoints(fsys FS, p Plan) error {
	writable := append([]string{p.Workspace}, p.Write...)
	inWritable := func(c string) bool {
		for _, w := range writable {
			if WinWithin(c, w) {
				return true
			}
		}
		return false
	}
	targets := []string{p.Workspace}
	targets = append(targets, p.Protected...)
	targets = append(targets, p.Write...)
	targets = append(targets, p.Read...)
	for _, t := range targets {
		comps := winComponents(t)
		for i, c := range comps {
			last := i == len(comps)-1
			if !last && !inWritable(c) {
				continue
			}
			fi, err := fsys.Lstat(c)
			if err != nil {
				return fmt.Errorf("refusing to run: cannot inspect %s: %w", c, err)
			}
			if fi.Reparse {
				return &ReparsePointError{Path: c, For: t}
			}
			if !fi.Exists {
				break // nothing below a missing component to check
			}
		}
	}
	return nil
}

// MapFS is an in-memory FS for tests and dry runs: keys are paths
// (compared case-insensitively), values their kind.
type MapFS map[string]FileInfo

// Lstat implements FS.
func (m MapFS) Lstat(path string) (FileInfo, error) {
	for k, v := range m {
		if strings.EqualFold(WinClean(k), WinClean(path)) {
			v.Exists = true
			return v, nil
		}
	}
	return FileInfo{}, nil
}
