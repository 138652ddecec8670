//go:build linux

package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The pre-forked child of a prepared sandbox (InitSpec.GoFD).
//
// When the command may not spawn, the supervisor's child execs
// sandbox-init again in the plain mode, which adds the no-spawn filter the
// supervisor itself cannot carry, then execs the target. That second Go
// start (about 1.5 ms here, more under load) and the child's confinement
// used to come after the command arrived. A prepared sandbox starts the
// child while it waits instead: the child confines itself (no_new_privs,
// Landlock, the rlimits, its capabilities cleared on every thread) and
// then waits on a socket pair only the supervisor holds the other end of.
// At the hand-over the supervisor sends it the command (argv, directory,
// the RLIMIT_NPROC to apply) with the command's stdin, stdout, stderr and
// environment as SCM_RIGHTS; the child, under the target's seccomp program
// since before it waited, puts them in place and execs the target.
//
// What is the same as a child forked at the hand-over: the target's
// Landlock rules (built from the spec, which has nothing of the command's:
// the roots and the system read set, never a protected entry, so building
// them before the hand-over's mounts changes nothing), its seccomp program
// (the target's whole program, which includes the PID-1 guard the forked
// child inherited from the supervisor), no_new_privs, the rlimits, the
// descriptors it keeps, its process group, and the death signal tied to
// the supervisor's locked thread. The child holds neither the lifeline nor
// anything of the driver's.
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
// The child's capabilities: it was forked from the waiting supervisor,
// which still holds CAP_SYS_ADMIN and CAP_SETPCAP (in the sandbox's user
// namespace) for the mounts. Before it forks, the supervisor empties its
// bounding, ambient and inheritable sets and locks the securebits that
// give uid 0 capabilities at an exec, so the child starts with none; it
// refuses to go on if it finds any, and clears the sets on every thread
// anyway before it waits.

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

// preforked is a supervisor's waiting child.
type preforked struct {
	pid  int
	sock int // the supervisor's end
}

// wantsPrefork says whether spec's supervisor starts its child while it
// waits: a prepared sandbox whose command may not spawn, supervised as
// PID 1 (its kill(-1) must reach the child).
func wantsPrefork(spec *InitSpec) bool {
	return spec.Prepared && spec.Supervise && !spec.AllowSpawn && spec.Tty == nil && os.Getpid() == 1
}

// startPreforked starts the waiting child. It runs on the locked thread
// (the child's death signal follows that thread).
func startPreforked(spec *InitSpec) (*preforked, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("own binary: %w", err)
	}
	sv, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pre-forked child: socketpair: %w", err)
	}
	cs := childSpec(spec)
	files := childFiles(spec.EnvFD, withSeccompFD(spec))
	cs.GoFD = len(files)
	files = append(files, uintptr(sv[1]))
	args, err := InitArgs(cs, HandoverProgram)
	if err != nil {
		unix.Close(sv[0])
		unix.Close(sv[1])
		return nil, err
	}
	pid, err := syscall.ForkExec(self, append([]string{self, SandboxInitCommand}, args...), &syscall.ProcAttr{
		Env: []string{}, Files: files,
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true},
	})
	unix.Close(sv[1])
	if err != nil {
		unix.Close(sv[0])
		return nil, fmt.Errorf("pre-forked child: start %s: %w", self, err)
	}
	return &preforked{pid: pid, sock: sv[0]}, nil
}

// ready waits until the child says it waits for its command (one byte),
// and reports whether it does; false: it ended, said something else or
// took longer than preforkReadyWait, and the supervisor forks a child the
// ordinary way. Not waited for at start: the sandbox is ready for the pool
// sooner, and the child's start overlaps the hand-over when a command
// comes at once.
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

// noCapabilities fails when this thread holds any capability.
func noCapabilities() error {
	return noneHeld("the pre-forked child started with capabilities")
}

// abandon kills and reaps the child (it never received a command).
func (p *preforked) abandon() {
	_ = unix.Kill(p.pid, unix.SIGKILL)
	var ws unix.WaitStatus
	for {
		if _, err := unix.Wait4(p.pid, &ws, 0, nil); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if p.sock >= 0 {
		unix.Close(p.sock)
	}
}

// start sends the child its command with this process's descriptors 0, 1,
// 2 and envFD (the command's, since the hand-over) and closes the
// supervisor's end.
func (p *preforked) start(argv []string, cwd string, nproc uint64, envFD int) error {
	defer func() {
		unix.Close(p.sock)
		p.sock = -1
	}()
	rec, err := EncodeHandover(Handover{Argv: argv, Cwd: cwd, Nproc: nproc})
	if err != nil {
		return err
	}
	n, err := unix.SendmsgN(p.sock, rec, unix.UnixRights(0, 1, 2, envFD), nil, unix.MSG_NOSIGNAL)
	for err == nil && n < len(rec) {
		var m int
		m, err = unix.SendmsgN(p.sock, rec[n:], nil, nil, unix.MSG_NOSIGNAL)
		n += m
	}
	if err != nil {
		return fmt.Errorf("pre-forked child: %w", err)
	}
	return nil
}

// preforkedChild is sandbox-init as a pre-forked child: confine, wait for
// the command, exec it. It returns only on failure (or when the supervisor
// ends without a command: 0, nil and nothing to say).
func preforkedChild(spec InitSpec) (int, error) {
	fail := func(err error) (int, error) { return 0, err }
	if err := noCapabilities(); err != nil {
		return fail(err)
	}
	prog, err := initProgram(&spec)
	if err != nil {
		return fail(err)
	}
	plan, err := planLandlock(&spec, effectiveLandlockABI())
	if err != nil {
		return fail(err)
	}
	runtime.LockOSThread()
	if err := clearCapabilitiesAllThreads(); err != nil {
		return fail(err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err))
	}
	if err := applyLandlock(plan); err != nil {
		return fail(err)
	}
	if err := applyRlimits(rlimitPlan(&spec)); err != nil {
		return fail(err)
	}
	// The target's program now, on this thread (the one that execs): what
	// runs under it from here to the exec (receiving the command, the
	// descriptors, the directory, the environment, the PATH lookup) is
	// what any target may do, and threads the runtime starts meanwhile
	// die at the exec.
	if err := loadSeccomp(prog); err != nil {
		return fail(err)
	}
	if err := unix.Sendto(spec.GoFD, []byte{StartedTag}, unix.MSG_NOSIGNAL, nil); err != nil {
		return fail(fmt.Errorf("go fd %d: %w", spec.GoFD, err))
	}
	h, fds, err := awaitHandover(spec.GoFD)
	if errors.Is(err, errLauncherGone) {
		// The sandbox ends without a command (destroyed, or its hand-over
		// failed): nothing to run, nothing to say.
		return SandboxInitExitCode, nil
	}
	if err != nil {
		return fail(err)
	}
	for i, to := range []int{0, 1, 2, spec.EnvFD} {
		if err := unix.Dup3(fds[i], to, 0); err != nil {
			return fail(fmt.Errorf("command descriptor %d: %w", to, err))
		}
		unix.Close(fds[i])
	}
	if err := unix.Chdir(h.Cwd); err != nil {
		return fail(fmt.Errorf("chdir %s: %w", h.Cwd, err))
	}
	env, err := ReadEnvFD(spec.EnvFD)
	if err != nil {
		return fail(err)
	}
	if err := becomeEnv(env); err != nil {
		return fail(err)
	}
	path, err := exec.LookPath(h.Argv[0])
	if err != nil {
		return fail(fmt.Errorf("program %q: %w", h.Argv[0], err))
	}
	if h.Nproc > 0 {
		if err := applyRlimits([]rlimitSetting{{"RLIMIT_NPROC", unix.RLIMIT_NPROC, h.Nproc}}); err != nil {
			return fail(err)
		}
	}
	if err := closeOnExecExcept(spec.InheritFDs); err != nil {
		return fail(err)
	}
	err = syscall.Exec(path, h.Argv, env)
	return fail(fmt.Errorf("exec %s: %w", path, err))
}
