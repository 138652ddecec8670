//go:build linux

package bwrap

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// The launcher's side of the Landlock tier's metadata guard (the
// sandbox-init side, sandboxinit/metaguard_linux.go, says why it exists).
//
// For each chmod, chown, utimes, xattr-setting or inotify_add_watch call of
// the command, the kernel stops the calling thread and hands the call to
// this loop. The loop, on a thread of its own that never runs anything
// else:
//
//  1. reads the call's path (and times, attribute name and value) from the
//     command's memory, once;
//  2. resolves the target once, relative to the command's own cwd or
//     descriptor (through /proc/PID/cwd and /proc/PID/fd/N, which name the
//     very inodes the command holds), into an O_PATH descriptor, following
//     symbolic links exactly as the call would;
//  3. checks that the kernel's name for that descriptor lies in a write
//     grant (the workspace or an fs_write grant; for a watch, anywhere the
//     command may read). The devices the tier lets the command open
//     (/dev/null...) are host inodes and not a write grant: their metadata
//     is refused too;
//  4. makes the call itself on that descriptor (fchmodat2, fchownat and
//     utimensat with AT_EMPTY_PATH, the xattr calls and inotify_add_watch
//     through /proc/self/fd/N, inotify on a copy of the command's own
//     inotify descriptor, taken with pidfd_getfd, so the watch lands in the
//     command's instance) and returns its result as the command's.
//
// Nothing the command does after step 1 can change what step 4 touches:
// the command's call never resumes in the kernel (no
// SECCOMP_USER_NOTIF_FLAG_CONTINUE, whose re-read of the arguments would
// be a time-of-check race), the descriptor pins the inode, and a rename of
// it out of the grant needs write access outside it, which Landlock
// denies. The loop's thread has the command's identity: the same uid and
// groups, and, for a root driver, no effective capability (dropped on that
// thread alone, which dies with the loop), so the kernel's own permission
// checks (owner for chmod, owner or write access for utimes) are the
// command's. A pid that was reused meanwhile is caught by
// SECCOMP_IOCTL_NOTIF_ID_VALID after the /proc lookups.

// Layouts of struct seccomp_notif and seccomp_notif_resp
// (include/uapi/linux/seccomp.h).
type seccompNotif struct {
	ID    uint64
	Pid   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// metaGuard answers the guarded calls of one Landlock-tier command (the
// notifier, notify_linux.go, hands them over).
type metaGuard struct {
	// writable are the roots whose metadata the command may change;
	// readable those it may watch.
	writable, readable []string
	nr                 map[int32]string
}

// newMetaGuard is the guard of a command whose init spec is is.
func newMetaGuard(plan launchPlan, is initSpec) *metaGuard {
	g := &metaGuard{nr: guardedNumbers()}
	g.writable = append(g.writable, plan.Workspace)
	g.writable = append(g.writable, plan.writable()...)
	g.readable = append(append(g.readable, is.ReadOnly...), is.ReadWrite...)
	return g
}

func ioctlPtr(fd int, req uint, p unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(p))
	if e != 0 {
		return e
	}
	return nil
}

// dropEffectiveCaps clears this thread's effective capabilities (a root
// driver's), leaving the permitted set: the thread acts as the command,
// uid 0 without capabilities, does. Only this thread changes.
func dropEffectiveCaps() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	if data[0].Effective == 0 && data[1].Effective == 0 {
		return nil
	}
	data[0].Effective, data[1].Effective = 0, 0
	return unix.Capset(&hdr, &data[0])
}

// guardedNumbers maps this architecture's numbers of the guarded calls to
// their names.
func guardedNumbers() map[int32]string {
	m := map[int32]string{}
	for name, nr := range sandboxinit.MetaGuardNumbers() {
		m[int32(nr)] = name
	}
	return m
}

// call is one notification being answered.
type call struct {
	g        *metaGuard
	listener int
	n        *seccompNotif
	pid      int
	mem      *os.File
}

func (c *call) arg(i int) uint64 { return c.n.Args[i] }
func (c *call) fdArg(i int) int  { return int(int32(uint32(c.n.Args[i]))) }

// valid is SECCOMP_IOCTL_NOTIF_ID_VALID: the caller is still waiting, so
// its pid still names it.
func (c *call) valid() bool {
	id := c.n.ID
	return ioctlPtr(c.listener, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)) == nil
}

// read copies n bytes at addr of the caller's memory.
func (c *call) read(addr uint64, n int) ([]byte, unix.Errno) {
	b := make([]byte, n)
	if n == 0 {
		return b, 0
	}
	if addr == 0 {
		return nil, unix.EFAULT
	}
	got, err := c.mem.ReadAt(b, int64(addr))
	if got != n || err != nil {
		return nil, unix.EFAULT
	}
	return b, 0
}

// readString copies a NUL-terminated string at addr, up to max bytes,
// page by page (a string may end just before an unmapped page).
func (c *call) readString(addr uint64, max int) (string, unix.Errno) {
	if addr == 0 {
		return "", unix.EFAULT
	}
	var out []byte
	const page = 4096
	for len(out) < max {
		chunk := page - int((addr+uint64(len(out)))%page)
		b := make([]byte, chunk)
		got, _ := c.mem.ReadAt(b, int64(addr)+int64(len(out)))
		if got <= 0 {
			return "", unix.EFAULT
		}
		if i := strings.IndexByte(string(b[:got]), 0); i >= 0 {
			return string(append(out, b[:i]...)), 0
		}
		out = append(out, b[:got]...)
		if got < chunk {
			return "", unix.EFAULT
		}
	}
	return "", unix.ENAMETOOLONG
}

// answer performs the call of n, received on listener, on behalf of its
// caller and returns the result and errno the caller gets.
func (g *metaGuard) answer(listener int, n *seccompNotif) (int64, unix.Errno) {
	name, ok := g.nr[n.Nr]
	if !ok {
		return -1, unix.ENOSYS
	}
	mem, err := os.Open("/proc/" + strconv.FormatUint(uint64(n.Pid), 10) + "/mem")
	if err != nil {
		return -1, unix.EPERM
	}
	defer mem.Close()
	c := &call{g: g, listener: listener, n: n, pid: int(n.Pid), mem: mem}
	if !c.valid() {
		return -1, unix.EPERM
	}
	return c.do(name)
}

const (
	atFDCWD       = unix.AT_FDCWD
	inDontFollow  = unix.IN_DONT_FOLLOW
	maxXattrValue = 64 << 10
	maxXattrName  = 255
	guardPathMax  = unix.PathMax
	modeSetIDBits = unix.S_ISUID | unix.S_ISGID
	timespecBytes = 16
	timevalBytes  = 16
	utimbufBytes  = 16
)

func (c *call) do(name string) (int64, unix.Errno) {
	switch name {
	case "chmod":
		return c.chmod(atFDCWD, c.arg(0), c.arg(1), 0)
	case "fchmod":
		return c.chmodFD(c.fdArg(0), c.arg(1))
	case "fchmodat":
		return c.chmod(c.fdArg(0), c.arg(1), c.arg(2), 0)
	case "fchmodat2":
		return c.chmod(c.fdArg(0), c.arg(1), c.arg(2), int(c.arg(3)))
	case "chown":
		return c.chown(atFDCWD, c.arg(0), c.arg(1), c.arg(2), 0)
	case "lchown":
		return c.chown(atFDCWD, c.arg(0), c.arg(1), c.arg(2), unix.AT_SYMLINK_NOFOLLOW)
	case "fchown":
		return c.chownFD(c.fdArg(0), c.arg(1), c.arg(2))
	case "fchownat":
		return c.chown(c.fdArg(0), c.arg(1), c.arg(2), c.arg(3), int(c.arg(4)))
	case "utimensat":
		return c.utimensat(c.fdArg(0), c.arg(1), c.arg(2), int(c.arg(3)))
	case "utimes":
		return c.utimesTimeval(atFDCWD, c.arg(0), c.arg(1))
	case "futimesat":
		return c.utimesTimeval(c.fdArg(0), c.arg(1), c.arg(2))
	case "utime":
		return c.utime(c.arg(0), c.arg(1))
	case "setxattr":
		return c.setxattr(atFDCWD, c.arg(0), true, false, c.arg(1), c.arg(2), c.arg(3), int(c.arg(4)))
	case "lsetxattr":
		return c.setxattr(atFDCWD, c.arg(0), false, false, c.arg(1), c.arg(2), c.arg(3), int(c.arg(4)))
	case "fsetxattr":
		return c.setxattr(c.fdArg(0), 0, true, true, c.arg(1), c.arg(2), c.arg(3), int(c.arg(4)))
	case "removexattr":
		return c.removexattr(atFDCWD, c.arg(0), true, false, c.arg(1))
	case "lremovexattr":
		return c.removexattr(atFDCWD, c.arg(0), false, false, c.arg(1))
	case "fremovexattr":
		return c.removexattr(c.fdArg(0), 0, true, true, c.arg(1))
	case "inotify_add_watch":
		return c.inotifyAddWatch(c.fdArg(0), c.arg(1), uint32(c.arg(2)))
	}
	return -1, unix.ENOSYS
}

// procPath is the caller's /proc/PID/<rest>.
func (c *call) procPath(rest string) string {
	return "/proc/" + strconv.Itoa(c.pid) + "/" + rest
}

// openFD is an O_PATH descriptor of the caller's descriptor fd.
func (c *call) openFD(fd int) (int, unix.Errno) {
	if fd < 0 {
		return -1, unix.EBADF
	}
	o, err := unix.Open(c.procPath("fd/"+strconv.Itoa(fd)), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, unix.EBADF
	}
	if !c.valid() {
		unix.Close(o)
		return -1, unix.EPERM
	}
	return o, 0
}

// resolve opens, with O_PATH, what the caller's (dirfd, path) names, as
// the kernel would resolve it for the caller: relative paths from its cwd
// or from its descriptor dirfd; an empty path with emptyOK is dirfd
// itself. follow says whether a final symbolic link is followed.
func (c *call) resolve(dirfd int, pathAddr uint64, follow, emptyOK bool) (int, unix.Errno) {
	path, e := c.readString(pathAddr, guardPathMax)
	if e != 0 {
		return -1, e
	}
	path = c.ownProc(path)
	if path == "" {
		if !emptyOK {
			return -1, unix.ENOENT
		}
		if dirfd == atFDCWD {
			return c.openProc("cwd")
		}
		return c.openFD(dirfd)
	}
	base := -1
	if !strings.HasPrefix(path, "/") {
		// The command's root is the host's (chroot is denied to it), so
		// an absolute path means the same to both.
		var e unix.Errno
		if dirfd == atFDCWD {
			base, e = c.openProc("cwd")
		} else {
			base, e = c.openFD(dirfd)
		}
		if e != 0 {
			return -1, e
		}
		defer unix.Close(base)
	} else {
		base = atFDCWD
	}
	flags := unix.O_PATH | unix.O_CLOEXEC
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := unix.Openat(base, path, flags, 0)
	if err != nil {
		return -1, errnoOf(err)
	}
	return fd, 0
}

// ownProc rewrites /proc/self and /proc/thread-self, which name the
// process that resolves them, into the caller's /proc/PID (glibc's lchmod
// and fchmodat fallbacks chmod /proc/self/fd/N). The notification's pid is
// the calling thread's id, which /proc also serves.
func (c *call) ownProc(path string) string {
	for _, self := range []string{"/proc/self", "/proc/thread-self"} {
		if rest, ok := strings.CutPrefix(path, self); ok && (rest == "" || rest[0] == '/') {
			return "/proc/" + strconv.Itoa(c.pid) + rest
		}
	}
	return path
}

func (c *call) openProc(rest string) (int, unix.Errno) {
	o, err := unix.Open(c.procPath(rest), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, unix.EPERM
	}
	if !c.valid() {
		unix.Close(o)
		return -1, unix.EPERM
	}
	return o, 0
}

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EPERM
}

// within says whether the kernel's current name for the O_PATH
// descriptor fd lies under one of roots. An unlinked file is judged by the
// name it had.
func within(fd int, roots []string) bool {
	name, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || !strings.HasPrefix(name, "/") {
		// Not a path (pipe:[...], socket:[...], anon_inode:...).
		return false
	}
	name = strings.TrimSuffix(name, " (deleted)")
	for _, r := range roots {
		if driverapi.PathWithin(name, r) {
			return true
		}
	}
	return false
}

// inGrant returns EPERM when fd lies outside the write grants.
func (c *call) inGrant(fd int) unix.Errno {
	if !within(fd, c.g.writable) {
		return unix.EPERM
	}
	return 0
}

func result(err error) (int64, unix.Errno) {
	if err != nil {
		return -1, errnoOf(err)
	}
	return 0, 0
}

func (c *call) chmod(dirfd int, pathAddr, mode uint64, flags int) (int64, unix.Errno) {
	if flags&^(unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH) != 0 {
		return -1, unix.EINVAL
	}
	fd, e := c.resolve(dirfd, pathAddr, flags&unix.AT_SYMLINK_NOFOLLOW == 0, flags&unix.AT_EMPTY_PATH != 0)
	if e != 0 {
		return -1, e
	}
	defer unix.Close(fd)
	return c.chmodResolved(fd, mode, flags&unix.AT_SYMLINK_NOFOLLOW)
}

func (c *call) chmodFD(cfd int, mode uint64) (int64, unix.Errno) {
	fd, e := c.openFD(cfd)
	if e != 0 {
		return -1, e
	}
	defer unix.Close(fd)
	return c.chmodResolved(fd, mode, 0)
}

func (c *call) chmodResolved(fd int, mode uint64, nofollow int) (int64, unix.Errno) {
	if e := c.inGrant(fd); e != 0 {
		return -1, e
	}
	m := uint32(mode) & 0o7777
	if m&modeSetIDBits != 0 {
		// The main filter refuses these first; kept here so the guard
		// never sets what the sandbox forbids.
		return -1, unix.EPERM
	}
	empty := []byte{0}
	_, _, errno := unix.Syscall6(unix.SYS_FCHMODAT2, uintptr(fd), uintptr(unsafe.Pointer(&empty[0])), uintptr(m),
		uintptr(unix.AT_EMPTY_PATH|nofollow), 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return 0, 0
}

func (c *call) chown(dirfd int, pathAddr, uid, gid uint64, flags int) (int64, unix.Errno) {
	if flags&^(unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH) != 0 {
		return -1, unix.EINVAL
	}
	fd, e := c.resolve(dirfd, pathAddr, flags&unix.AT_SYMLINK_NOFOLLOW == 0, flags&unix.AT_EMPTY_PATH != 0)
	if e != 0 {
		return -1, e
	}
	defer unix.Close(fd)
	return c.chownResolved(fd, uid, gid)
}

func (c *call) chownFD(cfd int, uid, gid uint64) (int64, unix.Errno) {
	fd, e := c.openFD(cfd)
	if e != 0 {
		return -1, e
	}
	defer unix.Close(fd)
	return c.chownResolved(fd, uid, gid)
}

func (c *call) chownResolved(fd int, uid, gid uint64) (int64, unix.Errno) {
	if e := c.inGrant(fd); e != 0 {
		return -1, e
	}
	// uid_t and gid_t are 32 bits; -1 leaves one unchanged.
	return result(unix.Fchownat(fd, "", int(int32(uint32(uid))), int(int32(uint32(gid))), unix.AT_EMPTY_PATH))
}

// utimensatResolved sets fd's times to ts (nil: now, as a NULL times
// argument does).
func (c *call) utimensatResolved(fd int, ts *[2]unix.Timespec) (int64, unix.Errno) {
	if e := c.inGrant(fd); e != 0 {
		return -1, e
	}
	empty := []byte{0}
	var tp uintptr
	if ts != nil {
		tp = uintptr(unsafe.Pointer(&ts[0]))
	}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), uintptr(unsafe.Pointer(&empty[0])), tp, unix.AT_EMPTY_PATH, 0, 0)
	runtime.KeepAlive(ts)
	if errno != 0 {
		return -1, errno
	}
	return 0, 0
}

func (c *call) utimensat(dirfd int, pathAddr, timesAddr uint64, flags int) (int64, unix.Errno) {
	if flags&^(unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH) != 0 {
		return -1, unix.EINVAL
	}
	var ts *[2]unix.Timespec
	if timesAddr != 0 {
		b, e := c.read(timesAddr, 2*timespecBytes)
		if e != 0 {
			return -1, e
		}
		ts = &[2]unix.Timespec{}
		for i := range 2 {
			ts[i] = mkTimespec(int64(binary.NativeEndian.Uint64(b[16*i:])), int64(binary.NativeEndian.Uint64(b[16*i+8:])))
		}
	}
	var fd int
	var e unix.Errno
	if pathAddr == 0 {
		// futimens: utimensat(fd, NULL, times, 0) acts on fd itself.
		if dirfd == atFDCWD {
			return -1, unix.EFAULT
		}
		fd, e = c.openFD(dirfd)
	} else {
		fd, e = c.resolve(dirfd, pathAddr, flags&unix.AT_SYMLINK_NOFOLLOW == 0, flags&unix.AT_EMPTY_PATH != 0)
	}
	if e != 0 {
		return -1, e
	}
	defer unix.Close(fd)
	return c.utimensatResolved(fd, ts)
}

// utimesTimeval is utimes and futimesat: struct timeval[2] or NULL.
func (c *call) utimesTimeval(dirfd int, pathAddr, tvAddr uint64) (int64, unix.Errno) {
	var ts *[2]unix.Timespec
	if tvAddr != 0 {
		b, e := c.read(tvAddr, 2*timevalBytes)
		if e != 0 {
			return -1, e
		}
		ts = &[2]unix.Timespec{}
		for i := range 2 {
			usec := int64(binary.NativeEndian.Uint64(b[16*i+8:]))
			if usec < 0 || usec >= 1_000_000 {
				return -1, unix.EINVAL
			}
			ts[i] = mkTimespec(int64(binary.NativeEndian.Uint64(b[16*i:])), usec*1000)
		}
	}
	var fd int
	var e unix.Errno
	if pathAddr == 0 && dirfd != atFDCWD {
		fd, e = c.openFD(dirfd)
	} else {
		fd, e = c.resolve(dirfd, pathAddr, true, false)
	}
	if e != 0 {
		return -1, e
	}
	defer unix.Close(fd)
	return c.utimensatResolved(fd, ts)
}

// utime is utime(2): struct utimbuf {actime, modtime} or NULL.
func (c *call) utime(pathAddr, bufAddr uint64) (int64, unix.Errno) {
	var ts *[2]unix.Timespec
	if bufAddr != 0 {
		b, e := c.read(bufAddr, utimbufBytes)
		if e != 0 {
			return -1, e
		}
		ts = &[2]unix.Timespec{
			mkTimespec(int64(binary.NativeEndian.Uint64(b[0:])), 0),
			mkTimespec(int64(binary.NativeEndian.Uint64(b[8:])), 0),
		}
	}
	fd, e := c.resolve(atFDCWD, pathAddr, true, false)
	if e != 0 {
		return -1, e
	}
	defer unix.Close(fd)
	return c.utimensatResolved(fd, ts)
}

// xattrTarget resolves the object of an xattr call: by descriptor (byFD),
// else by path, following a final symlink or not. The call is then made on
// /proc/self/fd/N, which lands on that object; a symbolic link itself
// (lsetxattr on a link) cannot be reached that way and is refused: user
// attributes are not allowed on links anyway, the others need capabilities.
func (c *call) xattrTarget(dirfd int, pathAddr uint64, follow, byFD bool) (int, unix.Errno) {
	var fd int
	var e unix.Errno
	if byFD {
		fd, e = c.openFD(dirfd)
	} else {
		fd, e = c.resolve(dirfd, pathAddr, follow, false)
	}
	if e != 0 {
		return -1, e
	}
	if e := c.inGrant(fd); e != 0 {
		unix.Close(fd)
		return -1, e
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		unix.Close(fd)
		return -1, unix.EPERM
	}
	return fd, 0
}

func (c *call) setxattr(dirfd int, pathAddr uint64, follow, byFD bool, nameAddr, valueAddr, size uint64, flags int) (int64, unix.Errno) {
	name, e := c.readString(nameAddr, maxXattrName+1)
	if e == unix.ENAMETOOLONG {
		return -1, unix.ERANGE
	}
	if e != 0 {
		return -1, e
	}
	if size > maxXattrValue {
		return -1, unix.E2BIG
	}
	value, e := c.read(valueAddr, int(size))
	if e != 0 {
		return -1, e
	}
	fd, e := c.xattrTarget(dirfd, pathAddr, follow, byFD)
	if e != 0 {
		return -1, e
	}
	defer unix.Close(fd)
	return result(unix.Setxattr("/proc/self/fd/"+strconv.Itoa(fd), name, value, flags))
}

func (c *call) removexattr(dirfd int, pathAddr uint64, follow, byFD bool, nameAddr uint64) (int64, unix.Errno) {
	name, e := c.readString(nameAddr, maxXattrName+1)
	if e == unix.ENAMETOOLONG {
		return -1, unix.ERANGE
	}
	if e != 0 {
		return -1, e
	}
	fd, e := c.xattrTarget(dirfd, pathAddr, follow, byFD)
	if e != 0 {
		return -1, e
	}
	defer unix.Close(fd)
	return result(unix.Removexattr("/proc/self/fd/"+strconv.Itoa(fd), name))
}

// inotifyAddWatch adds the watch to the caller's own inotify instance (a
// copy of its descriptor) when the object lies where the command may
// read.
func (c *call) inotifyAddWatch(ifd int, pathAddr uint64, mask uint32) (int64, unix.Errno) {
	fd, e := c.resolve(atFDCWD, pathAddr, mask&inDontFollow == 0, false)
	if e != 0 {
		return -1, e
	}
	defer unix.Close(fd)
	if !within(fd, c.g.readable) {
		return -1, unix.EACCES
	}
	pidfd, err := unix.PidfdOpen(c.pid, 0)
	if err != nil {
		return -1, unix.EPERM
	}
	defer unix.Close(pidfd)
	if !c.valid() {
		return -1, unix.EPERM
	}
	inst, err := unix.PidfdGetfd(pidfd, ifd, 0)
	if err != nil {
		return -1, unix.EBADF
	}
	defer unix.Close(inst)
	// The descriptor is resolved: follow the /proc/self/fd link to it,
	// never past it.
	wd, err := unix.InotifyAddWatch(inst, "/proc/self/fd/"+strconv.Itoa(fd), mask&^inDontFollow)
	if err != nil {
		return -1, errnoOf(err)
	}
	return int64(wd), 0
}
