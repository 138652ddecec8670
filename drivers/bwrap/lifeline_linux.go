//go:build linux

package bwrap

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// The descriptors every sandbox-init of the command finds open: the
// child's argv and environment (initSpec.CommandFD) and the lifeline
// (initSpec.LifelineFD).
const (
	commandFD  = 3
	lifelineFD = 4
)

// launchEnv is the whole environment bwrap is exec'd with: fixed, and
// nothing of the child's. bwrap, its PID-1 reaper and sandbox-init are
// dynamically linked and start before any confinement applies, so a loader
// variable of the child's (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH,
// GCONV_PATH...) in their environment would make the host's loader run
// workspace code in them. The child's environment travels on a descriptor
// (initSpec.CommandFD) and applies only at the target's execve.
func launchEnv() []string { return []string{} }

// commandMemfd returns a sealed memfd holding the command record of argv
// and env for initSpec.CommandFD; nil argv leaves it empty (a prepared
// sandbox's, whose record comes with the hand-over).
func commandMemfd(argv, env []string) (*os.File, error) {
	var rec []byte
	if argv != nil {
		var err error
		if rec, err = sandboxinit.EncodeCommand(argv, env); err != nil {
			return nil, fmt.Errorf("bwrap driver: %w", err)
		}
	}
	fd, err := unix.MemfdCreate("aleph-command", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("bwrap driver: memfd for the command: %w", err)
	}
	f := os.NewFile(uintptr(fd), "aleph-command")
	if _, err := f.Write(rec); err != nil {
		f.Close()
		return nil, fmt.Errorf("bwrap driver: write the command: %w", err)
	}
	// Sealed: nothing that holds the descriptor can change what the
	// target will be given.
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK); err != nil {
		f.Close()
		return nil, fmt.Errorf("bwrap driver: seal the command: %w", err)
	}
	return f, nil
}

// lifeline is a socket pair between the driver and sandbox-init (see
// initSpec.LifelineFD). Only the driver holds local (close-on-exec, never
// passed on), so when the driver dies, however early, sandbox-init sees
// the hang-up and refuses to run the command. remote goes to bwrap.
type lifeline struct {
	local  int
	remote *os.File

	mu      sync.Mutex
	started bool
	got     []byte // what ExitStatus and status read so far
	// holding: a prepared sandbox's supervisor reads its hand-over record
	// before anything else, so Signal keeps its requests in held until
	// the supervisor has answered the record (holdSignals, awaitReady).
	holding bool
	held    []syscall.Signal
}

func newLifeline() (*lifeline, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("bwrap driver: lifeline: %w", err)
	}
	return &lifeline{local: fds[0], remote: os.NewFile(uintptr(fds[1]), "lifeline")}, nil
}

// Started reports whether sandbox-init has run (its byte is waiting).
func (l *lifeline) Started() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.started {
		var b [1]byte
		n, _, _ := unix.Recvfrom(l.local, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		l.started = n == 1
	}
	return l.started
}

// Close closes the driver's end: from then on no sandbox-init of this
// command starts its target.
func (l *lifeline) Close() {
	l.remote.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.local >= 0 {
		unix.Close(l.local)
		l.local = -1
	}
}

// maxSetupMessage bounds what the driver holds back from stderr while the
// sandbox is being set up (bwrap writes one line when it fails).
const maxSetupMessage = 64 << 10

// setupGate sits in front of the command's stderr. Until sandbox-init
// reports that it runs, only bwrap (or sandbox-net) can be writing there,
// so that output is held back: if the sandbox never gets set up it becomes
// the driver's error (setupError) instead of looking like the command's
// output; otherwise it is passed on first.
type setupGate struct {
	w    io.Writer
	life *lifeline

	mu   sync.Mutex
	held []byte
	open bool
}

func (g *setupGate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open && (g.life.Started() || len(g.held)+len(p) > maxSetupMessage) {
		if err := g.openLocked(); err != nil {
			return 0, err
		}
	}
	if g.open {
		return g.w.Write(p)
	}
	g.held = append(g.held, p...)
	return len(p), nil
}

func (g *setupGate) openLocked() error {
	g.open = true
	held := g.held
	g.held = nil
	if len(held) > 0 {
		_, err := g.w.Write(held)
		return err
	}
	return nil
}

// release passes on what is held (the sandbox was set up).
func (g *setupGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		_ = g.openLocked()
	}
}

// message is what was held back, as one line.
func (g *setupGate) message() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := strings.Join(strings.Fields(string(bytes.ToValidUTF8(g.held, []byte("?")))), " ")
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

// setupError: bwrap ended before sandbox-init ran, so the sandbox was
// never set up and the command never started. It is the driver's failure,
// never the command's exit status.
type setupError struct {
	Status  string // how bwrap ended
	Message string // what it wrote to stderr, one line
	Err     error  // the driver's own failure during setup, if any
}

func (e *setupError) Error() string {
	s := "bwrap driver: the sandbox could not be set up (" + e.Status + ")"
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

func (e *setupError) Unwrap() error { return e.Err }

// Signal asks sandbox-init to deliver sig to the command (SignalTag and the
// number). A request sent before the command runs waits on the socket
// until the supervisor starts reading it, right after it forked the
// command. It fails once the driver's end is closed.
func (l *lifeline) Signal(sig syscall.Signal) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.local < 0 {
		return errLifelineClosed
	}
	if l.holding {
		l.held = append(l.held, sig)
		return nil
	}
	return l.sendSignal(sig)
}

// sendSignal writes a signal request (l.mu held).
func (l *lifeline) sendSignal(sig syscall.Signal) error {
	// Two bytes on a stream socket whose buffer nobody else fills:
	// MSG_DONTWAIT only matters if sandbox-init stopped reading, and then
	// an error is the honest answer.
	if err := unix.Sendto(l.local, []byte{sandboxinit.SignalTag, byte(sig)}, unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT, nil); err != nil {
		return fmt.Errorf("bwrap driver: lifeline: %w", err)
	}
	return nil
}

// holdSignals makes Signal keep its requests until awaitReady sends them,
// once the supervisor has answered the hand-over record: the command is
// registered for signals before its record is sent, so that none sent
// once it runs can miss it.
func (l *lifeline) holdSignals() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holding = true
}

// takeHeld returns the requests held back and never sent (the hand-over
// failed before the supervisor answered it), and stops holding.
func (l *lifeline) takeHeld() []syscall.Signal {
	l.mu.Lock()
	defer l.mu.Unlock()
	held := l.held
	l.holding, l.held = false, nil
	return held
}

// errLifelineClosed: the command's lifeline is closed (it has ended).
var errLifelineClosed = errors.New("lifeline closed")

// ExitStatus returns the command's wait status as the supervisor reported
// it (sandboxinit.StatusTag record), read once the sandbox has ended; ok is
// false when there is none (the supervisor never got there).
func (l *lifeline) ExitStatus() (ws syscall.WaitStatus, ok bool) {
	st, ok, _ := l.status()
	return syscall.WaitStatus(st.Wait), ok
}

// status reads what sandbox-init has written since the last call and
// decodes the status record from all of it; hungUp reports that its end
// is closed (nothing more will come).
func (l *lifeline) status() (st sandboxinit.Status, ok, hungUp bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st, ok = sandboxinit.DecodeStatus(l.got); ok || l.local < 0 {
		return st, ok, l.local < 0
	}
	buf := make([]byte, 64)
	for len(l.got) < 1<<10 {
		n, _, err := unix.Recvfrom(l.local, buf, unix.MSG_DONTWAIT)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n == 0 && err == nil {
			hungUp = true
		}
		if err != nil || n <= 0 {
			break
		}
		l.got = append(l.got, buf[:n]...)
	}
	st, ok = sandboxinit.DecodeStatus(l.got)
	return st, ok, hungUp
}

// awaitStatus waits until the status record has arrived (ok) or the
// supervisor's end hangs up without one, or stop is closed.
func (l *lifeline) awaitStatus(stop <-chan struct{}) (st sandboxinit.Status, ok bool) {
	for {
		if st, ok, hungUp := l.status(); ok || hungUp {
			return st, ok
		}
		l.mu.Lock()
		fd := l.local
		l.mu.Unlock()
		if fd < 0 {
			return st, false
		}
		select {
		case <-stop:
			return st, false
		default:
		}
		// Bounded, so a closed stop is seen; the record wakes it at once.
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, 50); err != nil && !errors.Is(err, unix.EINTR) {
			return st, false
		}
	}
}

// receivedFDs are the descriptors of every SCM_RIGHTS message in oob (a
// recvmsg's control data), none if it holds none or cannot be parsed.
func receivedFDs(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}
