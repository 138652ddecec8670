//go:build linux

package bwrap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Network none, shared by a session.
//
// A command under network none runs in an empty network namespace: nothing
// but a loopback interface, no route anywhere. Its AF_INET and AF_INET6
// sockets (socket mode loopback) can reach only listeners in that same
// namespace. The commands of one session (RunSpec.SessionID) share one such
// namespace, so a server one command starts answers another command of the
// session running at the same time; a command of another session, the host
// and everything else have their own network stacks and never see it.
//
// bwrap 0.8 cannot join an existing network namespace, so the driver starts
// bwrap inside it:
//
//   - as root, the thread that forks bwrap enters the namespace (setns) and
//     bwrap runs with --share-net;
//   - unprivileged, the namespace is owned by a user namespace the driver
//     made for it (mapping only the driver's own uid and gid), which a
//     multi-threaded Go process cannot enter. The driver runs `nsenter
//     --user --net --preserve-credentials` (util-linux), which enters both
//     and execs `unshare --user --pid --fork --kill-child` (the PID guard's
//     namespaces, nested in the holder's user namespace), whose child is
//     bwrap with --share-net. bwrap makes its own user namespace inside as
//     always. The chain needs nsenter and unshare on PATH and the guard's
//     user+PID mode; elsewhere each command has a namespace of its own.
//
// The namespace itself is made by a short-lived child of the driver (the
// driver binary's netnsHolderCommand mode, cloned into a new network
// namespace, and a new user namespace when unprivileged), which brings
// loopback up and waits until the driver has opened its /proc/PID/ns files.
// From then on the driver's open descriptors alone keep the namespace: it
// dies with the driver, however the driver ends, and when the driver
// releases it (the session forgotten, idle too long, or evicted when more
// sessions than the cap want one). Commands still running keep it until
// they end.

// netnsHolderCommand is the hidden mode of the driver binary that brings up
// loopback in the fresh network namespace it was cloned into, writes
// "ready\n" on stdout and waits for stdin to close.
const netnsHolderCommand = "sandbox-netns"

// defaultSessionNetworkIdle is the default config.SessionNetworkIdle
// (defaultMaxSessionNetworks, which the options validate on every OS, is
// in options.go).
const defaultSessionNetworkIdle = 10 * time.Minute

// Session network modes (hostProbe.sessionNet).
const (
	sessionNetSetns   = "setns"
	sessionNetNsenter = "nsenter"
)

// netnsHolderMain implements netnsHolderCommand (args exclude it).
func netnsHolderMain(args []string) int {
	if len(args) != 0 {
		fmt.Fprintf(os.Stderr, "aleph-sandbox: %s: takes no arguments\n", netnsHolderCommand)
		return sandboxInitExitCode
	}
	if err := loopbackUp(); err != nil {
		fmt.Fprintf(os.Stderr, "aleph-sandbox: %s: %v\n", netnsHolderCommand, err)
		return sandboxInitExitCode
	}
	if _, err := os.Stdout.WriteString("ready\n"); err != nil {
		return sandboxInitExitCode
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// loopbackUp sets the lo interface of the calling thread's network
// namespace up (needs CAP_NET_ADMIN there).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo: set up: %w", err)
	}
	return nil
}

// netns is a network namespace the driver holds open.
type netns struct {
	net *os.File
	// user is the user namespace that owns net (unprivileged only).
	user *os.File
	// inode identifies the namespace (as /proc/PID/ns/net shows it).
	inode uint64
}

func (n *netns) close() {
	n.net.Close()
	if n.user != nil {
		n.user.Close()
	}
}

// makeNetns creates an empty network namespace with loopback up, through
// a holder process of binary bin; withUser puts it in a new user namespace
// (mapping only this process's uid and gid) the driver can hand to nsenter.
func makeNetns(bin string, withUser bool) (*netns, error) {
	cmd := exec.Command(bin, netnsHolderCommand)
	cmd.Args[0] = "aleph-netns"
	cmd.Env, cmd.Dir = []string{}, "/"
	var stderr limitedBuffer
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	attr := &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if withUser {
		uid, gid := os.Getuid(), os.Getgid()
		attr.Cloneflags |= unix.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		// The holder keeps, across its exec, the one capability it needs
		// in its own user namespace: bringing loopback up.
		attr.AmbientCaps = []uintptr{unix.CAP_NET_ADMIN}
	}
	cmd.SysProcAttr = attr
	// Pdeathsig follows the forking thread: keep it until the holder is
	// reaped below.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("network namespace holder: %w", err)
	}
	defer func() {
		in.Close()
		_ = cmd.Wait()
	}()
	line, _ := bufio.NewReader(io.LimitReader(out, 64)).ReadString('\n')
	if line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("network namespace holder failed: %s", stderr.String())
	}
	dir := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/"
	n := &netns{}
	if n.net, err = os.OpenFile(dir+"net", os.O_RDONLY|syscall.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("open the session's network namespace: %w", err)
	}
	if withUser {
		if n.user, err = os.OpenFile(dir+"user", os.O_RDONLY|syscall.O_CLOEXEC, 0); err != nil {
			n.net.Close()
			return nil, fmt.Errorf("open the session's user namespace: %w", err)
		}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(n.net.Fd()), &st); err != nil {
		n.close()
		return nil, err
	}
	n.inode = st.Ino
	return n, nil
}

// startInNetns starts cmd from the calling thread, which the caller has
// locked, inside ns, and moves the thread back to its own namespace. A
// thread that cannot go back stays locked: its goroutine ends with it.
func startInNetns(cmd *exec.Cmd, ns *netns) error {
	own, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return fmt.Errorf("this thread's network namespace: %w", err)
	}
	defer own.Close()
	if err := unix.Setns(int(ns.net.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter the session's network namespace: %w", err)
	}
	startErr := cmd.Start()
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		if startErr == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return fmt.Errorf("leave the session's network namespace: %w", err)
	}
	return startErr
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 4096 - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *limitedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// heldInodes are the inodes of the session namespaces d holds (tests and
// the log).
func (d *Driver) heldInodes() []uint64 {
	var out []uint64
	for _, n := range d.nets.Held() {
		out = append(out, n.inode)
	}
	return out
}

// ForgetSession implements driverapi.SessionForgetter: the session's
// network namespace is released (once its running commands, if any, end).
func (d *Driver) ForgetSession(ctx context.Context, sessionID string) error {
	if sessionID == "" {
		return &driverapi.InvalidSpecError{Field: "session_id", Reason: "empty"}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The session's sandboxes first: they hold its namespace.
	d.forgetSessions(sessionID)
	d.forgetPrepared(sessionID)
	// Then its runs still in flight: the host cancelled them before
	// forgetting the session, but its calls returned at once, and a run
	// may still be removing the placeholders it made in the workspace,
	// which the host may delete next. Bounded by the host's deadline; past
	// it the session is forgotten all the same (the runs end on their own).
	if err := d.runs.waitSession(ctx, sessionID); err != nil {
		d.log.Warn("forgetting a session whose runs have not ended", "error", err)
	}
	d.nets.Forget(sessionID)
	return nil
}

// probeSessionNet decides how commands of a session share a network
// namespace here ("" and why not: each command gets its own).
func (d *Driver) probeSessionNet(h *hostProbe) (mode, why string) {
	if h.sandboxErr != nil || h.tier != tierBwrap {
		return "", "no network namespaces here"
	}
	if os.Geteuid() == 0 {
		ns, err := makeNetns(d.cfg.DriverBinary, false)
		if err != nil {
			return "", err.Error()
		}
		ns.close()
		return sessionNetSetns, ""
	}
	if h.guard.mode != guardUserPID {
		return "", "unprivileged without the user+PID setup guard (" + h.guard.why + ")"
	}
	nsenter, err1 := exec.LookPath("nsenter")
	unshare, err2 := exec.LookPath("unshare")
	if err := errors.Join(err1, err2); err != nil {
		return "", "unprivileged, the session namespace is entered with nsenter and unshare (util-linux): " + err.Error()
	}
	ns, err := makeNetns(d.cfg.DriverBinary, true)
	if err != nil {
		return "", err.Error()
	}
	defer ns.close()
	// A trial of the whole chain: user namespaces nested three deep and
	// bwrap inside them are refused by some LSM profiles.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nsenter, nsenterChain(unshare, h.bwrap, 3, 4,
		"--unshare-all", "--share-net", "--die-with-parent", "--ro-bind", "/", "/", "--", "/bin/true")...)
	cmd.Args[0] = "nsenter"
	cmd.Env, cmd.Dir = launchEnv(), "/"
	cmd.ExtraFiles = []*os.File{ns.user, ns.net}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("bwrap inside the session's namespaces failed: %v: %s", err, clipString(string(out), 300))
	}
	h.nsenter, h.unshare = nsenter, unshare
	return sessionNetNsenter, ""
}

// nsenterChain is nsenter's argv (without argv[0]) entering the user and
// network namespaces at descriptors userFD and netFD and running bwrap
// under unshare's user+PID namespaces (the setup guard) with bwrapArgs.
func nsenterChain(unshare, bwrap string, userFD, netFD int, bwrapArgs ...string) []string {
	uid, gid := strconv.Itoa(os.Getuid()), strconv.Itoa(os.Getgid())
	args := []string{
		"--user=/proc/self/fd/" + strconv.Itoa(userFD), "--net=/proc/self/fd/" + strconv.Itoa(netFD),
		"--preserve-credentials", "--",
		unshare, "--map-user=" + uid, "--map-group=" + gid, "--pid", "--fork", "--kill-child", "--",
		bwrap,
	}
	return append(args, bwrapArgs...)
}

func clipString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
