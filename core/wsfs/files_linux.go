//go:build linux

package wsfs

import (
	"strings"

	"golang.org/x/sys/unix"
)

// beneath is how every read resolves a path on Linux: the kernel follows
// a link only while the resolution stays beneath the workspace's
// descriptor (RESOLVE_BENEATH: an absolute link or ".." above it is
// EXDEV), and never through a /proc magic link. Because the kernel checks
// while it resolves, a link swapped in mid-operation cannot lead out
// either.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS

func openBeneath(root int, comps []string, flags int) (int, error) {
	rel := "."
	if len(comps) > 0 {
		rel = strings.Join(comps, "/")
	}
	for {
		fd, err := unix.Openat2(root, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: beneath})
		if err == unix.EINTR || err == unix.EAGAIN {
			// EAGAIN: a rename elsewhere raced the resolution; the kernel
			// asks for a retry.
			continue
		}
		return fd, err
	}
}

// lookupStat is the entry comps names, not followed when it is a link
// (the directories on the way may be links that stay beneath).
func lookupStat(root int, comps []string) (unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := openBeneath(root, comps, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return st, err
	}
	defer unix.Close(fd)
	err = unix.Fstat(fd, &st)
	return st, err
}

// openRegular opens the regular file comps names for reading. An O_PATH
// descriptor looks first (opening it opens nothing: no FIFO waits, no
// device driver runs); only a regular file is then opened for real, with
// O_NONBLOCK, and must be the very file looked at.
func openRegular(root int, comps []string) (int, unix.Stat_t, error) {
	var pre unix.Stat_t
	pfd, err := openBeneath(root, comps, unix.O_PATH)
	if err != nil {
		return -1, pre, err
	}
	err = unix.Fstat(pfd, &pre)
	unix.Close(pfd)
	if err != nil {
		return -1, pre, err
	}
	if err := checkRegular(&pre); err != nil {
		return -1, pre, err
	}
	fd, err := openBeneath(root, comps, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return -1, pre, err
	}
	st, err := sameFile(fd, &pre)
	if err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// openDir opens the directory comps names for listing.
func openDir(root int, comps []string) (int, error) {
	return openBeneath(root, comps, unix.O_RDONLY|unix.O_DIRECTORY)
}

func mtime(st *unix.Stat_t) (int64, int64) { return int64(st.Mtim.Sec), int64(st.Mtim.Nsec) } //nolint:unconvert // int32 on 32-bit Linux
