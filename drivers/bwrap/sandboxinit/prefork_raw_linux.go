//go:build linux && (amd64 || arm64)

package sandboxinit

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawForkArch: forkWaiting knows this architecture's clone (its flags
// first; the other arguments are all zero here) and its 64-bit socket
// structures.
const rawForkArch = true

//go:linkname beforeFork syscall.runtime_BeforeFork
func beforeFork()

//go:linkname afterFork syscall.runtime_AfterFork
func afterFork()

//go:linkname afterForkInChild syscall.runtime_AfterForkInChild
func afterForkInChild()

// forkWaiting forks the waiting child, which runs p and never returns:
// it execs its command or exits. The parent gets the child's pid.
//
// Everything after the fork in the child is system calls on p's values.
// No variable may be declared after beforeFork, no function called but
// nosplit ones that make system calls (waitFail, childAppend), no pointer
// stored: see the comment at the top of prefork_linux.go.
//
//go:noinline
//go:norace
//go:nocheckptr
func forkWaiting(p *waitPlan) (pid int, errno syscall.Errno) {
	var (
		r1 uintptr
		e  syscall.Errno
	)
	beforeFork()
	r1, _, e = syscall.RawSyscall6(unix.SYS_CLONE, uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
	if e != 0 || r1 != 0 {
		afterFork()
		return int(r1), e
	}
	// The child. Default signal handlers and the thread's signal mask.
	afterForkInChild()
	runWaitChild(p)
	return 0, 0 // not reached
}

// runWaitChild is the waiting child's life after its fork (forkWaiting's,
// or the command's in a session fork, sessionfork_raw_linux.go): it
// confines the process and execs the command, or exits. Never returns.
// The same rules as after any raw fork: system calls on p's values and
// nosplit helpers only, no pointer stored.
//
//go:nosplit
//go:norace
//go:nocheckptr
func runWaitChild(p *waitPlan) {
	var (
		r1  uintptr
		e   syscall.Errno
		i   int
		cmd *waitCommand
		c   *unix.Cmsghdr
	)
	// Dies with the supervisor's locked thread; already gone: end now.
	if _, _, e = syscall.RawSyscall(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0); e != 0 {
		waitFail(p, stepDeath, -1, e)
	}
	if r1, _, _ = syscall.RawSyscall(unix.SYS_GETPPID, 0, 0, 0); r1 != p.ppid {
		waitFail(p, stepDeath, -1, unix.ESRCH)
	}
	// A process group of its own, as the command's: kill(0, sig) in it
	// reaches its group, not its supervisor.
	if p.setpgid {
		if _, _, e = syscall.RawSyscall(unix.SYS_SETPGID, 0, 0, 0); e != 0 {
			waitFail(p, stepGroup, -1, e)
		}
	}
	// Capabilities first: what the supervisor holds for the mounts.
	if _, _, e = syscall.RawSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&p.capHdr)), uintptr(unsafe.Pointer(&p.capData[0])), 0); e != 0 {
		waitFail(p, stepCaps, -1, e)
	}
	if _, _, e = syscall.RawSyscall(unix.SYS_CAPGET, uintptr(unsafe.Pointer(&p.capHdr)), uintptr(unsafe.Pointer(&p.capData[0])), 0); e != 0 {
		waitFail(p, stepCaps, -1, e)
	}
	for i = 0; i < len(p.capData); i++ {
		if p.capData[i].Effective|p.capData[i].Permitted|p.capData[i].Inheritable != 0 {
			waitFail(p, stepCapsLeft, -1, unix.EPERM)
		}
	}
	if _, _, e = syscall.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); e != 0 {
		waitFail(p, stepNoNew, -1, e)
	}
	if p.ruleset >= 0 {
		if _, _, e = syscall.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(p.ruleset), p.rsFlags, 0); e != 0 {
			waitFail(p, stepLandlock, -1, e)
		}
	}
	// The notification filter (notify_linux.go), its listener to the
	// launcher, before the socket below can take the number of NotifyFD
	// and before close_range closes it.
	if p.notify {
		if r1, _, e = syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&p.nprog))); e != 0 {
			waitFail(p, stepNotify, -1, e)
		}
		if p.pull {
			// Offered by number, taken by the launcher (pullTag): a
			// sendmsg would wait for the listener's own holder.
			*(*int32)(unsafe.Pointer(&p.prec[1])) = int32(r1)
			if _, _, e = syscall.RawSyscall(unix.SYS_WRITE, p.notifySock, uintptr(unsafe.Pointer(&p.prec[0])), uintptr(len(p.prec))); e != 0 {
				waitFail(p, stepNotify, -1, e)
			}
			for {
				if _, _, e = syscall.RawSyscall(unix.SYS_READ, p.notifySock, uintptr(unsafe.Pointer(&p.pack[0])), 1); e != unix.EINTR {
					break
				}
			}
			if e != 0 {
				waitFail(p, stepNotify, -1, e)
			}
		} else {
			*(*int32)(unsafe.Add(unsafe.Pointer(&p.noob[0]), p.ncmsgData)) = int32(r1)
			if _, _, e = syscall.RawSyscall(unix.SYS_SENDMSG, p.notifySock, uintptr(unsafe.Pointer(&p.nmsg)), unix.MSG_NOSIGNAL); e != 0 {
				waitFail(p, stepNotify, -1, e)
			}
		}
		syscall.RawSyscall(unix.SYS_CLOSE, r1, 0, 0)
		syscall.RawSyscall(unix.SYS_CLOSE, p.notifySock, 0, 0)
	}
	// The socket to its place, then nothing else of the supervisor's
	// (the ruleset, the lifeline, the runtime's own) but 0-2 and keep.
	if p.sock != p.sockFD {
		if _, _, e = syscall.RawSyscall(unix.SYS_DUP3, p.sock, p.sockFD, unix.O_CLOEXEC); e != 0 {
			waitFail(p, stepSocket, -1, e)
		}
	}
	for i = 0; i < p.nranges && i < len(p.ranges); i++ {
		if _, _, e = syscall.RawSyscall(unix.SYS_CLOSE_RANGE, p.ranges[i][0], p.ranges[i][1], 0); e != 0 {
			waitFail(p, stepClose, -1, e)
		}
	}
	for i = 0; i < p.nrlimits && i < len(p.rlimits); i++ {
		if _, _, e = syscall.RawSyscall6(unix.SYS_PRLIMIT64, 0, p.rlimits[i].resource, uintptr(unsafe.Pointer(&p.rlimits[i].lim)), 0, 0, 0); e != 0 {
			waitFail(p, stepRlimit, -1, e)
		}
	}
	// The target's program, from here to the exec: what runs under it
	// (receiving the command, the descriptors, the directory) is what any
	// target may do.
	if _, _, e = syscall.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&p.fprog))); e != 0 {
		waitFail(p, stepSeccomp, -1, e)
	}
	if !p.immediate {
		// Says it waits, and waits: for the byte that says its command is
		// in the shared mapping, with the command's descriptors.
		if _, _, e = syscall.RawSyscall(unix.SYS_WRITE, p.sockFD, uintptr(unsafe.Pointer(&p.started[0])), 1); e != 0 {
			waitFail(p, stepSocket, -1, e)
		}

		// Waiting. The supervisor's end closed without a byte: the sandbox
		// ends without a command, nothing to run, nothing to say.
		for {
			p.msg.Controllen = uint64(len(p.oob))
			r1, _, e = syscall.RawSyscall(unix.SYS_RECVMSG, p.sockFD, uintptr(unsafe.Pointer(&p.msg)), unix.MSG_CMSG_CLOEXEC)
			if e != unix.EINTR {
				break
			}
		}
		if e != 0 {
			waitFail(p, stepWait, -1, e)
		}
		if r1 == 0 {
			syscall.RawSyscall(unix.SYS_EXIT_GROUP, SandboxInitExitCode, 0, 0)
		}
		c = (*unix.Cmsghdr)(unsafe.Pointer(&p.oob[0]))
		if p.buf[0] != goTag || p.msg.Flags&unix.MSG_CTRUNC != 0 || p.msg.Controllen < p.cmsgLen ||
			c.Level != unix.SOL_SOCKET || c.Type != unix.SCM_RIGHTS || c.Len != p.cmsgLen {
			waitFail(p, stepWait, -1, unix.EBADMSG)
		}
		p.fds = *(*[3]int32)(unsafe.Add(unsafe.Pointer(&p.oob), p.cmsgData))
		for i = 0; i < 3; i++ {
			if _, _, e = syscall.RawSyscall(unix.SYS_DUP3, uintptr(p.fds[i]), uintptr(i), 0); e != 0 {
				waitFail(p, stepFD, -1, e)
			}
			syscall.RawSyscall(unix.SYS_CLOSE, uintptr(p.fds[i]), 0, 0)
		}
	}
	cmd = (*waitCommand)(p.region)
	if cmd.cwd != 0 {
		if _, _, e = syscall.RawSyscall(unix.SYS_CHDIR, uintptr(p.region)+cmd.cwd, 0, 0); e != 0 {
			waitFail(p, stepChdir, int(cmd.cwd), e)
		}
	}
	if cmd.nproc > 0 {
		p.rlimits[0] = waitRlimit{unix.RLIMIT_NPROC, unix.Rlimit{Cur: cmd.nproc, Max: cmd.nproc}}
		if _, _, e = syscall.RawSyscall6(unix.SYS_PRLIMIT64, 0, unix.RLIMIT_NPROC, uintptr(unsafe.Pointer(&p.rlimits[0].lim)), 0, 0, 0); e != 0 {
			waitFail(p, stepRlimit, -1, e)
		}
	}
	// What the target inherits: open, and kept across the exec.
	for i = 0; i < p.ninherit && i < len(p.inherit); i++ {
		if _, _, e = syscall.RawSyscall(unix.SYS_FCNTL, p.inherit[i], unix.F_SETFD, 0); e != 0 {
			waitFail(p, stepInherit, -1, e)
		}
	}
	_, _, e = syscall.RawSyscall(unix.SYS_EXECVE, uintptr(p.region)+cmd.path, uintptr(p.region)+cmd.argv, uintptr(p.region)+cmd.envp)
	// The target never ran: the supervisor learns why on the socket (the
	// NotRunTag record), which only this child holds and which an exec
	// that succeeds closes; the sandbox's stderr stays the command's.
	p.notRun[2], p.notRun[3], p.notRun[4], p.notRun[5] = byte(e), byte(e>>8), byte(e>>16), byte(e>>24)
	if r1, _, _ = syscall.RawSyscall(unix.SYS_WRITE, p.sockFD, uintptr(unsafe.Pointer(&p.notRun[0])), uintptr(len(p.notRun))); r1 == uintptr(len(p.notRun)) {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, SandboxInitExitCode, 0, 0)
	}
	waitFail(p, stepExec, int(cmd.path), e)
}

// waitFail writes `aleph-sandbox: sandbox-init: STEP[ ARG]: ERROR` to the
// child's descriptor 2 (the sandbox's setup stream before the hand-over,
// the command's stderr after it, as for a plain sandbox-init) and exits
// with SandboxInitExitCode. ARG, when arg >= 0, is the string at that
// offset of the shared mapping (the directory, the program).
//
//go:nosplit
//go:norace
func waitFail(p *waitPlan, step string, arg int, e syscall.Errno) {
	var n uint
	n = childAppend(p, n, "aleph-sandbox: sandbox-init: ")
	n = childAppend(p, n, step)
	if arg >= 0 {
		n = childAppend(p, n, " ")
		for ; n < uint(len(p.out)) && arg < waitRegionBytes; arg++ {
			b := *(*byte)(unsafe.Add(p.region, arg))
			if b == 0 {
				break
			}
			p.out[n] = b
			n++
		}
	}
	n = childAppend(p, n, ": ")
	if int(e) >= 0 && int(e) < len(p.errs) {
		n = childAppend(p, n, p.errs[int(e)])
	}
	n = childAppend(p, n, "\n")
	syscall.RawSyscall(unix.SYS_WRITE, 2, uintptr(unsafe.Pointer(&p.out[0])), uintptr(n))
	for {
		syscall.RawSyscall(unix.SYS_EXIT_GROUP, SandboxInitExitCode, 0, 0)
	}
}

// childAppend copies s into p.out from n on, as far as it fits, and
// returns the new length.
//
//go:nosplit
//go:norace
func childAppend(p *waitPlan, n uint, s string) uint {
	for j := 0; j < len(s) && n < uint(len(p.out)); j++ {
		p.out[n] = s[j]
		n++
	}
	return n
}
