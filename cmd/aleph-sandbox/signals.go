package main

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// defaultSignalGrace is how long a command has, after the first signal
// forwarded to it, to end by itself before its tree is killed.
const defaultSignalGrace = 10 * time.Second

// signalRouter owns the CLI's SIGINT, SIGTERM and SIGHUP. While a command
// runs they are forwarded to it (docs/cli.md: the exit status is then the
// command's); otherwise the first one cancels the CLI's context, as
// signal.NotifyContext would.
type signalRouter struct {
	mu     sync.Mutex
	fwd    chan<- os.Signal
	cancel context.CancelFunc
	stop   func()
}

func newSignalRouter(cancel context.CancelFunc) *signalRouter {
	r := &signalRouter{cancel: cancel}
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case s := <-ch:
				r.route(s)
			}
		}
	}()
	r.stop = func() { signal.Stop(ch); close(done) }
	return r
}

func (r *signalRouter) route(s os.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fwd == nil {
		r.cancel()
		return
	}
	select {
	case r.fwd <- s:
	default: // a burst: the command has been told already
	}
}

// forward sends the signals to ch until the returned function is called.
func (r *signalRouter) forward(ch chan<- os.Signal) (restore func()) {
	r.mu.Lock()
	r.fwd = ch
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.fwd = nil
		r.mu.Unlock()
	}
}

// commandSignals turns the CLI's signals into signals for the command. The
// first one also starts the grace period, after which kill is called (the
// pipeline then kills the whole tree). got reports the first signal
// forwarded, if any, and whether the grace period ran out.
type commandSignals struct {
	C       chan driverapi.Signal
	mu      sync.Mutex
	first   os.Signal
	expired bool
	timer   *time.Timer
	stop    func()
}

func forwardToCommand(fwd func(chan<- os.Signal) func(), grace time.Duration, kill context.CancelFunc) *commandSignals {
	cs := &commandSignals{C: make(chan driverapi.Signal, 8)}
	in := make(chan os.Signal, 8)
	restore := fwd(in)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case s := <-in:
				cs.mu.Lock()
				if cs.first == nil {
					cs.first = s
					cs.timer = time.AfterFunc(grace, func() {
						cs.mu.Lock()
						cs.expired = true
						cs.mu.Unlock()
						kill()
					})
				}
				cs.mu.Unlock()
				if name, ok := signalName(s); ok {
					select {
					case cs.C <- name:
					default:
					}
				}
			}
		}
	}()
	cs.stop = func() {
		restore()
		close(done)
		wg.Wait()
		cs.mu.Lock()
		if cs.timer != nil {
			cs.timer.Stop()
		}
		cs.mu.Unlock()
	}
	return cs
}

// got is the first signal forwarded (nil if none) and whether the grace
// period after it expired.
func (cs *commandSignals) got() (os.Signal, bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.first, cs.expired
}

func signalName(s os.Signal) (driverapi.Signal, bool) {
	switch s {
	case syscall.SIGINT:
		return driverapi.SignalINT, true
	case syscall.SIGTERM:
		return driverapi.SignalTERM, true
	case syscall.SIGHUP:
		return driverapi.SignalHUP, true
	}
	return "", false
}

// signalNumber is the number of a forwarded signal, for the 128+N status.
func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return int(syscall.SIGKILL)
}

func sigLabel(s os.Signal) string {
	if n, ok := signalName(s); ok {
		return string(n)
	}
	return s.String()
}
