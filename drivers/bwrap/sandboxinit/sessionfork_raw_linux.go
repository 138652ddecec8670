//go:build linux && (amd64 || arm64)

package sandboxinit

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

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
	r1, _, e = syscall.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD|unix.CLONE_NEWPID|unix.CLONE_NEWNS), 0, 0, 0, 0, 0)
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
	// The go-ahead: the launcher has put this process in the command's
	// cgroup (what it forks next starts there). End of file: the
	// launcher is gone, nothing runs.
	for {
		r1, _, e = syscall.RawSyscall(unix.SYS_READ, n.ctl, uintptr(unsafe.Pointer(&n.buf[0])), 1)
		if e != unix.EINTR {
			break
		}
	}
	if e != 0 || r1 != 1 || n.buf[0] != GoAheadTag {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, SandboxInitExitCode, 0, 0)
	}
	// The command's descriptors at 0-2 (above 2 in the caller's table,
	// so no one is overwritten before it is copied).
	for i = 0; i < len(n.stdio); i++ {
		if _, _, e = syscall.RawSyscall(unix.SYS_DUP3, n.stdio[i], uintptr(i), 0); e != 0 {
			reaperFail(n, stepFD, e)
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
