//go:build linux

package bwrap

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// Streamed runs (driverapi.StreamRunner, protocol 1.2).
//
// Stdin: the sandbox's stdin is a pipe the driver feeds from the stream
// as the command reads it (a full pipe holds the feeder back, and with it
// the stream), closed when the stream closes stdin (commandIO,
// runpath_linux.go); without a terminal the
// command reads that pipe directly. With a terminal (RunSpec.Tty)
// sandbox-init opens it inside the sandbox, from the sandbox's own devpts,
// and relays between it and its stdin and stdout (sandboxinit/pty_linux.go);
// window sizes travel on the lifeline. Both need the bwrap tier: the
// Landlock tier has no devpts of its own, and refuses streamed runs.

var _ driverapi.StreamRunner = (*Driver)(nil)

// RunStream implements driverapi.StreamRunner.
func (d *Driver) RunStream(ctx context.Context, spec driverapi.RunSpec, in driverapi.StreamInput, streams driverapi.Streams) (driverapi.Exit, error) {
	if len(spec.Stdin) > 0 {
		return driverapi.Exit{}, &driverapi.InvalidSpecError{Field: "stdin", Reason: "a streamed run takes its stdin from the stream"}
	}
	exit, err := d.run(ctx, spec, &in, streams)
	d.forgetProbeCache(err)
	return exit, err
}

// streamUnavailable is the refusal of a streamed run where the tier cannot
// give one.
func streamUnavailable(spec driverapi.RunSpec) error {
	f := driverapi.FeatureStdinStream
	if spec.Tty != nil {
		f = driverapi.FeaturePTY
	}
	return &unavailableError{Feature: f, Reason: "Landlock tier: no sandbox of its own (no private devpts, no supervisor on a pipe)", Fix: tierFix}
}

// followResize passes window sizes to sandbox-init until stop is called.
func followResize(life *lifeline, sizes <-chan driverapi.WindowSize) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case ws, ok := <-sizes:
				if !ok {
					return
				}
				// A lost size is not fatal: the next one corrects it.
				_ = life.Resize(ws.Rows, ws.Cols)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// Resize asks sandbox-init to set the terminal's window size (a
// WinsizeTag record), queued on the socket until it reads it.
func (l *lifeline) Resize(rows, cols uint16) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.local < 0 {
		return errLifelineClosed
	}
	if err := unix.Sendto(l.local, sandboxinit.EncodeWinsize(rows, cols), unix.MSG_NOSIGNAL|unix.MSG_DONTWAIT, nil); err != nil {
		return fmt.Errorf("bwrap driver: lifeline: %w", err)
	}
	return nil
}
