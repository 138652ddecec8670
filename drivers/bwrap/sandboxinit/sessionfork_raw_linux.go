//go:build linux && (amd64 || arm64)

package sandboxinit

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// atFDCWD is AT_FDCWD (-100) as a system call's argument.
const atFDCWD = ^uintptr(99)

// forkSession clones the reaper of one session command (sessionfork_linux.go)
// in a new PID and mount namespace; the reaper clones the command, which
// runs n.cmd (runWaitChild: confined, then exec). The parent gets the
// reaper's pid.
//
// After the first clone nothing but system calls on n's values and the
// nosplit helpers runs, in both children: the rules of forkWaiting (the
// comment atop prefork_linux.go). Only integers are stored.
//
//go:noinline
//go:norace
//go:nocheckptr
func forkSession(n *nsPlan) (pid int, errno syscall.Errno) {
	var (
		r1 uintptr
		e  syscall.Errno
	)
	beforeFork()
	// CLONE_PIDFD: the parent's pidfd of the reaper in n.pidfd (the third
	// argument on amd64 and arm64 alike), so it is signalled by a handle
	// no reuse of its number can redirect.
	r1, _, e = syscall.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD|unix.CLONE_NEWPID|unix.CLONE_NEWNS|unix.CLONE_PIDFD), 0,
		uintptr(unsafe.Pointer(&n.pidfd)), 0, 0, 0)
	if e != 0 || r1 != 0 {
		afterFork()
		return int(r1), e
	}
	afterForkInChild()
	runReaper(n)
	return 0, 0 // not reached
}

// runReaper is PID 1 of a session command's PID namespace: it makes its
// mounts private, waits for the go-ahead, clones the command, drops every
// capability it holds, forwards the signals it is sent to the command,
// reaps, and once the command has ended kills what is left of its
// namespace, reaps it, writes the command's wait status on its control
// socket and exits. Never returns.
//
//go:nosplit
//go:norace
//go:nocheckptr
func runReaper(n *nsPlan) {
	var (
		r1   uintptr
		e    syscall.Errno
		sfd  uintptr
		cmd  uintptr
		i    int
		done bool
		ws   int32
	)
	// Not dumpable whatever the caller is: its /proc entries and ptrace
	// stay closed to the command.
	syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_DUMPABLE, 0, 0, 0, 0, 0)
	// Its name says what it is in ps and /proc/<pid>/comm.
	syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_NAME, uintptr(unsafe.Pointer(&n.name[0])), 0, 0, 0, 0)
	// Dies with the supervisor's locked thread. A supervisor gone before
	// this call is seen below: the go-ahead's read returns end of file.
	syscall.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0)
	// No controlling terminal, a session of its own (the command then
	// makes its own process group in it).
	syscall.RawSyscall(unix.SYS_SETSID, 0, 0, 0)
	// The command's mounts are its own: nothing mounted in this namespace
	// (a protected entry's cover) propagates to the session or another
	// command.
	if _, _, e = syscall.RawSyscall6(unix.SYS_MOUNT, uintptr(unsafe.Pointer(&n.none[0])), uintptr(unsafe.Pointer(&n.root[0])), 0,
		unix.MS_REC|unix.MS_PRIVATE, 0, 0); e != 0 {
		reaperFail(n, stepMounts, e)
	}
	// Every signal blocked, then read from a signalfd: a PID 1 drops a
	// signal it has no handler for, but a blocked one is queued.
	if _, _, e = syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&n.all)), 0, 8, 0, 0); e != 0 {
		reaperFail(n, stepSignals, e)
	}
	if n.served {
		serveReaperGo(n)
	} else {
		// The go-ahead: the launcher has put this process in the
		// command's cgroup (what it forks next starts there). End of
		// file: the launcher is gone, nothing runs.
		for {
			r1, _, e = syscall.RawSyscall(unix.SYS_READ, n.ctl, uintptr(unsafe.Pointer(&n.buf[0])), 1)
			if e != unix.EINTR {
				break
			}
		}
		if e != 0 || r1 != 1 || n.buf[0] != GoAheadTag {
			syscall.RawSyscall(unix.SYS_EXIT_GROUP, SandboxInitExitCode, 0, 0)
		}
		// The command's descriptors at 0-2 (above 2 in the caller's
		// table, so no one is overwritten before it is copied).
		for i = 0; i < len(n.stdio); i++ {
			if _, _, e = syscall.RawSyscall(unix.SYS_DUP3, n.stdio[i], uintptr(i), 0); e != 0 {
				reaperFail(n, stepFD, e)
			}
		}
	}
	cmd, _, e = syscall.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 {
		reaperFail(n, stepClone, e)
	}
	if cmd == 0 {
		// The command: the signal mask back to empty (an exec keeps it),
		// then its confinement and its exec.
		syscall.RawSyscall6(unix.SYS_RT_SIGPROCMASK, unix.SIG_SETMASK, uintptr(unsafe.Pointer(&n.empty)), 0, 8, 0, 0)
		runWaitChild(n.cmd)
	}
	if n.served {
		// The command exists, in the reaper's cgroup and namespaces: the
		// supervisor answers the hand-over.
		n.tag[0] = ReadyTag
		syscall.RawSyscall(unix.SYS_WRITE, n.ctl, uintptr(unsafe.Pointer(&n.tag[0])), 1)
	}
	// Nothing of the caller's is kept but the control socket: not the
	// command's descriptors (its output ends when it and what it started
	// close theirs), not another command's, not the session's lifeline,
	// not the command's report socket (its exec closes the last copy).
	if n.ctl > 0 {
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, 0, n.ctl-1, 0)
	}
	syscall.RawSyscall(unix.SYS_CLOSE_RANGE, n.ctl+1, uintptr(^uint32(0)), 0)
	if sfd, _, e = syscall.RawSyscall6(unix.SYS_SIGNALFD4, ^uintptr(0), uintptr(unsafe.Pointer(&n.caught)), 8, unix.SFD_CLOEXEC, 0, 0); e != 0 {
		syscall.RawSyscall(unix.SYS_KILL, cmd, uintptr(unix.SIGKILL), 0)
		reaperFail(n, stepSignals, e)
	}
	// Nothing left to do that needs a capability: the reaper holds none
	// from here on, and may gain none (no_new_privs).
	if _, _, e = syscall.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&n.capHdr)), uintptr(unsafe.Pointer(&n.capData[0])), 0); e != 0 {
		syscall.RawSyscall(unix.SYS_KILL, cmd, uintptr(unix.SIGKILL), 0)
		reaperFail(n, stepCaps, e)
	}
	if _, _, e = syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); e != 0 {
		syscall.RawSyscall(unix.SYS_KILL, cmd, uintptr(unix.SIGKILL), 0)
		reaperFail(n, stepNoNew, e)
	}
	for !done {
		r1, _, e = syscall.RawSyscall(unix.SYS_READ, sfd, uintptr(unsafe.Pointer(&n.info[0])), unsafe.Sizeof(n.info))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			break // cannot happen on a signalfd; the namespace ends below
		}
		if n.info[0] != uint32(unix.SIGCHLD) {
			// Forwarded to the command alone, as the supervisor of a
			// sandbox built for its command does.
			syscall.RawSyscall(unix.SYS_KILL, cmd, uintptr(n.info[0]), 0)
			continue
		}
		for {
			r1, _, e = syscall.RawSyscall6(unix.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&ws)), unix.WNOHANG, 0, 0, 0)
			if e == unix.EINTR {
				continue
			}
			if e != 0 || r1 == 0 {
				break
			}
			if r1 == cmd {
				done = true
				n.status[1], n.status[2], n.status[3], n.status[4] = byte(ws), byte(ws>>8), byte(ws>>16), byte(ws>>24)
			}
		}
	}
	// The command has ended: what it left running ends now (kill(-1)
	// from PID 1 reaches every other process of the namespace), and is
	// reaped before the status says nothing of it runs any more.
	syscall.RawSyscall(unix.SYS_KILL, ^uintptr(0), uintptr(unix.SIGKILL), 0)
	for {
		_, _, e = syscall.RawSyscall6(unix.SYS_WAIT4, ^uintptr(0), uintptr(unsafe.Pointer(&ws)), 0, 0, 0, 0)
		if e != 0 && e != unix.EINTR {
			break // ECHILD: nothing left
		}
	}
	if done {
		syscall.RawSyscall(unix.SYS_WRITE, n.ctl, uintptr(unsafe.Pointer(&n.status[0])), uintptr(len(n.status)))
		if n.served {
			// What every process of the namespace used, all reaped now.
			// RUSAGE_CHILDREN is -1.
			syscall.RawSyscall(unix.SYS_GETRUSAGE, ^uintptr(0), uintptr(unsafe.Pointer(&n.ru)), 0)
			syscall.RawSyscall(unix.SYS_WRITE, n.ctl, uintptr(unsafe.Pointer(&n.ru)), unsafe.Sizeof(n.ru))
		}
	}
	if n.served && done {
		// Alive, alone in its namespace, until the supervisor has passed
		// the status on and closed its end: the launcher watches this
		// process, and its end must not come before the record.
		for {
			_, _, e = syscall.RawSyscall(unix.SYS_READ, n.ctl, uintptr(unsafe.Pointer(&n.buf[0])), 1)
			if e != unix.EINTR {
				break
			}
		}
	}
	for {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
}

// reaperFail says which step of the reaper failed, as the waiting child
// does (waitFail: one line on descriptor 2, the sandbox's setup stream
// until the command's descriptors are put there), and exits.
//
//go:nosplit
//go:norace
func reaperFail(n *nsPlan, step string, e syscall.Errno) {
	waitFail(n.cmd, step, -1, e)
}

// serveReaperGo is a served reaper's part before the command's clone: the
// started byte on the command's lifeline, the go-ahead with the command's
// descriptors and mount trees, the protected entries' mounts (each target
// opened with no symlink followed and checked to be the inode the launcher
// saw, as handoverMount does), the descriptors at 0-2. A mount that fails
// is reported on ctl ('e', its index, the errno) and ends the reaper:
// nothing ran. A callee of runReaper's, so that neither's frame holds the
// other's temporaries (a nosplit chain has a small stack).
//
//go:nosplit
//go:norace
//go:nocheckptr
func serveReaperGo(n *nsPlan) {
	var (
		r1 uintptr
		e  syscall.Errno
		i  int
	)
	// Nothing of the supervisor's other commands (their lifelines, their
	// stdio while it is handed on) is held a moment longer than needed.
	for i = 0; i < n.nshut && i < len(n.shut); i++ {
		syscall.RawSyscall(unix.SYS_CLOSE_RANGE, n.shut[i][0], n.shut[i][1], 0)
	}
	n.tag[0] = StartedTag
	if _, _, e = syscall.RawSyscall(unix.SYS_WRITE, n.life, uintptr(unsafe.Pointer(&n.tag[0])), 1); e != 0 {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, SandboxInitExitCode, 0, 0)
	}
	syscall.RawSyscall(unix.SYS_CLOSE, n.life, 0, 0)
	for {
		n.msg.Controllen = uint64(len(n.oob))
		r1, _, e = syscall.RawSyscall(unix.SYS_RECVMSG, n.ctl, uintptr(unsafe.Pointer(&n.msg)), unix.MSG_CMSG_CLOEXEC)
		if e != unix.EINTR {
			break
		}
	}
	// The supervisor's end closed without a go-ahead: nothing to run.
	if e != 0 || r1 != 1 || n.buf[0] != GoAheadTag {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, SandboxInitExitCode, 0, 0)
	}
	n.want = uint64(unix.SizeofCmsghdr) + uint64(4*(3+n.mnt.n))
	if n.mnt.n < 0 || n.mnt.n > maxServeMounts || n.msg.Flags&unix.MSG_CTRUNC != 0 ||
		(*unix.Cmsghdr)(unsafe.Pointer(&n.oob[0])).Level != unix.SOL_SOCKET ||
		(*unix.Cmsghdr)(unsafe.Pointer(&n.oob[0])).Type != unix.SCM_RIGHTS ||
		(*unix.Cmsghdr)(unsafe.Pointer(&n.oob[0])).Len != n.want {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, SandboxInitExitCode, 0, 0)
	}
	for i = 0; i < 3+n.mnt.n && i < len(n.fds); i++ {
		n.fds[i] = *(*int32)(unsafe.Add(unsafe.Pointer(&n.oob[0]), unix.SizeofCmsghdr+4*i))
	}
	for i = 0; i < n.mnt.n && i < maxServeMounts; i++ {
		n.how.Flags = unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC
		n.how.Resolve = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
		n.tfd, _, e = syscall.RawSyscall6(unix.SYS_OPENAT2, atFDCWD, uintptr(unsafe.Pointer(&n.mnt.m[i].path[0])),
			uintptr(unsafe.Pointer(&n.how)), unsafe.Sizeof(n.how), 0, 0)
		if e == 0 {
			if _, _, e = syscall.RawSyscall(unix.SYS_FSTAT, n.tfd, uintptr(unsafe.Pointer(&n.st)), 0); e == 0 {
				if uint64(n.st.Dev) != n.mnt.m[i].dev || uint64(n.st.Ino) != n.mnt.m[i].ino ||
					n.mnt.m[i].devNull != 0 && (n.st.Mode&unix.S_IFMT != unix.S_IFREG || n.st.Size != 0) {
					e = unix.ESTALE
				}
			}
			if e == 0 {
				_, _, e = syscall.RawSyscall6(unix.SYS_MOVE_MOUNT, uintptr(n.fds[3+i]), uintptr(unsafe.Pointer(&n.emptyS[0])),
					n.tfd, uintptr(unsafe.Pointer(&n.emptyS[0])), unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH, 0)
			}
			syscall.RawSyscall(unix.SYS_CLOSE, n.tfd, 0, 0)
		}
		if e != 0 {
			n.failRec[0], n.failRec[1] = ErrorTag, byte(i)
			n.failRec[2], n.failRec[3], n.failRec[4], n.failRec[5] = byte(e), byte(e>>8), byte(e>>16), byte(e>>24)
			syscall.RawSyscall(unix.SYS_WRITE, n.ctl, uintptr(unsafe.Pointer(&n.failRec[0])), uintptr(len(n.failRec)))
			syscall.RawSyscall(unix.SYS_EXIT_GROUP, SandboxInitExitCode, 0, 0)
		}
	}
	// The command's descriptors at 0-2: received above 2 (0-2 were
	// open), so none is overwritten before it is copied.
	for i = 0; i < 3; i++ {
		if _, _, e = syscall.RawSyscall(unix.SYS_DUP3, uintptr(n.fds[i]), uintptr(i), 0); e != 0 {
			reaperFail(n, stepFD, e)
		}
	}
}
