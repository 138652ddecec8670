//go:build linux

package sandboxinit

import (
	"os"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// notifyVM runs spec's notification filter.
func notifyVM(t *testing.T, spec InitSpec) *filterVM {
	t.Helper()
	return vmOf(t, "notifyProgram", func(s *InitSpec) ([]bpf.Instruction, error) {
		info, err := nativeArch()
		if err != nil {
			return nil, err
		}
		return notifyProgram(s, info)
	}, spec)
}

// Without spawn, the notification filter hands fork, vfork and
// process-making clones to the launcher; threads and everything else pass
// (the target's program decides those). With spawn nothing of the fork
// family is handed over.
func TestNotifyProgramSpawnRules(t *testing.T) {
	f := notifyVM(t, InitSpec{NotifyFD: 5})
	for _, name := range []string{"fork", "vfork"} {
		if _, ok := f.info.SyscallNames[name]; !ok {
			continue
		}
		if got := f.run(name); got != seccompRetUserNotif {
			t.Errorf("%s: %#x, want USER_NOTIF", name, got)
		}
	}
	// What glibc's fork and posix_spawn pass, and junk in the high half.
	for _, flags := range []uint64{sigchld, unix.CLONE_VM | unix.CLONE_VFORK | sigchld, 1<<32 | sigchld} {
		if got := f.run("clone", flags); got != seccompRetUserNotif {
			t.Errorf("clone %#x: %#x, want USER_NOTIF", flags, got)
		}
	}
	thread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM)
	if got := f.run("clone", thread); got != retAllow {
		t.Errorf("clone of a thread: %#x, want allow", got)
	}
	for _, name := range []string{"read", "execve", "chmod"} {
		if _, ok := f.info.SyscallNames[name]; !ok {
			continue
		}
		if got := f.run(name); got != retAllow {
			t.Errorf("%s: %#x, want allow", name, got)
		}
	}

	spawn := notifyVM(t, InitSpec{NotifyFD: 5, AllowSpawn: true})
	if got := spawn.run("clone", sigchld); got != retAllow {
		t.Errorf("with spawn, clone: %#x, want allow", got)
	}
}

// In the Landlock tier the filter holds both handlers: the fork rules and
// the metadata guard's.
func TestNotifyProgramSharedListener(t *testing.T) {
	f := notifyVM(t, InitSpec{NotifyFD: 5, MetaGuard: true, NoNamespaces: true})
	if got := f.run("clone", sigchld); got != seccompRetUserNotif {
		t.Errorf("clone: %#x, want USER_NOTIF", got)
	}
	if got := f.run("fchmodat"); got != seccompRetUserNotif {
		t.Errorf("fchmodat: %#x, want USER_NOTIF (the guard)", got)
	}
	if got := f.run("fanotify_mark"); got != retEPERM {
		t.Errorf("fanotify_mark: %#x, want EPERM (the guard's refusal)", got)
	}
}

// The target's program leaves the fork family to the notification filter
// when there is one (an EPERM of its own would take precedence over the
// filter's USER_NOTIF, and the launcher would never count the call), and
// refuses it itself when there is none. Namespace flags stay refused.
func TestTargetProgramForkRulesWithNotify(t *testing.T) {
	with := vmOf(t, "guardedProgram", guardedProgram, InitSpec{SocketMode: SocketUnixOnly, NotifyFD: 5})
	without := vmOf(t, "guardedProgram", guardedProgram, InitSpec{SocketMode: SocketUnixOnly})
	if got := with.run("clone", sigchld); got != retAllow {
		t.Errorf("with a notification filter, clone: %#x, want allow (the filter's)", got)
	}
	if got := without.run("clone", sigchld); got != retEPERM {
		t.Errorf("without one, clone: %#x, want EPERM", got)
	}
	if got := with.run("clone", sigchld|unix.CLONE_NEWUSER); got != retEPERM {
		t.Errorf("clone with CLONE_NEWUSER: %#x, want EPERM", got)
	}
	if _, ok := with.info.SyscallNames["fork"]; ok {
		if got := with.run("fork"); got != retAllow {
			t.Errorf("with a notification filter, fork: %#x, want allow (the filter's)", got)
		}
		if got := without.run("fork"); got != retEPERM {
			t.Errorf("without one, fork: %#x, want EPERM", got)
		}
	}
	if KeyOf(InitSpec{NotifyFD: 5}) == KeyOf(InitSpec{}) {
		t.Error("the precompiled programs' key ignores the notification filter")
	}
}

// sigchld is clone's exit-signal field for SIGCHLD, as fork passes it.
const sigchld = uint64(unix.SIGCHLD)

// With the answering side gone the kernel still refuses: the child sends
// the listener, the receiver closes it without answering, and the
// command's fork fails with ENOSYS (the command ran: its probe reports).
// Control: the same probe without a notification filter gets the target
// program's own EPERM; with spawn it forks (the probe reaches the kernel).
func TestNotifyAnswererGoneStillRefuses(t *testing.T) {
	requireSeccomp(t)
	spec := baseSpec(t, SocketUnixOnly)
	if got := sandboxed(t, spec, "syscall", "fork").result(t); got != "ok" {
		t.Fatalf("control: fork with spawn: %s", got)
	}
	spec.AllowSpawn = false
	if got := sandboxed(t, spec, "syscall", "fork").result(t); got != "EPERM" {
		t.Fatalf("control: fork without spawn, no notification filter: %s, want EPERM", got)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	local, remote := os.NewFile(uintptr(fds[0]), "local"), os.NewFile(uintptr(fds[1]), "remote")
	defer local.Close()
	got := make(chan bool, 1)
	go func() {
		// Takes the listener and drops it unanswered: the driver died.
		buf, oob := make([]byte, 8), make([]byte, unix.CmsgSpace(4))
		n, oobn, _, _, err := unix.Recvmsg(int(local.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
		ok := false
		if err == nil && n == 5 && buf[0] == pullTag {
			// Offered by number (the filter guards unix sockets): the
			// driver dies without taking it.
			local.Close()
			got <- true
			return
		}
		if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && perr == nil && len(msgs) == 1 {
			if l, rerr := unix.ParseUnixRights(&msgs[0]); rerr == nil && len(l) == 1 {
				unix.Close(l[0])
				ok = true
			}
		}
		got <- ok
	}()
	spec.NotifyFD = 3
	exe := testExe(t)
	args, err := InitArgs(spec, exe, "probe", "syscall", "fork")
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, append([]string{exe, SandboxInitCommand}, args...), remote)
	remote.Close()
	if !<-got {
		t.Fatalf("no listener arrived (stderr %q)", r.stderr)
	}
	if res := r.result(t); res != "ENOSYS" {
		t.Fatalf("fork with the answerer gone: %s, want ENOSYS (still refused)", res)
	}
}
