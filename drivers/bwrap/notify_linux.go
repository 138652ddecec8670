//go:build linux

package bwrap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// The launcher's side of the command's notification filter
// (sandboxinit/notify_linux.go says which calls it hands over and why).
//
// One notifier per command, on every exec path that needs one: the bwrap
// sandbox of a command that may not spawn (direct launch, the allow_hosts
// chain, the terminal, a prepared sandbox) and every Landlock-tier
// command. The process that execs the target installs the filter and
// sends its listener on the notify socket; the notifier answers what the
// filter hands over, dispatching by syscall number:
//
//   - fork, vfork, clone (without CLONE_THREAD: the filter notifies no
//     other): EPERM, counted in refused and reported as a violation of
//     kind spawn. Never SECCOMP_USER_NOTIF_FLAG_CONTINUE, so no answer of
//     this loop can let a process start; a number it does not know gets
//     ENOSYS.
//   - the denylist (sandboxinit's deniedSyscalls): EPERM, the errno the
//     target's own program answers without a notification filter, and a
//     violation of kind syscall. Never CONTINUE: none of them is made.
//   - the metadata guard's calls (Landlock tier, metaguard_linux.go).
//   - connect and the sends of the command's sockets, where it may have
//     unix sockets of its own (unixguard_linux.go).
//
// If the notifier is gone (the driver died, the loop ended), the kernel
// fails every notified call with ENOSYS: a fork is refused all the same,
// only no longer counted. A listener that never arrives leaves the target
// unexecuted: the child that installs the filter fails when it cannot
// send it.

// notifySocket is the pair the listener is sent on: the launcher keeps
// local, sandbox-init inherits remote.
func notifySocket() (local, remote *os.File, err error) {
	if strconv.IntSize != 64 {
		// The guard reads the command's arguments in the 64-bit layouts
		// (timespec, timeval, utimbuf); a 32-bit build would misread
		// them, so the tier refuses to run rather than guard wrongly.
		return nil, nil, errors.New("notification filter: needs a 64-bit build of the driver")
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("notify socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "notify"), os.NewFile(uintptr(fds[1]), "notify-remote"), nil
}

// notifier answers one command's notifications.
type notifier struct {
	local *os.File
	// guard answers the metadata guard's calls; nil outside the Landlock
	// tier (the filter then hands none over, and one is refused).
	guard *metaGuard
	// sockets answers the calls of the command's unix sockets
	// (unixguard_linux.go); the filter hands them over only where the
	// command may have some.
	sockets *unixGuard
	spawnNr map[int32]string
	// denyNr names the denylist's numbers.
	denyNr  map[int32]string
	refused atomic.Int64
	// log holds what was refused the command (spawn, syscall, and the
	// socket guard's network refusals), bounded.
	log   *driverapi.ViolationLog
	stopR *os.File
	stopW *os.File
	done  chan struct{}
	stop  sync.Once
}

// startNotifier answers, on a goroutine of its own, the notifications of
// the listeners that arrive on local (one, or a second when a prepared
// sandbox's waiting child failed and the supervisor forked another) until
// local reads the end of the stream or finish is called. It takes local.
func startNotifier(local *os.File, guard *metaGuard, sockets *unixGuard) (*notifier, error) {
	n := &notifier{local: local, guard: guard, sockets: sockets, spawnNr: numbersOf(sandboxinit.SpawnNumbers()),
		denyNr: numbersOf(sandboxinit.DeniedNumbers()), log: &driverapi.ViolationLog{}, done: make(chan struct{})}
	if sockets != nil {
		sockets.log = n.log
	}
	// The kernel's credentials on every record: a listener offered by
	// number names its process by them (sandboxinit's pullTag).
	if err := unix.SetsockoptInt(int(local.Fd()), unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		local.Close()
		return nil, fmt.Errorf("notifier: %w", err)
	}
	var err error
	if n.stopR, n.stopW, err = os.Pipe(); err != nil {
		local.Close()
		return nil, fmt.Errorf("notifier: %w", err)
	}
	go n.run()
	return n, nil
}

// numbersOf inverts a map of syscall names to this architecture's
// numbers.
func numbersOf(byName map[string]int) map[int32]string {
	m := map[int32]string{}
	for name, nr := range byName {
		m[int32(nr)] = name
	}
	return m
}

// notifierDrain bounds how long finish waits for the loop to end; it ends
// at once but for a guard call in progress (a file-system call).
const notifierDrain = 5 * time.Second

// finish stops the loop and returns how many process starts it refused.
// Called once the command has ended: each refused call was counted before
// its caller resumed, so every refusal of the command's is in the count.
func (n *notifier) finish() int64 {
	if n == nil {
		return 0
	}
	n.stop.Do(func() { n.stopW.Close() })
	select {
	case <-n.done:
	case <-time.After(notifierDrain):
	}
	return n.refused.Load()
}

// violations are what the command was refused, once finish has returned
// (every refusal is recorded before its caller resumes, as for refused).
func (n *notifier) violations() ([]driverapi.Violation, int64) {
	if n == nil {
		return nil, 0
	}
	return n.log.Snapshot()
}

// violationKinds are the kinds of violation the driver watched for a
// command with notifier n (nil: none) that may spawn or not: the kinds
// for which an empty list means that nothing was refused.
//
//   - spawn: with a notifier every refused process start is one of its
//     answers; a command that may spawn is refused none.
//   - syscall: the denylist is the notification filter's whenever there
//     is one (sandboxinit's denyNotified). Without one it is refused
//     unseen.
//   - network: where the socket guard judges the command's inet connects
//     (network none's empty namespace, allow_hosts' route to the
//     bridge). Under network none an inet socket of the Landlock tier is
//     refused by seccomp (socket(2), unseen): not watched there.
//   - filesystem: never. A write under a read-only bind fails with EROFS
//     in the kernel, and Landlock's denials are logged only to the
//     kernel's audit subsystem, which the driver cannot read without
//     CAP_AUDIT_READ (docs/linux.md).
func violationKinds(n *notifier, mayspawn bool) []string {
	switch {
	case n == nil && mayspawn:
		return []string{driverapi.ViolationSpawn}
	case n == nil:
		return nil
	}
	kinds := []string{driverapi.ViolationSpawn, driverapi.ViolationSyscall}
	if n.sockets.watchesInet() {
		kinds = append(kinds, driverapi.ViolationNetwork)
	}
	return kinds
}

// run receives listeners and serves each in turn.
func (n *notifier) run() {
	defer close(n.done)
	defer n.sockets.close()
	defer n.stopR.Close()
	defer n.local.Close()
	if n.guard != nil {
		// The guard acts for the command: on a thread of its own with
		// the command's identity, which dies with this goroutine.
		runtime.LockOSThread()
		if err := dropEffectiveCaps(); err != nil {
			// Without the command's identity the guard would act with
			// more rights than the command: answer nothing (every
			// notified call fails with ENOSYS once the listener is
			// closed).
			return
		}
	}
	for {
		listener, ok := n.receive()
		if !ok {
			return
		}
		if !n.serve(listener) {
			return
		}
	}
}

// wait polls fd and the stop pipe; it reports fd's events, or false when
// stopped (or the poll failed).
func (n *notifier) wait(fd int) (int16, bool) {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(n.stopR.Fd()), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return 0, false
		}
		if fds[1].Revents != 0 {
			return 0, false
		}
		return fds[0].Revents, true
	}
}

// receive waits for a listener on local. false: the stream ended (every
// holder of the remote end is gone) or the loop was stopped. The
// sock_diag socket of the command's namespace, which the supervisor sends
// first when the command may have unix sockets (sandboxinit's
// unixsock_linux.go), is handed to the socket guard on the way.
func (n *notifier) receive() (int, bool) {
	for {
		fd, tag, ok := n.receiveOne()
		if !ok {
			return -1, false
		}
		if tag == 'd' {
			n.sockets.setDiag(fd)
			continue
		}
		return fd, true
	}
}

// receiveOne reads one message of local: its tag and descriptor.
func (n *notifier) receiveOne() (int, byte, bool) {
	fd := int(n.local.Fd())
	if _, ok := n.wait(fd); !ok {
		return -1, 0, false
	}
	buf := make([]byte, 8)
	oob := make([]byte, unix.CmsgSpace(4)+unix.CmsgSpace(unix.SizeofUcred))
	got, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC|unix.MSG_DONTWAIT)
	if err != nil || got < 1 {
		return -1, 0, false
	}
	if buf[0] == 'p' && got == 5 {
		l, ok := pullListener(fd, buf[1:5], oob[:oobn])
		return l, 'm', ok
	}
	if got != 1 || (buf[0] != 'm' && buf[0] != 'd') {
		return -1, 0, false
	}
	// The descriptor, beside the credentials every record carries.
	fds := receivedFDs(oob[:oobn])
	if len(fds) != 1 {
		for _, f := range fds {
			unix.Close(f)
		}
		return -1, 0, false
	}
	return fds[0], buf[0], true
}

// serve answers listener's notifications until every process carrying its
// filter is gone (it hangs up: true, look for another) or the loop is
// stopped (false). It closes listener.
func (n *notifier) serve(listener int) bool {
	defer unix.Close(listener)
	for {
		ev, ok := n.wait(listener)
		if !ok {
			return false
		}
		if ev&unix.POLLIN == 0 {
			// POLLHUP: no process carries the filter any more.
			return true
		}
		var req seccompNotif
		if err := ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
			// ENOENT: the caller died before it was read.
			continue
		}
		if n.sockets.handles(req.Nr) {
			// Answered on a goroutine of its own: a connect or send
			// may block, as in the kernel, for its thread alone.
			n.sockets.start(listener, req)
			continue
		}
		val, errno := n.answer(listener, &req)
		resp := seccompNotifResp{ID: req.ID, Val: val, Error: -int32(errno)}
		_ = ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
	}
}

// answer dispatches one notification by its syscall number.
func (n *notifier) answer(listener int, req *seccompNotif) (int64, unix.Errno) {
	if name, ok := n.spawnNr[req.Nr]; ok {
		// Counted before the answer is sent: the caller resumes only
		// after it, so a command that has ended has all its refusals in
		// the count.
		n.refused.Add(1)
		n.log.Add(driverapi.ViolationSpawn, "process_start", name)
		return -1, unix.EPERM
	}
	if name, ok := n.denyNr[req.Nr]; ok {
		n.log.Add(driverapi.ViolationSyscall, "syscall", name)
		return -1, unix.EPERM
	}
	if n.guard != nil {
		return n.guard.answer(listener, req)
	}
	return -1, unix.ENOSYS
}

// pullListener takes the listener offered by number (sandboxinit's
// pullTag) from the process the kernel's credentials of the record name,
// and answers it so that it may close its own.
func pullListener(local int, num []byte, oob []byte) (int, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return -1, false
	}
	pid := 0
	for i := range msgs {
		if cred, err := unix.ParseUnixCredentials(&msgs[i]); err == nil {
			pid = int(cred.Pid)
		} else if fds, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			for _, f := range fds {
				unix.Close(f)
			}
		}
	}
	if pid <= 0 {
		return -1, false
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, false
	}
	defer unix.Close(pidfd)
	l, err := unix.PidfdGetfd(pidfd, int(int32(binary.NativeEndian.Uint32(num))), 0)
	if err != nil {
		return -1, false
	}
	// A listener is an anonymous inode "[seccomp notify]": anything else
	// offered is not taken.
	if name, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(l)); err != nil || name != "anon_inode:seccomp notify" {
		unix.Close(l)
		return -1, false
	}
	if _, err := unix.Write(local, []byte{'a'}); err != nil {
		unix.Close(l)
		return -1, false
	}
	return l, true
}

// dupFile is a copy of f (close-on-exec) that the caller owns.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", f.Name(), err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
