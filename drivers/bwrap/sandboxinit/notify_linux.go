//go:build linux

package sandboxinit

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The command's notification filter (InitSpec.NotifyFD).
//
// Some calls the command makes are answered by the launcher instead of the
// kernel, through seccomp user notification: the filter returns
// SECCOMP_RET_USER_NOTIF for them, the kernel stops the calling thread and
// hands the call to whoever holds the filter's listener. The launcher
// holds it, outside every confinement, and dispatches by syscall number:
//
//   - fork, vfork and clone without CLONE_THREAD, when the command may not
//     spawn: answered with EPERM, always, and counted, so that the result
//     of the run can say that the command failed for want of the spawn
//     capability (reason spawn_refused) instead of leaving the user to
//     guess from what the command printed. The answer is never
//     SECCOMP_USER_NOTIF_FLAG_CONTINUE: nothing the launcher does can let
//     a process start.
//   - the denylist (seccomp_linux.go's deniedSyscalls), whenever there is
//     a notification filter: answered with EPERM, as the target's program
//     answers them without one, and reported as violations of kind
//     syscall. Never CONTINUE either: the launcher runs none of them.
//   - the metadata guard's calls in the Landlock tier (metaguard_linux.go).
//   - connect and the addressed sends of the command's unix sockets
//     (unixsock_linux.go).
//
// One filter, one listener, per command: a filter chain may hold only one
// listener (a second SECCOMP_FILTER_FLAG_NEW_LISTENER fails with EBUSY),
// so every handler shares it and the launcher dispatches.
//
// Who installs it: the process that execs the target, after its own
// confinement and before the target's program: the plain sandbox-init the
// supervisor forks, or the raw child (forkCommand, a prepared sandbox's
// waiting child). Never the supervisor: it must fork the target once, and
// a fork rule on its own chain would refuse that fork too.
//
// Failing closed:
//   - the listener's holder gone (the launcher died, or never took it):
//     the kernel fails every notified call with ENOSYS; a fork is still
//     refused, only no longer counted.
//   - the target's program (seccomp_linux.go) refuses fork and the rest
//     itself (EPERM) whenever no notification filter takes them; with one,
//     it lets them through to this filter, because an ERRNO of any filter
//     takes precedence over USER_NOTIF and the call would never reach the
//     launcher. Namespace flags on clone and clone3 stay refused by the
//     target's program (ERRNO), whatever this filter says.
//   - a call of a foreign architecture is allowed here: the target's
//     program kills the process.

// spawnNotified reports whether the fork rules of spec's target are in its
// notification filter, so its main program leaves them out.
func spawnNotified(spec *InitSpec) bool {
	return spec.NotifyFD > 0 && !spec.AllowSpawn
}

// notifying reports whether the process that execs spec's target
// installs a notification filter.
func notifying(spec *InitSpec) bool {
	return spec.NotifyFD > 0 && (spec.MetaGuard || !spec.AllowSpawn || unixGuarded(spec))
}

// denyNotified reports whether spec's denylist is answered by the
// launcher: whenever the process that execs the target installs the
// notification filter, which then holds it, and the target's program
// leaves it out (as the fork rules: an ERRNO there would take precedence).
func denyNotified(spec *InitSpec) bool { return notifying(spec) && !spec.childNotifies }

// DeniedNumbers maps the names of the denylist this architecture has to
// their numbers, for the launcher that answers them.
func DeniedNumbers() map[string]int {
	info, err := nativeArch()
	if err != nil {
		return nil
	}
	m := map[string]int{}
	for _, name := range deniedSyscalls() {
		if nr, ok := info.SyscallNames[name]; ok {
			m[name] = nr
		}
	}
	return m
}

// SpawnSyscalls are the calls the launcher answers with EPERM and counts
// when the command may not spawn, by name (clone only without
// CLONE_THREAD). Names the architecture lacks (fork and vfork on arm64)
// are skipped.
func SpawnSyscalls() []string { return []string{"fork", "vfork", "clone"} }

// SpawnNumbers maps the names of SpawnSyscalls this architecture has to
// their numbers, for the launcher that answers them.
func SpawnNumbers() map[string]int {
	info, err := nativeArch()
	if err != nil {
		return nil
	}
	m := map[string]int{}
	for _, name := range SpawnSyscalls() {
		if nr, ok := info.SyscallNames[name]; ok {
			m[name] = nr
		}
	}
	return m
}

// notifyHeader checks the architecture (a foreign one is allowed here: the
// target's program kills it) and loads the syscall number.
func notifyHeader(info *arch.Info) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompDataArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: retAllow},
		bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
	}
}

// notifyProgram is spec's notification filter.
func notifyProgram(spec *InitSpec, info *arch.Info) ([]bpf.Instruction, error) {
	p := notifyHeader(info)
	if !spec.AllowSpawn {
		for _, name := range []string{"fork", "vfork"} {
			nr, ok := info.SyscallNames[name]
			if !ok {
				continue
			}
			p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1},
				bpf.RetConstant{Val: seccompRetUserNotif})
		}
		cloneNr, ok := info.SyscallNames["clone"]
		if !ok {
			return nil, fmt.Errorf("syscall clone unknown on %s", info.Name)
		}
		// A thread (CLONE_THREAD) is not a new process: Go, Java and Node
		// start threads with it. The kernel keeps the low 32 bits of the
		// flags, the word compared here.
		p = append(p,
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(cloneNr), SkipFalse: 4},
			bpf.LoadAbsolute{Off: argLowOffset(0), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: unix.CLONE_THREAD, SkipTrue: 1},
			bpf.RetConstant{Val: seccompRetUserNotif},
			bpf.RetConstant{Val: retAllow},
		)
	}
	if denyNotified(spec) {
		for _, name := range deniedSyscalls() {
			nr, ok := info.SyscallNames[name]
			if !ok {
				continue
			}
			p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1},
				bpf.RetConstant{Val: seccompRetUserNotif})
		}
	}
	if unixGuarded(spec) {
		rules, err := unixGuardRules(info)
		if err != nil {
			return nil, err
		}
		p = append(p, rules...)
	}
	if spec.MetaGuard {
		rules, err := metaGuardRules(info)
		if err != nil {
			return nil, err
		}
		return append(p, rules...), nil
	}
	return append(p, bpf.RetConstant{Val: retAllow}), nil
}

// notifyFilter is spec's notification filter in the kernel's format.
func notifyFilter(spec *InitSpec) ([]unix.SockFilter, error) {
	info, err := nativeArch()
	if err != nil {
		return nil, fmt.Errorf("notification filter: %w", err)
	}
	prog, err := notifyProgram(spec, info)
	if err != nil {
		return nil, fmt.Errorf("notification filter: %w", err)
	}
	return sockFilter(prog)
}

// notifyTag is the byte that carries the listener on NotifyFD.
const notifyTag = 'm'

// installNotify loads spec's notification filter on the calling thread,
// sends its listener on spec.NotifyFD and closes both. The caller holds
// runtime.LockOSThread, has set no_new_privs and execs on this thread
// (loadSeccomp says why one thread is enough).
func installNotify(spec *InitSpec) error {
	filter, err := notifyFilter(spec)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	l, _, errno := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_NEW_LISTENER, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("notification filter: seccomp(NEW_LISTENER): %w", errno)
	}
	listener := int(l)
	defer unix.Close(listener)
	defer unix.Close(spec.NotifyFD)
	if unixGuarded(spec) {
		return offerListener(spec.NotifyFD, listener)
	}
	if err := unix.Sendmsg(spec.NotifyFD, []byte{notifyTag}, unix.UnixRights(listener), nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("notification filter: hand the listener to the launcher: %w", err)
	}
	return nil
}

// pullTag starts the record that offers the listener to the launcher when
// the filter notifies sendmsg (unixsock_linux.go): sending it with
// SCM_RIGHTS would be a notified call that only the listener's holder, who
// does not have it yet, could answer. The record is the tag and the
// listener's descriptor number (4 bytes, native order), written with
// write(2), which no filter hands over; the launcher, which reads the
// writer's pid from the credentials the kernel attaches to the record
// (SO_PASSCRED, in the launcher's own pid namespace), takes the listener
// with pidfd_getfd and answers one byte, after which the writer may close
// it. A launcher that is gone answers end-of-file: the listener is then
// closed unowned, and every notified call fails with ENOSYS.
const pullTag = 'p'

// offerListener offers listener on sock (see pullTag) and waits for the
// launcher to have taken it.
func offerListener(sock, listener int) error {
	var rec [5]byte
	rec[0] = pullTag
	binary.NativeEndian.PutUint32(rec[1:], uint32(int32(listener)))
	if _, err := unix.Write(sock, rec[:]); err != nil {
		return fmt.Errorf("notification filter: offer the listener to the launcher: %w", err)
	}
	var ack [1]byte
	for {
		_, err := unix.Read(sock, ack[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("notification filter: the launcher's answer: %w", err)
		}
		return nil
	}
}
