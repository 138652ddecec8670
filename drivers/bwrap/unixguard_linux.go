//go:build linux

package bwrap

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// The launcher's side of the command's own unix sockets (the sandbox-init
// side, sandboxinit/unixsock_linux.go, says where they are allowed and
// which calls its filter hands over).
//
// The command's connect, sendto with an address, sendmsg and sendmmsg
// arrive here. None of them ever continues in the kernel
// (SECCOMP_USER_NOTIF_FLAG_CONTINUE): the kernel would read the descriptor
// number and the address again, and another thread of the command could
// have put a unix socket behind that number (dup2) or a host socket's path
// in that memory in between. Each call is made here instead, once, on a
// copy of the command's socket taken with pidfd_getfd (the same open file,
// so the same socket, whatever the number names afterwards), with the
// address and data read once from the command's memory:
//
//   - the address of a call on a unix socket that names a path is
//     resolved once, in the command's view of the tree (/proc/PID/root,
//     RESOLVE_IN_ROOT, its cwd for a relative path, no magic links), to an
//     O_PATH descriptor; it is reached only if a socket of the sandbox's
//     own network namespace is bound to that inode (sock_diag,
//     UNIX_DIAG_VFS, on the socket sandbox-init opened there), and then
//     through /proc/self/fd/N, the very inode checked. Else the call fails
//     with EACCES: the socket exists and the command may see it, it may
//     not use it (ECONNREFUSED would read as "nobody listens" and send
//     the user looking for a dead server). A host socket never passes: it
//     is not in the sandbox's namespace, wherever it is bound;
//   - the address of a call on an inet socket is judged by the sandbox's
//     network mode (inetRule): under network none (the empty namespace)
//     any; under allow_hosts a TCP socket reaches the bridge's ports and
//     no other (EACCES), see inetRule for why the driver must check this
//     itself;
//   - every other address (abstract names, which the kernel looks up in
//     the socket's namespace, the sandbox's own; unnamed; an inet address
//     the rule lets through) is passed as read: the kernel judges it on
//     the copy.
//
// What the command sees: the call's result and errno, as from the kernel.
// What differs: the peer's SO_PEERCRED and SCM_CREDENTIALS name the driver
// process, not the command's (the connect and the send are the driver's);
// the uid is the same for a driver that runs the command as its own user.
// A call interrupted by a signal while it waits here may still be made
// once (the driver cannot take back a send); the kernel then restarts or
// fails the command's call.
//
// Each call is answered on a goroutine of its own, so a connect or send
// that blocks (a full backlog, a full queue) stalls only the thread that
// made it, as in the kernel, never the notifier's other answers.

// unixGuard answers one command's guarded socket calls.
type unixGuard struct {
	nr map[int32]string
	// inet judges the addresses of the command's inet sockets.
	inet inetRule
	// mu guards diag: a netlink dump is one request and its replies.
	mu sync.Mutex
	// diag is the sock_diag socket of the command's network namespace,
	// -1 until sandbox-init sends it: paths are then refused.
	diag int
	// log receives the refusals (the notifier's violation log; nil: none
	// kept).
	log *driverapi.ViolationLog
}

// watchesInet reports whether the guard sees the command's inet connects
// and can tell the refused ones (violationKinds).
func (g *unixGuard) watchesInet() bool {
	return g != nil && (g.inet.loopbackOnly || len(g.inet.ports) > 0)
}

// refused records a refused call of c to the address raw (of family
// domain) or to a unix socket's path.
func (c *sockCall) refused(domain int, raw []byte, path string) {
	target := path
	if path == "" {
		target = inetTarget(domain, raw)
	}
	c.g.log.Add(driverapi.ViolationNetwork, c.op, target)
}

// inetTarget is an inet sockaddr as host:port ("" when it is none).
func inetTarget(domain int, raw []byte) string {
	switch {
	case domain == unix.AF_INET && len(raw) >= 8:
		return net.JoinHostPort(netip.AddrFrom4([4]byte(raw[4:8])).String(), strconv.Itoa(int(binary.BigEndian.Uint16(raw[2:4]))))
	case domain == unix.AF_INET6 && len(raw) >= 24:
		return net.JoinHostPort(netip.AddrFrom16([16]byte(raw[8:24])).String(), strconv.Itoa(int(binary.BigEndian.Uint16(raw[2:4]))))
	}
	return ""
}

// leavesLoopback reports whether raw, an inet sockaddr, names an address
// outside the loopback range (AF_UNSPEC and short ones: no).
func leavesLoopback(domain int, raw []byte) bool {
	switch {
	case domain == unix.AF_INET && len(raw) >= 8 && binary.NativeEndian.Uint16(raw) == unix.AF_INET:
		return !netip.AddrFrom4([4]byte(raw[4:8])).IsLoopback()
	case domain == unix.AF_INET6 && len(raw) >= 24 && binary.NativeEndian.Uint16(raw) == unix.AF_INET6:
		a := netip.AddrFrom16([16]byte(raw[8:24]))
		return !a.IsLoopback() && !a.Unmap().IsLoopback()
	}
	return false
}

// inetRule is what the guard lets the command's inet sockets reach.
//
// Under allow_hosts the target's Landlock domain pins its TCP connects to
// the bridge's ports (sandboxinit's landlock_linux.go): the bridge is its
// only way out, and nothing else in the namespace is the command's to
// reach. Landlock judges the task that makes the call, and with unix
// sockets of its own the command's connect and addressed sends are made
// by this process, outside that domain: a connect here that only passed
// the address on would take the pin away. Continuing the call in the
// kernel instead (SECCOMP_USER_NOTIF_FLAG_CONTINUE, under the command's
// domain) is no way out: between the check that the descriptor is an
// inet socket and the kernel's own reading of it, another thread of the
// command can dup2 a unix socket onto that number and reach a host
// socket's path. So the guard makes the call itself, on its copy of the
// socket, and applies the pin itself first, as Landlock would: a TCP
// socket (every stream inet socket; MPTCP is refused at creation) reaches
// a bridge port and no other port, whatever the address (the namespace
// routes nothing but loopback), with EACCES as Landlock answers; AF_UNSPEC
// (a disconnect) passes. Datagram inet sockets pass as read: Landlock
// before UDP rules does not hold them either, and in the sandbox's own
// namespace they reach only the command's own sockets.
type inetRule struct {
	// any: every address (network none: the empty namespace confines
	// them). Otherwise a stream socket may reach ports alone.
	any   bool
	ports []uint16
	// loopbackOnly: the sandbox's namespace is empty but for loopback
	// (network none): the kernel refuses any other address itself
	// (ENETUNREACH), the guard only records it as a violation.
	loopbackOnly bool
}

// inetRuleFor is the rule of a plan's socket mode. A mode with no inet
// sockets (unix_only: socket(AF_INET) is refused) gets the closed rule.
func inetRuleFor(mode socketMode, bridgePorts []uint16) inetRule {
	switch mode {
	case socketLoopback:
		return inetRule{any: true, loopbackOnly: true}
	case socketUnrestricted:
		return inetRule{any: true}
	case socketProxyRouted:
		return inetRule{ports: append([]uint16(nil), bridgePorts...)}
	}
	return inetRule{}
}

// allows judges raw, the address of a call on an inet socket of type
// sockType: 0, or the errno the command gets.
func (r inetRule) allows(sockType int, raw []byte) unix.Errno {
	if r.any || sockType == unix.SOCK_DGRAM {
		return 0
	}
	if len(raw) < 2 {
		return unix.EINVAL
	}
	if binary.NativeEndian.Uint16(raw) == unix.AF_UNSPEC {
		return 0
	}
	// sockaddr_in and sockaddr_in6 both carry the port, in network
	// order, after the family; any other family fails in the kernel.
	if len(raw) < 4 {
		return unix.EINVAL
	}
	port := binary.BigEndian.Uint16(raw[2:4])
	for _, p := range r.ports {
		if p == port {
			return 0
		}
	}
	return unix.EACCES
}

// newUnixGuard answers the socket calls of a command of mode's network
// (inetRuleFor).
func newUnixGuard(mode socketMode, bridgePorts []uint16) *unixGuard {
	g := &unixGuard{nr: map[int32]string{}, diag: -1, inet: inetRuleFor(mode, bridgePorts)}
	for name, nr := range sandboxinit.UnixGuardNumbers() {
		g.nr[int32(nr)] = name
	}
	return g
}

func (g *unixGuard) handles(nr int32) bool {
	_, ok := g.nr[nr]
	return ok
}

// setDiag takes fd as the namespace's sock_diag socket (the first one
// sent: the supervisor sends one, before any code of the command runs).
func (g *unixGuard) setDiag(fd int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.diag >= 0 {
		unix.Close(fd)
		return
	}
	g.diag = fd
}

func (g *unixGuard) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.diag >= 0 {
		unix.Close(g.diag)
		g.diag = -1
	}
}

// start answers n, received on listener, on a goroutine of its own, which
// sends the answer on a copy of listener (the loop may close its own).
func (g *unixGuard) start(listener int, n seccompNotif) {
	l, err := unix.FcntlInt(uintptr(listener), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		resp := seccompNotifResp{ID: n.ID, Val: -1, Error: -int32(unix.ENOMEM)}
		_ = ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
		return
	}
	go func() {
		defer unix.Close(l)
		val, errno := g.answer(l, &n)
		resp := seccompNotifResp{ID: n.ID, Val: val, Error: -int32(errno)}
		_ = ioctlPtr(l, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
	}()
}

// sockCall is one guarded call being answered.
type sockCall struct {
	call
	g     *unixGuard
	pidfd int
	// op names the call in a violation: connect or send.
	op string
}

func (g *unixGuard) answer(listener int, n *seccompNotif) (int64, unix.Errno) {
	name := g.nr[n.Nr]
	pid := int(n.Pid)
	mem, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/mem", os.O_RDWR, 0)
	if err != nil {
		return -1, unix.EPERM
	}
	defer mem.Close()
	c := &sockCall{call: call{listener: listener, n: n, pid: pid, mem: mem}, g: g, pidfd: -1, op: "send"}
	if name == "connect" {
		c.op = "connect"
	}
	if c.pidfd, err = pidfdOfThread(pid); err != nil {
		return -1, unix.EPERM
	}
	defer unix.Close(c.pidfd)
	if !c.valid() {
		return -1, unix.EPERM
	}
	sock, e := c.socketCopy(c.fdArg(0))
	if e != 0 {
		return -1, e
	}
	defer unix.Close(sock)
	switch name {
	case "connect":
		return c.connect(sock, c.arg(1), c.arg(2))
	// The flags are an unsigned int: the kernel reads the low 32 bits.
	case "sendto":
		return c.sendto(sock, c.arg(1), c.arg(2), int(uint32(c.arg(3))), c.arg(4), c.arg(5))
	case "sendmsg":
		return c.sendmsg(sock, c.arg(1), int(uint32(c.arg(2))))
	case "sendmmsg":
		return c.sendmmsg(sock, c.arg(1), uint32(c.arg(2)), int(uint32(c.arg(3))))
	}
	return -1, unix.ENOSYS
}

// pidfdThread is PIDFD_THREAD (Linux 6.9): a pidfd of the thread itself.
const pidfdThread = unix.O_EXCL

// pidfdOfThread is a pidfd through which the descriptors of thread tid
// are reached: its own (PIDFD_THREAD), or its thread group leader's on an
// older kernel (the descriptor table is the group's).
func pidfdOfThread(tid int) (int, error) {
	fd, err := unix.PidfdOpen(tid, pidfdThread)
	if err == nil {
		return fd, nil
	}
	status, rerr := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if rerr != nil {
		return -1, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			tgid, cerr := strconv.Atoi(strings.TrimSpace(v))
			if cerr != nil {
				return -1, cerr
			}
			return unix.PidfdOpen(tgid, 0)
		}
	}
	return -1, err
}

// socketCopy is a copy of the command's descriptor fd, which must be a
// socket (the kernel's errno otherwise).
func (c *sockCall) socketCopy(fd int) (int, unix.Errno) {
	if fd < 0 {
		return -1, unix.EBADF
	}
	s, err := unix.PidfdGetfd(c.pidfd, fd, 0)
	if err != nil {
		return -1, unix.EBADF
	}
	if _, err := unix.GetsockoptInt(s, unix.SOL_SOCKET, unix.SO_DOMAIN); err != nil {
		unix.Close(s)
		return -1, unix.ENOTSOCK
	}
	return s, 0
}

// sockaddrUnixSize is sizeof(struct sockaddr_un).
const sockaddrUnixSize = 110

// maxGuardedSend bounds the data of one emulated send: a datagram beyond
// it fails with EMSGSIZE (the kernel's own ceiling, the send buffer, is
// lower by default), a stream send is cut to it and returns its count,
// as a short write.
const maxGuardedSend = 8 << 20

// maxGuardedControl bounds a send's ancillary data (the kernel's
// net.core.optmem_max is 20 KiB by default).
const maxGuardedControl = 64 << 10

// address reads the address of a call on sock and returns what the
// driver's own call must pass instead: the bytes as read, or, for a path
// on a unix socket, /proc/self/fd/N of the checked inode (held by the
// returned descriptor, -1 when none).
func (c *sockCall) address(sock int, addr, addrlen uint64) ([]byte, int, unix.Errno) {
	if addrlen > 1<<16 {
		return nil, -1, unix.EINVAL
	}
	raw, e := c.read(addr, int(addrlen))
	if e != 0 {
		return nil, -1, e
	}
	domain, err := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return nil, -1, unix.ENOTSOCK
	}
	if domain == unix.AF_INET || domain == unix.AF_INET6 {
		typ, err := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_TYPE)
		if err != nil {
			return nil, -1, unix.ENOTSOCK
		}
		if e := c.g.inet.allows(typ, raw); e != 0 {
			if e == unix.EACCES {
				c.refused(domain, raw, "")
			}
			return nil, -1, e
		}
		if c.g.inet.loopbackOnly && leavesLoopback(domain, raw) {
			// Made all the same: the empty namespace answers it, with
			// the errno the command would get without the guard.
			c.refused(domain, raw, "")
		}
		return raw, -1, 0
	}
	if domain != unix.AF_UNIX || len(raw) <= 2 || binary.NativeEndian.Uint16(raw) != unix.AF_UNIX || raw[2] == 0 {
		// Not a path: the kernel judges it on the copy (an abstract name
		// in the sandbox's own namespace).
		return raw, -1, 0
	}
	if len(raw) > sockaddrUnixSize {
		return nil, -1, unix.EINVAL
	}
	path := raw[2:]
	if i := strings.IndexByte(string(path), 0); i >= 0 {
		path = path[:i]
	}
	fd, e := c.resolveIn(string(path))
	if e != 0 {
		return nil, -1, e
	}
	if e := c.g.ownSocket(fd); e != 0 {
		unix.Close(fd)
		if e == unix.EACCES {
			c.refused(domain, nil, string(path))
		}
		return nil, -1, e
	}
	return sockaddrPath("/proc/self/fd/" + strconv.Itoa(fd)), fd, 0
}

// sockaddrPath is a struct sockaddr_un naming path.
func sockaddrPath(path string) []byte {
	b := make([]byte, 2+len(path)+1)
	binary.NativeEndian.PutUint16(b, unix.AF_UNIX)
	copy(b[2:], path)
	return b
}

// resolveIn opens, with O_PATH, what path names for the command: in its
// root (the sandbox's tree), from its cwd when relative, following
// symbolic links as connect does, but never a magic link (/proc/PID/fd/N
// of another process's view).
func (c *sockCall) resolveIn(path string) (int, unix.Errno) {
	if path == "" {
		return -1, unix.ENOENT
	}
	root, e := c.openProc("root")
	if e != 0 {
		return -1, e
	}
	defer unix.Close(root)
	if !strings.HasPrefix(path, "/") {
		cwd, err := os.Readlink(c.procPath("cwd"))
		if err != nil || !strings.HasPrefix(cwd, "/") {
			return -1, unix.ENOENT
		}
		path = strings.TrimSuffix(cwd, "/") + "/" + path
	}
	fd, err := unix.Openat2(root, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, errnoOf(err)
	}
	if !c.valid() {
		unix.Close(fd)
		return -1, unix.EPERM
	}
	return fd, 0
}

// ownSocket returns 0 when a socket of the sandbox's network namespace is
// bound to the inode fd holds; ECONNREFUSED when it is no socket (the
// kernel's answer), EACCES otherwise.
func (g *unixGuard) ownSocket(fd int) unix.Errno {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return unix.EACCES
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return unix.ECONNREFUSED
	}
	bound, err := g.boundInodes()
	if err != nil {
		return unix.EACCES
	}
	// The kernel reports the inode's number in 32 bits and its device in
	// the kernel's own encoding (MAJOR<<20 | MINOR).
	want := vfsID{ino: uint32(st.Ino), dev: unix.Major(uint64(st.Dev))<<20 | unix.Minor(uint64(st.Dev))}
	if bound[want] {
		return 0
	}
	return unix.EACCES
}

// vfsID is struct unix_diag_vfs.
type vfsID struct{ ino, dev uint32 }

// sock_diag (include/uapi/linux/sock_diag.h, unix_diag.h).
const (
	udiagShowVFS  = 0x2
	unixDiagVFS   = 1
	nlmsgHdrLen   = 16
	unixDiagReqSz = 24
	unixDiagMsgSz = 16
)

// boundInodes dumps the unix sockets of the sandbox's namespace and
// returns the inodes they are bound to.
func (g *unixGuard) boundInodes() (map[vfsID]bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.diag < 0 {
		return nil, unix.EACCES
	}
	req := make([]byte, nlmsgHdrLen+unixDiagReqSz)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1)
	r := req[nlmsgHdrLen:]
	r[0] = unix.AF_UNIX
	ne.PutUint32(r[4:], 0xffffffff) // every state
	ne.PutUint32(r[12:], udiagShowVFS)
	if err := unix.Sendto(g.diag, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, err
	}
	out := map[vfsID]bool{}
	buf := make([]byte, 64<<10)
	for {
		got, _, err := unix.Recvfrom(g.diag, buf, 0)
		if err != nil {
			return nil, err
		}
		msgs, err := parseNetlink(buf[:got])
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			switch m.typ {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				return nil, unix.EIO
			}
			if len(m.data) < unixDiagMsgSz {
				continue
			}
			attrs := m.data[unixDiagMsgSz:]
			for len(attrs) >= 4 {
				l := int(ne.Uint16(attrs[0:]))
				t := ne.Uint16(attrs[2:])
				if l < 4 || l > len(attrs) {
					break
				}
				if t == unixDiagVFS && l >= 12 {
					out[vfsID{ino: ne.Uint32(attrs[4:]), dev: ne.Uint32(attrs[8:])}] = true
				}
				adv := (l + 3) &^ 3
				if adv >= len(attrs) {
					break
				}
				attrs = attrs[adv:]
			}
		}
	}
}

type nlMsg struct {
	typ  uint16
	data []byte
}

func parseNetlink(b []byte) ([]nlMsg, error) {
	var out []nlMsg
	ne := binary.NativeEndian
	for len(b) >= nlmsgHdrLen {
		l := int(ne.Uint32(b[0:]))
		if l < nlmsgHdrLen || l > len(b) {
			return nil, unix.EIO
		}
		out = append(out, nlMsg{typ: ne.Uint16(b[4:]), data: b[nlmsgHdrLen:l]})
		adv := (l + 3) &^ 3
		if adv > len(b) {
			break
		}
		b = b[adv:]
	}
	return out, nil
}

func (c *sockCall) connect(sock int, addr, addrlen uint64) (int64, unix.Errno) {
	sa, held, e := c.address(sock, addr, addrlen)
	if e != 0 {
		return -1, e
	}
	if held >= 0 {
		defer unix.Close(held)
	}
	var p unsafe.Pointer
	if len(sa) > 0 {
		p = unsafe.Pointer(&sa[0])
	}
	_, _, errno := unix.Syscall(unix.SYS_CONNECT, uintptr(sock), uintptr(p), uintptr(len(sa)))
	if errno != 0 {
		return -1, errno
	}
	return 0, 0
}

// readData copies the command's buffer of n bytes, cut to maxGuardedSend
// (a datagram socket's longer one fails with EMSGSIZE).
func (c *sockCall) readData(sock int, addr uint64, n uint64) ([]byte, unix.Errno) {
	if n > maxGuardedSend {
		if t, _ := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_TYPE); t != unix.SOCK_STREAM {
			return nil, unix.EMSGSIZE
		}
		n = maxGuardedSend
	}
	return c.read(addr, int(n))
}

func (c *sockCall) sendto(sock int, buf, n uint64, flags int, addr, addrlen uint64) (int64, unix.Errno) {
	data, e := c.readData(sock, buf, n)
	if e != 0 {
		return -1, e
	}
	sa, held, e := c.address(sock, addr, addrlen)
	if e != 0 {
		return -1, e
	}
	if held >= 0 {
		defer unix.Close(held)
	}
	r, e := rawSend(sock, data, nil, sa, flags)
	c.pipeSignal(flags, e)
	return r, e
}

// rawSend is sendmsg on sock with one buffer, control and address.
func rawSend(sock int, data, control, sa []byte, flags int) (int64, unix.Errno) {
	var msg unix.Msghdr
	var iov unix.Iovec
	if len(data) > 0 {
		iov.Base = &data[0]
		iov.SetLen(len(data))
		msg.Iov, msg.Iovlen = &iov, 1
	}
	if len(control) > 0 {
		msg.Control = &control[0]
		msg.SetControllen(len(control))
	}
	if len(sa) > 0 {
		msg.Name = &sa[0]
		msg.Namelen = uint32(len(sa))
	}
	// Never a SIGPIPE for the driver: the caller sends it to the command.
	r, _, errno := unix.Syscall(unix.SYS_SENDMSG, uintptr(sock), uintptr(unsafe.Pointer(&msg)), uintptr(flags|unix.MSG_NOSIGNAL))
	if errno != 0 {
		return -1, errno
	}
	return int64(r), 0
}

// pipeSignal gives the command's thread the SIGPIPE the kernel would have
// sent it with EPIPE, unless it asked for none.
func (c *sockCall) pipeSignal(flags int, e unix.Errno) {
	if e == unix.EPIPE && flags&unix.MSG_NOSIGNAL == 0 {
		_ = unix.PidfdSendSignal(c.pidfd, unix.SIGPIPE, nil, 0)
	}
}

// The command's struct msghdr (64-bit layout).
const (
	msghdrSize  = 56
	mmsghdrSize = 64
	iovecSize   = 16
	maxIovecs   = 1024 // UIO_MAXIOV
)

// message reads the command's msghdr at addr and returns its data (the
// iovecs joined), its control (SCM_RIGHTS carrying copies of the
// command's descriptors, to close with the returned descriptors) and its
// address.
func (c *sockCall) message(sock int, addr uint64) (data, control, sa []byte, fds []int, held int, e unix.Errno) {
	held = -1
	h, e := c.read(addr, msghdrSize)
	if e != 0 {
		return nil, nil, nil, nil, -1, e
	}
	ne := binary.NativeEndian
	name, namelen := ne.Uint64(h[0:]), uint64(ne.Uint32(h[8:]))
	iov, iovlen := ne.Uint64(h[16:]), ne.Uint64(h[24:])
	ctl, ctllen := ne.Uint64(h[32:]), ne.Uint64(h[40:])
	if iovlen > maxIovecs {
		return nil, nil, nil, nil, -1, unix.EMSGSIZE
	}
	vecs, e := c.read(iov, int(iovlen)*iovecSize)
	if e != 0 {
		return nil, nil, nil, nil, -1, e
	}
	var total uint64
	for i := 0; i < int(iovlen); i++ {
		base, l := ne.Uint64(vecs[i*iovecSize:]), ne.Uint64(vecs[i*iovecSize+8:])
		if l == 0 {
			continue
		}
		if total+l > maxGuardedSend {
			if t, _ := unix.GetsockoptInt(sock, unix.SOL_SOCKET, unix.SO_TYPE); t != unix.SOCK_STREAM {
				return nil, nil, nil, nil, -1, unix.EMSGSIZE
			}
			l = maxGuardedSend - total
		}
		b, e := c.read(base, int(l))
		if e != 0 {
			return nil, nil, nil, nil, -1, e
		}
		data = append(data, b...)
		total += l
		if total >= maxGuardedSend {
			break
		}
	}
	if ctllen > 0 {
		if ctllen > maxGuardedControl {
			return nil, nil, nil, nil, -1, unix.ENOBUFS
		}
		if control, e = c.read(ctl, int(ctllen)); e != 0 {
			return nil, nil, nil, nil, -1, e
		}
		if fds, e = c.translateRights(control); e != 0 {
			return nil, nil, nil, nil, -1, e
		}
	}
	if name != 0 && namelen > 0 {
		if sa, held, e = c.address(sock, name, namelen); e != 0 {
			closeFDs(fds)
			return nil, nil, nil, nil, -1, e
		}
	}
	return data, control, sa, fds, held, 0
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// translateRights replaces, in control, the descriptor numbers of every
// SCM_RIGHTS message with copies of the command's descriptors, which it
// returns for closing once sent. Other messages pass as they are.
func (c *sockCall) translateRights(control []byte) ([]int, unix.Errno) {
	var fds []int
	ne := binary.NativeEndian
	const hdr = 16 // struct cmsghdr: len u64, level i32, type i32
	b := control
	for len(b) >= hdr {
		l := ne.Uint64(b[0:])
		if l < hdr || l > uint64(len(b)) {
			closeFDs(fds)
			return nil, unix.EINVAL
		}
		level, typ := int32(ne.Uint32(b[8:])), int32(ne.Uint32(b[12:]))
		if level == unix.SOL_SOCKET && typ == unix.SCM_RIGHTS {
			for off := hdr; off+4 <= int(l); off += 4 {
				cfd := int(int32(ne.Uint32(b[off:])))
				if cfd < 0 {
					closeFDs(fds)
					return nil, unix.EBADF
				}
				mine, err := unix.PidfdGetfd(c.pidfd, cfd, 0)
				if err != nil {
					closeFDs(fds)
					return nil, unix.EBADF
				}
				fds = append(fds, mine)
				ne.PutUint32(b[off:], uint32(int32(mine)))
			}
		}
		adv := (l + 7) &^ 7
		if adv >= uint64(len(b)) {
			break
		}
		b = b[adv:]
	}
	return fds, 0
}

func (c *sockCall) sendmsg(sock int, addr uint64, flags int) (int64, unix.Errno) {
	data, control, sa, fds, held, e := c.message(sock, addr)
	if e != 0 {
		return -1, e
	}
	defer closeFDs(fds)
	if held >= 0 {
		defer unix.Close(held)
	}
	r, e := rawSend(sock, data, control, sa, flags)
	c.pipeSignal(flags, e)
	return r, e
}

// sendmmsg sends the first message only and says so (a count of one):
// sendmmsg may send fewer than asked, and callers send the rest again.
func (c *sockCall) sendmmsg(sock int, addr uint64, vlen uint32, flags int) (int64, unix.Errno) {
	if vlen == 0 {
		return 0, 0
	}
	n, e := c.sendmsg(sock, addr, flags)
	if e != 0 {
		return -1, e
	}
	var l [4]byte
	binary.NativeEndian.PutUint32(l[:], uint32(n))
	if _, err := c.mem.WriteAt(l[:], int64(addr+msghdrSize)); err != nil {
		return -1, unix.EFAULT
	}
	return 1, 0
}
