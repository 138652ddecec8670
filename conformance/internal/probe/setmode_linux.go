//go:build linux

package probe

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// sysFchmodat2 is fchmodat2's number, the same on every Linux architecture
// (Linux 6.6).
const sysFchmodat2 = 452

// atSymlinkFollow is AT_SYMLINK_FOLLOW for linkat.
const atSymlinkFollow = 0x400

// oTmpfile is O_TMPFILE: __O_TMPFILE (the same on the common
// architectures) with O_DIRECTORY (which is not).
const oTmpfile = 0o20000000 | syscall.O_DIRECTORY

// SetModeRoutes are the routes setmode knows on this OS: every system
// call that can give a file a mode, set-id bits included.
func SetModeRoutes() []string {
	return []string{"chmod", "fchmod", "fchmodat", "fchmodat2", "open-create", "creat", "tmpfile", "mknod", "chown-chmod"}
}

// setModeRoute gives path the mode m (permission and set-id bits, as
// chmod(2) takes them) by one route:
//
//	chmod       the chmod system call by path (fchmodat where the
//	            architecture has no chmod, as on arm64)
//	fchmod      fchmod on a descriptor opened read-only
//	fchmodat    fchmodat(AT_FDCWD, path)
//	fchmodat2   fchmodat2(AT_FDCWD, path, flags 0), Linux 6.6
//	open-create openat(O_CREAT|O_EXCL) with the mode: set at creation
//	creat       the creat system call (openat O_CREAT where the
//	            architecture has none)
//	tmpfile     an O_TMPFILE file created with the mode, then linked in
//	            at path
//	mknod       mknodat(S_IFREG | mode): a regular file made by mknod
//	chown-chmod chown to this process's own uid and gid first, then chmod
//	            by path (the order a setuid-root plant takes)
func setModeRoute(route string, m uint32, path string) error {
	errno := func(e syscall.Errno) error {
		if e != 0 {
			return e
		}
		return nil
	}
	sysChmod, sysCreat := rawPathCalls()
	switch route {
	case "chmod":
		if sysChmod < 0 {
			return syscall.Chmod(path, m)
		}
		p, err := syscall.BytePtrFromString(path)
		if err != nil {
			return err
		}
		_, _, e := syscall.Syscall(uintptr(sysChmod), uintptr(unsafe.Pointer(p)), uintptr(m), 0)
		return errno(e)
	case "fchmod":
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return syscall.Fchmod(int(f.Fd()), m)
	case "fchmodat", "fchmodat2":
		p, err := syscall.BytePtrFromString(path)
		if err != nil {
			return err
		}
		nr := uintptr(syscall.SYS_FCHMODAT)
		if route == "fchmodat2" {
			nr = sysFchmodat2
		}
		at := -100 // AT_FDCWD
		_, _, e := syscall.Syscall6(nr, uintptr(at), uintptr(unsafe.Pointer(p)), uintptr(m), 0, 0, 0)
		return errno(e)
	case "open-create", "creat":
		if route == "creat" && sysCreat >= 0 {
			p, err := syscall.BytePtrFromString(path)
			if err != nil {
				return err
			}
			fd, _, e := syscall.Syscall(uintptr(sysCreat), uintptr(unsafe.Pointer(p)), uintptr(m), 0)
			if e != 0 {
				return e
			}
			return syscall.Close(int(fd))
		}
		fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, m)
		if err != nil {
			return err
		}
		return syscall.Close(fd)
	case "tmpfile":
		dir := "."
		if i := lastSlash(path); i >= 0 {
			dir = path[:i+1]
		}
		fd, err := syscall.Open(dir, oTmpfile|syscall.O_WRONLY|syscall.O_CLOEXEC, m)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		src, err := syscall.BytePtrFromString(fmt.Sprintf("/proc/self/fd/%d", fd))
		if err != nil {
			return err
		}
		dst, err := syscall.BytePtrFromString(path)
		if err != nil {
			return err
		}
		at := -100
		_, _, e := syscall.Syscall6(syscall.SYS_LINKAT, uintptr(at), uintptr(unsafe.Pointer(src)), uintptr(at), uintptr(unsafe.Pointer(dst)), atSymlinkFollow, 0)
		return errno(e)
	case "mknod":
		return syscall.Mknod(path, syscall.S_IFREG|m, 0)
	case "chown-chmod":
		if err := os.Chown(path, os.Getuid(), os.Getgid()); err != nil {
			return err
		}
		return syscall.Chmod(path, m)
	}
	return fmt.Errorf("%w: setmode route %q", errUsage, route)
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}
