//go:build linux

package sandboxinit

import (
	"fmt"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The command's own unix sockets (the launcher's side is the driver's
// unixguard_linux.go, which says how each call is answered).
//
// A command may create, bind and connect unix sockets of its own, and use
// socket pairs of every type, while no socket the host created is
// reachable, in the workspace or in a grant (a docker.sock, an ssh-agent
// socket placed there): where the filter is in force:
//
//   - socket(AF_UNIX, any type) and socketpair(AF_UNIX, any type) are
//     allowed by the target's program, in the bwrap tier's network none
//     and allow_hosts, whose network namespace is the sandbox's (or its
//     session's) own (GuardsUnixSockets);
//   - connect, sendto with a destination address (a register: BPF tests
//     it, a NULL one is never notified), sendmsg and sendmmsg (the address
//     is behind a pointer) go to the launcher through the notification
//     filter (notify_linux.go). The launcher makes every one of them
//     itself, on a copy of the command's socket, never continued in the
//     kernel: what the command changes in its memory, in its descriptor
//     table or in the tree after the check reaches nothing. A path is
//     passed as the inode it checked; an inet address under allow_hosts
//     only to the bridge's ports (the launcher's inetRule says why it,
//     not Landlock, must hold that pin for the calls it makes);
//   - a path is reached only when a socket of the sandbox's own network
//     namespace is bound to that very inode (sock_diag's UNIX_DIAG_VFS,
//     asked on a NETLINK_SOCK_DIAG socket the supervisor opens in that
//     namespace and hands to the launcher with the tag diagTag). A socket
//     is in the namespace of the process that created it, and nothing of
//     the host's lives in the sandbox's; so a host socket, wherever it is
//     bound and however it is named (a symbolic link, a rename over the
//     command's own path between check and use), is refused with EACCES;
//   - abstract names are looked up in the socket's network namespace: the
//     sandbox's own holds none of the host's.
//
// bind is not notified: it creates a new inode with the command's rights
// (Landlock, read-only mounts) and cannot reach an existing socket; an
// abstract name it takes lives in the sandbox's namespace alone.
//
// Elsewhere socket(AF_UNIX) stays refused and socket pairs are stream and
// seqpacket only: in the Landlock tier (no network namespace of its own:
// the host's abstract names and its sock_diag view are shared, so neither
// the namespace nor the inode check can tell the sandbox's sockets from
// the host's), and wherever no notification filter is installed. Network
// "all" shares the host's namespace and filters no socket family.

// GuardsUnixSockets reports whether the commands of s may have unix
// sockets of their own when they carry a notification filter: the modes
// of the bwrap tier whose network namespace is the sandbox's own.
func GuardsUnixSockets(s *InitSpec) bool {
	if s.NoNamespaces {
		return false
	}
	switch s.SocketMode {
	case SocketUnixOnly, SocketLoopback:
		return true
	case SocketProxyRouted:
		// The command's TCP connects are notified too and made by the
		// launcher, outside the Landlock domain whose TCP rules pin them
		// to the bridge's ports: the launcher holds that pin itself
		// (its inetRule), so the route stays the only way out.
		return true
	}
	return false
}

// unixGuarded reports whether spec's target gets unix sockets of its own:
// its notification filter carries the unix rules. The supervisor's
// program (supervisorSpec) allows the sockets too, though it carries no
// such filter: the target inherits it, and its refusal would take
// precedence over the notification. The supervisor runs nothing but
// sandbox-init's own code, which opens no unix socket.
func unixGuarded(spec *InitSpec) bool {
	return spec.NotifyFD > 0 && GuardsUnixSockets(spec)
}

// UnixGuardSyscalls are the calls the notification filter hands to the
// launcher for the command's unix sockets (sendto only with a destination
// address).
func UnixGuardSyscalls() []string { return []string{"connect", "sendto", "sendmsg", "sendmmsg"} }

// UnixGuardNumbers maps the names of UnixGuardSyscalls to this
// architecture's numbers.
func UnixGuardNumbers() map[string]int {
	info, err := nativeArch()
	if err != nil {
		return nil
	}
	m := map[string]int{}
	for _, name := range UnixGuardSyscalls() {
		if nr, ok := info.SyscallNames[name]; ok {
			m[name] = nr
		}
	}
	return m
}

// argHighOffset is the offset of the high 32 bits of syscall argument i.
func argHighOffset(i uint32) uint32 {
	lo := argLowOffset(i)
	if lo%8 == 0 {
		return lo + 4
	}
	return lo - 4
}

// unixGuardRules notify the guarded calls, the syscall number in the
// accumulator; a call that is none of them falls through with the number
// still there.
func unixGuardRules(info *arch.Info) ([]bpf.Instruction, error) {
	nr := func(name string) (uint32, error) {
		n, ok := info.SyscallNames[name]
		if !ok {
			return 0, fmt.Errorf("syscall %s unknown on %s", name, info.Name)
		}
		return uint32(n), nil
	}
	var p []bpf.Instruction
	for _, name := range []string{"connect", "sendmsg", "sendmmsg"} {
		n, err := nr(name)
		if err != nil {
			return nil, err
		}
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: n, SkipFalse: 1},
			bpf.RetConstant{Val: seccompRetUserNotif})
	}
	sendto, err := nr("sendto")
	if err != nil {
		return nil, err
	}
	// sendto's address is a pointer in a register: all 64 bits are
	// compared, a NULL one (send, write on a socket) never leaves the
	// kernel, so a command that sends without addresses pays nothing.
	p = append(p,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: sendto, SkipFalse: 6},
		bpf.LoadAbsolute{Off: argLowOffset(4), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 3},
		bpf.LoadAbsolute{Off: argHighOffset(4), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 1},
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: seccompRetUserNotif},
	)
	return p, nil
}

// diagTag is the byte that carries the sock_diag socket on NotifyFD.
const diagTag = 'd'

// sendUnixDiag opens a NETLINK_SOCK_DIAG socket in this process's network
// namespace, the command's, and hands it to the launcher on NotifyFD,
// which asks it which of the namespace's sockets is bound to the inode a
// connect names. Sent by the supervisor before anything of the command's
// runs, and before its own program (which refuses AF_NETLINK) is loaded.
func sendUnixDiag(spec *InitSpec) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return fmt.Errorf("unix sockets: sock_diag socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Sendmsg(spec.NotifyFD, []byte{diagTag}, unix.UnixRights(fd), nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("unix sockets: hand the sock_diag socket to the launcher: %w", err)
	}
	return nil
}
