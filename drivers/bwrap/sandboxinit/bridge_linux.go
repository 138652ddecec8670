//go:build linux

package sandboxinit

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// bridgeLandlockRules: the bridge binds its listen ports and connects to no
// TCP port; its only way out is the proxy's unix socket, which Landlock's
// network rules do not cover and its filesystem rules (read-only, nothing
// created) leave reachable.
func bridgeLandlockRules(spec *InitSpec) []landlock.Rule {
	var rules []landlock.Rule
	for _, port := range spec.BridgePorts {
		rules = append(rules, landlock.BindTCP(port))
	}
	return rules
}

// sockTypeMask is SOCK_TYPE_MASK: socket(2)'s type argument carries
// SOCK_NONBLOCK and SOCK_CLOEXEC above it.
const sockTypeMask = 0xf

// bridgeSocketTypeGate makes socket(2) fail with EPERM unless the type is
// SOCK_STREAM: the bridge needs TCP listeners and a stream unix socket, and
// no datagram socket, which Landlock (before UDP rules) would not hold to
// any port. It runs with the syscall number in A and leaves it there.
func bridgeSocketTypeGate(socketNr uint32) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: socketNr, SkipFalse: 5},
		bpf.LoadAbsolute{Off: argLowOffset(1), Size: 4},
		bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: sockTypeMask},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.SOCK_STREAM, SkipTrue: 1},
		bpf.RetConstant{Val: retEPERM},
		bpf.LoadAbsolute{Off: seccompDataNr, Size: 4},
	}
}

// bridgeLockedSyscalls are what a running bridge never needs again once
// its listeners are bound: executing a program and making new listeners.
func bridgeLockedSyscalls() []string {
	return []string{"execve", "execveat", "bind", "listen"}
}

// LockBridge adds a second seccomp filter, on every thread of the process
// (SECCOMP_FILTER_FLAG_TSYNC), that denies execve, execveat, bind and
// listen with EPERM. The bridge calls it after binding its listeners and
// before accepting a connection: sandbox-init's filter has to let the
// bridge binary be exec'd and bind its ports, this one takes both away for
// the rest of its life. Filters only stack, so nothing can lift it.
func LockBridge() error {
	info, err := nativeArch()
	if err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	var names []string
	for _, n := range bridgeLockedSyscalls() {
		if _, ok := info.SyscallNames[n]; ok {
			names = append(names, n)
		}
	}
	f := seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionAllow,
			Syscalls:      []seccomp.SyscallGroup{{Names: names, Action: seccomp.ActionErrno}},
		},
	}
	if err := seccomp.LoadFilter(f); err != nil {
		return fmt.Errorf("seccomp: bridge lock: %w", err)
	}
	return nil
}
