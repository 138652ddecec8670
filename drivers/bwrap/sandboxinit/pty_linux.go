//go:build linux

package sandboxinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The pseudo-terminal of a tty run (InitSpec.Tty).
//
// Where it comes from: bwrap's --dev gives the sandbox a devpts instance
// of its own (/dev/pts with its own ptmx, /dev/ptmx pointing at it), and
// the supervisor, already inside the sandbox and confined, opens
// /dev/ptmx there and takes the slave with TIOCGPTPEER (the peer of that
// very master, never a path that could name another instance's). No
// terminal of the host is ever opened: the launcher's side of the run is
// pipes. The target is started as a session leader with the slave as its
// controlling terminal and as its descriptors 0, 1 and 2.
//
// The supervisor relays: its stdin (the launcher's stream) to the master,
// the master to its stdout (so the run's output is one stream), and window
// sizes (WinsizeTag records on the lifeline) to the master with
// TIOCSWINSZ, which makes the kernel send SIGWINCH to the terminal's
// foreground process group. When its stdin ends it writes the terminal's
// EOF character (twice when a line is pending), which a reader in
// canonical mode sees as end-of-file.
//
// TIOCSTI and TIOCLINUX stay denied by the seccomp filter the target
// inherits (seccomp_linux.go), so nothing can push input into this
// terminal either.

// WinsizeTag starts a window-size record on the lifeline: the tag, then
// rows and cols as two little-endian uint16.
const WinsizeTag = 'w'

// winsizeRecordLen is the length of a WinsizeTag record.
const winsizeRecordLen = 5

// EncodeWinsize is the lifeline record for a window size.
func EncodeWinsize(rows, cols uint16) []byte {
	b := make([]byte, winsizeRecordLen)
	b[0] = WinsizeTag
	binary.LittleEndian.PutUint16(b[1:], rows)
	binary.LittleEndian.PutUint16(b[3:], cols)
	return b
}

// drainQuiet is how long the relay waits for more output once the target
// has ended, when something else may still hold the terminal (a
// background process is not waited for). What the target wrote reaches the
// master through the kernel's tty buffer work, which a loaded machine may
// run later than that; when nothing else can hold the terminal, the drain
// waits for the hang-up instead (the kernel delivers what is buffered
// first), bounded by drainMax.
const drainQuiet = 100 * time.Millisecond

// drainMax bounds the whole drain: a background process that keeps
// writing to the terminal must not hold the command's end (and its
// status) back.
const drainMax = 2 * time.Second

// ptyRelay is the supervisor's side of the terminal.
type ptyRelay struct {
	master *os.File
	// mfd is master's descriptor for ioctls (File.Fd would make it
	// blocking, out of the poller).
	mfd      int
	out      io.Writer
	in       io.Reader
	draining atomic.Bool
	// alone: nothing but the master is left open on the terminal, so
	// the drain ends at the hang-up, not at a quiet spell.
	alone atomic.Bool
	// drainEnd is when the drain stops at the latest (UnixNano).
	drainEnd atomic.Int64
	outDone  chan struct{}
}

// openPty opens a terminal pair of the sandbox's devpts with window size
// ws: the master (close-on-exec, for the relay) and the slave's descriptor
// (close-on-exec; the fork makes it the target's 0, 1 and 2), and the
// master's descriptor number.
func openPty(ws TtySpec) (master *os.File, mfdOut, slave int, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, -1, -1, fmt.Errorf("pty: open /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(mfd)
		return nil, -1, -1, fmt.Errorf("pty: unlock: %w", err)
	}
	sfd, err := ptyPeer(mfd)
	if err != nil {
		unix.Close(mfd)
		return nil, -1, -1, err
	}
	if err := unix.IoctlSetWinsize(mfd, unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols}); err != nil {
		unix.Close(mfd)
		unix.Close(sfd)
		return nil, -1, -1, fmt.Errorf("pty: TIOCSWINSZ: %w", err)
	}
	// Non-blocking, so the relay waits in Go's poller rather than in
	// threads of its own (threads count against RLIMIT_NPROC).
	if err := unix.SetNonblock(mfd, true); err != nil {
		unix.Close(mfd)
		unix.Close(sfd)
		return nil, -1, -1, fmt.Errorf("pty: %w", err)
	}
	return os.NewFile(uintptr(mfd), "ptmx"), mfd, sfd, nil
}

// ptyPeer opens the slave of master mfd (TIOCGPTPEER with open flags).
func ptyPeer(mfd int) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), uintptr(unix.TIOCGPTPEER), uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		return -1, fmt.Errorf("pty: TIOCGPTPEER: %w", errno)
	}
	return int(r), nil
}

// ptyForkAttr makes attr start the target on the slave: descriptors 0-2,
// a session of its own, the slave as controlling terminal.
func ptyForkAttr(attr *syscall.ProcAttr, slave int) {
	attr.Files[0], attr.Files[1], attr.Files[2] = uintptr(slave), uintptr(slave), uintptr(slave)
	attr.Sys.Setsid, attr.Sys.Setctty, attr.Sys.Ctty = true, true, 0
	// A session leader leads its group already; setpgid would fail.
	attr.Sys.Setpgid = false
}

// startPtyRelay starts relaying between the supervisor's stdin/stdout and
// master. Descriptors 0 and 1 are the target's no more (it has the
// slave), so they are made non-blocking for the poller.
func startPtyRelay(master *os.File, mfd int) (*ptyRelay, error) {
	for _, fd := range []int{0, 1} {
		if err := unix.SetNonblock(fd, true); err != nil {
			return nil, fmt.Errorf("pty relay: fd %d: %w", fd, err)
		}
	}
	r := &ptyRelay{master: master, mfd: mfd, in: os.NewFile(0, "stdin"), out: os.NewFile(1, "stdout"), outDone: make(chan struct{})}
	go r.pumpIn()
	go r.pumpOut()
	return r, nil
}

// pumpIn copies stdin to the terminal; at its end it sends EOF.
func (r *ptyRelay) pumpIn() {
	buf := make([]byte, 32<<10)
	var last byte = '\n'
	for {
		n, err := r.in.Read(buf)
		if n > 0 {
			if _, werr := r.master.Write(buf[:n]); werr != nil {
				return
			}
			last = buf[n-1]
		}
		if err != nil {
			break
		}
	}
	eof := byte(4) // ^D, the default VEOF
	if t, err := unix.IoctlGetTermios(r.mfd, unix.TCGETS); err == nil && t.Cc[unix.VEOF] != 0 {
		eof = t.Cc[unix.VEOF]
	}
	msg := []byte{eof}
	if last != '\n' {
		// The first EOF ends the pending line, the second is end-of-file.
		msg = append(msg, eof)
	}
	_, _ = r.master.Write(msg)
}

// pumpOut copies the terminal's output to stdout until the terminal hangs
// up (EIO: no slave left open) or, once draining, it stays quiet.
func (r *ptyRelay) pumpOut() {
	defer close(r.outDone)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.master.Read(buf)
		if n > 0 {
			if _, werr := r.out.Write(buf[:n]); werr != nil {
				return
			}
			if r.draining.Load() {
				_ = r.master.SetReadDeadline(r.drainDeadline())
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && !r.draining.Load() {
				continue
			}
			return
		}
	}
}

// finish waits until the output the target left is relayed. alone says
// that no process of the command is left (a PID-1 supervisor has killed
// and reaped them all, and holds no slave itself).
func (r *ptyRelay) finish(alone bool) {
	if alone {
		r.alone.Store(true)
	}
	if !r.draining.Load() {
		r.drainEnd.Store(time.Now().Add(drainMax).UnixNano())
		r.draining.Store(true)
	}
	_ = r.master.SetReadDeadline(r.drainDeadline())
	<-r.outDone
}

// drainDeadline is drainQuiet from now, but never past drainEnd (drainEnd
// itself when alone).
func (r *ptyRelay) drainDeadline() time.Time {
	end := time.Unix(0, r.drainEnd.Load())
	if r.alone.Load() {
		return end
	}
	d := time.Now().Add(drainQuiet)
	if d.After(end) {
		return end
	}
	return d
}

// resize applies a window size (the kernel signals SIGWINCH).
func (r *ptyRelay) resize(rows, cols uint16) {
	_ = unix.IoctlSetWinsize(r.mfd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
}
