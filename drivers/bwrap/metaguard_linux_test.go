//go:build linux

package bwrap

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// metadataProbe is run by python3 inside the sandbox: every way of
// changing a file's metadata, by path and by descriptor, against target
// (a file), plus an inotify watch on watchDir. It prints "<what> ok" or
// "<what> refused <errno name>" per line.
const metadataProbe = `
import ctypes, errno, os, sys
target, watch_dir, label = sys.argv[1], sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
def attempt(what, f):
    try:
        f()
        print(label, what, "ok")
    except OSError as e:
        print(label, what, "refused", errno.errorcode.get(e.errno, e.errno))
def fd_ro():
    return os.open(target, os.O_RDONLY)
def fchmod():
    fd = fd_ro()
    try: os.fchmod(fd, 0o640)
    finally: os.close(fd)
def futimens():
    fd = fd_ro()
    try: os.utime(fd, ns=(1_000_000_000, 1_000_000_000))
    finally: os.close(fd)
def fsetxattr():
    fd = fd_ro()
    try: os.setxattr(fd, "user.aleph", b"1")
    finally: os.close(fd)
def fchown():
    fd = fd_ro()
    try: os.fchown(fd, os.getuid(), os.getgid())
    finally: os.close(fd)
def inotify():
    ifd = libc.inotify_init1(os.O_CLOEXEC)
    if ifd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    wd = libc.inotify_add_watch(ifd, watch_dir.encode(), 0x100)  # IN_CREATE
    if wd < 0:
        e = ctypes.get_errno(); os.close(ifd); raise OSError(e, "inotify_add_watch")
    if label != "ws":
        # The watch was set: that is the failure (nothing can be created
        # there to show more).
        os.close(ifd); return
    # The watch must be the command's own: a file created in the watched
    # directory is reported to it.
    open(os.path.join(watch_dir, "created-" + label), "w").close()
    data = os.read(ifd, 4096)
    os.close(ifd)
    if b"created-" + label.encode() not in data:
        raise OSError(errno.EIO, "no event")
def setflags():
    import array, fcntl
    fd = fd_ro()
    try:
        flags = array.array("l", [0])
        fcntl.ioctl(fd, 0x80086601, flags, True)  # FS_IOC_GETFLAGS
        flags[0] |= 0x80  # FS_NOATIME_FL
        fcntl.ioctl(fd, 0x40086602, flags, True)  # FS_IOC_SETFLAGS
    finally: os.close(fd)
attempt("chmod", lambda: os.chmod(target, 0o640))
attempt("fchmod", fchmod)
attempt("utimes", lambda: os.utime(target, ns=(1_000_000_000, 1_000_000_000)))
attempt("futimens", futimens)
attempt("setxattr", lambda: os.setxattr(target, "user.aleph", b"1"))
attempt("fsetxattr", fsetxattr)
attempt("chown", lambda: os.chown(target, os.getuid(), os.getgid()))
attempt("fchown", fchown)
attempt("inotify", inotify)
attempt("setflags", setflags)
`

// In the Landlock tier (no read-only mounts) a command must not change
// the metadata of anything outside its write grants, by path or by a
// read-only descriptor, nor watch a directory it may not read; beside it,
// the same calls work in the workspace (positive controls, run in the same
// command, which shows the attempts really ran).
func TestTierMetadataGuarded(t *testing.T) {
	d := tierDriver(t, options{})
	ws := newWorkspace(t)
	host := newWorkspace(t) // a read grant: readable, not writable
	secret := newWorkspace(t)
	if err := os.Chmod(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(host, "owned")
	if err := os.WriteFile(target, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A setting the filesystem must allow for the positive control.
	if err := unix.Setxattr(filepath.Join(ws), "user.probe", []byte("1"), 0); err != nil {
		t.Skipf("user xattrs not supported on %s: %v", ws, err)
	}
	wsTarget := filepath.Join(ws, "mine")
	if err := os.WriteFile(wsTarget, []byte("ws"), 0o644); err != nil {
		t.Fatal(err)
	}
	var before syscall.Stat_t
	if err := syscall.Stat(target, &before); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(ws, "probe.py")
	if err := os.WriteFile(probe, []byte(metadataProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	var devNull syscall.Stat_t
	if err := syscall.Stat("/dev/null", &devNull); err != nil {
		t.Fatal(err)
	}
	devNullMode := strconv.FormatUint(uint64(devNull.Mode&0o7777), 8)
	script := "python3 " + probe + " " + target + " " + secret + " host; " +
		"python3 " + probe + " " + wsTarget + " " + ws + " ws; " +
		"python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_PATH); os.chmod(\"/proc/self/fd/%d\" % fd, 0o600); print(\"procself ok\")' " + wsTarget + "; " +
		"python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_PATH); os.chmod(\"/proc/self/fd/%d\" % fd, 0o600); print(\"procself host ok\")' " + target + "; " +
		// The mode given is the one /dev/null has: should the guard fail,
		// the call succeeds (and is reported) without breaking the host's
		// /dev/null for every other process.
		"chmod " + devNullMode + " /dev/null && echo dev chmod ok; echo x > /dev/null && echo dev write ok"
	caps := driverapi.Capabilities{SpawnSubprocess: true, FSRead: []string{host}}
	r := drvRun(t, t.Context(), d, ws, caps, nil, "/bin/sh", "-c", script)
	if r.err != nil {
		t.Fatalf("run: %v", r.err)
	}
	out := r.stdout
	t.Logf("stdout %q stderr %q", out, r.stderr)
	for _, what := range []string{"chmod", "fchmod", "utimes", "futimens", "setxattr", "fsetxattr", "chown", "fchown", "inotify"} {
		if !strings.Contains(out, "ws "+what+" ok\n") {
			t.Errorf("positive control: %s in the workspace failed: %q (stderr %q)", what, out, r.stderr)
		}
		if !strings.Contains(out, "host "+what+" refused ") {
			t.Errorf("%s outside the write grants was not refused: %q (stderr %q)", what, out, r.stderr)
		}
	}
	// A path through /proc/self names the command's descriptors, not the
	// driver's (glibc's lchmod fallback uses it).
	if !strings.Contains(out, "procself ok\n") || strings.Contains(out, "procself host ok") {
		t.Errorf("chmod through /proc/self/fd: want it in the workspace only: %q (stderr %q)", out, r.stderr)
	}
	// Inode flags are refused everywhere, the workspace included.
	for _, who := range []string{"host", "ws"} {
		if !strings.Contains(out, who+" setflags refused EPERM\n") {
			t.Errorf("FS_IOC_SETFLAGS (%s) was not refused: %q (stderr %q)", who, out, r.stderr)
		}
	}
	if strings.Contains(out, "dev chmod ok") || !strings.Contains(out, "dev write ok") {
		t.Errorf("/dev/null: chmod must be refused, writing must work: %q (stderr %q)", out, r.stderr)
	}
	var after syscall.Stat_t
	if err := syscall.Stat(target, &after); err != nil {
		t.Fatal(err)
	}
	if after.Mode != before.Mode || after.Mtim != before.Mtim || after.Ctim != before.Ctim {
		t.Errorf("host file changed: mode %o -> %o, mtime %v -> %v, ctime %v -> %v",
			before.Mode, after.Mode, before.Mtim, after.Mtim, before.Ctim, after.Ctim)
	}
	if _, err := unix.Getxattr(target, "user.aleph", make([]byte, 16)); err == nil {
		t.Errorf("host file gained an xattr")
	}
	if _, err := os.Stat(filepath.Join(secret, "created-host")); err == nil {
		t.Errorf("the command created a file in a directory outside its grants")
	}
}
