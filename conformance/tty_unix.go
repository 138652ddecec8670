//go:build linux || darwin

package conformance

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// testTerminal is a pty the suite holds: a session given it as its
// controlling terminal is what a user's shell session is to the commands
// it starts.
type testTerminal struct {
	master, slave *os.File
	path          string
}

// openTerminal makes a pty pair in raw mode (so that any injected byte is
// pending input at once, not held back for a line).
func openTerminal() (*testTerminal, error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	path, err := unlockPTY(int(m.Fd()))
	if err != nil {
		m.Close()
		return nil, err
	}
	s, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return nil, err
	}
	t := &testTerminal{master: m, slave: s, path: path}
	tio, err := unix.IoctlGetTermios(int(s.Fd()), ioctlGetTermios)
	if err == nil {
		tio.Lflag &^= unix.ICANON | unix.ECHO
		err = unix.IoctlSetTermios(int(s.Fd()), ioctlSetTermios, tio)
	}
	if err != nil {
		t.close()
		return nil, fmt.Errorf("raw mode: %w", err)
	}
	return t, nil
}

// pending is how many input bytes wait on the terminal: what was typed,
// or injected, and not read.
func (t *testTerminal) pending() (int, error) {
	return unix.IoctlGetInt(int(t.slave.Fd()), ioctlPending)
}

// drain reads the pending input away (raw mode: a read of what is
// pending returns at once).
func (t *testTerminal) drain() error {
	n, err := t.pending()
	if err != nil || n == 0 {
		return err
	}
	_, err = t.slave.Read(make([]byte, n))
	return err
}

func (t *testTerminal) close() {
	t.slave.Close()
	t.master.Close()
}
