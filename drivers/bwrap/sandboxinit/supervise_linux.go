//go:build linux

package sandboxinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Supervised mode (InitSpec.Supervise): sandbox-init stays, as the
// target's parent, instead of becoming it.
//
// Why: bwrap's own PID-1 reaper is started before any confinement, so it
// runs with no seccomp filter, as the sandbox's uid, and dumpable. With
// Landlock present its ptrace restriction keeps the command away from it;
// with Landlock absent the command could open /proc/1/mem for writing and
// take over an unfiltered process. So the driver runs bwrap with
// --as-pid-1 and sandbox-init is PID 1: confined like the command (the
// same Landlock domain, rlimits and, on every one of its threads, the same
// seccomp filter, except that it may fork), non-dumpable (its /proc/1/mem,
// fd, environ and ptrace are closed to the command whatever Landlock does),
// and it reaps every process of the sandbox. Where sandbox-init is not PID 1
// (the allow_hosts chain, which needs Landlock anyway) it is the children's
// subreaper instead.
//
// The command is forked from the confined thread: fork copies the calling
// thread's seccomp filters, Landlock domain and no_new_privs, so the child
// starts exactly as confined. When the command may not spawn, the child
// first execs sandbox-init again in the plain mode, which adds the
// no-spawn filter the supervisor itself cannot carry, and execs the target.
// So does the child of a supervisor that is not PID 1 (nestsTarget).
//
// How the status crosses: bwrap reports a child killed by signal N as exit
// status 128+N, on its exit status and on --json-status-fd alike, so from
// there `exit 130` and death by SIGINT look the same. The supervisor
// writes the target's raw wait status on the lifeline instead (statusTag
// and four bytes, little-endian) just before it exits: the lifeline is
// the one channel between sandbox-init and the launcher that the command
// can neither read nor write (close-on-exec, never inherited, and
// /proc/1/fd is closed to it because PID 1 is not dumpable). A sandbox
// that ends without the record (killed from outside, or sandbox-init
// failed) is reported from bwrap's status as before.
//
// Signals: TERM, INT, HUP, QUIT, USR1, USR2 and WINCH sent to the
// supervisor are forwarded to the target, and so are signal requests the
// launcher writes on the lifeline (signalTag and the signal number). A
// lifeline that hangs up while the command runs means the launcher is gone:
// everything in the sandbox is killed.

// Lifeline records. The launcher writes signalTag+N; sandbox-init writes
// the started byte (ReportStarted) and, when supervising, statusTag+4 bytes.
const (
	StartedTag = 's'
	SignalTag  = 'k'
	StatusTag  = 'x'
)

// ForwardedSignals are what the supervisor passes on to the target.
func ForwardedSignals() []syscall.Signal {
	return []syscall.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT,
		unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH}
}

// maxSignal is the highest signal number a lifeline request may carry.
const maxSignal = 64

// supervisorSpec is the spec whose seccomp filter the supervisor carries:
// the target's, with fork allowed (it must fork the target once).
func supervisorSpec(spec *InitSpec) InitSpec {
	s := *spec
	s.childNotifies = notifying(spec)
	s.AllowSpawn = true
	return s
}

// childSpec is the spec of the plain sandbox-init the supervisor's child
// runs when the target may not spawn, or when the supervisor is not PID 1
// (nestsTarget): the same restrictions, no lifeline (the supervisor owns
// it), no supervision.
func childSpec(spec *InitSpec) InitSpec {
	s := *spec
	s.Supervise = false
	s.LifelineFD = 0
	// NotifyFD and MetaGuard stay: the child installs the notification
	// filter (notify_linux.go).
	// Its program is the command's, handed over already.
	s.Prepared = false
	// The supervisor holds the terminal; the child only inherits it.
	s.Tty = nil
	// The supervisor's RLIMIT_NPROC (see nprocHeadroom) is inherited.
	s.RlimitNproc = 0
	if s.CommandFD == 0 {
		// Only the command record's path passes descriptors on to it.
		s.SeccompFD = 0
	}
	return s
}

// nprocHeadroom is added to RLIMIT_NPROC on top of the supervisor's own
// threads when it forks: the Go runtime may start a few more threads later
// (a blocking system call, the garbage collector), and they must not eat
// into the command's max_pids.
const nprocHeadroom = 4

// withoutNproc is plan less RLIMIT_NPROC.
func withoutNproc(plan []rlimitSetting) []rlimitSetting {
	var out []rlimitSetting
	for _, s := range plan {
		if s.Resource != unix.RLIMIT_NPROC {
			out = append(out, s)
		}
	}
	return out
}

// setNproc sets RLIMIT_NPROC to limit plus the supervisor's own tasks and
// nprocHeadroom. The kernel counts every task of the uid in the sandbox's
// user namespace, the supervisor's threads included, and RLIMIT_NPROC is
// what caps the sandbox where there is no pids cgroup: without this the
// supervisor (about nine threads here) would take that many of the
// command's max_pids.
func setNproc(limit uint64) error {
	n, err := nprocFor(limit)
	if err != nil {
		return err
	}
	return applyRlimits([]rlimitSetting{{"RLIMIT_NPROC", unix.RLIMIT_NPROC, n}})
}

// nprocFor is limit plus this process's tasks and nprocHeadroom.
func nprocFor(limit uint64) (uint64, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, fmt.Errorf("RLIMIT_NPROC: own threads: %w", err)
	}
	return limit + uint64(len(tasks)) + nprocHeadroom, nil
}

// supervise runs on the locked, confined thread (no_new_privs, Landlock,
// rlimits and descriptor marks applied; seccomp not yet). It loads prog on
// every thread, forks the target and returns the exit status to end with.
//
// sigs are the signal channels when they were set up already (a prepared
// sandbox catches them while it waits), else nil; pre is the plain child a
// prepared sandbox started while it waited, to be given the command and cwd
// instead of forking one (prefork_linux.go).
func supervise(spec *InitSpec, prog []bpf.Instruction, path string, argv, env []string, sigs *caughtSignals,
	pre *preforked, cwd string) (int, error) {
	// Not dumpable: /proc/1/{mem,fd,environ,...} and ptrace need
	// CAP_SYS_PTRACE, which nobody inside has. The target's exec makes
	// it dumpable again, as any exec does.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	pid1 := os.Getpid() == 1
	if !pid1 {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			return 0, fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
		}
	}
	// Signal handlers before the fork, so nothing sent meanwhile is lost.
	if sigs == nil {
		sigs = catchSignals(!targetScopedAway(spec))
	}
	fwd, chld := sigs.fwd, sigs.chld
	// The terminal first (pty_linux.go): window sizes from the lifeline
	// are applied to it as they come.
	var master *os.File
	mfd, slave := -1, -1
	var relay atomic.Pointer[ptyRelay]
	onResize := func(rows, cols uint16) {
		if r := relay.Load(); r != nil {
			r.resize(rows, cols)
		}
	}
	if spec.Tty != nil {
		var err error
		if master, mfd, slave, err = openPty(*spec.Tty); err != nil {
			return 0, err
		}
		defer master.Close()
	}
	var life <-chan syscall.Signal
	if spec.LifelineFD > 0 {
		var err error
		if life, err = readSignalRequests(spec.LifelineFD, onResize); err != nil {
			return 0, err
		}
	}
	if err := loadSeccompAllThreads(prog); err != nil {
		return 0, err
	}
	if spec.LifelineFD > 0 && LauncherGone(spec.LifelineFD) {
		return 0, errLauncherGone
	}
	// Descriptors 0-2 as they are; descriptors the target inherits were
	// made inheritable already. The plain child also needs the command
	// record's descriptor and its report descriptor; the target gets its
	// argv and environment directly.
	files := []uintptr{0, 1, 2}
	attr := &syscall.ProcAttr{Env: env, Files: files,
		Sys: &syscall.SysProcAttr{
			// The locked thread lives as long as this process.
			Pdeathsig: syscall.SIGKILL,
			// A process group of its own: kill(0, sig) in the command
			// reaches the command's group, not its supervisor. Without
			// namespaces the command stays in the supervisor's group
			// instead: the one the launcher kills as a whole, which
			// nothing inside can leave (setsid and setpgid are denied).
			Setpgid: !spec.NoNamespaces,
		}}
	var child int
	// report is where the child says that its target never ran (a
	// NotRunTag record), read once it is reaped: the waiting child's and
	// forkCommand's socket, the plain child's ReportFD. -1: none (a
	// target forked straight, whose exec error ForkExec returns).
	report := -1
	defer func() {
		if report >= 0 {
			unix.Close(report)
		}
	}()
	if pre != nil && pre.ready() {
		var nproc uint64
		var err error
		if spec.RlimitNproc > 0 {
			nproc, err = nprocFor(spec.RlimitNproc)
		}
		if err == nil {
			err = pre.start(path, argv, env, cwd, nproc)
		}
		if err == nil {
			child, report = pre.pid, pre.report()
		} else {
			pre.abandon()
			pre = nil
		}
	} else if pre != nil {
		pre.abandon()
		pre = nil
	}
	// pre is nil when the waiting child failed (it never ran anything):
	// one is forked for the command, as in a sandbox built for it.
	execPath, execArgv := path, argv
	// A child that confines itself is a fork that runs system calls only
	// (forkCommand), where it can be; else the plain sandbox-init.
	direct := nestsTarget(spec, pid1) && pre == nil && slave < 0 && rawForkWorks()
	reportW := -1
	defer func() {
		if reportW >= 0 {
			unix.Close(reportW)
		}
	}()
	if nestsTarget(spec, pid1) && pre == nil && !direct {
		self, err := os.Executable()
		if err != nil {
			return 0, fmt.Errorf("own binary: %w", err)
		}
		if spec.CommandFD > 0 {
			// The plain child reads the command itself: its own
			// environment stays empty, so loader variables of the target's
			// do not act on it, and its argv holds the spec alone.
			attr.Env = []string{}
			attr.Files = childFiles(spec.CommandFD, withNotifyFD(spec, withSeccompFD(spec)))
		} else {
			attr.Files = childFiles(0, withNotifyFD(spec, spec.InheritFDs))
		}
		// Its report descriptor goes above every other it keeps.
		var pfd [2]int
		if err := unix.Pipe2(pfd[:], unix.O_CLOEXEC); err != nil {
			return 0, fmt.Errorf("report pipe: %w", err)
		}
		report, reportW = pfd[0], pfd[1]
		cs := childSpec(spec)
		cs.ReportFD = len(attr.Files)
		attr.Files = append(attr.Files, uintptr(reportW))
		var args []string
		if cs.CommandFD > 0 {
			args, err = CommandInitArgs(cs)
		} else {
			args, err = InitArgs(cs, argv[0], argv[1:]...)
		}
		if err != nil {
			return 0, err
		}
		execPath, execArgv = self, append([]string{self, SandboxInitCommand}, args...)
	}
	if pre == nil {
		if spec.RlimitNproc > 0 {
			// Last before the fork, so the count of own threads is current.
			if err := setNproc(spec.RlimitNproc); err != nil {
				return 0, err
			}
		}
		if slave >= 0 {
			ptyForkAttr(attr, slave)
		}
		var err error
		if direct {
			child, report, err = forkCommand(spec, path, argv, env)
		} else {
			child, err = syscall.ForkExec(execPath, execArgv, attr)
		}
		if reportW >= 0 {
			// Only the child holds the write end now: its target's exec
			// or its exit closes it.
			unix.Close(reportW)
			reportW = -1
		}
		if slave >= 0 {
			// Only the target holds the slave: the master reads EIO once it
			// and what it started have closed theirs.
			unix.Close(slave)
		}
		if err != nil {
			err = fmt.Errorf("start %s: %w", execPath, err)
			// ForkExec reports the error of the child's failed step; for
			// the target itself, one about the program is its exec's
			// (Go's other steps here, setpgid, the death signal and the
			// descriptors, fail with none of those).
			if execPath == path && !direct && ProgramErrno(errnoOf(err)) && reportNotRun(spec, nil, NotRunExec, err) {
				return SandboxInitExitCode, nil
			}
			return 0, err
		}
	}
	if spec.NotifyFD > 0 {
		// The child has its copy (or the waiting child sent its listener
		// already): nothing of the supervisor's may hold the launcher's
		// socket, so that a child that ended before sending reads as the
		// end of the stream there.
		_ = unix.Close(spec.NotifyFD)
	}
	if master != nil {
		r, err := startPtyRelay(master, mfd)
		if err != nil {
			_ = unix.Kill(child, unix.SIGKILL)
			return 0, err
		}
		relay.Store(r)
		defer r.finish(false)
	}
	killAll := func() { _ = unix.Kill(child, unix.SIGKILL) }
	switch {
	case pid1:
		// kill(-1) reaches every other process of the namespace.
		killAll = func() { _ = unix.Kill(-1, unix.SIGKILL) }
	case spec.NoNamespaces:
		// The whole process group, this process included.
		killAll = func() { _ = unix.Kill(0, unix.SIGKILL) }
	}
	var used usage
	ws := superviseLoop(child, fwd, chld, life, killAll, &used)
	// The child is reaped: what it wrote on its report descriptor is all
	// there will be.
	used.notRun, used.errno = readNotRun(report)
	if pid1 {
		// What the command left running ends now, not when this process
		// exits: the status record below tells the launcher that nothing
		// of the command runs any more (see status.go).
		killAll()
		reapRest(&used)
		used.alone = true
	}
	if r := relay.Load(); r != nil {
		// The target's last output goes out before its status.
		r.finish(used.alone)
	}
	if spec.Prepared {
		// The command's output ends here: the launcher of a prepared
		// sandbox holds none of these descriptors, so its copies see the
		// end of the output now instead of when this process exits.
		for fd := range 3 {
			_ = unix.Close(fd)
		}
	}
	if spec.LifelineFD > 0 {
		reportStatus(spec.LifelineFD, ws, used)
	}
	if spec.NoNamespaces {
		// What the command left in the background ends with it, as a PID
		// namespace's does when its PID 1 exits. The launcher kills the
		// group too, but it may be gone by now; this process dies with
		// the group, its status already on the lifeline.
		killAll()
	}
	return exitCodeOf(ws), nil
}

// caughtSignals are the supervisor's signal channels: fwd for
// ForwardedSignals, chld for SIGCHLD.
type caughtSignals struct {
	fwd, chld chan os.Signal
}

// catchSignals installs the supervisor's handlers. It is slow for what it
// does: the Go runtime hands each newly caught signal to its signal-mask
// thread and waits for the answer (two thread wake-ups per signal), so a
// prepared sandbox calls it before it waits for its command. Catching
// early changes nothing else: until the command is forked nothing reads
// fwd, and what arrives meanwhile (up to its buffer) is passed on to the
// command once it runs, as a signal sent during a sandbox's setup is.
//
// With all, every other signal is caught and dropped too (the signal
// package never blocks on a full channel, and nothing reads that one). The
// seccomp guard keeps kill(1, ...) away, but not every way the command can
// name this process: a descriptor of /proc/1 given to pidfd_send_signal,
// or kill and tkill aimed at one of its other threads. Uncaught, a signal
// such as ABRT or SEGV sent that way would make the Go runtime end the
// supervisor (with a dump of its state on the command's stderr), and with
// it the sandbox, without the status record. Caught, it does nothing.
// Faults of the supervisor's own still crash it: the runtime tells them
// from sent signals. Catching the other sixty-odd signals costs as much
// CPU as a Go process's start (about 1.5 ms here), on every command, so
// it is left out where the kernel already refuses every such signal
// (targetScopedAway).
func catchSignals(all bool) *caughtSignals {
	c := &caughtSignals{fwd: make(chan os.Signal, 16), chld: make(chan os.Signal, 1)}
	for _, s := range ForwardedSignals() {
		signal.Notify(c.fwd, s)
	}
	signal.Notify(c.chld, unix.SIGCHLD)
	if all {
		signal.Notify(make(chan os.Signal, 1))
	} else {
		// Caught whatever the scope: the kernel sends SIGPIPE to this
		// process for its own writes, and the Go runtime ends a process
		// whose write to descriptor 1 or 2 (the terminal relay's output,
		// a failure message) meets a closed pipe unless SIGPIPE is
		// caught. Caught, the write fails with EPIPE instead.
		signal.Notify(make(chan os.Signal, 1), unix.SIGPIPE)
	}
	return c
}

// targetScopedAway reports whether the command of spec runs in a Landlock
// domain of its own that has the signal scope, so that the kernel refuses
// every signal it or anything it starts sends to the supervisor, however
// it names it (kill, tkill, tgkill, pidfd_send_signal, F_SETOWN): a domain
// with LANDLOCK_SCOPE_SIGNAL may signal only processes in itself or in
// domains nested in it, and the supervisor is in neither.
//
// That holds when the command may not spawn, or the supervisor is not
// PID 1 (nestsTarget): the supervisor's child then confines itself in a
// domain of its own before it execs the target, whether it is a prepared
// sandbox's waiting child (a sibling of the supervisor's domain,
// prefork_linux.go) or the plain sandbox-init forked at the command
// (nested in the supervisor's). Both plan their domain from spec, with its
// scope, and whatever the command starts stays in that domain or below
// it. A command that may spawn under PID 1 is forked straight into the
// supervisor's own domain, where the scope lets it signal the supervisor,
// so it gets the catch-all handlers. So does every command where Landlock
// has no signal scope (ABI < 6, Landlock unavailable).
func targetScopedAway(spec *InitSpec) bool {
	return signalScoped(spec) && nestsTarget(spec, os.Getpid() == 1)
}

// signalScoped reports whether the domains planned from spec have the
// signal scope: spec asks for it and this kernel's Landlock has scopes.
func signalScoped(spec *InitSpec) bool {
	return spec.ScopeSignals && effectiveLandlockABI() >= landlockScopeABI
}

// landlockScopeABI is the first Landlock ABI with scopes (signals and
// abstract unix sockets).
const landlockScopeABI = 6

// nestsTarget reports whether the supervisor's child runs the plain
// sandbox-init, which confines itself again before it execs the target:
// always when the command may not spawn (the no-spawn rules) or in the
// Landlock tier (the notification filter, notify_linux.go), and, where
// Landlock has the signal scope, when the supervisor is not PID 1 (the
// allow_hosts chain, the Landlock tier). Forked straight, a command that
// may spawn shares the supervisor's domain, and the kernel's protection
// of a namespace's init (no SIGKILL, no SIGSTOP from inside, signals it
// has no handler for dropped) is not there: kill -9 $PPID ended the
// supervisor, and the run was reported as killed, without its status
// record. In a domain nested in the supervisor's, with the scope, the
// command can signal neither it nor anything else outside.
func nestsTarget(spec *InitSpec, pid1 bool) bool {
	if !spec.AllowSpawn || spec.MetaGuard || unixGuarded(spec) {
		// The child installs the notification filter, which the
		// supervisor cannot carry (notify_linux.go).
		return true
	}
	return !pid1 && signalScoped(spec)
}

// withNotifyFD is keep and spec's NotifyFD, when the child installs the
// notification filter.
func withNotifyFD(spec *InitSpec, keep []int) []int {
	if !notifying(spec) {
		return keep
	}
	return append(slices.Clone(keep), spec.NotifyFD)
}

// childFiles maps 0-2, commandFD and keep to themselves and closes the
// rest up to the highest of them (-1 closes a slot in the child).
func childFiles(commandFD int, keep []int) []uintptr {
	top := max(commandFD, 2)
	for _, k := range keep {
		top = max(top, k)
	}
	files := make([]uintptr, top+1)
	for i := range files {
		if i <= 2 || i == commandFD || slices.Contains(keep, i) {
			files[i] = uintptr(i)
		} else {
			files[i] = ^uintptr(0)
		}
	}
	return files
}

// superviseLoop forwards signals and reaps children until child has ended,
// and returns its wait status. Reaping and signalling happen in this one
// goroutine, so a signal never goes to a pid that was already reaped (and
// possibly reused).
func superviseLoop(child int, fwd, chld <-chan os.Signal, life <-chan syscall.Signal, killAll func(), used *usage) unix.WaitStatus {
	for {
		select {
		case <-chld:
			if ws, done := reapAll(child, used); done {
				return ws
			}
		case s := <-fwd:
			if sig, ok := s.(syscall.Signal); ok {
				_ = unix.Kill(child, sig)
			}
		case sig, ok := <-life:
			if !ok {
				// The launcher is gone: nothing of the sandbox may outlive
				// it (killAll: as PID 1 every process of the namespace,
				// without namespaces the process group, as a subreaper
				// only the child).
				life = nil
				killAll()
				continue
			}
			_ = unix.Kill(child, sig)
		}
	}
}

// usage is what the reaped processes used, and how the target ended
// when it never ran, for the status record.
type usage struct {
	maxRSSKB, userUS, systemUS int64
	alone                      bool // every other process was reaped
	notRun                     NotRunStage
	errno                      syscall.Errno
}

func (u *usage) add(ru *unix.Rusage) {
	// The conversions are for 32-bit targets, where these fields are int32.
	u.maxRSSKB = max(u.maxRSSKB, int64(ru.Maxrss))
	u.userUS += int64(ru.Utime.Sec)*1e6 + int64(ru.Utime.Usec)
	u.systemUS += int64(ru.Stime.Sec)*1e6 + int64(ru.Stime.Usec)
}

// reapAll reaps every child that has ended; done reports child among them.
func reapAll(child int, used *usage) (status unix.WaitStatus, done bool) {
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, &ru)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil || pid <= 0:
			return status, done
		}
		used.add(&ru)
		if pid == child {
			status, done = ws, true
		}
	}
}

// reapRest waits for every remaining child (PID 1 has just killed them
// all; orphans of the namespace are its children too) until none is left.
func reapRest(used *usage) {
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		_, err := unix.Wait4(-1, &ws, 0, &ru)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return // ECHILD: nothing of the sandbox is left
		}
		used.add(&ru)
	}
}

// readSignalRequests delivers the signal numbers the launcher writes on
// the lifeline (SignalTag + one byte each) and is closed when the launcher's
// end hangs up. Anything else on the stream is skipped. The descriptor is
// made non-blocking so the reads wait in Go's poller, not in a thread of
// their own (threads count against RLIMIT_NPROC).
//
// WinsizeTag records (pty_linux.go) go to onResize.
func readSignalRequests(fd int, onResize func(rows, cols uint16)) (<-chan syscall.Signal, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("lifeline fd %d: %w", fd, err)
	}
	// A duplicate for the reader: the original stays for the status
	// record, whatever the reader's file does with its descriptor.
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fmt.Errorf("lifeline fd %d: %w", fd, err)
	}
	f := os.NewFile(uintptr(dup), "lifeline")
	out := make(chan syscall.Signal, 8)
	go func() {
		defer close(out)
		defer f.Close()
		var buf [64]byte
		var pending []byte
		for {
			n, err := f.Read(buf[:])
			if err != nil || n <= 0 {
				return
			}
			pending = append(pending, buf[:n]...)
			for len(pending) >= 2 {
				if pending[0] == WinsizeTag {
					if len(pending) < winsizeRecordLen {
						break
					}
					onResize(binary.LittleEndian.Uint16(pending[1:]), binary.LittleEndian.Uint16(pending[3:]))
					pending = pending[winsizeRecordLen:]
					continue
				}
				if pending[0] != SignalTag {
					pending = pending[1:]
					continue
				}
				if s := int(pending[1]); s >= 1 && s <= maxSignal {
					out <- syscall.Signal(s)
				}
				pending = pending[2:]
			}
		}
	}()
	return out, nil
}

// readNotRun reads what a reaped child wrote on its report descriptor
// (none: fd < 0): a NotRunTag record when its target never ran, nothing
// (its exec closed the descriptor) when it did. Anything else is no
// report: the child's exit status stands.
func readNotRun(fd int) (NotRunStage, syscall.Errno) {
	if fd < 0 {
		return NotRunNone, 0
	}
	// Every writer is gone (the child is reaped, and nothing else ever
	// held the other end): a read never waits, but the descriptor is made
	// non-blocking so a mistake there cannot hang the supervisor.
	_ = unix.SetNonblock(fd, true)
	var buf [2 * notRunRecordLen]byte
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || m <= 0 {
			break
		}
		n += m
	}
	stage, e, ok := decodeNotRun(buf[:n])
	if !ok {
		return NotRunNone, 0
	}
	return stage, e
}

// reportStatus writes the status record. A launcher that is gone cannot
// read it, which is no error.
func reportStatus(fd int, ws unix.WaitStatus, used usage) {
	rec := EncodeStatus(Status{Wait: uint32(ws), MaxRSSKB: used.maxRSSKB, UserUS: used.userUS, SystemUS: used.systemUS, Alone: used.alone,
		NotRun: used.notRun, Errno: used.errno})
	_ = unix.Sendto(fd, rec, unix.MSG_NOSIGNAL, nil)
}

// exitCodeOf is the shell's convention (what bwrap reports too): the exit
// status, or 128+N for death by signal N.
func exitCodeOf(ws unix.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return 255
}

// loadSeccompAllThreads installs prog on every thread of the process
// (SECCOMP_FILTER_FLAG_TSYNC). The supervisor, unlike the plain mode,
// lives on beside the command, and all of its Go runtime threads must be
// filtered, not only the one that forks.
func loadSeccompAllThreads(prog []bpf.Instruction) error {
	filter, err := sockFilter(prog)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	r, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER, TSYNC): thread %d could not be synchronised", r)
	}
	return nil
}

// pid1SignalGuard goes in front of every sandbox-init filter (the
// supervisor's, which a spawning command inherits, and the plain mode's):
// kill, tkill, tgkill, rt_sigqueueinfo, rt_tgsigqueueinfo and pidfd_open
// aimed at pid 1 fail with EPERM. PID 1 shares the command's Landlock
// domain, so Landlock's signal scope does not stop these, and the kernel
// answers a signal to a namespace's init that it then ignores with
// success. What such a signal could do is small (SIGKILL and SIGSTOP from
// inside are dropped, the forwarded ones come back to the command), but
// the command has no business signalling its supervisor. The pid is a
// pid_t: the kernel keeps only its low 32 bits, so only those are
// compared. Threads of PID 1 other than the first have other ids, and a
// signal to one of them reaches the same handlers: no more than above.
// A foreign architecture skips the guard; the main program kills it.
func pid1SignalGuard(info *arch.Info) ([]bpf.Instruction, error) {
	names := []string{"kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open"}
	var nrs []uint32
	for _, n := range names {
		nr, ok := info.SyscallNames[n]
		if !ok {
			return nil, fmt.Errorf("seccomp: syscall %s unknown on %s", n, info.Name)
		}
		nrs = append(nrs, uint32(nr))
	}
	// Layout: [0] load arch, [1] skip all if foreign, [2] load nr,
	// [3..3+n) one test per syscall jumping to the argument check, then
	// "not one of them: done", the check (load arg0 low, compare, EPERM),
	// and the end, where the main program starts.
	n := len(nrs)
	checkAt := 3 + n + 1 // index of the argument load
	end := checkAt + 3   // first instruction after the guard
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompDataArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(info.ID), SkipTrue: uint8(end - 2)},
		bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
	}
	for i, nr := range nrs {
		at := 3 + i
		p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipTrue: uint8(checkAt - at - 1)})
	}
	p = append(p,
		bpf.Jump{Skip: uint32(end - (3 + n) - 1)},
		bpf.LoadAbsolute{Off: argLowOffset(0), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 1, SkipFalse: 1},
		bpf.RetConstant{Val: retEPERM},
	)
	if len(p) != end {
		return nil, fmt.Errorf("seccomp: pid-1 guard is %d instructions, laid out for %d", len(p), end)
	}
	return p, nil
}

// faultSignals are the signals the Go runtime ends the supervisor on,
// caught or not, when they carry a code other than SI_USER or SI_TKILL:
// it takes SIGSEGV, SIGBUS and SIGFPE for a fault of its own, and the
// others for a trap it cannot recover from. kill, tkill and tgkill always
// send SI_USER or SI_TKILL; sigqueue and pidfd_send_signal let the sender
// choose a negative code (SI_QUEUE), and a descriptor's owner gets the
// signal F_SETSIG names with a POLL_* code.
func faultSignals() []uint32 {
	return []uint32{uint32(unix.SIGILL), uint32(unix.SIGTRAP), uint32(unix.SIGBUS), uint32(unix.SIGFPE),
		uint32(unix.SIGSEGV), uint32(unix.SIGSTKFLT), uint32(unix.SIGSYS)}
}

// faultSignalGuard goes in front of every sandbox-init filter, after the
// pid-1 guard: rt_sigqueueinfo, rt_tgsigqueueinfo, pidfd_send_signal with
// a siginfo, and fcntl(F_SETSIG) get EPERM for a signal of faultSignals.
// The catch-all handlers (catchSignals) do not help against those: a
// SIGSEGV queued to PID 1 with SI_QUEUE, or sent as its descriptor's
// SIGIO, made the Go runtime crash with a dump of its state on the
// command's stderr, and the sandbox ended without its status record. A
// command that may spawn shares PID 1's Landlock domain, and without the
// signal scope nothing else stops it; the pid-1 guard cannot see a
// descriptor's target, nor PID 1's other threads. No program needs to
// queue a fault signal to another process, nor to be told of I/O with
// one. The arguments are ints the kernel truncates to 32 bits, so only the
// low halves are compared, the siginfo pointer excepted.
func faultSignalGuard(info *arch.Info) ([]bpf.Instruction, error) {
	sigs := faultSignals()
	n := len(sigs)
	// sigIn denies when argument arg holds one of sigs; it falls through
	// to its last instruction, which reloads the number for what follows.
	sigIn := func(arg uint32) []bpf.Instruction {
		p := []bpf.Instruction{bpf.LoadAbsolute{Off: argLowOffset(arg), Size: 4}}
		for i, s := range sigs {
			p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: s, SkipTrue: uint8(n - i)})
		}
		return append(p,
			bpf.Jump{Skip: 1},
			bpf.RetConstant{Val: retEPERM},
			bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
		)
	}
	sigLen := n + 3 // sigIn without its reload
	type check struct {
		name string
		body []bpf.Instruction
	}
	checks := []check{
		{"rt_sigqueueinfo", sigIn(1)},
		{"rt_tgsigqueueinfo", sigIn(2)},
		// pidfd_send_signal(fd, sig, info, flags): without a siginfo the
		// code is SI_USER, which the catch-all handles.
		{"pidfd_send_signal", append([]bpf.Instruction{
			bpf.LoadAbsolute{Off: argLowOffset(2), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 0, SkipTrue: 2},
			bpf.LoadAbsolute{Off: argLowOffset(2) ^ 4, Size: 4}, // the other half of the pointer
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: uint8(sigLen)},
		}, sigIn(1)...)},
	}
	for _, name := range []string{"fcntl", "fcntl64"} {
		if _, ok := info.SyscallNames[name]; !ok {
			continue
		}
		checks = append(checks, check{name, append([]bpf.Instruction{
			bpf.LoadAbsolute{Off: argLowOffset(1), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.F_SETSIG, SkipTrue: uint8(sigLen)},
		}, sigIn(2)...)})
	}
	var body []bpf.Instruction
	for _, c := range checks {
		nr, ok := info.SyscallNames[c.name]
		if !ok {
			return nil, fmt.Errorf("seccomp: syscall %s unknown on %s", c.name, info.Name)
		}
		body = append(body, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(nr), SkipTrue: uint8(len(c.body))})
		body = append(body, c.body...)
	}
	if len(body)+1 > 255 {
		return nil, fmt.Errorf("seccomp: fault-signal guard is %d instructions, more than a jump reaches", len(body))
	}
	// A foreign architecture skips the guard, as the pid-1 guard's; the
	// main program kills it.
	return append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompDataArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(info.ID), SkipTrue: uint8(len(body) + 1)},
		bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
	}, body...), nil
}

// guardedProgram is spec's filter with the pid-1 and fault-signal guards
// in front.
func guardedProgram(spec *InitSpec) ([]bpf.Instruction, error) {
	prog, err := seccompProgram(spec)
	if err != nil {
		return nil, err
	}
	info, err := nativeArch()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	guard, err := pid1SignalGuard(info)
	if err != nil {
		return nil, err
	}
	faults, err := faultSignalGuard(info)
	if err != nil {
		return nil, err
	}
	guard = append(guard, faults...)
	prog = append(guard, prog...)
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("seccomp: program has %d instructions, limit %d", len(prog), unix.BPF_MAXINSNS)
	}
	return prog, nil
}
