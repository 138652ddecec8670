//go:build linux

package sandboxinit

import (
	"testing"

	"golang.org/x/sys/unix"
)

// Under network none and allow_hosts in the bwrap tier the target's
// program lets unix sockets and pairs of every type through, and its
// notification filter hands connect, addressed sendto, sendmsg and
// sendmmsg to the launcher; without the filter (or in the Landlock tier)
// the old refusals stay.
func TestUnixGuardRules(t *testing.T) {
	guarded := InitSpec{SocketMode: SocketLoopback, AllowSpawn: true, NotifyFD: 5}
	routed := InitSpec{SocketMode: SocketProxyRouted, AllowSpawn: true, NotifyFD: 5, BridgePorts: []uint16{3128}} // allow_hosts
	t.Run("allow_hosts", func(t *testing.T) {
		m := newFilterVM(t, routed)
		for _, c := range []struct {
			name string
			args []uint64
			want uint32
		}{
			{"socket", []uint64{unix.AF_UNIX, unix.SOCK_STREAM, 0}, retAllow},
			{"socketpair", []uint64{unix.AF_UNIX, unix.SOCK_DGRAM, 0, 0}, retAllow},
			{"socket", []uint64{unix.AF_INET, unix.SOCK_STREAM, 0}, retAllow},
			{"socket", []uint64{unix.AF_NETLINK, unix.SOCK_DGRAM, 0}, retEPERM},
		} {
			if got := m.run(c.name, c.args...); got != c.want {
				t.Errorf("allow_hosts %s%v: %s, want %s", c.name, c.args, retName(got), retName(c.want))
			}
		}
		// Every TCP connect goes to the launcher, which pins it to the
		// bridge's ports (the driver's inetRule).
		n := notifyVM(t, routed)
		for _, name := range []string{"connect", "sendmsg"} {
			if got := n.run(name, 3, 0x1000, 20); got != seccompRetUserNotif {
				t.Errorf("allow_hosts %s: %s, want USER_NOTIF", name, retName(got))
			}
		}
	})
	main := newFilterVM(t, guarded)
	for _, c := range []struct {
		name string
		args []uint64
	}{
		{"socket", []uint64{unix.AF_UNIX, unix.SOCK_STREAM, 0}},
		{"socket", []uint64{unix.AF_UNIX, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, 0}},
		{"socketpair", []uint64{unix.AF_UNIX, unix.SOCK_DGRAM, 0, 0}},
		{"socketpair", []uint64{unix.AF_UNIX, unix.SOCK_RAW, 0, 0}},
		{"socket", []uint64{unix.AF_INET, unix.SOCK_STREAM, 0}},
	} {
		if got := main.run(c.name, c.args...); got != retAllow {
			t.Errorf("guarded %s%v: %s, want ALLOW", c.name, c.args, retName(got))
		}
	}
	if got := main.run("socket", unix.AF_NETLINK, unix.SOCK_DGRAM, 0); got != retEPERM {
		t.Errorf("guarded socket(AF_NETLINK): %s, want EPERM", retName(got))
	}
	n := notifyVM(t, guarded)
	for _, c := range []struct {
		name string
		args []uint64
		want uint32
	}{
		{"connect", []uint64{3, 0x1000, 20}, seccompRetUserNotif},
		{"sendmsg", []uint64{3, 0x1000, 0}, seccompRetUserNotif},
		{"sendmmsg", []uint64{3, 0x1000, 1, 0}, seccompRetUserNotif},
		{"sendto", []uint64{3, 0x1000, 1, 0, 0x2000, 20}, seccompRetUserNotif},
		// An address in the high half alone is still an address.
		{"sendto", []uint64{3, 0x1000, 1, 0, 1 << 32, 20}, seccompRetUserNotif},
		{"sendto", []uint64{3, 0x1000, 1, 0, 0, 0}, retAllow},
		{"write", []uint64{3, 0x1000, 1}, retAllow},
		{"bind", []uint64{3, 0x1000, 20}, retAllow},
		{"clone", []uint64{0}, retAllow}, // spawn allowed: no fork rule
	} {
		if got := n.run(c.name, c.args...); got != c.want {
			t.Errorf("notify %s%v: %s, want %#x", c.name, c.args, retName(got), c.want)
		}
	}
	for _, s := range []InitSpec{
		{SocketMode: SocketLoopback, AllowSpawn: true},                                 // no filter
		{SocketMode: SocketProxyRouted, AllowSpawn: true, BridgePorts: []uint16{3128}}, // allow_hosts, no filter
		{SocketMode: SocketUnixOnly, NoNamespaces: true, NotifyFD: 5, MetaGuard: true}, // Landlock tier
	} {
		m := newFilterVM(t, s)
		if got := m.run("socket", unix.AF_UNIX, unix.SOCK_STREAM, 0); got != retEPERM {
			t.Errorf("%+v: socket(AF_UNIX) %s, want EPERM", s, retName(got))
		}
		if got := m.run("socketpair", unix.AF_UNIX, unix.SOCK_DGRAM, 0, 0); got != retEPERM {
			t.Errorf("%+v: datagram socketpair %s, want EPERM", s, retName(got))
		}
		if s.NotifyFD > 0 {
			if got := notifyVM(t, s).run("connect", 3, 0x1000, 20); got == seccompRetUserNotif {
				t.Errorf("%+v: connect notified", s)
			}
		}
	}
	if KeyOf(guarded) == KeyOf(InitSpec{SocketMode: SocketLoopback, AllowSpawn: true}) {
		t.Error("the precompiled programs of a guarded spec share the key of an unguarded one")
	}
}
