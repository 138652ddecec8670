//go:build linux

package bwrap

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// pinPaths opens every host path of the plan that a sandbox could have
// changed (workspace, grants, existing protected entries and their anchors) and checks that each
// descriptor really is that path. bwrap then mounts the descriptors
// (--bind-fd), not the names: a symlink swapped in after the check (by
// another sandbox with write access to a parent, say) cannot redirect a
// mount — the symlink-during-setup escape class (Flatpak CVE-2024-42472).
//
// The files are numbered firstFD, firstFD+1, ... in the returned order (they
// go into exec.Cmd.ExtraFiles after any earlier ones). The caller closes
// them once bwrap has started.
func pinPaths(p launchPlan, firstFD int) ([]*os.File, map[string]int, error) {
	var paths []string
	if p.attachRoot == "" {
		paths = append(paths, p.Workspace)
	}
	paths = append(paths, p.FSRead...)
	paths = append(paths, p.boundWritable()...)
	paths = append(paths, p.prot.pinned()...)
	if p.ProxySocket != "" {
		paths = append(paths, p.ProxySocket)
	}
	var files []*os.File
	fds := map[string]int{}
	fail := func(err error) ([]*os.File, map[string]int, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, nil, err
	}
	for _, path := range paths {
		if _, dup := fds[path]; dup {
			continue
		}
		fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(fmt.Errorf("bwrap driver: open %s: %w", path, err))
		}
		f := os.NewFile(uintptr(fd), path)
		files = append(files, f)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fail(fmt.Errorf("bwrap driver: stat %s: %w", path, err))
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fail(&driverapi.InvalidSpecError{Field: "workspace", Reason: fmt.Sprintf("%s became a symlink", path)})
		}
		// What the descriptor really is: a path whose directories were
		// swapped for symlinks before the open shows up here.
		real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil || real != path {
			return fail(&driverapi.InvalidSpecError{Field: "workspace", Reason: fmt.Sprintf("%s resolves to %q since it was checked", path, real)})
		}
		fds[path] = firstFD + len(files) - 1
	}
	return files, fds, nil
}
