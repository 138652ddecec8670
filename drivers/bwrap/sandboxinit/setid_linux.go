//go:build linux

package sandboxinit

import (
	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// setIDBits are the mode bits that make an executable run with its owner's
// or group's identity. A command that could leave such a file in the
// workspace (a host directory) would plant a setuid-root program under a
// root driver, or one that runs as the driver's user under an unprivileged
// driver, for any local user to run later.
const setIDBits = unix.S_ISUID | unix.S_ISGID

// tmpfileFlag is __O_TMPFILE: O_TMPFILE without its O_DIRECTORY part, the
// bit that makes open(2) create an unnamed file with the mode argument.
const tmpfileFlag = unix.O_TMPFILE &^ unix.O_DIRECTORY

// Parts of the file type field (S_IFMT) of mknod's mode: a FIFO has exactly
// the S_IFIFO bit. Every other type (0 and S_IFREG: a regular file that
// could later carry a set-id bit; character and block devices; sockets)
// sets another bit of S_IFMT or lacks S_IFIFO.
const (
	fileTypeMask  = unix.S_IFMT
	fifoTypeBit   = unix.S_IFIFO
	otherTypeBits = fileTypeMask &^ fifoTypeBit
)

// setIDRules deny, with EPERM, every way of giving a file a set-id bit
// that seccomp can see: chmod-family modes, the creation mode of open,
// openat and creat when they create (O_CREAT or O_TMPFILE), and mknod of
// anything but a plain FIFO. openat2 carries its mode in a struct seccomp
// cannot read: seccompPrefix makes it ENOSYS so libc falls back to openat.
//
// The mode arguments are umode_t (16 bits) in the kernel and the flags an
// int: the kernel drops the high half of the register. BitsSet and
// BitsNotSet with masks that have no high bits test the low half only, so
// junk above changes nothing either way.
//
// Not covered, and why that is safe: the set-group-id bit a new directory
// inherits from its parent (the kernel sets it in inode_init_owner, no
// syscall asks for it; on a directory it only chooses the group of new
// entries, it runs nothing); mkdir's own mode (the kernel keeps only the
// permission and sticky bits); file capabilities (setxattr of
// security.capability needs CAP_SETFCAP, which the command never holds).
// chmod g+s on a directory is denied too: seccomp cannot tell a directory
// from a file.
func setIDRules(info *arch.Info) []seccomp.NameWithConditions {
	bits := func(arg uint32, v uint64) seccomp.ArgumentConditions {
		return seccomp.ArgumentConditions{{Argument: arg, Operation: seccomp.BitsSet, Value: v}}
	}
	creating := func(flagsArg, modeArg uint32) seccomp.ArgumentConditions {
		return seccomp.ArgumentConditions{
			{Argument: flagsArg, Operation: seccomp.BitsSet, Value: unix.O_CREAT | tmpfileFlag},
			{Argument: modeArg, Operation: seccomp.BitsSet, Value: setIDBits},
		}
	}
	rules := []seccomp.NameWithConditions{
		{Name: "chmod", Conditions: bits(1, setIDBits)},
		{Name: "fchmod", Conditions: bits(1, setIDBits)},
		{Name: "fchmodat", Conditions: bits(2, setIDBits)},
		{Name: "fchmodat2", Conditions: bits(2, setIDBits)},
		{Name: "creat", Conditions: bits(1, setIDBits)},
		{Name: "open", Conditions: creating(1, 2)},
		{Name: "openat", Conditions: creating(2, 3)},
	}
	// mknod(path, mode, dev) and mknodat(dirfd, path, mode, dev): a FIFO
	// (mkfifo) passes, anything else is denied, and so is a FIFO with a
	// set-id bit.
	for _, m := range []struct {
		name string
		arg  uint32
	}{{"mknod", 1}, {"mknodat", 2}} {
		rules = append(rules,
			seccomp.NameWithConditions{Name: m.name, Conditions: seccomp.ArgumentConditions{
				{Argument: m.arg, Operation: seccomp.BitsNotSet, Value: fifoTypeBit}}},
			seccomp.NameWithConditions{Name: m.name, Conditions: bits(m.arg, otherTypeBits)},
			seccomp.NameWithConditions{Name: m.name, Conditions: bits(m.arg, setIDBits)},
		)
	}
	var out []seccomp.NameWithConditions
	for _, r := range rules {
		// open, creat, chmod and mknod do not exist on arm64: what does
		// not exist cannot be called.
		if _, ok := info.SyscallNames[r.Name]; ok {
			out = append(out, r)
		}
	}
	return out
}

// socketpairTypeGate makes socketpair(2) fail with EPERM unless the type is
// SOCK_STREAM or SOCK_SEQPACKET. An AF_UNIX datagram socket, even one of a
// connected pair, sends to any pathname address given in sendmsg's
// msg_name (unix_dgram_sendmsg honours it), which sits behind a pointer
// seccomp cannot read: such a socket could reach a host datagram socket
// visible through the workspace or a grant (a syslog socket, a daemon's
// control socket). SOCK_RAW is no escape hatch: for AF_UNIX the kernel
// turns it into SOCK_DGRAM, so it is refused as well. Stream and seqpacket
// sockets ignore or refuse msg_name. It runs with the syscall number in A
// and leaves it there.
func socketpairTypeGate(socketpairNr uint32) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: socketpairNr, SkipFalse: 6},
		bpf.LoadAbsolute{Off: argLowOffset(1), Size: 4},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: sockTypeMask},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SOCK_STREAM, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SOCK_SEQPACKET, SkipTrue: 1},
		bpf.RetConstant{Val: retEPERM},
		bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
	}
}
