//go:build linux

package sandboxinit

import (
	"fmt"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The metadata guard of the Landlock tier (InitSpec.MetaGuard).
//
// Landlock has no right for a file's mode, owner, times or extended
// attributes, nor for inotify: in the Landlock tier, where no read-only
// mount stands between the command and the host's files, a command with no
// grant could chmod ~/.ssh (as the user) or /etc/shadow (as root), set the
// times of any file it can reach, and watch a 0700 directory it cannot
// list. Nothing outside the write grants may change its metadata, by path
// or by descriptor (fchmod on a descriptor opened read-only, on a file the
// uid owns, needs no write access), and no watch may be set outside what
// the command may read.
//
// seccomp cannot read a path or tell what a descriptor is, so those calls
// go to the launcher through seccomp user notification: the guard's rules
// are part of the command's notification filter (notify_linux.go), which
// the process that execs the target installs and whose listener it hands
// to the launcher over NotifyFD. The launcher, outside every
// confinement, resolves the target exactly once into an O_PATH descriptor,
// checks where it lies, and performs the call itself on that descriptor
// with the command's credentials; the command's call never continues in
// the kernel, so nothing the command changes after the check (its memory,
// a symlink, a rename) can redirect it (see the driver's metaguard_linux.go).
// A launcher that is gone leaves the listener closed: the calls then fail
// with ENOSYS, never succeed unchecked.
//
// Refused here outright, because nobody needs them in a workspace and the
// launcher could not do them more safely: fanotify_mark (a watch on any
// filesystem object), setxattrat and removexattrat (new in Linux 6.13; libc
// does not use them: ENOSYS, as on older kernels), and the ioctls that set
// inode flags, project ids, generation numbers and fs-verity
// (FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, FS_IOC_SETVERSION,
// FS_IOC_ENABLE_VERITY: the owner may issue them on a read-only
// descriptor).

// seccompRetUserNotif is SECCOMP_RET_USER_NOTIF.
const seccompRetUserNotif = 0x7fc00000

// MetaGuardSyscalls are the calls the launcher answers, by name. Names the
// architecture lacks (utime, futimesat and the path-only chmod and chown
// on arm64) are skipped.
func MetaGuardSyscalls() []string {
	return []string{
		"chmod", "fchmod", "fchmodat", "fchmodat2",
		"chown", "fchown", "lchown", "fchownat",
		"utime", "utimes", "futimesat", "utimensat",
		"setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
		"inotify_add_watch",
	}
}

// MetaGuardNumbers maps the names of MetaGuardSyscalls this architecture
// has to their numbers, for the launcher that answers them.
func MetaGuardNumbers() map[string]int {
	info, err := nativeArch()
	if err != nil {
		return nil
	}
	m := map[string]int{}
	for _, name := range MetaGuardSyscalls() {
		if nr, ok := info.SyscallNames[name]; ok {
			m[name] = nr
		}
	}
	return m
}

// metaGuardRefusals are refused in the filter itself, with their errno.
func metaGuardRefusals() []metaRefusal {
	return []metaRefusal{
		{"fanotify_mark", unix.EPERM},
		{"setxattrat", unix.ENOSYS},
		{"removexattrat", unix.ENOSYS},
	}
}

type metaRefusal struct {
	name  string
	errno unix.Errno
}

// inodeIoctls change an inode's flags or attributes through a descriptor
// that need not be writable. ioctl's request is an unsigned int: only the
// low 32 bits are compared, as the kernel reads them.
func inodeIoctls() []uint32 {
	return []uint32{
		0x40086602, // FS_IOC_SETFLAGS
		0x40046602, // FS_IOC32_SETFLAGS
		0x401c5820, // FS_IOC_FSSETXATTR
		0x40087602, // FS_IOC_SETVERSION
		0x40047602, // FS_IOC32_SETVERSION
		0x40806685, // FS_IOC_ENABLE_VERITY
	}
}

// metaGuardProgram is the guard's filter on its own. A foreign
// architecture is allowed here: the main program kills it.
func metaGuardProgram(info *arch.Info) ([]bpf.Instruction, error) {
	rules, err := metaGuardRules(info)
	if err != nil {
		return nil, err
	}
	return append(notifyHeader(info), rules...), nil
}

// metaGuardRules are the guard's rules, with the syscall number in the
// accumulator; every path returns.
func metaGuardRules(info *arch.Info) ([]bpf.Instruction, error) {
	var p []bpf.Instruction
	for _, name := range MetaGuardSyscalls() {
		nr, ok := info.SyscallNames[name]
		if !ok {
			continue
		}
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1},
			bpf.RetConstant{Val: seccompRetUserNotif})
	}
	for _, r := range metaGuardRefusals() {
		nr, ok := info.SyscallNames[r.name]
		if !ok {
			continue
		}
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1},
			bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(r.errno)})
	}
	ioctlNr, ok := info.SyscallNames["ioctl"]
	if !ok {
		return nil, fmt.Errorf("syscall ioctl unknown on %s", info.Name)
	}
	reqs := inodeIoctls()
	p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(ioctlNr), SkipFalse: uint8(len(reqs) + 3)},
		bpf.LoadAbsolute{Off: argLowOffset(1), Size: 4})
	for i, r := range reqs {
		// Equal: jump to the EPERM after the last compare.
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: r, SkipTrue: uint8(len(reqs) - i)})
	}
	p = append(p, bpf.RetConstant{Val: retAllow}, bpf.RetConstant{Val: retEPERM})
	// Not an ioctl: the jump over the ioctl block lands here.
	p = append(p, bpf.RetConstant{Val: retAllow})
	return p, nil
}
