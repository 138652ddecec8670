//go:build linux

package main

import (
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// userTerminal is the user's side of `exec -t`: its size, raw mode while
// the command reads it, and SIGWINCH turned into window sizes.
type userTerminal struct {
	inFd   int // -1 when stdin is not a terminal
	sizeFd int // the terminal whose size the command follows, -1: none
	size   driverapi.WindowSize
	resize chan driverapi.WindowSize

	mu      sync.Mutex
	saved   *unix.Termios
	stopped bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// defaultWindow is the size a command gets when no terminal tells one.
var defaultWindow = driverapi.WindowSize{Rows: 24, Cols: 80}

func terminalFd(x any) int {
	f, ok := x.(*os.File)
	if !ok {
		return -1
	}
	fd := int(f.Fd())
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
		return -1
	}
	return fd
}

// openUserTerminal looks at stdin and stdout and starts following the
// window size. It never fails: without a terminal the command still gets
// its pty, of the default size.
func openUserTerminal(in, out any) *userTerminal {
	t := &userTerminal{inFd: terminalFd(in), sizeFd: -1, size: defaultWindow,
		resize: make(chan driverapi.WindowSize, 1), stop: make(chan struct{})}
	for _, fd := range []int{t.inFd, terminalFd(out)} {
		if fd < 0 {
			continue
		}
		if ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ); err == nil && ws.Row > 0 && ws.Col > 0 {
			t.sizeFd, t.size = fd, driverapi.WindowSize{Rows: ws.Row, Cols: ws.Col}
			break
		}
	}
	if t.sizeFd >= 0 {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, unix.SIGWINCH)
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer signal.Stop(winch)
			for {
				select {
				case <-t.stop:
					return
				case <-winch:
					ws, err := unix.IoctlGetWinsize(t.sizeFd, unix.TIOCGWINSZ)
					if err != nil {
						continue
					}
					// The latest size wins over one not yet sent.
					select {
					case <-t.resize:
					default:
					}
					t.resize <- driverapi.WindowSize{Rows: ws.Row, Cols: ws.Col}
				}
			}
		}()
	}
	return t
}

// makeRaw puts the user's terminal in raw mode (as cfmakeraw): every key
// goes to the command's terminal, which does its own echo, line editing
// and signal characters.
func (t *userTerminal) makeRaw() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inFd < 0 || t.saved != nil || t.stopped {
		return
	}
	old, err := unix.IoctlGetTermios(t.inFd, unix.TCGETS)
	if err != nil {
		return
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(t.inFd, unix.TCSETS, &raw); err != nil {
		return
	}
	t.saved = old
}

// restore puts the terminal back as it was and stops following its size.
// Called on every way out of exec (deferred); safe to call twice.
func (t *userTerminal) restore() {
	t.mu.Lock()
	if !t.stopped {
		t.stopped = true
		close(t.stop)
	}
	if t.saved != nil {
		_ = unix.IoctlSetTermios(t.inFd, unix.TCSETS, t.saved)
		t.saved = nil
	}
	t.mu.Unlock()
	t.wg.Wait()
}

func ttySupported() bool { return true }
