//go:build linux

package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The waiting child of a prepared sandbox.
//
// When the command may not spawn, the supervisor's child used to exec
// sandbox-init again in the plain mode, which adds the no-spawn filter the
// supervisor itself cannot carry, then exec the target. A prepared sandbox
// starts that child while it waits instead, and the child is not a second
// Go program: it is a fork of the supervisor that runs system calls only,
// on values the supervisor computed before the fork (waitPlan), as the
// child half of syscall.ForkExec does. It confines itself (its
// capabilities emptied, no_new_privs, Landlock, the rlimits, the target's
// seccomp program) and then waits on a socket pair only the supervisor
// holds the other end of. At the hand-over the supervisor lays the
// command out in memory the two share (the program's path it looked up,
// argv, the environment, the directory, the RLIMIT_NPROC to apply) and
// sends one byte with the command's stdin, stdout and stderr as
// SCM_RIGHTS; the child puts them in place, enters the directory and
// execs. A second Go start per command (about 1.5 ms of CPU here, more
// under load), the child's all-threads calls and the teardown of its Go
// runtime at the exec are gone; an exec from a single-threaded process is
// also shorter on the command's path.
//
// What is the same as a child forked at the hand-over: the target's
// Landlock rules (built from the spec, which has nothing of the command's:
// the roots and the system read set, never a protected entry, so building
// them before the hand-over's mounts changes nothing), its seccomp program
// (the target's whole program, which includes the PID-1 guard), the
// rlimits, no_new_privs, the descriptors it keeps (0-2 and InheritFDs), its
// process group, the death signal tied to the supervisor's locked thread,
// RLIMIT_NOFILE's soft limit as the supervisor inherited it
// (originalNofile), an environment of the command's only. It holds neither
// the lifeline nor anything else of the supervisor's: every other
// descriptor is closed right after the fork.
//
// What differs: the child is not in the supervisor's Landlock domain, but
// in a sibling one with the same rules (it was forked before the
// supervisor could confine itself: the hand-over's mounts need an
// unconfined process, and Landlock forbids mounting). With Landlock's
// signal scope, a domain may only signal processes in itself or in domains
// nested in it, so the supervisor, to forward signals to the target and to
// kill what is left at the end, goes without the signal scope in this
// case. That costs nothing: no code of the command's ever runs in the
// supervisor's domain (the target runs in the child's, which keeps the
// scope, so the target can signal neither the supervisor nor anything
// outside), and nothing outside the sandbox is in the supervisor's PID
// namespace. ptrace stays closed both ways: Landlock lets a domain trace
// only itself and what is nested in it, and the supervisor is not
// dumpable.
//
// Why a fork of a Go process may run here at all: between the fork and
// the exec the child is one thread with a copy of the supervisor's memory
// and none of its other threads, so it must not allocate, grow its stack,
// take a lock or enter the scheduler. forkWaiting is written as
// syscall.forkAndExecInChild1 is: every variable declared before the fork,
// runtime_BeforeFork spoils the stack guard so that any growth would crash
// instead of corrupting, and after the fork only nosplit functions that
// make system calls are called; no pointer is stored (no write barrier).
// The memory it reads was written before the fork, or, for the command,
// into a shared mapping before the byte that wakes it was sent.
//
// The child's capabilities: it was forked from the waiting supervisor,
// which still holds CAP_SYS_ADMIN and CAP_SETPCAP (in the sandbox's user
// namespace) in its effective and permitted sets for the mounts. Before
// it forks, the supervisor empties its bounding, ambient and inheritable
// sets and locks the securebits that give uid 0 capabilities at an exec;
// the child empties the rest with capset (one thread: the whole process)
// before anything else, reads them back and ends if any is left.

// PreparedTag on the lifeline says that a prepared sandbox is ready for its
// command (after StartedTag): what can be done before the command arrives
// has been done.
const PreparedTag = 'p'

// ReportPrepared writes PreparedTag on the lifeline.
func ReportPrepared(fd int) error {
	if err := unix.Sendto(fd, []byte{PreparedTag}, unix.MSG_NOSIGNAL, nil); err != nil {
		return fmt.Errorf("lifeline fd %d: %w", fd, err)
	}
	return nil
}

// reportPreparedWith is ReportPrepared with the descriptor fd on the byte
// (SCM_RIGHTS), or without one when fd < 0.
func reportPreparedWith(lifeline, fd int) error {
	if fd < 0 {
		return ReportPrepared(lifeline)
	}
	if err := unix.Sendmsg(lifeline, []byte{PreparedTag}, unix.UnixRights(fd), nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("lifeline fd %d: %w", lifeline, err)
	}
	return nil
}

// goTag wakes the waiting child: its command is in the shared mapping.
const goTag = 'g'

// Bounds of a waitPlan's fixed arrays: a spec beyond them is served by a
// child forked at the hand-over instead.
const (
	maxWaitRanges  = 40
	maxWaitInherit = 32
	maxWaitRlimits = 8
	// waitRegionBytes is the shared mapping's size (reserved, not
	// committed: only the pages a command's layout touches are). A
	// command that does not fit is run by a child forked for it, which
	// gets the kernel's own E2BIG for what no exec could take.
	waitRegionBytes = 8 << 20
)

// waitRlimit is one limit the child sets (soft and hard as given).
type waitRlimit struct {
	resource uintptr
	lim      unix.Rlimit
}

// waitCommand is the head of the shared mapping, written by the supervisor
// at the hand-over: offsets into the mapping (argv and envp are arrays of
// absolute addresses ending with 0).
type waitCommand struct {
	path, argv, envp, cwd uintptr
	nproc                 uint64
}

// waitPlan is everything the waiting child does, computed before the fork
// (see above). Only integers are written to it after the fork.
type waitPlan struct {
	ppid     uintptr // the supervisor, for the death signal's check
	sock     uintptr // the child's end, as the socket pair made it
	sockFD   uintptr // where the child keeps it (above every fd it keeps)
	ranges   [maxWaitRanges][2]uintptr
	nranges  int
	inherit  [maxWaitInherit]uintptr
	ninherit int
	capHdr   unix.CapUserHeader
	capData  [2]unix.CapUserData
	ruleset  int // -1: no Landlock
	rsFlags  uintptr
	rlimits  [maxWaitRlimits]waitRlimit
	nrlimits int
	filter   []unix.SockFilter
	fprog    unix.SockFprog
	region   unsafe.Pointer // the shared mapping (immediate: laid out in private memory before the fork)
	// immediate: the command is known at the fork (a sandbox built for
	// it, forkCommand): no waiting, descriptors 0-2 as they are, the
	// directory the supervisor's. Its socket only reports a failed exec.
	immediate bool
	layout    []byte // immediate: what region points into
	setpgid   bool
	started   [1]byte
	// notRun is the NotRunTag record written on the socket when the exec
	// fails (the errno filled in by the child).
	notRun [notRunRecordLen]byte
	// The hand-over's message and its descriptors.
	buf [1]byte
	iov unix.Iovec
	oob [64]byte
	msg unix.Msghdr
	// cmsgLen is the length of a control message of three descriptors,
	// cmsgData where their numbers start in oob.
	cmsgLen  uint64
	cmsgData uintptr
	fds      [3]int32
	errs     [134]string // the kernel's error texts, indexed by errno
	out      [1024]byte  // a failure message is built here
	// notify: the child installs the notification filter nfilter and
	// sends its listener on notifySock (notify_linux.go); the message is
	// built before the fork, the listener's number written into noob at
	// ncmsgData after it.
	notify     bool
	notifySock uintptr
	// pull: the listener is offered by number (notify_linux.go's pullTag)
	// in prec, and the launcher's one-byte answer read into pack, instead
	// of sent in nmsg: the filter notifies sendmsg.
	pull      bool
	prec      [5]byte
	pack      [1]byte
	nfilter   []unix.SockFilter
	nprog     unix.SockFprog
	nbuf      [1]byte
	niov      unix.Iovec
	noob      [32]byte
	nmsg      unix.Msghdr
	ncmsgData uintptr
}

// setNotify makes the child of p install spec's notification filter.
func (p *waitPlan) setNotify(spec *InitSpec) error {
	filter, err := notifyFilter(spec)
	if err != nil {
		return err
	}
	rights := unix.UnixRights(0)
	if len(rights) > len(p.noob) {
		return fmt.Errorf("notification filter: a control message of %d bytes", len(rights))
	}
	p.notify, p.notifySock = true, uintptr(spec.NotifyFD)
	p.pull = unixGuarded(spec)
	p.prec[0] = pullTag
	p.nfilter = filter
	p.nprog = unix.SockFprog{Len: uint16(len(filter)), Filter: &p.nfilter[0]}
	p.nbuf[0] = notifyTag
	p.niov = unix.Iovec{Base: &p.nbuf[0]}
	p.niov.SetLen(len(p.nbuf))
	copy(p.noob[:], rights)
	p.nmsg = unix.Msghdr{Iov: &p.niov, Iovlen: 1, Control: &p.noob[0]}
	p.nmsg.SetControllen(len(rights))
	p.ncmsgData = uintptr(unix.CmsgLen(0))
	return nil
}

// waitStep names what failed in a waiting child, for its message.
const (
	stepDeath    = "death signal"
	stepGroup    = "process group"
	stepSocket   = "socket"
	stepCaps     = "capabilities"
	stepCapsLeft = "capabilities left after the drop"
	stepNoNew    = "prctl(PR_SET_NO_NEW_PRIVS)"
	stepLandlock = "landlock: restrict_self"
	stepClose    = "close_range"
	stepRlimit   = "setrlimit"
	stepSeccomp  = "seccomp(SECCOMP_SET_MODE_FILTER)"
	stepNotify   = "notification filter"
	stepWait     = "waiting for the command"
	stepFD       = "command descriptor"
	stepInherit  = "inherit fd"
	stepChdir    = "chdir"
	stepExec     = "exec"
)

// preforked is a supervisor's waiting child. Its socket is also where it
// reports a failed exec (a NotRunTag record; close-on-exec, so the target
// never holds it): the supervisor keeps it until the child is reaped.
type preforked struct {
	pid    int
	sock   int    // the supervisor's end
	region []byte // the shared mapping
}

// wantsPrefork says whether spec's supervisor starts its child while it
// waits: a prepared sandbox whose command may not spawn, supervised as
// PID 1 (its kill(-1) must reach the child), where the fork below works.
func wantsPrefork(spec *InitSpec) bool {
	return spec.Prepared && spec.Supervise && !spec.AllowSpawn && spec.Tty == nil && os.Getpid() == 1 &&
		rawForkWorks()
}

// rawForkWorks says whether forkWaiting can run here: a clone whose
// argument order it knows, and close_range (Linux 5.9), which lets the
// child close what it must not hold without a list of them.
func rawForkWorks() bool {
	if !rawForkArch {
		return false
	}
	// Closes nothing (the highest possible descriptor), fails ENOSYS on
	// a kernel without the call.
	return unix.CloseRange(^uint(0), ^uint(0), 0) == nil
}

// startPreforked starts the waiting child. It runs on the locked thread
// (the child's death signal follows that thread).
func startPreforked(spec *InitSpec) (*preforked, error) {
	p, ll, err := childPlan(spec)
	if err != nil {
		return nil, err
	}
	p.setpgid = true
	sv, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pre-forked child: socketpair: %w", err)
	}
	p.sock = uintptr(sv[1])
	region, err := unix.Mmap(-1, 0, waitRegionBytes, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_SHARED|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		unix.Close(sv[0])
		unix.Close(sv[1])
		return nil, fmt.Errorf("pre-forked child: shared mapping: %w", err)
	}
	p.region = unsafe.Pointer(&region[0])
	pid, err := p.fork(ll)
	unix.Close(sv[1])
	if err != nil {
		unix.Close(sv[0])
		_ = unix.Munmap(region)
		return nil, fmt.Errorf("pre-forked child: %w", err)
	}
	return &preforked{pid: pid, sock: sv[0], region: region}, nil
}

// forkCommand starts the target of a sandbox built for its command when
// the supervisor's child confines itself (nestsTarget): the same fork as a
// prepared sandbox's waiting child, with the command laid out before the
// fork instead of waiting for it, so no second sandbox-init starts (its Go
// start and confinement were about 2 ms of every such command's path).
// The child keeps descriptors 0-2 and the directory as they are, inherits
// the supervisor's RLIMIT_NPROC, is in a process group of its own unless
// the sandbox has no namespaces (the launcher kills the supervisor's group
// as a whole there), and stacks the target's program on the supervisor's,
// in a Landlock domain nested in the supervisor's. It runs on the locked
// thread, after the supervisor's own confinement. report is the
// supervisor's end of the socket on which the child says that its exec
// failed (readNotRun, once the child is reaped).
func forkCommand(spec *InitSpec, path string, argv, env []string) (pid, report int, err error) {
	p, ll, err := childPlan(spec)
	if err != nil {
		return 0, -1, err
	}
	p.immediate, p.setpgid = true, !spec.NoNamespaces
	p.layout = make([]byte, commandLayoutSize(path, argv, env))
	if err := layOutCommand(p.layout, path, argv, env, "", 0); err != nil {
		return 0, -1, err
	}
	p.region = unsafe.Pointer(&p.layout[0])
	sv, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, -1, fmt.Errorf("forked child: socketpair: %w", err)
	}
	p.sock = uintptr(sv[1])
	pid, err = p.fork(ll) // the caller says what it started
	unix.Close(sv[1])
	if err != nil {
		unix.Close(sv[0])
		return 0, -1, err
	}
	return pid, sv[0], nil
}

// childPlan is what both children plan from spec, as the plain
// sandbox-init would (childSpec): the target's program, its Landlock plan,
// its limits.
func childPlan(spec *InitSpec) (*waitPlan, landlockPlan, error) {
	cs := childSpec(spec)
	prog, err := initProgram(&cs)
	if err != nil {
		return nil, landlockPlan{}, err
	}
	ll, err := planLandlock(&cs, effectiveLandlockABI())
	if err != nil {
		return nil, landlockPlan{}, err
	}
	limits, err := waitLimits(rlimitPlan(&cs))
	if err != nil {
		return nil, landlockPlan{}, err
	}
	p, err := newWaitPlan(spec.InheritFDs, spec.CommandFD, prog, limits)
	if err != nil {
		return nil, landlockPlan{}, err
	}
	if notifying(&cs) {
		if err := p.setNotify(&cs); err != nil {
			return nil, landlockPlan{}, err
		}
	}
	return p, ll, nil
}

// fork builds ll's ruleset (the child enforces it; this process closes its
// copy) and forks the child of p.
func (p *waitPlan) fork(ll landlockPlan) (int, error) {
	rs, err := buildRuleset(ll)
	if err != nil {
		return 0, err
	}
	defer rs.close()
	p.ruleset, p.rsFlags = rs.fd, uintptr(rs.flags)
	p.ppid = uintptr(os.Getpid())
	// As syscall.forkExec: no descriptor is made without close-on-exec
	// meanwhile (the child closes every one it does not keep anyway).
	syscall.ForkLock.Lock()
	pid, errno := forkWaiting(p)
	syscall.ForkLock.Unlock()
	runtime.KeepAlive(p)
	if errno != 0 {
		return 0, fmt.Errorf("clone: %w", errno)
	}
	return pid, nil
}

// commandLayoutSize is what layOutCommand needs for a command without a
// directory.
func commandLayoutSize(path string, argv, env []string) int {
	const word = int(unsafe.Sizeof(uintptr(0)))
	n := int(unsafe.Sizeof(waitCommand{})) + len(path) + 1
	for _, ss := range [][]string{argv, env} {
		for _, s := range ss {
			n += len(s) + 1
		}
		n += word - 1 + word*(len(ss)+1) // alignment, the array
	}
	return n
}

// newWaitPlan fills the parts of a waitPlan that depend on the spec: the
// descriptors the child keeps (0-2, until a waiting child's are replaced by
// the command's, and keep, made inheritable before the exec), where it
// keeps its socket, the ranges it closes, the target's program and the
// limits.
func newWaitPlan(keep []int, commandFD int, prog []bpf.Instruction, limits []waitRlimit) (*waitPlan, error) {
	p := &waitPlan{ruleset: -1}
	keep = slices.Sorted(slices.Values(keep))
	if len(keep) > maxWaitInherit || len(limits) > maxWaitRlimits {
		return nil, fmt.Errorf("pre-forked child: %d inherited descriptors, %d limits", len(keep), len(limits))
	}
	top := max(2, commandFD)
	for i, fd := range keep {
		p.inherit[i] = uintptr(fd)
		top = max(top, fd)
	}
	p.ninherit = len(keep)
	p.sockFD = uintptr(top + 1)
	// Closed: 3 up to the socket's number, less keep, and all above it.
	next := uintptr(3)
	kept := append(slices.Clone(keep), int(p.sockFD))
	for _, fd := range kept {
		if uintptr(fd) > next {
			if p.nranges == maxWaitRanges {
				return nil, errors.New("pre-forked child: too many descriptor ranges")
			}
			p.ranges[p.nranges] = [2]uintptr{next, uintptr(fd) - 1}
			p.nranges++
		}
		next = uintptr(fd) + 1
	}
	if p.nranges == maxWaitRanges {
		return nil, errors.New("pre-forked child: too many descriptor ranges")
	}
	p.ranges[p.nranges] = [2]uintptr{next, uintptr(^uint32(0))} // close_range takes unsigned ints
	p.nranges++
	copy(p.rlimits[:], limits)
	p.nrlimits = len(limits)
	filter, err := sockFilter(prog)
	if err != nil {
		return nil, err
	}
	p.filter = filter
	p.fprog = unix.SockFprog{Len: uint16(len(p.filter)), Filter: &p.filter[0]}
	p.capHdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	p.started[0] = StartedTag
	p.notRun = [notRunRecordLen]byte{NotRunTag, byte(NotRunExec)}
	p.iov = unix.Iovec{Base: &p.buf[0]}
	p.iov.SetLen(len(p.buf))
	p.msg = unix.Msghdr{Iov: &p.iov, Iovlen: 1, Control: &p.oob[0]}
	p.cmsgLen, p.cmsgData = uint64(unix.CmsgLen(4*3)), uintptr(unix.CmsgLen(0))
	for i := range p.errs {
		p.errs[i] = syscall.Errno(i).Error()
	}
	return p, nil
}

// waitLimits turns plan into the child's settings: each at min(asked,
// the current hard limit), as applyRlimits sets them, and RLIMIT_NOFILE's
// soft limit back to what this process inherited when the plan does not
// set it (what syscall.Exec would have restored).
func waitLimits(plan []rlimitSetting) ([]waitRlimit, error) {
	var out []waitRlimit
	nofile := false
	for _, s := range plan {
		var cur syscall.Rlimit
		if err := syscall.Getrlimit(s.Resource, &cur); err != nil {
			return nil, fmt.Errorf("getrlimit(%s): %w", s.Name, err)
		}
		v := min(s.Value, cur.Max)
		out = append(out, waitRlimit{uintptr(s.Resource), unix.Rlimit{Cur: v, Max: v}})
		nofile = nofile || s.Resource == syscall.RLIMIT_NOFILE
	}
	if !nofile {
		lim, err := originalNofile()
		if err != nil {
			return nil, err
		}
		out = append(out, waitRlimit{uintptr(syscall.RLIMIT_NOFILE), unix.Rlimit{Cur: lim.Cur, Max: lim.Max}})
	}
	return out, nil
}

// originalNofile is RLIMIT_NOFILE as this process inherited it. The Go
// runtime raises the soft limit of every Go process at its start (to the
// hard limit less one) and puts the original back only in what it execs
// through the syscall package: syscall.Exec restores it in this process
// just before its execve. An exec that fails at once (an empty path: the
// kernel looks nothing up) therefore leaves the original in place, with
// the runtime's copy forgotten, so the children this supervisor forks the
// ordinary way inherit the same limit. Without the raise (soft already at
// hard, or hard less one) the limit is the inherited one as it is.
func originalNofile() (syscall.Rlimit, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return lim, fmt.Errorf("getrlimit(RLIMIT_NOFILE): %w", err)
	}
	if lim.Max > 0 && lim.Cur == lim.Max-1 {
		if err := syscall.Exec("", nil, nil); !errors.Is(err, syscall.ENOENT) {
			return lim, fmt.Errorf("RLIMIT_NOFILE: restoring the inherited limit: %v", err)
		}
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return lim, fmt.Errorf("getrlimit(RLIMIT_NOFILE): %w", err)
		}
	}
	return lim, nil
}

// ready waits until the child says it waits for its command (one byte),
// and reports whether it does; false: it ended, said something else or
// took longer than preforkReadyWait, and the supervisor forks a child the
// ordinary way. Not waited for at start: the sandbox is ready for the pool
// sooner.
func (p *preforked) ready() bool {
	deadline := time.Now().Add(preforkReadyWait)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		pfd := []unix.PollFd{{Fd: int32(p.sock), Events: unix.POLLIN}}
		if n, err := unix.Poll(pfd, int(left.Milliseconds())+1); errors.Is(err, unix.EINTR) {
			continue
		} else if err != nil || n == 0 {
			return false
		}
		var b [1]byte
		n, err := unix.Read(p.sock, b[:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n == 1 && b[0] == StartedTag
	}
}

// preforkReadyWait bounds how long a command waits for the pre-forked
// child before one is forked for it.
const preforkReadyWait = 5 * time.Second

// abandon kills and reaps the child (it never received a command).
func (p *preforked) abandon() {
	_ = unix.Kill(p.pid, unix.SIGKILL)
	var ws unix.WaitStatus
	for {
		if _, err := unix.Wait4(p.pid, &ws, 0, nil); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	p.release()
}

// release closes the supervisor's end and unmaps its view of the shared
// mapping (the child keeps its own until its exec).
func (p *preforked) release() {
	if p.sock >= 0 {
		unix.Close(p.sock)
		p.sock = -1
	}
	if p.region != nil {
		_ = unix.Munmap(p.region)
		p.region = nil
	}
}

// start lays the command out in the shared mapping and wakes the child
// with this process's descriptors 0, 1 and 2 (the command's, since the
// hand-over). path is the program as the supervisor looked it up in env's
// PATH from cwd, where it is now. The socket stays open (report), the
// mapping goes; a failed start releases both.
func (p *preforked) start(path string, argv, env []string, cwd string, nproc uint64) (err error) {
	defer func() {
		if err != nil {
			p.release()
		} else if p.region != nil {
			_ = unix.Munmap(p.region)
			p.region = nil
		}
	}()
	if nproc > 0 {
		// At most the hard limit, as applyRlimits sets every limit: the
		// child holds no capability to raise it, and its hard limit is
		// this process's (nothing set RLIMIT_NPROC since the fork).
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(unix.RLIMIT_NPROC, &lim); err != nil {
			return fmt.Errorf("getrlimit(RLIMIT_NPROC): %w", err)
		}
		nproc = min(nproc, lim.Max)
	}
	if err := layOutCommand(p.region, path, argv, env, cwd, nproc); err != nil {
		return err
	}
	if _, err := unix.SendmsgN(p.sock, []byte{goTag}, unix.UnixRights(0, 1, 2), nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("pre-forked child: %w", err)
	}
	return nil
}

// report hands over the socket on which the started child says that its
// exec failed: the caller reads it once the child is reaped (readNotRun)
// and closes it.
func (p *preforked) report() int {
	fd := p.sock
	p.sock = -1
	return fd
}

// errCommandTooLarge says a command does not fit the shared mapping.
var errCommandTooLarge = errors.New("pre-forked child: the command does not fit its mapping")

// layOutCommand writes a waitCommand and what it points to into region. An
// empty cwd leaves the directory as it is.
func layOutCommand(region []byte, path string, argv, env []string, cwd string, nproc uint64) error {
	const word = int(unsafe.Sizeof(uintptr(0)))
	base := uintptr(unsafe.Pointer(&region[0]))
	off := int(unsafe.Sizeof(waitCommand{}))
	align := func() { off = (off + word - 1) &^ (word - 1) }
	str := func(s string) (uintptr, bool) {
		if off+len(s)+1 > len(region) {
			return 0, false
		}
		at := off
		copy(region[off:], s)
		region[off+len(s)] = 0
		off += len(s) + 1
		return uintptr(at), true
	}
	// Strings first, then each array of their addresses.
	list := func(ss []string) (uintptr, bool) {
		offs := make([]uintptr, len(ss))
		for i, s := range ss {
			o, ok := str(s)
			if !ok {
				return 0, false
			}
			offs[i] = o
		}
		align()
		if off+word*(len(ss)+1) > len(region) {
			return 0, false
		}
		at := off
		for _, o := range offs {
			*(*uintptr)(unsafe.Pointer(&region[off])) = base + o
			off += word
		}
		*(*uintptr)(unsafe.Pointer(&region[off])) = 0
		off += word
		return uintptr(at), true
	}
	var c waitCommand
	var ok1, ok3, ok4 bool
	ok2 := true
	c.path, ok1 = str(path)
	if cwd != "" { // else 0: the directory stays
		c.cwd, ok2 = str(cwd)
	}
	c.argv, ok3 = list(argv)
	c.envp, ok4 = list(env)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return errCommandTooLarge
	}
	c.nproc = nproc
	*(*waitCommand)(unsafe.Pointer(&region[0])) = c
	return nil
}
