//go:build linux

package sandboxinit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// SandboxInit is the sandbox-init mode of the driver binary, run by bwrap
// inside the new namespaces. args is `<initspec-json>`, the command on
// InitSpec.CommandFD, or `<initspec-json> -- PROGRAM ARGS...`. It confines
// its own thread (no_new_privs, Landlock, rlimits, seccomp) and execs
// PROGRAM, looked up in the PATH of the target's environment (from
// InitSpec.CommandFD, else its own). In the plain mode it returns only on
// failure, with SandboxInitExitCode after one `aleph-sandbox: sandbox-init:`
// line on stderr: the target is never exec'd unconfined. Supervising
// (InitSpec.Supervise, supervise_linux.go) it runs PROGRAM as its child and
// returns the exit status to end with once PROGRAM has ended.
func SandboxInit(args []string) int {
	// One P. Nothing here computes in parallel (a supervisor waits,
	// forwards signals and relays a terminal), and with two the runtime
	// wakes a second thread to look for work at every wake-up of a
	// goroutine: sandbox-init's CPU per command fell from 10.5 to 9.2 ms
	// and from 11.9 to 9.5 ms in two perf runs (4 commands at a time, two
	// cores), fewer threads for the all-threads calls to stop included.
	runtime.GOMAXPROCS(1)
	code, err := sandboxInit(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "aleph-sandbox: sandbox-init: %v\n", err)
		return SandboxInitExitCode
	}
	return code
}

func sandboxInit(args []string) (int, error) {
	fail := func(err error) (int, error) { return 0, err }
	spec, argv, err := ParseInitArgs(args)
	if err != nil {
		return fail(err)
	}
	if spec.LifelineFD > 0 {
		if err := ReportStarted(spec.LifelineFD); err != nil {
			return fail(err)
		}
		wait := WaitReaperArmed
		if spec.NoNamespaces || spec.SessionChild {
			// No bwrap, no reaper: the launcher says when this process is
			// in the command's cgroup.
			wait = func() error { return WaitGoAhead(spec.LifelineFD) }
		}
		if err := wait(); err != nil {
			return fail(err)
		}
	}
	if spec.SessionSupervisor {
		return superviseSession(&spec)
	}
	if spec.SessionChild {
		if err := enterSessionChild(); err != nil {
			return fail(err)
		}
	}
	if spec.Supervise && unixGuarded(&spec) {
		// First of all on NotifyFD: before a prepared sandbox's waiting
		// child sends its listener, and before any program is loaded.
		if err := sendUnixDiag(&spec); err != nil {
			return fail(err)
		}
	}
	var sigs *caughtSignals
	var pre *preforked
	var conf *confinement
	var cwd string
	if spec.Prepared {
		// What does not depend on the command is done before it arrives:
		// the signal handlers (supervise_linux.go), the bounding set, the
		// plain child (prefork_linux.go). The child's death signal follows
		// the thread that forks it: the one locked below for good.
		runtime.LockOSThread()
		// The bounding set first: each all-threads call stops every
		// thread, and catching signals starts two more.
		if err := dropBoundingAllThreads(); err != nil {
			return fail(err)
		}
		sigs = catchSignals(!targetScopedAway(&spec))
		if wantsPrefork(&spec) {
			if pre, err = startPreforked(&spec); err != nil {
				// The child is forked at the hand-over instead, as in a
				// sandbox built for its command.
				pre = nil
			}
		}
		// The supervisor's own confinement is built now too (its
		// seccomp program, its Landlock ruleset); only loading them is
		// left for after the hand-over's mounts, which both would deny.
		if conf, err = planConfinement(&spec, pre != nil); err != nil {
			return fail(err)
		}
		defer conf.close()
		if err := ReportPrepared(spec.LifelineFD); err != nil {
			return fail(err)
		}
		// A prepared sandbox: the command arrives now (handover.go).
		h, fds, err := awaitHandover(spec.LifelineFD)
		if err != nil {
			return fail(err)
		}
		herr := applyHandover(h, fds, spec.CommandFD)
		if err := replyHandover(spec.LifelineFD, herr); herr != nil || err != nil {
			return fail(errors.Join(herr, err))
		}
		cwd = h.Cwd
	}
	env := os.Environ()
	if spec.CommandFD > 0 {
		if argv, env, err = ReadCommandFD(spec.CommandFD); err != nil {
			return fail(err)
		}
		if err := becomeEnv(env); err != nil {
			return fail(err)
		}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		err = fmt.Errorf("program %q: %w", argv[0], err)
		if reportNotRun(&spec, pre, NotRunLookup, err) {
			return SandboxInitExitCode, nil
		}
		if spec.SessionChild && spec.LifelineFD > 0 {
			// A refusal with no errno (a program found through a
			// relative PATH entry): a command's own sandbox-init ends
			// with SandboxInitExitCode, which bwrap passes on; a session
			// child's end is seen by no one but the supervisor, so it
			// says so on the lifeline, or the launcher would take its
			// silence for the session sandbox's end. Nothing was started.
			fmt.Fprintf(os.Stderr, "aleph-sandbox: sandbox-init: %v\n", err)
			if pre != nil {
				pre.abandon()
			}
			rec := EncodeStatus(Status{Wait: SandboxInitExitCode << 8, Alone: os.Getpid() == 1})
			_ = unix.Sendto(spec.LifelineFD, rec, unix.MSG_NOSIGNAL, nil)
			return SandboxInitExitCode, nil
		}
		return fail(err)
	}
	// Everything that can fail for a reason other than the kernel is
	// computed before the process is changed.
	if conf == nil {
		if conf, err = planConfinement(&spec, false); err != nil {
			return fail(err)
		}
		defer conf.close()
	}
	limits := rlimitPlan(&spec)
	if spec.Supervise {
		// The supervisor sets RLIMIT_NPROC itself, once it knows how many
		// threads of its own the count includes (supervise_linux.go).
		limits = withoutNproc(limits)
	}

	// Landlock, no_new_privs and seccomp are per thread; the exec below
	// must run on the thread that carries them. Never unlocked: if exec
	// fails, the confined thread must not be handed back to the scheduler.
	runtime.LockOSThread()

	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err))
	}
	if spec.NoNamespaces {
		// No user namespace bounds a root launcher's capabilities here.
		if err := dropCapabilities(); err != nil {
			return fail(err)
		}
	}
	if err := conf.restrict(); err != nil {
		return fail(err)
	}
	if err := applyRlimits(limits); err != nil {
		return fail(err)
	}
	if err := closeOnExecExcept(spec.InheritFDs); err != nil {
		return fail(err)
	}
	if spec.Supervise {
		return supervise(&spec, conf.prog, path, argv, env, sigs, pre, cwd)
	}
	if notifying(&spec) {
		// Before the target's program, which would refuse the sendmsg
		// that hands the listener over in none of its modes, but is kept
		// last (notify_linux.go).
		if err := installNotify(&spec); err != nil {
			return fail(err)
		}
	}
	// seccomp last: it denies nothing the steps above need, but loading
	// it last keeps the window where this Go code runs filtered minimal.
	if err := loadSeccomp(conf.prog); err != nil {
		return fail(err)
	}
	// Last look at the lifeline: a launcher that died while bwrap set up
	// could not take the sandbox down (--die-with-parent was not armed
	// yet). From here on it can: bwrap armed it for this process before
	// running it, and for its reaper before WaitReaperArmed returned.
	if spec.LifelineFD > 0 && LauncherGone(spec.LifelineFD) {
		return fail(errLauncherGone)
	}
	err = syscall.Exec(path, argv, env)
	err = fmt.Errorf("exec %s: %w", path, err)
	if reportNotRun(&spec, nil, NotRunExec, err) {
		return SandboxInitExitCode, nil
	}
	return fail(err)
}

// reportNotRun tells whoever launched this sandbox-init that the target
// never ran, and why (err's errno), through a channel the command cannot
// write to: the plain mode writes a NotRunTag record on its ReportFD (to
// the supervisor that forked it), a supervisor the status record on the
// lifeline (to the launcher), after ending its waiting child pre and, in a
// prepared sandbox, closing the command's stdio. It returns false when err
// has no errno or there is no one to tell: the caller then says it on
// stderr, as for any other failure. A report replaces that line: the
// launcher says it, once, as the error of the run.
func reportNotRun(spec *InitSpec, pre *preforked, stage NotRunStage, err error) bool {
	e := errnoOf(err)
	switch {
	case e == 0:
		return false
	case spec.ReportFD > 0:
		rec := encodeNotRun(stage, e)
		n, err := unix.Write(spec.ReportFD, rec)
		return err == nil && n == len(rec)
	case spec.Supervise && spec.LifelineFD > 0:
		if pre != nil {
			pre.abandon()
		}
		if spec.Prepared {
			// As at the end of a command that ran (supervise_linux.go).
			for fd := range 3 {
				_ = unix.Close(fd)
			}
		}
		// Nothing was started: as PID 1 nothing else of the sandbox runs.
		rec := EncodeStatus(Status{Wait: SandboxInitExitCode << 8, Alone: os.Getpid() == 1, NotRun: stage, Errno: e})
		return unix.Sendto(spec.LifelineFD, rec, unix.MSG_NOSIGNAL, nil) == nil
	}
	return false
}

// errnoOf is the errno behind a failed lookup or exec, 0 when there is
// none: the lookup's own errors stand for the errno they mean.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrPermission):
		return syscall.EACCES
	}
	return 0
}

// becomeEnv makes env's PATH this process's only variable: the PATH lookup
// of the program reads it. Nothing else of the command's environment is
// taken on: a supervisor lives as long as its command, and the Go runtime
// acts on some variables when they are set (GODEBUG changes its settings
// at once), so a command's GODEBUG would otherwise tune the supervisor.
func becomeEnv(env []string) error {
	os.Clearenv()
	if path, ok := envPath(env); ok {
		if err := os.Setenv("PATH", path); err != nil {
			return fmt.Errorf("env PATH: %w", err)
		}
	}
	return nil
}

// envPath is env's PATH (the last one, as setting each in turn would
// leave it).
func envPath(env []string) (string, bool) {
	path, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path, found = v, true
		}
	}
	return path, found
}

// LandlockABI is the Landlock ABI level SandboxInit enforces on this kernel:
// the kernel's version, capped at what go-landlock knows; 0 when Landlock is
// unavailable (then no Landlock rule is applied and none may be claimed).
func LandlockABI() int { return effectiveLandlockABI() }

// SeccompAvailable reports whether this kernel accepts seccomp filters
// (SandboxInit fails closed when it does not).
func SeccompAvailable() bool { return seccompSupported() }

// closeOnExecExcept marks every descriptor >= 3 close-on-exec except keep,
// which must be open and lose their close-on-exec flag. Marking instead of
// closing leaves the Go runtime's own descriptors usable until the exec.
func closeOnExecExcept(keep []int) error {
	keep = slices.Sorted(slices.Values(keep))
	for _, fd := range keep {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return fmt.Errorf("inherit fd %d: %w", fd, err)
		}
	}
	mark := func(first, last uint) error {
		err := unix.CloseRange(first, last, unix.CLOSE_RANGE_CLOEXEC)
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
			return cloexecByList(first, last) // kernel < 5.11
		}
		if err != nil {
			return fmt.Errorf("close_range: %w", err)
		}
		return nil
	}
	next := uint(3)
	for _, fd := range keep {
		if uint(fd) > next {
			if err := mark(next, uint(fd)-1); err != nil {
				return err
			}
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return fmt.Errorf("inherit fd %d: %w", fd, err)
		}
		next = uint(fd) + 1
	}
	return mark(next, ^uint(0))
}

// cloexecByList is closeOnExecExcept's fallback without close_range.
func cloexecByList(first, last uint) error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("listing fds: %w", err)
	}
	for _, e := range ents {
		n, err := strconv.ParseUint(e.Name(), 10, 0)
		if err != nil || uint(n) < first || uint(n) > last {
			continue
		}
		// The directory's own fd is gone by now: EBADF is expected.
		if _, err := unix.FcntlInt(uintptr(n), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("fd %d: %w", n, err)
		}
	}
	return nil
}
