//go:build linux

package sandboxinit

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A session command without a sandbox-init of its own.
//
// A session supervisor (session_linux.go) used to fork and exec a prepared
// sandbox-init per command; that Go start and its confinement were most of
// a warm command's CPU. This file is the part of the fork path that runs
// in the supervisor's process and below it: the command's confinement
// planned once per session (sessionForker: the target's seccomp program,
// its Landlock ruleset, its limits, the descriptors it keeps), and per
// command two raw clones and no Go code after them (forkSession,
// sessionfork_raw_linux.go):
//
//   - the reaper, cloned into a new PID and mount namespace, is PID 1
//     there. It makes its mounts private, blocks every signal and waits
//     for the go-ahead on its control socket (the launcher puts it in the
//     command's cgroup first), puts the command's descriptors at 0-2 and
//     clones the command. Then it keeps nothing of the supervisor's but
//     its control socket, drops every capability, sets no_new_privs, and
//     loops on a signalfd: a signal it is sent goes to the command, a
//     SIGCHLD reaps. Once the command has ended it kills every other
//     process of its namespace, reaps them, writes the command's wait
//     status on the control socket and exits. It is not dumpable.
//   - the command runs runWaitChild with the planned values, as a
//     prepared sandbox's waiting child does: capabilities emptied,
//     no_new_privs, Landlock, the rlimits, the target's seccomp program
//     (with the no-spawn filter and the PID-1 guard when the profile has
//     them), its own process group, then exec.
//
// What each per-command guarantee rests on in this path: the tree dies
// whole because the reaper is PID 1 of its namespace (its end, or a
// SIGKILL from the supervisor on a timeout, ends every process in it);
// the exit status is the reaper's wait4 of the command, raw, as the
// supervisor's record carries it; signals reach the command through the
// reaper (a PID 1 with a blocked signal queues it; the command's own
// kill(1, ...) stays refused by the PID-1 guard of its program); the
// cgroup is joined by the reaper before the command exists; no-spawn,
// seccomp and Landlock are applied in the command after the clone, from
// the plan. Not in this path: a terminal (the pty relay is Go code;
// session sandboxes take no terminal command). The session supervisor's
// use of it (the lifeline, the protected entries' mounts, the
// notification filter's listener) is sessionserve_linux.go's.
//
// Who can reach whom: the command has no number for the supervisor (a
// PID namespace below it) nor for the reaper's parent; the reaper is PID 1
// of the command's namespace, holds no capability, is not dumpable, and
// the command's Landlock domain (scoped) and seccomp program keep
// signals and ptrace away from it.

// nsPlan is what forkSession's two children run, filled before the clone.
type nsPlan struct {
	cmd    *waitPlan // the command's confinement and its layout (immediate)
	ctl    uintptr   // the reaper's end of its control socket
	stdio  [3]uintptr
	none   [5]byte // "none", the mount's source
	root   [2]byte // "/"
	all    uint64  // the signal sets, as the kernel reads them (8 bytes)
	empty  uint64
	caught uint64 // what the signalfd reads: every signal but KILL and STOP
	buf    [1]byte
	info   [32]uint32 // one signalfd_siginfo
	status [5]byte    // StatusTag and the wait status, little-endian
	// The reaper's capability sets, emptied.
	capHdr  unix.CapUserHeader
	capData [2]unix.CapUserData
	name    [16]byte // ReaperName, NUL-terminated
	// pidfd: where the clone puts the parent's pidfd of the reaper.
	pidfd int32
	// served: the reaper of a session supervisor's command
	// (sessionserve_linux.go). It writes the started byte on life (the
	// command's lifeline, so the kernel's credentials name it to the
	// launcher), then takes the go-ahead from ctl with the command's
	// descriptors and the protected entries' mount trees (mnt), mounts
	// them, reports ReadyTag on ctl once the command is cloned, and after
	// its status (with the usage, ru) waits for ctl's end before it exits.
	served  bool
	life    uintptr
	tag     [1]byte
	iov     unix.Iovec
	oob     [serveOOB]byte
	msg     unix.Msghdr
	fds     [3 + maxServeMounts]int32
	mnt     *serveMounts // a shared mapping, filled before the go-ahead
	how     unix.OpenHow
	st      unix.Stat_t
	emptyS  [1]byte
	ru      unix.Rusage
	failRec [6]byte // 'e', the mount's index, the errno (little-endian)
	tfd     uintptr // the mount's target, opened
	want    uint64  // the go-ahead's control message length
	// shut: the ranges a served reaper closes first (every descriptor of
	// the supervisor's but those it and the command need).
	shut  [maxWaitRanges][2]uintptr
	nshut int
}

// ReaperName is the reaper's name (its comm): what a command of the fork
// path finds as its parent.
const ReaperName = "aleph-reaper"

// Reaper steps, for its failure message.
const (
	stepMounts  = "private mounts"
	stepSignals = "signals"
	stepClone   = "clone"
)

// sessionForker is the confinement of one session's commands, planned
// once: the target's program and limits in a waitPlan and its Landlock
// ruleset, built, kept open for every command's clone.
type sessionForker struct {
	tmpl *waitPlan
	rs   ruleset
}

// newSessionForker plans spec's commands' confinement.
func newSessionForker(spec *InitSpec) (*sessionForker, error) {
	if notifying(spec) {
		// The listener goes on each command's own notify socket: only the
		// served path (newServeForker) places one.
		return nil, errors.New("session fork: a notification filter is not planned here")
	}
	return planSessionForker(spec)
}

// planSessionForker plans spec's commands' confinement.
func planSessionForker(spec *InitSpec) (*sessionForker, error) {
	if !rawForkWorks() {
		return nil, errors.New("session fork: no raw fork here")
	}
	p, ll, err := childPlan(spec)
	if err != nil {
		return nil, err
	}
	rs, err := buildRuleset(ll)
	if err != nil {
		return nil, err
	}
	p.ruleset, p.rsFlags = rs.fd, uintptr(rs.flags)
	// The command's parent is the reaper: PID 1 of its namespace.
	p.ppid = 1
	p.immediate, p.setpgid = true, true
	return &sessionForker{tmpl: p, rs: rs}, nil
}

func (f *sessionForker) close() { f.rs.close() }

// nsCommand is one command started by a sessionForker: pid is its reaper
// in the caller's PID namespace.
type nsCommand struct {
	pid    int
	ctl    int // control: the go-ahead out, the status in
	report int // the command's NotRunTag record, when its exec failed
}

// start clones the reaper of one command (path looked up already, argv,
// env, cwd; stdio its descriptors 0-2, not closed here). The reaper waits
// for goAhead. It runs on a locked thread: the reaper's death signal
// follows it.
func (f *sessionForker) start(path string, argv, env []string, cwd string, stdio [3]int) (*nsCommand, error) {
	p := *f.tmpl
	p.fprog = unix.SockFprog{Len: uint16(len(p.filter)), Filter: &p.filter[0]}
	p.layout = make([]byte, commandLayoutSize(path, argv, env)+len(cwd)+1)
	if err := layOutCommand(p.layout, path, argv, env, cwd, 0); err != nil {
		return nil, err
	}
	p.region = unsafe.Pointer(&p.layout[0])
	n := &nsPlan{cmd: &p, none: [5]byte{'n', 'o', 'n', 'e'}, root: [2]byte{'/'},
		all: ^uint64(0), caught: ^uint64(0) &^ (sigBit(unix.SIGKILL) | sigBit(unix.SIGSTOP)), pidfd: -1}
	copy(n.name[:], ReaperName)
	n.status[0] = StatusTag
	n.capHdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var closeLater []int
	defer func() {
		for _, fd := range closeLater {
			unix.Close(fd)
		}
	}()
	// The command's descriptors above 2 in this table (see runReaper).
	for i, fd := range stdio {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return nil, fmt.Errorf("session fork: descriptor %d: %w", i, err)
		}
		closeLater = append(closeLater, d)
		n.stdio[i] = uintptr(d)
	}
	ctl, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("session fork: socketpair: %w", err)
	}
	closeLater = append(closeLater, ctl[1])
	rep, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		unix.Close(ctl[0])
		return nil, fmt.Errorf("session fork: socketpair: %w", err)
	}
	closeLater = append(closeLater, rep[1])
	n.ctl, p.sock = uintptr(ctl[1]), uintptr(rep[1])
	syscall.ForkLock.Lock()
	pid, errno := forkSession(n)
	syscall.ForkLock.Unlock()
	runtime.KeepAlive(n)
	runtime.KeepAlive(&p)
	if n.pidfd >= 0 {
		// This caller names the reaper by its pid (its own child, reaped
		// by wait only).
		unix.Close(int(n.pidfd))
	}
	if errno != 0 {
		unix.Close(ctl[0])
		unix.Close(rep[0])
		return nil, fmt.Errorf("session fork: clone: %w", errno)
	}
	return &nsCommand{pid: pid, ctl: ctl[0], report: rep[0]}, nil
}

func sigBit(s syscall.Signal) uint64 { return 1 << (uint(s) - 1) }

// goAhead lets the reaper clone the command.
func (c *nsCommand) goAhead() error {
	if err := unix.Sendto(c.ctl, []byte{GoAheadTag}, unix.MSG_NOSIGNAL, nil); err != nil {
		return fmt.Errorf("session fork: go-ahead: %w", err)
	}
	return nil
}

// signal sends sig to the reaper, which passes it on to the command;
// SIGKILL ends the reaper and with it every process of its namespace.
func (c *nsCommand) signal(sig syscall.Signal) error {
	return unix.Kill(c.pid, sig)
}

// nsResult is how a session command ended.
type nsResult struct {
	status unix.WaitStatus
	// reported: the reaper wrote the status (the command ended and
	// nothing of its namespace runs any more); false: the reaper was
	// killed or failed, its namespace ended with it.
	reported bool
	notRun   NotRunStage
	errno    syscall.Errno
}

// wait reads the status, reaps the reaper and reads the command's
// not-run record, then releases c's descriptors.
func (c *nsCommand) wait() (nsResult, error) {
	var r nsResult
	var buf [5]byte
	got := 0
	for got < len(buf) {
		n, err := unix.Read(c.ctl, buf[got:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			break
		}
		got += n
	}
	if got == len(buf) && buf[0] == StatusTag {
		r.reported = true
		r.status = unix.WaitStatus(uint32(buf[1]) | uint32(buf[2])<<8 | uint32(buf[3])<<16 | uint32(buf[4])<<24)
	}
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(c.pid, &ws, 0, nil)
		if !errors.Is(err, unix.EINTR) {
			if err != nil {
				c.release()
				return r, fmt.Errorf("session fork: wait: %w", err)
			}
			break
		}
	}
	r.notRun, r.errno = readNotRun(c.report)
	c.release()
	return r, nil
}

func (c *nsCommand) release() {
	for _, fd := range []*int{&c.ctl, &c.report} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}
