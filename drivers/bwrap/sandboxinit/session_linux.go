//go:build linux

package sandboxinit

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The session supervisor: PID 1 of a session sandbox (InitSpec.SessionSupervisor).
//
// A session sandbox is built once (bwrap, the profile's mounts, the
// session's /tmp, its network namespace) and serves every command of one
// session and one profile. Its PID 1 never runs a command: it is a factory
// of prepared sandboxes inside the session's namespaces. For each spawn
// record on its lifeline (SpawnTag with the new command's lifeline end
// and, when the profile has one, its notify socket) it clones the
// command's reaper and serves its lifeline itself (the fork path,
// sessionserve_linux.go), or, where the raw clone cannot run
// (newServeForker says why), forks and execs sandbox-init of its own spec
// in the prepared mode (SessionChild) in a new PID and mount namespace: that sandbox-init is PID 1 of the command's own
// PID namespace (the command's tree dies with it, the session lives on),
// its hand-over mounts are private to it, and it confines itself exactly
// as a prepared sandbox's PID 1 does (bounding set, seccomp, Landlock,
// no-spawn), after the fork and before the command's program is looked up.
//
// Security of the supervisor itself:
//   - it keeps CAP_SYS_ADMIN and CAP_SETPCAP of the sandbox's own user
//     namespace for its whole life (a child needs them for the new
//     namespaces and its hand-over mounts); an unprivileged driver's
//     supervisor is uid 0 of bwrap's user namespace, keeps CAP_SETFCAP
//     too, and starts each child in a user namespace of its own
//     (SessionUser, sessionuser_linux.go, where that is argued);
//   - nothing of a command can reach it: every command runs in a PID
//     namespace below the supervisor's, where the supervisor has no number
//     (kill, pidfd_open and ptrace name processes by their number in the
//     caller's namespace), the supervisor is not dumpable (its /proc
//     entries are root's of the host and closed to ptrace), and commands
//     hold no capability and run under their seccomp filter;
//   - it reads records only from its lifeline, whose other end only the
//     launcher holds; no command ever holds a descriptor of it (it is
//     close-on-exec here and not passed to a child);
//   - the launcher's end hanging up (the driver ended or died) ends the
//     supervisor, and as PID 1 of the session's PID namespace its end
//     kills everything in it, every command's namespace included.

// SpawnTag is the launcher's request on a session supervisor's lifeline:
// one byte carrying, as SCM_RIGHTS, the new sandbox-init's lifeline end and
// (with InitSpec.NotifyFD) its notify socket.
const SpawnTag = 'c'

// superviseSession is the session supervisor's life: it returns when the
// launcher's end of the lifeline is gone.
func superviseSession(spec *InitSpec) (int, error) {
	// Not dumpable: its /proc entries stay closed to every command (no
	// ptrace, no /proc/1/environ, no /proc/1/fd), whatever their uid.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	viewFD := -1
	if spec.SessionOverlay != nil {
		// Before passCapabilitiesAmbient and any child: the one step that
		// needs CAP_DAC_OVERRIDE, which is dropped at its end.
		if err := mountSessionOverlay(spec.SessionOverlay); err != nil {
			return 0, err
		}
		fd, err := openSessionOverlayRoot(spec.SessionOverlay.Target)
		if err != nil {
			return 0, err
		}
		viewFD = fd
		defer func() {
			if viewFD >= 0 {
				unix.Close(viewFD)
			}
		}()
	}
	if err := passCapabilitiesAmbient(); err != nil {
		return 0, err
	}
	child := *spec
	child.SessionSupervisor, child.SessionChild = false, true
	child.SessionOverlay = nil
	js, err := MarshalInitSpec(child)
	if err != nil {
		return 0, err
	}
	// The spec is sandbox-init's last argument (CommandFD: nothing follows
	// it); whatever precedes it (the mode, a PWD prefix) is kept.
	if len(os.Args) < 2 {
		return 0, errors.New("session supervisor: no argv to start children with")
	}
	argv := append(slices.Clone(os.Args[:len(os.Args)-1]), string(js))
	// What a child inherits at the same numbers: the command descriptor
	// (its record arrives with the hand-over), the seccomp programs and the
	// pinned paths. Everything else of the supervisor's is close-on-exec,
	// its lifeline first of all.
	keep := append([]int{spec.CommandFD}, spec.InheritFDs...)
	if spec.SeccompFD > 0 {
		keep = append(keep, spec.SeccompFD)
	}
	if err := closeOnExecExcept(keep); err != nil {
		return 0, err
	}
	for _, fd := range []int{spec.LifelineFD, spec.NotifyFD} {
		if fd > 0 {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
				return 0, fmt.Errorf("fd %d: %w", fd, err)
			}
		}
	}
	top := slices.Max(append(slices.Clone(keep), spec.LifelineFD, spec.NotifyFD))
	// The fork path (sessionserve_linux.go) where it can serve this
	// session's commands; else each command gets a sandbox-init of its
	// own, as below. The reapers' death signal follows the thread that
	// clones them: this goroutine's, locked for the supervisor's life.
	runtime.LockOSThread()
	var forker *sessionForker
	ferr := errors.New("the command's user namespace (session_user) is made on the sandbox-init path only")
	if spec.SessionUser == nil {
		forker, ferr = newServeForker(spec)
	}
	if ferr == nil {
		defer forker.close()
	}
	reap := make(chan os.Signal, 1)
	signal.Notify(reap, unix.SIGCHLD)
	go reapSession(reap)
	// Nothing is done ahead here: the driver knows the supervisor is ready
	// once this byte is on the lifeline. A layered session's overlay root
	// travels with it (SCM_RIGHTS), and goes from here before any child.
	if err := reportPreparedWith(spec.LifelineFD, viewFD); err != nil {
		return 0, err
	}
	if viewFD >= 0 {
		unix.Close(viewFD)
		viewFD = -1
	}
	want := 1
	if spec.NotifyFD > 0 {
		want = 2
	}
	for {
		fds, err := awaitSpawn(spec.LifelineFD, want)
		if errors.Is(err, errLauncherGone) {
			return 0, nil
		}
		if err != nil {
			return 0, err
		}
		if forker != nil {
			notify := -1
			if len(fds) > 1 {
				notify = fds[1]
			}
			// serve owns both descriptors from here on.
			if err := forker.serve(spec, fds[0], notify); err != nil {
				// The command's lifeline closed without a started byte:
				// its launcher says so, as below.
				fmt.Fprintf(os.Stderr, "aleph-sandbox: session supervisor: %v\n", err)
			}
			continue
		}
		if err := spawnChild(argv, top, spec, fds); err != nil {
			// The child's lifeline closes with fds below: its launcher
			// reads the end before any started byte and says so.
			fmt.Fprintf(os.Stderr, "aleph-sandbox: session supervisor: %v\n", err)
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
}

// passCapabilitiesAmbient arranges, once per session, what every
// command's sandbox-init would otherwise do itself with five all-threads
// calls (dropBoundingAllThreads): the bounding set emptied and the
// securebits set and locked (no root rule, no set-uid fix-up, no ambient
// raise). The capabilities a child needs for its mounts (those of the
// bounding set this process holds in its permitted set: CAP_SYS_ADMIN and
// CAP_SETPCAP, as bwrap left them) pass to it as ambient capabilities
// instead, the one way a capability survives an exec without a root rule
// or a bounding set; the child empties its inheritable set first thing,
// which empties its ambient set too, then drops the rest after its
// mounts, as before.
//
// What a child holds after its exec is therefore what it held before
// (those two, effective and permitted), with less to drop; nothing
// executed by this process's children can gain more, since its bounding
// set is empty and the securebits are locked. This process keeps its own
// effective and permitted sets (the clones need CAP_SYS_ADMIN). A step
// that fails before the bounding set is touched leaves things as they
// were (the children drop everything themselves, as before); a failure
// after it is returned: the supervisor ends, and the session is rebuilt.
func passCapabilitiesAmbient() error {
	last, err := lastCap()
	if err != nil {
		return err
	}
	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := new([2]unix.CapUserData)
	if err := unix.Capget(hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	var pass []int
	for c := 0; c <= last; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if err != nil {
			return fmt.Errorf("PR_CAPBSET_READ %d: %w", c, err)
		}
		if in != 0 && data[c/32].Permitted&(1<<(c%32)) != 0 {
			pass = append(pass, c)
			data[c/32].Inheritable |= 1 << (c % 32)
		}
	}
	err = allThreads("capset", unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(hdr)
	runtime.KeepAlive(data)
	if err != nil {
		return nil // as before: each child drops what it holds
	}
	for _, c := range pass {
		if err := allThreads("PR_CAP_AMBIENT_RAISE", unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c)); err != nil {
			return nil // the bounding set untouched: as before
		}
	}
	for c := 0; c <= last; c++ {
		if in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && in == 0 {
			continue
		}
		if err := allThreads("PR_CAPBSET_DROP", unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil {
			return err
		}
	}
	bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLock |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientLocked
	return allThreads("PR_SET_SECUREBITS", unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, uintptr(bits), 0)
}

// awaitSpawn reads one spawn record and its want descriptors.
func awaitSpawn(fd, want int) ([]int, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4*2))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, b[:], oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("lifeline fd %d: %w", fd, err)
		}
		var fds []int
		if oobn > 0 {
			if fds, err = parseRights(oob[:oobn]); err != nil {
				closeFDs(fds)
				return nil, err
			}
		}
		if n == 0 {
			closeFDs(fds)
			return nil, errLauncherGone
		}
		if b[0] != SpawnTag || len(fds) != want {
			closeFDs(fds)
			return nil, fmt.Errorf("lifeline: record %q with %d descriptors where a spawn was expected", b[0], len(fds))
		}
		return fds, nil
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// spawnChild forks and execs one prepared sandbox-init (argv) in a new PID
// and mount namespace, fds[0] as its lifeline and fds[1] its notify socket.
func spawnChild(argv []string, top int, spec *InitSpec, fds []int) error {
	files := make([]uintptr, top+1)
	for i := range files {
		files[i] = ^uintptr(0) // closed in the child
	}
	for i := range 3 {
		files[i] = uintptr(i)
	}
	files[spec.CommandFD] = uintptr(spec.CommandFD)
	if spec.SeccompFD > 0 {
		files[spec.SeccompFD] = uintptr(spec.SeccompFD)
	}
	for _, fd := range spec.InheritFDs {
		files[fd] = uintptr(fd)
	}
	files[spec.LifelineFD] = uintptr(fds[0])
	if spec.NotifyFD > 0 {
		files[spec.NotifyFD] = uintptr(fds[1])
	}
	sys := &syscall.SysProcAttr{
		// Its own PID namespace: the command's tree dies with its
		// sandbox-init (PID 1 there) and cannot name the supervisor
		// or another command's processes. Its own mount namespace:
		// the hand-over's mounts of the protected entries are its
		// alone (enterSessionChild makes them private).
		Cloneflags: unix.CLONE_NEWPID | unix.CLONE_NEWNS,
		Setsid:     true,
	}
	if spec.SessionUser != nil {
		// And its own user namespace (sessionuser_linux.go).
		sessionUserAttr(spec.SessionUser, sys)
	}
	_, err := syscall.ForkExec("/proc/self/exe", argv, &syscall.ProcAttr{
		Dir:   "/",
		Env:   os.Environ(),
		Files: files,
		Sys:   sys,
	})
	if err != nil {
		return fmt.Errorf("start a command's sandbox-init: %w", err)
	}
	return nil
}

// reapSession reaps every child of the session supervisor as it ends.
func reapSession(c <-chan os.Signal) {
	for range c {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

// enterSessionChild makes this process's mounts (a copy of the session's)
// private: the hand-over's mounts of the protected entries, made next,
// never propagate to the session or to another command.
func enterSessionChild() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("session child: private mounts: %w", err)
	}
	return nil
}
