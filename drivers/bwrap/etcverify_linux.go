//go:build linux

package bwrap

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// A view's content is checked, not only its name.
//
// Cost: comparing a view with the host byte by byte takes about 25 ms here
// (the /etc read set), too much for every one-shot command, each of which
// starts a driver that takes the last view up. So the builder records the
// view's own fingerprint beside it (<fingerprint>.sum, written before the
// lock file that makes the view usable), and a driver taking a view up
// compares the view's fingerprint now with that record, a walk of stats;
// the byte-by-byte comparison runs when the record is missing or does not
// match. What the record cannot catch is a writer that rewrites it too:
// only the driver's user can write in the state directory (privateDir),
// and stateDirRefusal keeps every sandbox out of it.
//
// A view is named by the fingerprint of the host entries it was copied
// from, so its name says what it should hold, not what it holds: a process
// that could write in the state directory (a command granted it, before
// stateDirRefusal; another program of the driver's user) could add a line
// to its hosts file, and every later sandbox would read it as /etc/hosts.
// So before a driver takes a view into use (one it built, or one another
// driver left), verifyEtcView compares it with the host's entries, entry by
// entry and byte by byte, and records the view's own fingerprint (every
// entry's inode, size, mode, owner, mtime and ctime: a write or chmod
// changes the ctime, which nobody can set back). The deep check that looks
// at the host's entries again every etcDeepEvery looks at that fingerprint
// too. A view that differs is not used: the entries are bound one by one
// instead, as on any failure of the view.

// verifyEtcView checks that the view at dir (a view's etc directory) holds
// exactly what copyEntry makes of entries, and returns its fingerprint.
func verifyEtcView(dir string, entries []string) (string, error) {
	base := filepath.Dir(dir)
	allowed := map[string]bool{}
	for _, e := range entries {
		for p := e; driverapi.PathWithin(p, "/etc"); p = filepath.Dir(p) {
			allowed[p] = true
		}
		if err := sameEntry(e, filepath.Join(base, e), true); err != nil {
			return "", err
		}
	}
	// Nothing beside the entries and the directories leading to them (what
	// is below an entry directory was compared above).
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		host := "/" + mustRel(base, p)
		if slices.Contains(entries, host) && de.IsDir() {
			return filepath.SkipDir
		}
		if !allowed[host] {
			return fmt.Errorf("etc view: %s holds %s, which is not in the read set", dir, host)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return viewFingerprint(dir)
}

func mustRel(base, p string) string {
	r, err := filepath.Rel(base, p)
	if err != nil {
		return p
	}
	return r
}

// sameEntry compares host entry src with its copy dest as copyEntry made
// it (follow: a top-level entry, whose symlink the copy followed).
func sameEntry(src, dest string, follow bool) error {
	var vs unix.Stat_t
	hs, err := statEntry(src, follow)
	if err != nil {
		return err
	}
	skipped := false
	switch hs.Mode & unix.S_IFMT {
	case unix.S_IFLNK, unix.S_IFDIR, unix.S_IFREG:
	default:
		skipped = true // devices, sockets and fifos are not copied
	}
	if err := unix.Lstat(dest, &vs); err != nil {
		if skipped {
			return nil
		}
		return fmt.Errorf("etc view: %s: %w", dest, err)
	}
	differs := func(what string) error { return fmt.Errorf("etc view: %s differs from %s (%s)", dest, src, what) }
	if skipped || hs.Mode&unix.S_IFMT != vs.Mode&unix.S_IFMT {
		return differs("type")
	}
	if os.Geteuid() == 0 && (hs.Uid != vs.Uid || hs.Gid != vs.Gid) {
		return differs("owner")
	}
	switch hs.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		a, err1 := os.Readlink(src)
		b, err2 := os.Readlink(dest)
		if err1 != nil || err2 != nil || a != b {
			return differs("link target")
		}
		return nil
	case unix.S_IFDIR:
		if hs.Mode&0o7777 != vs.Mode&0o7777 {
			return differs("mode")
		}
		hn, err1 := dirNames(src)
		vn, err2 := dirNames(dest)
		if err1 != nil || err2 != nil {
			return differs("listing")
		}
		for _, n := range vn {
			if !slices.Contains(hn, n) {
				return differs("extra entry " + n)
			}
		}
		for _, n := range hn {
			if err := sameEntry(filepath.Join(src, n), filepath.Join(dest, n), false); err != nil {
				return err
			}
		}
		return nil
	}
	if hs.Mode&0o7777 != vs.Mode&0o7777 || hs.Size != vs.Size {
		return differs("mode or size")
	}
	return sameBytes(src, dest)
}

func dirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// sameBytes compares two files' content.
func sameBytes(a, b string) error {
	fa, err := os.Open(a)
	if err != nil {
		return fmt.Errorf("etc view: %w", err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return fmt.Errorf("etc view: %w", err)
	}
	defer fb.Close()
	ba, bb := make([]byte, 32<<10), make([]byte, 32<<10)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return fmt.Errorf("etc view: %s differs from %s (content)", b, a)
		}
		if ea != nil || eb != nil {
			if (ea == io.EOF || ea == io.ErrUnexpectedEOF) && (eb == io.EOF || eb == io.ErrUnexpectedEOF) {
				return nil
			}
			return fmt.Errorf("etc view: compare %s: %w", b, errorsJoin(ea, eb))
		}
	}
}

func errorsJoin(a, b error) error {
	if a != nil && a != io.EOF && a != io.ErrUnexpectedEOF {
		return a
	}
	return b
}

// viewFingerprint summarises the view's own tree as it is now, never
// following a link.
func viewFingerprint(dir string) (string, error) {
	h := sha256.New()
	err := statWalk(dir, func(p string, st *unix.Stat_t) { putStat(h, p, st) })
	if err != nil {
		return "", fmt.Errorf("etc view: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// putStat adds one entry to a fingerprint: its path and what a change of
// it changes (inode, mode, owner, size, mtime, ctime).
func putStat(h io.Writer, name string, st *unix.Stat_t) {
	io.WriteString(h, name)
	h.Write([]byte{0})
	var b [8 * 10]byte
	for i, v := range []uint64{st.Dev, st.Ino, uint64(st.Mode), uint64(st.Uid), uint64(st.Gid), uint64(st.Size),
		uint64(st.Mtim.Sec), uint64(st.Mtim.Nsec), uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec)} {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	h.Write(b[:])
}

// checkEtcView returns the fingerprint of the view dir (named fp under
// root) after checking its content: against the builder's record when it
// matches, else against the host's entries byte by byte (then the record is
// written, for the next driver).
func checkEtcView(root, fp, dir string, entries []string) (string, error) {
	now, err := viewFingerprint(dir)
	if err != nil {
		return "", err
	}
	sum := filepath.Join(root, fp+".sum")
	if rec, err := os.ReadFile(sum); err == nil && string(rec) == now {
		return now, nil
	}
	verified, err := verifyEtcView(dir, entries)
	if err != nil {
		return "", err
	}
	if verified != now {
		return "", fmt.Errorf("etc view: %s changed while it was checked", dir)
	}
	if err := writeViewSum(sum, now); err != nil {
		return "", err
	}
	return now, nil
}

// writeViewSum records a view's fingerprint (renamed into place whole).
func writeViewSum(sum, fp string) error {
	tmp := sum + ".tmp-" + randHex(8)
	if err := os.WriteFile(tmp, []byte(fp), 0o600); err != nil {
		return fmt.Errorf("etc view: %w", err)
	}
	if err := os.Rename(tmp, sum); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("etc view: %w", err)
	}
	return nil
}
