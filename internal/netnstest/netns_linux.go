// Test hosts for network tests: a network
// namespace with its own address, joined to the host by a veth pair that
// exists only between the two, removed when the test ends. Root only; the
// addresses (10.231.N.0/30) are private and configured nowhere else.
package netnstest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Host is one test host.
type Host struct {
	// Name is the namespace's name for `ip -n`.
	Name string
	// Path is the namespace's file, for Listen.
	Path string
	// Addr is the test host's address; HostAddr is the host side's.
	Addr, HostAddr string
	// Veth is the host side of the pair.
	Veth string
}

// IP runs `ip ARGS...` and fails the test on error.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// New creates namespace prefix+tag with the test host at 10.231.subnet.2 and
// the host side at 10.231.subnet.1, registering their removal before anything
// can fail. It skips the test when not root or without iproute2.
func New(t testing.TB, prefix string, subnet int) Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating a network namespace test host needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip (iproute2) is not installed")
	}
	tag := fmt.Sprintf("%d%03d", os.Getpid()%10000, subnet)
	h := Host{
		Name:     prefix + tag,
		Path:     "/var/run/netns/" + prefix + tag,
		Addr:     fmt.Sprintf("10.231.%d.2", subnet),
		HostAddr: fmt.Sprintf("10.231.%d.1", subnet),
		Veth:     "vh" + tag,
	}
	peer := "vn" + tag
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", h.Veth).Run()
		exec.Command("ip", "netns", "del", h.Name).Run()
	})
	IP(t, "netns", "add", h.Name)
	IP(t, "link", "add", h.Veth, "type", "veth", "peer", "name", peer, "netns", h.Name)
	IP(t, "addr", "add", h.HostAddr+"/30", "dev", h.Veth)
	IP(t, "link", "set", h.Veth, "up")
	IP(t, "-n", h.Name, "link", "set", "lo", "up")
	IP(t, "-n", h.Name, "addr", "add", h.Addr+"/30", "dev", peer)
	IP(t, "-n", h.Name, "link", "set", peer, "up")
	return h
}

// Peer is the name of the veth end inside the namespace.
func (h Host) Peer() string { return "vn" + strings.TrimPrefix(h.Veth, "vh") }

// Listen creates a listening socket inside the namespace at nsPath: a
// socket belongs to the namespace it was created in, so one locked thread
// switches in, listens and switches back. A thread that cannot switch back
// stays locked and dies with its goroutine.
func Listen(nsPath, network, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns: %w", err)}
			return
		}
		ln, lerr := net.Listen(network, addr)
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			if ln != nil {
				ln.Close()
			}
			ch <- result{err: fmt.Errorf("setns back: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{ln: ln, err: lerr}
	}()
	r := <-ch
	return r.ln, r.err
}
