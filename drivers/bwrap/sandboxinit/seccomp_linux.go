//go:build linux

package sandboxinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Layout of struct seccomp_data (include/uapi/linux/seccomp.h).
const (
	seccompDataNr   = 0
	seccompDataArch = 4
	seccompDataArgs = 16
)

const (
	retAllow       = unix.SECCOMP_RET_ALLOW
	retKillProcess = unix.SECCOMP_RET_KILL_PROCESS
	retEPERM       = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS      = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retNoProto     = unix.SECCOMP_RET_ERRNO | uint32(unix.EPROTONOSUPPORT)

	// x32SyscallBit is __X32_SYSCALL_BIT: x32 syscalls arrive with the
	// x86_64 audit arch and this bit set in the number.
	x32SyscallBit = 0x40000000

	// cloneNamespaceFlags are the CLONE_NEW* bits clone(2) accepts.
	// CLONE_NEWTIME (0x80) is absent on purpose: in clone(2) that bit is
	// part of the exit signal (CSIGNAL); a time namespace can only be made
	// through clone3 or unshare, both denied outright.
	cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
		unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
)

// deniedSyscalls return EPERM in every mode. This is the seed's denylist plus
// the new mount API (fsopen & co. mount without mount(2)) and pidfd_getfd
// (steals another process's fd, a ptrace-class primitive). Names the native
// architecture lacks (fork, mknod on arm64) are skipped: what does not exist
// cannot be called.
func deniedSyscalls() []string {
	return []string{
		// filesystem manipulation / escaping the bwrap mount tree
		"mount", "umount2", "pivot_root", "chroot",
		"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "open_tree_attr", "mount_setattr",
		// kernel replacement and modules
		"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
		// eBPF and perf: large kernel attack surface, perf also reads other processes
		"bpf", "perf_event_open",
		// cross-process memory and debugging (independent of ptrace for process_vm_*)
		"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
		// kernel keyring (shared across the user, not namespaced)
		"keyctl", "add_key", "request_key",
		// userfaultfd widens kernel race windows for exploits
		"userfaultfd",
		// io_uring performs socket/open/connect without the syscalls filtered here
		"io_uring_setup", "io_uring_enter", "io_uring_register",
		// swap, kernel log, reboot (mknod and mknodat: setIDRules, FIFOs only)
		"swapon", "swapoff", "syslog", "reboot",
		// namespace switching: leaving or re-forming bwrap's namespaces
		"setns", "unshare",
		// file handles address inodes outside the mount namespace (shocker escape)
		"open_by_handle_at", "name_to_handle_at",
	}
}

// spawnSyscalls are denied when AllowSpawn is false (clone is handled by its
// CLONE_THREAD bit, clone3 is always ENOSYS).
func spawnSyscalls() []string { return []string{"fork", "vfork"} }

// nativeArch is go-seccomp-bpf's description of the running architecture.
func nativeArch() (*arch.Info, error) {
	return arch.GetInfo("")
}

// argLowOffset is the offset of the low 32 bits of syscall argument i in
// seccomp_data. The kernel loads 32-bit words in native byte order.
func argLowOffset(i uint32) uint32 {
	off := seccompDataArgs + 8*i
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 { // big endian
		off += 4
	}
	return off
}

// seccompPolicy is the go-seccomp-bpf part of the filter: default allow, the
// denylist, the clone rules and the socket gate, every match returning EPERM.
func seccompPolicy(spec *InitSpec, info *arch.Info) seccomp.Policy {
	present := func(names []string) []string {
		var out []string
		for _, n := range names {
			if _, ok := info.SyscallNames[n]; ok {
				out = append(out, n)
			}
		}
		return out
	}
	deny := present(deniedSyscalls())
	// With a notification filter the denylist is answered by the launcher
	// (notify_linux.go: the same EPERM, and reported as a violation): an
	// ERRNO here would take precedence over the filter's
	// SECCOMP_RET_USER_NOTIF, and the launcher would never see the call.
	//   - The target's program leaves it out (denyNotified), as the fork
	//     rules: the process that loads it installs the notification
	//     filter first (notifying, the same condition), so every call of
	//     the list meets that filter.
	//   - The supervisor's program, which its child and so the target
	//     inherit, returns SECCOMP_RET_USER_NOTIF for it: of equal actions
	//     the kernel takes the newest filter's, the child's notification
	//     filter, and the supervisor itself, which has no listener on its
	//     own filter, gets ENOSYS for these calls: still refused, it makes
	//     none of them.
	var denyNotify []string
	switch {
	case spec.childNotifies:
		deny, denyNotify = nil, deny
	case denyNotified(spec):
		deny = nil
	}
	// With a notification filter the fork rules are its (notify_linux.go):
	// an EPERM here would take precedence and the launcher would never
	// see, nor count, the call.
	spawnHere := !spec.AllowSpawn && !spawnNotified(spec)
	if spawnHere {
		deny = append(deny, present(spawnSyscalls())...)
	}
	if spec.NoNamespaces {
		// Without a PID namespace the launcher ends the command by killing
		// its process group: nothing may leave it.
		deny = append(deny, present([]string{"setsid", "setpgid"})...)
		// No IPC namespace either: the host's SysV objects are reachable
		// by key or by guessed id, and no Landlock right covers them.
		deny = append(deny, present([]string{"shmget", "shmat", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl",
			"semget", "semop", "semtimedop", "semctl"})...)
	}

	// The kernel keeps only the low 32 bits of clone(2)'s flags
	// (lower_32_bits in kernel/fork.c). Both masks below have no high
	// bits, so the library's BitsSet/BitsNotSet test exactly those low
	// bits and junk in the high half changes nothing. Lists are ORed.
	cloneRules := []seccomp.NameWithConditions{{
		Name: "clone",
		Conditions: seccomp.ArgumentConditions{
			{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaceFlags},
		},
	}}
	if spawnHere {
		// A thread shares the address space and thread group: it is not a
		// new process. Go, Java and Node create threads with
		// CLONE_VM|CLONE_THREAD|...; fork-like clones lack CLONE_THREAD.
		cloneRules = append(cloneRules, seccomp.NameWithConditions{
			Name: "clone",
			Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.BitsNotSet, Value: unix.CLONE_THREAD},
			},
		})
	}

	// Socket gate. socket(2)'s family is an int: a caller may set the high
	// 32 bits, but every rule here is "deny unless equal to an allowed
	// family", and a 64-bit NotEqual fails closed on such values.
	//
	// No socket(AF_UNIX) for the command, in none and allow_hosts alike:
	// seccomp cannot read connect's or sendmsg's address, and a host unix
	// socket inside the workspace or a grant (a docker.sock in a mounted
	// directory, a daemon's datagram socket) is reachable by path, read-only
	// mount or not. socketpair stays for local IPC; seccompPrefix limits it
	// to stream and seqpacket pairs (socketpairTypeGate says why).
	//
	// With the notification filter's unix rules (unixsock_linux.go) the
	// command may have unix sockets and pairs of every type: connect and
	// the addressed sends are the launcher's, which reaches no socket of
	// the host's. The rules that would refuse them here must then stay
	// out: an ERRNO of this program takes precedence over the
	// notification.
	var sockRules []seccomp.NameWithConditions
	var sockDeny []string
	unixOwn := unixGuarded(spec)
	switch {
	case spec.SocketMode == SocketUnixOnly && unixOwn:
		sockRules = append(sockRules,
			seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}}},
			seccomp.NameWithConditions{Name: "socketpair", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}}},
		)
	case (spec.SocketMode == SocketProxyRouted || spec.SocketMode == SocketLoopback) && unixOwn:
		sockRules = append(sockRules,
			seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX},
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET},
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET6}}},
			seccomp.NameWithConditions{Name: "socketpair", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}}},
		)
	case spec.SocketMode == SocketUnixOnly:
		sockRules = append(sockRules,
			seccomp.NameWithConditions{Name: "socketpair", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}}},
			// sendto with a destination address is a connect in disguise
			// (unconnected datagram sockets); with socket() denied and
			// datagram pairs refused no such socket exists, this stays as a
			// second line.
			seccomp.NameWithConditions{Name: "sendto", Conditions: seccomp.ArgumentConditions{
				{Argument: 4, Operation: seccomp.NotEqual, Value: 0}}},
		)
		sockDeny = []string{"connect", "socket"}
	case spec.SocketMode == SocketProxyRouted:
		sockRules = append(sockRules,
			seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET},
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET6}}},
			seccomp.NameWithConditions{Name: "socketpair", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}}},
		)
	case spec.SocketMode == SocketLoopback:
		// The empty namespace confines AF_INET and AF_INET6; everything
		// else (AF_UNIX, AF_NETLINK, AF_PACKET...) stays denied as in
		// unix_only.
		sockRules = append(sockRules,
			seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET},
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET6}}},
			seccomp.NameWithConditions{Name: "socketpair", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}}},
		)
	case spec.SocketMode == SocketBridge:
		// The bridge itself needs its stream unix socket to the host proxy.
		sockRules = append(sockRules,
			seccomp.NameWithConditions{Name: "socket", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX},
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET},
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET6}}},
			seccomp.NameWithConditions{Name: "socketpair", Conditions: seccomp.ArgumentConditions{
				{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX}}},
		)
	}

	// The group of conditions stays last: go-seccomp-bpf lets a call whose
	// conditions do not all hold fall through to the next instruction,
	// which must be the default action (a group after it made openat
	// with a mode of 0o666 take that group's USER_NOTIF, and fail with
	// ENOSYS). A group without names is left out.
	var groups []seccomp.SyscallGroup
	if len(denyNotify) > 0 {
		groups = append(groups, seccomp.SyscallGroup{Names: denyNotify, Action: seccomp.ActionUserNotify})
	}
	if names := append(deny, sockDeny...); len(names) > 0 {
		groups = append(groups, seccomp.SyscallGroup{Names: names, Action: seccomp.ActionErrno})
	}
	groups = append(groups, seccomp.SyscallGroup{NamesWithCondtions: append(append(cloneRules, sockRules...), setIDRules(info)...), Action: seccomp.ActionErrno})
	return seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: groups}
}

// seccompPrefix runs before go-seccomp-bpf's program and closes what the
// library leaves open:
//
//  1. Foreign architecture. The library jumps to the default action (allow)
//     when seccomp_data.arch is not native, so an x86_64 process could issue
//     i386 syscalls with `int 0x80` (socketcall, mount...) past every rule.
//     Nothing legitimate inside the sandbox does that: kill the process.
//  2. x32 (x86_64 only): same arch value, __X32_SYSCALL_BIT in the number,
//     and its own syscall numbers. Return ENOSYS, as an x32-less kernel would.
//  3. clone3: its flags live in a struct behind a pointer, which seccomp
//     cannot read, so namespace and CLONE_THREAD checks are impossible.
//     ENOSYS (not EPERM) makes glibc and others fall back to clone(2),
//     whose flags are a register the rules below can check.
//  4. openat2: its mode and flags live in a struct behind a pointer, so
//     setIDRules cannot check the creation mode; ENOSYS (what a pre-5.6
//     kernel says) makes glibc, Go and the rest fall back to openat.
//  5. socketpair's type, when the network is restricted and the command's
//     unix sockets are not guarded (unixsock_linux.go): only stream and
//     seqpacket pairs (socketpairTypeGate), a masked compare the library
//     cannot express.
//  6. Multipath TCP: Landlock's TCP bind/connect rules do not apply to
//     IPPROTO_MPTCP sockets, and Go's net.Listen uses MPTCP by default. When
//     the network is restricted, socket(..., IPPROTO_MPTCP) gets
//     EPROTONOSUPPORT, what an MPTCP-less kernel says, so runtimes fall back
//     to plain TCP, which Landlock does cover.
//  7. ioctl request numbers: the kernel takes `unsigned int cmd`, the
//     library compares 64 bits, so TIOCSTI|1<<32 would pass a library rule
//     and still inject (CVE-2019-10063 pattern). Compare the low 32 bits.
//     TIOCSTI pushes input into the controlling terminal (CVE-2017-5226);
//     TIOCLINUX can do the same on a virtual console.
func seccompPrefix(spec *InitSpec, info *arch.Info) ([]bpf.Instruction, error) {
	nr := func(name string) (uint32, error) {
		n, ok := info.SyscallNames[name]
		if !ok {
			return 0, fmt.Errorf("syscall %s unknown on %s", name, info.Name)
		}
		return uint32(n), nil
	}
	ioctlNr, err := nr("ioctl")
	if err != nil {
		return nil, err
	}
	clone3Nr, err := nr("clone3")
	if err != nil {
		return nil, err
	}
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompDataArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: retKillProcess},
		bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
	}
	if info.ID == arch.X86_64.ID {
		p = append(p,
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: x32SyscallBit, SkipFalse: 1},
			bpf.RetConstant{Val: retENOSYS},
		)
	}
	openat2Nr, err := nr("openat2")
	if err != nil {
		return nil, err
	}
	p = append(p,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: clone3Nr, SkipFalse: 1},
		bpf.RetConstant{Val: retENOSYS},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: openat2Nr, SkipFalse: 1},
		bpf.RetConstant{Val: retENOSYS},
	)
	if (spec.SocketMode == SocketUnixOnly || spec.SocketMode == SocketProxyRouted || spec.SocketMode == SocketLoopback) && !unixGuarded(spec) {
		socketpairNr, err := nr("socketpair")
		if err != nil {
			return nil, err
		}
		p = append(p, socketpairTypeGate(socketpairNr)...)
	}
	if spec.NoNamespaces && spec.SocketMode == SocketUnrestricted {
		// No mount namespace hides the host's unix sockets (a docker.sock
		// in a readable directory): socket(AF_UNIX) is refused under
		// network all too; socketpair stays. The family is an int, so the
		// low 32 bits are compared, as the kernel reads them.
		socketNr, err := nr("socket")
		if err != nil {
			return nil, err
		}
		p = append(p,
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: socketNr, SkipFalse: 4},
			bpf.LoadAbsolute{Off: argLowOffset(0), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_UNIX, SkipFalse: 1},
			bpf.RetConstant{Val: retEPERM},
			bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
		)
	}
	if spec.SocketMode != SocketUnrestricted {
		socketNr, err := nr("socket")
		if err != nil {
			return nil, err
		}
		p = append(p,
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: socketNr, SkipFalse: 4},
			bpf.LoadAbsolute{Off: argLowOffset(2), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_MPTCP, SkipFalse: 1},
			bpf.RetConstant{Val: retNoProto},
			bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
		)
		if spec.SocketMode == SocketBridge {
			p = append(p, bridgeSocketTypeGate(socketNr)...)
		}
	}
	p = append(p,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: ioctlNr, SkipFalse: 4},
		bpf.LoadAbsolute{Off: argLowOffset(1), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.TIOCSTI, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.TIOCLINUX, SkipFalse: 1},
		bpf.RetConstant{Val: retEPERM},
		// Fall through: the library program reloads arch and nr itself.
	)
	return p, nil
}

// seccompProgram assembles the whole filter for spec: prefix + library.
func seccompProgram(spec *InitSpec) ([]bpf.Instruction, error) {
	info, err := nativeArch()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	prefix, err := seccompPrefix(spec, info)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	pol := seccompPolicy(spec, info)
	body, err := pol.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: assembling policy: %w", err)
	}
	prog := append(prefix, body...)
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: program has %d instructions, limit %d", len(prog), unix.BPF_MAXINSNS)
	}
	return prog, nil
}

// loadSeccomp installs prog on the calling OS thread. The caller must hold
// runtime.LockOSThread and exec on this same thread.
//
// Why not SECCOMP_FILTER_FLAG_TSYNC: execve keeps only the calling thread
// (the kernel kills the others in de_thread) and the exec'd image inherits
// that thread's filter, no_new_privs and Landlock domain. The other Go
// runtime threads only live until that execve and never run sandboxed code,
// so synchronising them adds nothing; it would also make the load fail
// (ESRCH-style) if any thread had diverged, for no gain. Landlock below ABI 8
// cannot sync threads either, so both layers use the same one-thread model.
// go-seccomp-bpf's LoadFilter cannot be used: it assembles the policy itself
// and offers no way to put the prefix in front.
func loadSeccomp(prog []bpf.Instruction) error {
	filter, err := sockFilter(prog)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	// no_new_privs is required to install a filter without CAP_SYS_ADMIN
	// and stops setuid binaries from gaining privileges around it.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	_, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %w", errno)
	}
	return nil
}

// sockFilter assembles prog into the kernel's filter format.
func sockFilter(prog []bpf.Instruction) ([]unix.SockFilter, error) {
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	if len(raw) == 0 {
		return nil, errors.New("seccomp: empty program")
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		filter[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return filter, nil
}

// seccompSupported reports whether this kernel accepts seccomp filters.
func seccompSupported() bool {
	return seccomp.Supported()
}
