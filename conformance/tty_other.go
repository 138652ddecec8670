//go:build !linux && !darwin

package conformance

import "errors"

type testTerminal struct{ path string }

func openTerminal() (*testTerminal, error) {
	return nil, errors.New("the suite makes test terminals on Linux and macOS only")
}

func (t *testTerminal) pending() (int, error) { return 0, errors.New("no test terminal") }

func (t *testTerminal) drain() error { return errors.New("no test terminal") }

func (t *testTerminal) close() {}
