//go:build linux

package bwrap

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// netSupervisorCommand is the hidden mode of the driver binary that runs
// first inside an allow_hosts sandbox:
//
//	sandbox-net --socket PATH --listen ADDR... [--lifeline FD] [--fd FD]... -- [sandbox-pwd ARG] sandbox-init ...
//
// It starts the bridge as a separate, confined process and waits until its
// listeners are bound, then runs the rest of its argv (the usual
// sandbox-init chain) as a second child, and when that child ends stops the
// bridge and exits with the child's status. The supervisor itself opens no
// socket and accepts nothing; the bridge makes no decisions (the host proxy
// behind the socket does). Each --fd descriptor is passed on to the second
// child under the same number (the chain's environment and lifeline); with
// --lifeline it starts nothing once the launcher's end is closed.
//
// The bridge runs as `sandbox-init <bridge spec> -- SELF sandbox-net
// sandbox-bridge ...`: sandbox-init applies no_new_privs, Landlock (read
// and execute on the binary and its loader only, TCP bind on the bridge
// ports, TCP connect nowhere, signal and abstract-socket scopes) and the
// seccomp filter of socket mode "bridge" (no spawning, stream sockets of
// AF_UNIX/AF_INET/AF_INET6 only, the common denylist) and execs the bridge,
// which after binding adds a filter denying exec, bind and listen on every
// thread before it accepts anything. The target's chain is untouched.
const netSupervisorCommand = "sandbox-net"

// netSupervisorMain implements netSupervisorCommand (args exclude it).
func netSupervisorMain(args []string) int {
	if len(args) > 0 && args[0] == bridgeCommand {
		// The confined bridge, exec'd by sandbox-init (see above).
		return bridgeMain(args[1:], sandboxinit.LockBridge)
	}
	fail := func(f string, a ...any) int {
		fmt.Fprintf(os.Stderr, "aleph-sandbox: %s: %s\n", netSupervisorCommand, fmt.Sprintf(f, a...))
		return sandboxInitExitCode
	}
	var socket string
	var listen, rest []string
	lifeline := -1
	var pass []int
	fdArg := func(a string) (int, bool) {
		n, err := strconv.Atoi(a)
		return n, err == nil && n >= 3 && n < 1<<20
	}
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "--":
			rest = args[i+1:]
			i = len(args)
		case args[i] == "--socket" && i+1 < len(args):
			i++
			socket = args[i]
		case args[i] == "--listen" && i+1 < len(args):
			i++
			listen = append(listen, args[i])
		case args[i] == "--lifeline" && i+1 < len(args):
			i++
			n, ok := fdArg(args[i])
			if !ok {
				return fail("bad --lifeline %q", args[i])
			}
			lifeline = n
		case args[i] == "--fd" && i+1 < len(args):
			i++
			n, ok := fdArg(args[i])
			if !ok {
				return fail("bad --fd %q", args[i])
			}
			pass = append(pass, n)
		default:
			return fail("bad argument %q", args[i])
		}
	}
	if socket == "" || len(listen) == 0 || len(rest) == 0 {
		return fail("usage: --socket PATH --listen ADDR... -- COMMAND...")
	}
	if lifeline >= 0 && sandboxinit.LauncherGone(lifeline) {
		return fail("the launcher is gone; not starting the command")
	}
	self, err := os.Executable()
	if err != nil {
		return fail("%v", err)
	}
	// Entry i of ExtraFiles becomes descriptor 3+i; nil entries stay closed.
	var extra []*os.File
	for _, fd := range pass {
		for len(extra) <= fd-3 {
			extra = append(extra, nil)
		}
		extra[fd-3] = os.NewFile(uintptr(fd), "passed")
	}
	// Pdeathsig fires when the thread that forked exits: keep the main
	// goroutine on its thread so neither child outlives this process by
	// way of a retired thread.
	runtime.LockOSThread()
	// Not dumpable: its memory and descriptors need CAP_SYS_PTRACE, which
	// nobody inside has (Landlock keeps the command away as well).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail("prctl(PR_SET_DUMPABLE): %v", err)
	}
	br, err := startConfinedBridge(context.Background(), self, socket, listen)
	if err != nil {
		return fail("%v", err)
	}
	defer br.stop()
	cmd := exec.Command(self, rest...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	default:
		return fail("%v", err)
	}
}

// bridgeReadyFD is the bridge's descriptor for its ready line (the first
// of exec.Cmd's ExtraFiles).
const bridgeReadyFD = 3

// confinedBridge is a running bridge process.
type confinedBridge struct{ cmd *exec.Cmd }

// stop kills the bridge and reaps it. It holds nothing that needs a clean
// shutdown: its peers are the (finished) target and the host proxy.
func (b *confinedBridge) stop() {
	_ = b.cmd.Process.Kill()
	_ = b.cmd.Wait()
}

// startConfinedBridge starts the bridge under sandbox-init with
// bridgeSpec and returns once it has written its ready line, that is once
// every listener is bound and the seccomp lock is on. A bridge that exits
// instead is an error carrying its status; its stderr line is already on
// the sandbox's stderr.
func startConfinedBridge(ctx context.Context, self, socket string, listen []string) (*confinedBridge, error) {
	var ports []uint16
	for _, a := range listen {
		ap, err := netip.ParseAddrPort(a)
		if err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 {
			return nil, &bridgeError{Addr: a, Reason: "listen address must be a loopback IP literal with a non-zero port"}
		}
		if !slices.Contains(ports, ap.Port()) {
			ports = append(ports, ap.Port())
		}
	}
	spec, err := bridgeSpec(self, ports)
	if err != nil {
		return nil, err
	}
	bargs := []string{netSupervisorCommand, bridgeCommand, "--socket", socket}
	for _, a := range listen {
		bargs = append(bargs, "--listen", a)
	}
	bargs = append(bargs, "--ready-fd", strconv.Itoa(bridgeReadyFD))
	initArgs, err := sandboxinit.InitArgs(spec, self, bargs...)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.CommandContext(ctx, self, append([]string{sandboxInitCommand}, initArgs...)...)
	// Nothing of the target's environment: the bridge reads none.
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, &bridgeError{Reason: "start: " + err.Error()}
	}
	b := &confinedBridge{cmd: cmd}
	line, err := bufio.NewReader(io.LimitReader(r, 64)).ReadString('\n')
	if err != nil || line != "ready\n" {
		b.stop()
		return nil, &bridgeError{Reason: fmt.Sprintf("did not start (%v)", cmd.ProcessState)}
	}
	return b, nil
}

// bridgeSpec is the sandbox-init spec that confines the bridge whose
// binary is exe, listening on ports: socket mode "bridge" (TCP bind on
// ports only, no TCP connect, stream sockets only), no spawning, both
// Landlock scopes, its ready descriptor kept, and read+execute on exe and,
// if exe is dynamically linked, on its ELF interpreter, the loader cache
// and the shared libraries it needs (found as the loader would, in the
// standard library directories). Nothing is writable.
func bridgeSpec(exe string, ports []uint16) (initSpec, error) {
	ro, err := elfReadSet(exe)
	if err != nil {
		return initSpec{}, &bridgeError{Reason: "bridge binary: " + err.Error()}
	}
	s := initSpec{
		ReadOnly:          ro,
		SocketMode:        sandboxinit.SocketBridge,
		BridgePorts:       ports,
		ScopeSignals:      true,
		ScopeAbstractUnix: true,
		InheritFDs:        []int{bridgeReadyFD},
	}
	if err := s.Validate(); err != nil {
		return initSpec{}, err
	}
	return s, nil
}

// elfReadSet lists exe and everything the kernel and the dynamic loader
// open to start it: PT_INTERP, /etc/ld.so.cache and the DT_NEEDED
// libraries, transitively. A static binary needs only itself.
func elfReadSet(exe string) ([]string, error) {
	exe = filepath.Clean(exe)
	out := []string{exe}
	f, err := elf.Open(exe)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
			if err != nil {
				return nil, err
			}
			interp = filepath.Clean(strings.TrimRight(string(b), "\x00"))
		}
	}
	if interp == "" {
		return out, nil
	}
	if !filepath.IsAbs(interp) {
		return nil, fmt.Errorf("ELF interpreter %q is not absolute", interp)
	}
	out = append(out, interp, "/etc/ld.so.cache")
	dirs := []string{filepath.Dir(interp)}
	for _, pat := range []string{"/lib/*-linux-*", "/usr/lib/*-linux-*"} {
		m, _ := filepath.Glob(pat)
		dirs = append(dirs, m...)
	}
	dirs = append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	seen := map[string]bool{}
	queue, _ := f.ImportedLibraries()
	for len(queue) > 0 {
		lib := queue[0]
		queue = queue[1:]
		if seen[lib] {
			continue
		}
		seen[lib] = true
		var found []string
		if strings.Contains(lib, "/") {
			if filepath.IsAbs(lib) {
				found = append(found, filepath.Clean(lib))
			}
		} else {
			for _, d := range dirs {
				p := filepath.Join(d, lib)
				if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
					found = append(found, p)
				}
			}
		}
		for _, p := range found {
			if slices.Contains(out, p) {
				continue
			}
			out = append(out, p)
			if lf, err := elf.Open(p); err == nil {
				more, _ := lf.ImportedLibraries()
				lf.Close()
				queue = append(queue, more...)
			}
		}
	}
	return out, nil
}
