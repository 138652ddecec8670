//go:build linux

package sandboxinit

import (
	"errors"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The guard's program: every guarded call goes to the launcher, the
// refused ones get their errno, the inode-flag ioctls EPERM (also with
// junk in the high half of the request), everything else passes, a
// foreign architecture included (the main program kills it).
func TestMetaGuardProgram(t *testing.T) {
	f := vmOf(t, "metaGuardProgram", func(*InitSpec) ([]bpf.Instruction, error) {
		info, err := nativeArch()
		if err != nil {
			return nil, err
		}
		return metaGuardProgram(info)
	}, InitSpec{})
	for _, name := range MetaGuardSyscalls() {
		if _, ok := f.info.SyscallNames[name]; !ok {
			continue
		}
		if got := f.run(name); got != seccompRetUserNotif {
			t.Errorf("%s: %#x, want USER_NOTIF", name, got)
		}
	}
	for _, r := range metaGuardRefusals() {
		if got := f.run(r.name); got != unix.SECCOMP_RET_ERRNO|uint32(r.errno) {
			t.Errorf("%s: %#x, want errno %v", r.name, got, r.errno)
		}
	}
	for _, req := range inodeIoctls() {
		for _, high := range []uint64{0, 1 << 32} {
			if got := f.run("ioctl", 3, high|uint64(req)); got != retEPERM {
				t.Errorf("ioctl %#x: %#x, want EPERM", high|uint64(req), got)
			}
		}
	}
	for _, name := range []string{"read", "openat", "write", "fstat"} {
		if got := f.run(name); got != retAllow {
			t.Errorf("%s: %#x, want allow", name, got)
		}
	}
	if got := f.run("ioctl", 1, unix.TCGETS); got != retAllow {
		t.Errorf("ioctl TCGETS: %#x, want allow", got)
	}
	if got := f.runRaw(uint32(arch.I386.ID), f.nr("fchmodat")); got != retAllow {
		t.Errorf("foreign arch: %#x, want allow (the main program kills it)", got)
	}
}

// meta_guard belongs to the Landlock tier, with the socket its listener
// goes to; the plain child keeps both (it installs the filter).
func TestMetaGuardSpec(t *testing.T) {
	base := InitSpec{SocketMode: SocketUnixOnly, Supervise: true, NoNamespaces: true, LifelineFD: 4, CommandFD: 3, NotifyFD: 5, MetaGuard: true}
	if err := base.Validate(); err != nil {
		t.Fatalf("control: %v", err)
	}
	cs := childSpec(&base)
	if err := cs.Validate(); err != nil {
		t.Fatalf("control: the plain child's spec: %v", err)
	}
	if cs.NotifyFD != 5 || !cs.MetaGuard {
		t.Errorf("the plain child lost notify_fd %d / meta_guard %v", cs.NotifyFD, cs.MetaGuard)
	}
	var ise *InitSpecError
	for name, s := range map[string]InitSpec{
		"no socket":        {SocketMode: SocketUnixOnly, Supervise: true, NoNamespaces: true, LifelineFD: 4, MetaGuard: true},
		"bwrap tier":       {SocketMode: SocketUnixOnly, Supervise: true, LifelineFD: 4, NotifyFD: 5, MetaGuard: true},
		"same as lifeline": {SocketMode: SocketUnixOnly, Supervise: true, NoNamespaces: true, LifelineFD: 4, NotifyFD: 4, MetaGuard: true},
	} {
		if err := s.Validate(); !errors.As(err, &ise) {
			t.Errorf("%s: want an InitSpecError, got %v", name, err)
		}
	}
}
