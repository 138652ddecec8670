//go:build linux

package sandboxinit

import (
	"encoding/binary"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// fakeSeccompData builds a struct seccomp_data for x/net/bpf's VM. The VM
// loads 32-bit words big-endian (packet order) while the kernel loads them in
// native order, so each word is stored big-endian at the offset the program
// reads natively: nr, arch, then each argument's low and high halves at
// argLowOffset(i) and the other half. The VM then sees exactly the values the
// kernel's loads would produce.
func fakeSeccompData(archID uint32, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[seccompDataNr:], nr)
	binary.BigEndian.PutUint32(b[seccompDataArch:], archID)
	for i, a := range args {
		lo := argLowOffset(uint32(i))
		hi := seccompDataArgs + 8*uint32(i)
		if hi == lo {
			hi += 4
		}
		binary.BigEndian.PutUint32(b[lo:], uint32(a))
		binary.BigEndian.PutUint32(b[hi:], uint32(a>>32))
	}
	return b
}

type filterVM struct {
	t    *testing.T
	vm   *bpf.VM
	info *arch.Info
}

func newFilterVM(t *testing.T, spec InitSpec) *filterVM {
	t.Helper()
	return vmOf(t, "seccompProgram", seccompProgram, spec)
}

// vmOf runs the program build makes of spec in a BPF VM.
func vmOf(t *testing.T, name string, build func(*InitSpec) ([]bpf.Instruction, error), spec InitSpec) *filterVM {
	t.Helper()
	prog, err := build(&spec)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	// Must also pass the kernel-side assembler constraints.
	if _, err := bpf.Assemble(prog); err != nil {
		t.Fatalf("bpf.Assemble: %v", err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("bpf.NewVM: %v", err)
	}
	info, err := nativeArch()
	if err != nil {
		t.Fatal(err)
	}
	return &filterVM{t: t, vm: vm, info: info}
}

func (f *filterVM) nr(name string) uint32 {
	f.t.Helper()
	n, ok := f.info.SyscallNames[name]
	if !ok {
		f.t.Fatalf("no syscall %s on %s", name, f.info.Name)
	}
	return uint32(n)
}

func (f *filterVM) runRaw(archID, nr uint32, args ...uint64) uint32 {
	f.t.Helper()
	out, err := f.vm.Run(fakeSeccompData(archID, nr, args...))
	if err != nil {
		f.t.Fatalf("vm.Run: %v", err)
	}
	return uint32(out)
}

func (f *filterVM) run(name string, args ...uint64) uint32 {
	f.t.Helper()
	return f.runRaw(uint32(f.info.ID), f.nr(name), args...)
}

func retName(r uint32) string {
	switch r {
	case retAllow:
		return "ALLOW"
	case retEPERM:
		return "ERRNO(EPERM)"
	case retENOSYS:
		return "ERRNO(ENOSYS)"
	case retKillProcess:
		return "KILL_PROCESS"
	case retNoProto:
		return "ERRNO(EPROTONOSUPPORT)"
	}
	return "other"
}

func (f *filterVM) expect(want uint32, name string, args ...uint64) {
	f.t.Helper()
	if got := f.run(name, args...); got != want {
		f.t.Errorf("%s%v: got %s (%#x), want %s", name, args, retName(got), got, retName(want))
	}
}

func strictSpec(mode SocketMode) InitSpec {
	return InitSpec{SocketMode: mode}
}

func TestSeccompFilterDenylist(t *testing.T) {
	for _, mode := range []SocketMode{SocketUnrestricted, SocketUnixOnly, SocketProxyRouted, SocketLoopback} {
		t.Run(string(mode), func(t *testing.T) {
			f := newFilterVM(t, strictSpec(mode))
			for _, name := range deniedSyscalls() {
				if _, ok := f.info.SyscallNames[name]; !ok {
					continue
				}
				f.expect(retEPERM, name)
			}
			// Positive controls: ordinary syscalls pass.
			for _, name := range []string{"read", "write", "openat", "mmap", "execve", "exit_group", "getpid", "futex", "setrlimit"} {
				f.expect(retAllow, name)
			}
		})
	}
}

func TestSeccompFilterForeignArch(t *testing.T) {
	f := newFilterVM(t, strictSpec(SocketUnrestricted))
	// i386 socketcall(SYS_SOCKET) through int 0x80: nr 102 on i386.
	if got := f.runRaw(unix.AUDIT_ARCH_I386, 102, 1); got != retKillProcess {
		t.Errorf("i386 socketcall: got %s, want KILL_PROCESS", retName(got))
	}
	// Even an i386 syscall that would be harmless natively (getpid, 20).
	if got := f.runRaw(unix.AUDIT_ARCH_I386, 20); got != retKillProcess {
		t.Errorf("i386 getpid: got %s, want KILL_PROCESS", retName(got))
	}
	// Positive control: the native getpid passes.
	f.expect(retAllow, "getpid")
}

func TestSeccompFilterX32(t *testing.T) {
	f := newFilterVM(t, strictSpec(SocketUnrestricted))
	if f.info.ID != arch.X86_64.ID {
		t.Skip("x32 exists only on x86_64")
	}
	// x32 mount (165 in the x32 table is also mount) and x32 getpid.
	for _, nr := range []uint32{x32SyscallBit | 165, x32SyscallBit | 39, x32SyscallBit | 41} {
		if got := f.runRaw(uint32(f.info.ID), nr); got != retENOSYS {
			t.Errorf("x32 nr %#x: got %s, want ERRNO(ENOSYS)", nr, retName(got))
		}
	}
	f.expect(retAllow, "getpid")
}

func TestSeccompFilterIoctl(t *testing.T) {
	f := newFilterVM(t, strictSpec(SocketUnrestricted))
	const fd = 0
	f.expect(retEPERM, "ioctl", fd, unix.TIOCSTI)
	f.expect(retEPERM, "ioctl", fd, unix.TIOCLINUX)
	// The kernel truncates cmd to 32 bits: high bits must not dodge the rule.
	f.expect(retEPERM, "ioctl", fd, 1<<32|unix.TIOCSTI)
	f.expect(retEPERM, "ioctl", fd, 0xffffffff00000000|unix.TIOCSTI)
	f.expect(retEPERM, "ioctl", fd, 0xdead<<32|unix.TIOCLINUX)
	// Other ioctls (isatty's TCGETS, window size, FIONREAD) pass.
	f.expect(retAllow, "ioctl", fd, unix.TCGETS)
	f.expect(retAllow, "ioctl", fd, unix.TIOCGWINSZ)
	f.expect(retAllow, "ioctl", fd, unix.TIOCINQ)
	f.expect(retAllow, "ioctl", fd, 1<<32|unix.TCGETS)
}

func TestSeccompFilterSocketGate(t *testing.T) {
	t.Run("unix_only", func(t *testing.T) {
		f := newFilterVM(t, strictSpec(SocketUnixOnly))
		f.expect(retEPERM, "socket", unix.AF_INET, unix.SOCK_STREAM)
		f.expect(retEPERM, "socket", unix.AF_INET6, unix.SOCK_DGRAM)
		f.expect(retEPERM, "socket", unix.AF_NETLINK, unix.SOCK_RAW)
		f.expect(retEPERM, "socket", unix.AF_PACKET, unix.SOCK_RAW)
		// AF_UNIX with high garbage is not AF_UNIX for a 64-bit compare:
		// fails closed (the kernel would have read AF_UNIX).
		f.expect(retEPERM, "socket", 1<<32|unix.AF_UNIX, unix.SOCK_STREAM)
		f.expect(retEPERM, "socketpair", unix.AF_INET, unix.SOCK_STREAM)
		f.expect(retEPERM, "connect", 3, 0, 0)
		f.expect(retEPERM, "sendto", 3, 0, 0, 0, 0x1000, 16)
		// No AF_UNIX socket either: sendmsg's address cannot be read.
		f.expect(retEPERM, "socket", unix.AF_UNIX, unix.SOCK_STREAM)
		f.expect(retEPERM, "socket", unix.AF_UNIX, unix.SOCK_DGRAM)
		// Datagram pairs send to any path given in msg_name.
		f.expect(retEPERM, "socketpair", unix.AF_UNIX, unix.SOCK_DGRAM)
		f.expect(retEPERM, "socketpair", unix.AF_UNIX, unix.SOCK_RAW)
		f.expect(retEPERM, "socketpair", unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC)
		// Positive controls.
		f.expect(retAllow, "socketpair", unix.AF_UNIX, unix.SOCK_STREAM)
		f.expect(retAllow, "socketpair", unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		f.expect(retAllow, "socketpair", unix.AF_UNIX, unix.SOCK_SEQPACKET)
		f.expect(retAllow, "socketpair", unix.AF_UNIX, 1<<32|unix.SOCK_STREAM)
		f.expect(retAllow, "sendto", 3, 0x1000, 1, 0, 0, 0)
		f.expect(retAllow, "bind", 3, 0, 0)
		f.expect(retAllow, "ioctl", 0, unix.TCGETS) // nr reloaded after the socket check
	})
	t.Run("proxy_routed", func(t *testing.T) {
		f := newFilterVM(t, strictSpec(SocketProxyRouted))
		f.expect(retAllow, "socket", unix.AF_INET, unix.SOCK_STREAM)
		f.expect(retAllow, "socket", unix.AF_INET6, unix.SOCK_STREAM)
		f.expect(retAllow, "connect", 3, 0, 0)
		// Host unix sockets in the workspace or a grant stay unreachable.
		f.expect(retEPERM, "socket", unix.AF_UNIX, unix.SOCK_STREAM)
		f.expect(retEPERM, "socket", unix.AF_UNIX, unix.SOCK_DGRAM)
		f.expect(retEPERM, "socketpair", unix.AF_UNIX, unix.SOCK_DGRAM)
		f.expect(retEPERM, "socket", unix.AF_NETLINK, unix.SOCK_RAW)
		f.expect(retEPERM, "socket", unix.AF_PACKET, unix.SOCK_RAW)
		f.expect(retEPERM, "socket", unix.AF_VSOCK, unix.SOCK_STREAM)
		f.expect(retEPERM, "socketpair", unix.AF_INET, unix.SOCK_STREAM)
		f.expect(retAllow, "socketpair", unix.AF_UNIX, unix.SOCK_STREAM)
		// MPTCP escapes Landlock's TCP rules: refused so callers fall back.
		f.expect(retNoProto, "socket", unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP)
		f.expect(retNoProto, "socket", unix.AF_INET6, unix.SOCK_STREAM, 1<<32|unix.IPPROTO_MPTCP)
		f.expect(retAllow, "socket", unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP)
		f.expect(retEPERM, "ioctl", 0, unix.TIOCSTI) // the ioctl rule still follows
	})
	t.Run("loopback", func(t *testing.T) {
		// network none in an empty namespace: inet sockets of every type
		// for the sandbox's own loopback, nothing else.
		f := newFilterVM(t, strictSpec(SocketLoopback))
		f.expect(retAllow, "socket", unix.AF_INET, unix.SOCK_STREAM)
		f.expect(retAllow, "socket", unix.AF_INET6, unix.SOCK_STREAM)
		f.expect(retAllow, "socket", unix.AF_INET, unix.SOCK_DGRAM)
		f.expect(retAllow, "connect", 3, 0, 0)
		f.expect(retAllow, "bind", 3, 0, 0)
		f.expect(retAllow, "sendto", 3, 0x1000, 1, 0, 0x2000, 16)
		f.expect(retEPERM, "socket", unix.AF_UNIX, unix.SOCK_STREAM)
		f.expect(retEPERM, "socket", unix.AF_UNIX, unix.SOCK_DGRAM)
		f.expect(retEPERM, "socket", 1<<32|unix.AF_INET, unix.SOCK_STREAM)
		f.expect(retEPERM, "socket", unix.AF_NETLINK, unix.SOCK_RAW)
		f.expect(retEPERM, "socket", unix.AF_PACKET, unix.SOCK_RAW)
		f.expect(retEPERM, "socket", unix.AF_VSOCK, unix.SOCK_STREAM)
		f.expect(retEPERM, "socketpair", unix.AF_INET, unix.SOCK_STREAM)
		f.expect(retEPERM, "socketpair", unix.AF_UNIX, unix.SOCK_DGRAM)
		f.expect(retAllow, "socketpair", unix.AF_UNIX, unix.SOCK_STREAM)
		f.expect(retNoProto, "socket", unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP)
		f.expect(retEPERM, "ioctl", 0, unix.TIOCSTI)
	})
	t.Run("bridge", func(t *testing.T) {
		// The bridge's own way to the host proxy is a stream unix socket.
		f := newFilterVM(t, InitSpec{SocketMode: SocketBridge, BridgePorts: []uint16{3128}})
		f.expect(retAllow, "socket", unix.AF_UNIX, unix.SOCK_STREAM)
		f.expect(retAllow, "socket", unix.AF_INET, unix.SOCK_STREAM)
		f.expect(retEPERM, "socket", unix.AF_UNIX, unix.SOCK_DGRAM)
	})
	t.Run("unrestricted", func(t *testing.T) {
		f := newFilterVM(t, strictSpec(SocketUnrestricted))
		f.expect(retAllow, "socket", unix.AF_INET, unix.SOCK_STREAM)
		f.expect(retAllow, "socket", unix.AF_NETLINK, unix.SOCK_RAW)
		f.expect(retAllow, "connect", 3, 0, 0)
		f.expect(retAllow, "socket", unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP)
	})
}

// Flags glibc's pthread_create and Go's newosproc pass to clone.
const threadCloneFlags = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
	unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID |
	unix.CLONE_CHILD_CLEARTID

func TestSeccompFilterClone(t *testing.T) {
	const sigchld = uint64(unix.SIGCHLD)
	t.Run("spawn denied", func(t *testing.T) {
		f := newFilterVM(t, InitSpec{SocketMode: SocketUnrestricted, AllowSpawn: false})
		f.expect(retAllow, "clone", threadCloneFlags)
		f.expect(retEPERM, "clone", sigchld)                                     // fork()
		f.expect(retEPERM, "clone", unix.CLONE_VM|unix.CLONE_VFORK|sigchld)      // posix_spawn, Go os/exec
		f.expect(retEPERM, "clone", threadCloneFlags|unix.CLONE_NEWUSER)         // thread with a namespace
		f.expect(retEPERM, "clone", unix.CLONE_NEWUSER|unix.CLONE_NEWNS|sigchld) // namespace child
		f.expect(retENOSYS, "clone3", 0x1000, 88)
		// The kernel ignores the high 32 bits of clone's flags: junk there
		// neither hides a fork nor turns a thread into a denial.
		f.expect(retEPERM, "clone", 0xffffffff00000000|sigchld)
		f.expect(retEPERM, "clone", 1<<40|unix.CLONE_NEWUSER|sigchld)
		f.expect(retAllow, "clone", 1<<40|threadCloneFlags)
		for _, n := range spawnSyscalls() {
			if _, ok := f.info.SyscallNames[n]; ok {
				f.expect(retEPERM, n)
			}
		}
	})
	t.Run("spawn allowed", func(t *testing.T) {
		f := newFilterVM(t, InitSpec{SocketMode: SocketUnrestricted, AllowSpawn: true})
		f.expect(retAllow, "clone", threadCloneFlags)
		f.expect(retAllow, "clone", sigchld)
		f.expect(retAllow, "clone", unix.CLONE_VM|unix.CLONE_VFORK|sigchld)
		for _, ns := range []uint64{unix.CLONE_NEWUSER, unix.CLONE_NEWNS, unix.CLONE_NEWPID,
			unix.CLONE_NEWNET, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC, unix.CLONE_NEWCGROUP} {
			f.expect(retEPERM, "clone", ns|sigchld)
		}
		// clone3 hides its flags behind a pointer: always ENOSYS.
		f.expect(retENOSYS, "clone3", 0x1000, 88)
		for _, n := range spawnSyscalls() {
			if _, ok := f.info.SyscallNames[n]; ok {
				f.expect(retAllow, n)
			}
		}
	})
}

func TestSeccompProgramSize(t *testing.T) {
	for _, spawn := range []bool{false, true} {
		for _, mode := range []SocketMode{SocketUnrestricted, SocketUnixOnly, SocketProxyRouted, SocketLoopback} {
			spec := InitSpec{SocketMode: mode, AllowSpawn: spawn}
			prog, err := seccompProgram(&spec)
			if err != nil {
				t.Fatal(err)
			}
			if len(prog) < 40 || len(prog) > unix.BPF_MAXINSNS {
				t.Errorf("%s spawn=%v: %d instructions", mode, spawn, len(prog))
			}
		}
	}
}

func BenchmarkSeccompFilterVM(b *testing.B) {
	spec := InitSpec{SocketMode: SocketUnixOnly}
	prog, err := seccompProgram(&spec)
	if err != nil {
		b.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		b.Fatal(err)
	}
	info, _ := nativeArch()
	data := fakeSeccompData(uint32(info.ID), uint32(info.SyscallNames["write"]), 1, 0, 10)
	b.ResetTimer()
	for b.Loop() {
		if _, err := vm.Run(data); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSeccompFilterSetID(t *testing.T) {
	const (
		suid = unix.S_ISUID
		sgid = unix.S_ISGID
		cwd  = uint64(0xffffffffffffff9c) // AT_FDCWD as the register holds it
		path = 0x1000
	)
	for _, mode := range []SocketMode{SocketUnrestricted, SocketUnixOnly, SocketProxyRouted, SocketLoopback} {
		t.Run(string(mode), func(t *testing.T) {
			f := newFilterVM(t, strictSpec(mode))
			has := func(name string) bool { _, ok := f.info.SyscallNames[name]; return ok }
			// chmod family: any set-id bit is refused, high junk or not.
			for _, m := range []uint64{suid | 0o755, sgid | 0o755, suid | sgid | 0o4777, 1<<32 | suid | 0o755} {
				if has("chmod") {
					f.expect(retEPERM, "chmod", path, m)
				}
				f.expect(retEPERM, "fchmod", 3, m)
				f.expect(retEPERM, "fchmodat", cwd, path, m)
				f.expect(retEPERM, "fchmodat2", cwd, path, m, 0)
			}
			// Positive controls: chmod +x, 755, sticky, 0.
			for _, m := range []uint64{0o755, 0o644, 0o1777, 0, 1<<32 | 0o755} {
				if has("chmod") {
					f.expect(retAllow, "chmod", path, m)
				}
				f.expect(retAllow, "fchmod", 3, m)
				f.expect(retAllow, "fchmodat", cwd, path, m)
				f.expect(retAllow, "fchmodat2", cwd, path, m, 0)
			}
			// Creation modes: refused when creating, ignored otherwise.
			creat := uint64(unix.O_CREAT | unix.O_WRONLY | unix.O_TRUNC)
			tmp := uint64(unix.O_TMPFILE | unix.O_RDWR)
			f.expect(retEPERM, "openat", cwd, path, creat, suid|0o755)
			f.expect(retEPERM, "openat", cwd, path, creat|unix.O_EXCL, sgid|0o755)
			f.expect(retEPERM, "openat", cwd, path, tmp, suid|0o755)
			f.expect(retAllow, "openat", cwd, path, creat, 0o755)
			f.expect(retAllow, "openat", cwd, path, tmp, 0o600)
			f.expect(retAllow, "openat", cwd, path, unix.O_RDONLY, suid|0o755) // no creation: mode unused
			if has("open") {
				f.expect(retEPERM, "open", path, creat, suid|0o755)
				f.expect(retAllow, "open", path, creat, 0o644)
			}
			if has("creat") {
				f.expect(retEPERM, "creat", path, sgid|0o755)
				f.expect(retAllow, "creat", path, 0o755)
			}
			// openat2's mode is in a struct: ENOSYS, libc falls back.
			f.expect(retENOSYS, "openat2", cwd, path, 0x2000, 24)
			// mknod: FIFOs only.
			for _, name := range []string{"mknodat", "mknod"} {
				if !has(name) {
					continue
				}
				call := func(want uint32, m uint64) {
					t.Helper()
					if name == "mknod" {
						f.expect(want, name, path, m, 0)
					} else {
						f.expect(want, name, cwd, path, m, 0)
					}
				}
				call(retAllow, unix.S_IFIFO|0o644)
				call(retAllow, 1<<32|unix.S_IFIFO|0o600)
				call(retEPERM, 0o644) // type 0: a regular file
				call(retEPERM, unix.S_IFREG|0o644)
				call(retEPERM, unix.S_IFREG|suid|0o755)
				call(retEPERM, unix.S_IFCHR|0o666)
				call(retEPERM, unix.S_IFBLK|0o666)
				call(retEPERM, unix.S_IFSOCK|0o666)
				call(retEPERM, unix.S_IFIFO|suid|0o644)
				call(retEPERM, unix.S_IFIFO|unix.S_IFCHR|0o644)
			}
			// Foreign architectures still die before any of this.
			if got := f.runRaw(unix.AUDIT_ARCH_I386, 15, path, suid|0o755); got != retKillProcess { // i386 chmod
				t.Errorf("i386 chmod: got %s, want KILL_PROCESS", retName(got))
			}
			if f.info.ID == arch.X86_64.ID {
				if got := f.runRaw(uint32(f.info.ID), x32SyscallBit|90, path, suid|0o755); got != retENOSYS { // x32 chmod
					t.Errorf("x32 chmod: got %s, want ERRNO(ENOSYS)", retName(got))
				}
			}
		})
	}
}

// newGuardedVM is newFilterVM for the whole program sandbox-init loads:
// the pid-1 and fault-signal guards in front of spec's filter.
func newGuardedVM(t *testing.T, spec InitSpec) *filterVM {
	t.Helper()
	return vmOf(t, "guardedProgram", guardedProgram, spec)
}

// A fault signal cannot be queued (any code but SI_USER and SI_TKILL) nor
// chosen as a descriptor's SIGIO, in the target's program and the
// supervisor's alike; the same calls with other signals, a plain
// pidfd_send_signal, other fcntl commands and the pid-1 guard are as
// before.
func TestSeccompFaultSignalGuard(t *testing.T) {
	for _, spawn := range []bool{false, true} {
		spec := strictSpec(SocketUnixOnly)
		spec.AllowSpawn = spawn
		f := newGuardedVM(t, spec)
		const pid, fd, info = 4242, 5, 0x7ffd_0000_1000
		for _, s := range faultSignals() {
			sig := uint64(s)
			f.expect(retEPERM, "rt_sigqueueinfo", pid, sig, info)
			f.expect(retEPERM, "rt_tgsigqueueinfo", pid, pid, sig, info)
			f.expect(retEPERM, "pidfd_send_signal", fd, sig, info, 0)
			f.expect(retEPERM, "fcntl", fd, unix.F_SETSIG, sig)
			// What the kernel truncates away changes nothing.
			f.expect(retEPERM, "rt_sigqueueinfo", pid, 1<<32|sig, info)
			f.expect(retEPERM, "fcntl", fd, 1<<32|unix.F_SETSIG, 1<<32|sig)
			// A siginfo pointer above 4 GiB only.
			f.expect(retEPERM, "pidfd_send_signal", fd, sig, 1<<32, 0)
			// Positive controls: no siginfo (SI_USER), another command.
			f.expect(retAllow, "pidfd_send_signal", fd, sig, 0, 0)
			f.expect(retAllow, "fcntl", fd, unix.F_SETOWN, sig)
			f.expect(retAllow, "kill", pid, sig)
		}
		// Positive controls: other signals pass every one of these calls.
		for _, s := range []uint64{uint64(unix.SIGUSR1), uint64(unix.SIGIO), uint64(unix.SIGABRT), 34, 64} {
			f.expect(retAllow, "rt_sigqueueinfo", pid, s, info)
			f.expect(retAllow, "rt_tgsigqueueinfo", pid, pid, s, info)
			f.expect(retAllow, "pidfd_send_signal", fd, s, info, 0)
			f.expect(retAllow, "fcntl", fd, unix.F_SETSIG, s)
		}
		f.expect(retAllow, "fcntl", fd, unix.F_SETSIG, 0)
		f.expect(retAllow, "fcntl", fd, unix.F_GETFL, 0)
		// The pid-1 guard in front still acts, and the main program after.
		f.expect(retEPERM, "kill", 1, uint64(unix.SIGUSR1))
		f.expect(retEPERM, "rt_sigqueueinfo", 1, uint64(unix.SIGUSR1), info)
		f.expect(retEPERM, "mount")
		if got := f.runRaw(unix.AUDIT_ARCH_I386, 178, pid, uint64(unix.SIGSEGV)); got != retKillProcess {
			t.Errorf("i386 rt_sigqueueinfo: got %s, want KILL_PROCESS", retName(got))
		}
	}
}
