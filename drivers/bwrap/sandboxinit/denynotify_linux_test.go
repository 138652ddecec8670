//go:build linux

package sandboxinit

import (
	"slices"
	"testing"

	"golang.org/x/net/bpf"
)

// TestSupervisorProgramHandsOverTheDenylist: the supervisor's program of a
// command with a notification filter answers every call exactly as the
// same program without it, except the denylist, which it hands over
// (USER_NOTIF) instead of refusing; its conditions (set-id modes, clone
// flags) are untouched, for every syscall number and argument pattern
// tried. The target's program leaves the denylist to the notification
// filter, which returns USER_NOTIF for it.
func TestSupervisorProgramHandsOverTheDenylist(t *testing.T) {
	argSets := [][]uint64{
		{0xffffff9c, 0, 0o1101, 0o666}, {0xffffff9c, 0, 0o1101, 0o4755}, {0, 0o666, 0, 0},
		{0x10000000, 0, 0, 0}, {0x11, 0, 0, 0}, {0, 0, 0, 0}, {0o40000, 0o6755, 0o2755, 0o4000},
	}
	for _, mode := range []SocketMode{SocketLoopback, SocketProxyRouted, SocketUnrestricted} {
		s := InitSpec{SocketMode: mode, NotifyFD: 5}
		if mode == SocketProxyRouted {
			s.BridgePorts = []uint16{3128}
		}
		sup := supervisorSpec(&s)
		if !sup.childNotifies {
			t.Fatalf("%s: the supervisor's child does not notify", mode)
		}
		// The same program without a notification filter anywhere; the
		// socket calls' rules differ by design where the command's unix
		// sockets are guarded (unixsock_linux.go), and are not compared.
		plain := sup
		plain.childNotifies, plain.NotifyFD = false, 0
		sockets := map[uint32]bool{}
		for _, name := range []string{"socket", "socketpair", "connect", "sendto", "sendmsg", "sendmmsg"} {
			if nr, ok := sup.nativeNr(name); ok {
				sockets[nr] = true
			}
		}
		got, want := vmOf(t, "guarded", guardedProgram, sup), vmOf(t, "guarded", guardedProgram, plain)
		target := vmOf(t, "guarded", guardedProgram, s)
		notify := vmOf(t, "notify", func(s *InitSpec) ([]bpf.Instruction, error) { return notifyProgram(s, got.info) }, s)
		denied := map[uint32]bool{}
		for _, name := range deniedSyscalls() {
			if nr, ok := got.info.SyscallNames[name]; ok {
				denied[uint32(nr)] = true
			}
		}
		for nr := uint32(0); nr < 470; nr++ {
			for _, args := range argSets {
				g, w := got.runRaw(uint32(got.info.ID), nr, args...), want.runRaw(uint32(got.info.ID), nr, args...)
				switch {
				case denied[nr]:
					if w != retEPERM || g != seccompRetUserNotif {
						t.Fatalf("%s nr %d: supervisor %#x (want USER_NOTIF), without notification %#x (want EPERM)", mode, nr, g, w)
					}
					if tg := target.runRaw(uint32(got.info.ID), nr, args...); tg != retAllow {
						t.Fatalf("%s nr %d: the target's program %#x, want the denylist left to the notification filter", mode, nr, tg)
					}
					if n := notify.runRaw(uint32(got.info.ID), nr, args...); n != seccompRetUserNotif {
						t.Fatalf("%s nr %d: notification filter %#x", mode, nr, n)
					}
				case g != w && !sockets[nr]:
					t.Fatalf("%s nr %d args %o: supervisor %#x, without notification %#x", mode, nr, args, g, w)
				}
			}
		}
		if !slices.Contains(deniedSyscalls(), "unshare") {
			t.Fatal("unshare left the denylist")
		}
	}
}

func (s InitSpec) nativeNr(name string) (uint32, bool) {
	info, err := nativeArch()
	if err != nil {
		return 0, false
	}
	nr, ok := info.SyscallNames[name]
	return uint32(nr), ok
}
