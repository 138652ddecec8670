//go:build darwin

package wsfs

import "golang.org/x/sys/unix"

// Off Linux there is no openat2: every component is opened from its
// parent's descriptor with O_NOFOLLOW (walk), so no link is followed at
// all, reads included.

func lookupStat(root int, comps []string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if len(comps) == 0 {
		return st, unix.Fstat(root, &st)
	}
	dir, err := walk("", "", root, comps[:len(comps)-1], false)
	if err != nil {
		return st, unwrapSys(err)
	}
	defer unix.Close(dir)
	err = unix.Fstatat(dir, comps[len(comps)-1], &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// openRegular looks with fstatat first, so a FIFO or device is never
// opened; the file opened after (O_NONBLOCK|O_NOFOLLOW) must be the one
// looked at.
func openRegular(root int, comps []string) (int, unix.Stat_t, error) {
	var pre unix.Stat_t
	dir, err := walk("", "", root, comps[:len(comps)-1], false)
	if err != nil {
		return -1, pre, unwrapSys(err)
	}
	defer unix.Close(dir)
	name := comps[len(comps)-1]
	if err := unix.Fstatat(dir, name, &pre, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return -1, pre, err
	}
	if err := checkRegular(&pre); err != nil {
		return -1, pre, err
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
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

func openDir(root int, comps []string) (int, error) {
	fd, err := walk("", "", root, comps, false)
	return fd, unwrapSys(err)
}

// unwrapSys is the errno inside walk's *Error, so the caller words it.
func unwrapSys(err error) error {
	if fe, ok := err.(*Error); ok && fe.Err != nil {
		return fe.Err
	}
	return err
}

func mtime(st *unix.Stat_t) (int64, int64) { return st.Mtim.Sec, st.Mtim.Nsec }
