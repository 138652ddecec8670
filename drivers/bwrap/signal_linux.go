//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// notRunningError: no command with this id runs in this driver.
type notRunningError = driverapi.NotRunningError

var _ driverapi.Signaler = (*Driver)(nil)

// signalNumber maps the contract's signal names to this system's numbers.
func signalNumber(sig driverapi.Signal) (syscall.Signal, bool) {
	switch sig {
	case driverapi.SignalTERM:
		return syscall.SIGTERM, true
	case driverapi.SignalINT:
		return syscall.SIGINT, true
	case driverapi.SignalHUP:
		return syscall.SIGHUP, true
	case driverapi.SignalQUIT:
		return syscall.SIGQUIT, true
	case driverapi.SignalKILL:
		return syscall.SIGKILL, true
	case driverapi.SignalUSR1:
		return syscall.SIGUSR1, true
	case driverapi.SignalUSR2:
		return syscall.SIGUSR2, true
	case driverapi.SignalWINCH:
		return syscall.SIGWINCH, true
	case driverapi.SignalPIPE:
		return syscall.SIGPIPE, true
	}
	return 0, false
}

// Signal implements driverapi.Signaler: sig goes to the command's process
// through its PID 1 (see signalCommand).
func (d *Driver) Signal(ctx context.Context, commandID string, sig driverapi.Signal) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n, ok := signalNumber(sig)
	if !ok {
		return &driverapi.InvalidSpecError{Field: "signal", Reason: fmt.Sprintf("%q is not a signal of the contract", sig)}
	}
	return d.signalCommand(commandID, n)
}

// commandTable tracks the running commands by RunSpec.CommandID, each by
// its lifeline: the only way into a sandbox from the driver. The zero value
// is ready for use. Ids are the caller's: two commands run under one id are
// both signalled.
type commandTable struct {
	mu sync.Mutex
	m  map[string][]*lifeline
}

// add registers l under id until the returned func is called.
func (t *commandTable) add(id string, l *lifeline) (remove func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string][]*lifeline{}
	}
	t.m[id] = append(t.m[id], l)
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		ls := t.m[id]
		for i, x := range ls {
			if x == l {
				ls = append(ls[:i:i], ls[i+1:]...)
				break
			}
		}
		if len(ls) == 0 {
			delete(t.m, id)
		} else {
			t.m[id] = ls
		}
	}
}

func (t *commandTable) get(id string) []*lifeline {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*lifeline(nil), t.m[id]...)
}

// signalCommand delivers sig to the running command commandID
// (RunSpec.CommandID). sandbox-init, the command's parent inside the
// sandbox, sends it (supervise_linux.go), so the signal reaches the
// command itself, never a reused pid, and needs no permission over
// processes in the sandbox's namespaces. A command that has not reached its
// program yet gets the signal as soon as it does.
func (d *Driver) signalCommand(commandID string, sig syscall.Signal) error {
	if commandID == "" {
		return &driverapi.InvalidSpecError{Field: "command_id", Reason: "empty"}
	}
	if sig < 1 || sig > 64 {
		return &driverapi.InvalidSpecError{Field: "signal", Reason: fmt.Sprintf("%d is not a signal number (1-64)", int(sig))}
	}
	ls := d.running.get(commandID)
	if len(ls) == 0 {
		return &notRunningError{CommandID: commandID}
	}
	sent := false
	var errs []error
	for _, l := range ls {
		err := l.Signal(sig)
		switch {
		case err == nil:
			sent = true
		case !errors.Is(err, errLifelineClosed):
			errs = append(errs, err)
		}
	}
	if sent {
		return nil
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Every one ended between the look-up and the send.
	return &notRunningError{CommandID: commandID}
}
