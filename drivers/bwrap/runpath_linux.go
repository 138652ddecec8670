//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// One run routine for every exec path.
//
// A command runs through one starter: a sandbox built for it
// (launchStarter, driver_linux.go), a prepared sandbox handed the command
// (handoverStarter, prepared_linux.go) or sandbox-init started straight on
// the host in the Landlock tier (tierStarter, tier_linux.go). What a run
// needs besides starting its sandbox is written once, here, in runCommand:
//
//   - the output budgets and the copies of stdout and stderr, through the
//     setup gate (bwrap's own failure is the driver's error, never the
//     command's output), drained after the sandbox ended, bounded;
//   - stdin: a pipe fed from the spec's bytes or from the stream once the
//     command was started (a prepared sandbox that refuses the hand-over
//     has consumed none of it, so the command can run elsewhere), or
//     /dev/null;
//   - the timeout, which counts from the start (a prepared sandbox's own
//     setup was not the command's time), and the caller's cancel;
//   - the command's registration for signals and window sizes;
//   - the Exit: exit code and signal, the timeout, output counts and
//     truncation, usage, spawn_refused, the OOM kill, the tier.
//
// A starter starts its sandbox with the stdio it is given, registers its
// lifeline with the run at the point its path needs (attach), waits for
// the end in its own way and releases what it holds. The paths' Exits
// are held to one another by TestRunPathParity.

// starter is one exec path.
type starter interface {
	// start starts the command, its stdio the sandbox's ends of r.io, and
	// returns once it runs or was started (it is given stdin only then).
	// runCtx bounds the command: its end must end the sandbox. start calls
	// r.attach with the command's lifeline before anything of the command
	// can run. An error means nothing runs and the starter has released
	// what it held (errStartTimedOut: runCtx ended meanwhile); after nil,
	// wait and then end are called.
	start(ctx, runCtx context.Context, r *runState) error
	// wait waits for the command's end, ending the sandbox when runCtx
	// ends, and says how it ended.
	wait(runCtx context.Context) ending
	// startError is the run's error for a sandbox whose start failed
	// (ending.startErr), once what it wrote to stderr was read (gate).
	startError(err error, gate *setupGate) error
	// end releases what the run held, once its Exit has been built.
	end()
	// path is what the Exit reports of this path.
	path() *pathInfo
}

// pathInfo is what every starter knows of its command once started.
type pathInfo struct {
	tier     string
	prepared bool // a prepared sandbox ran the command (Details["prepared"])
	// session: the command ran in its session's sandbox, which was new,
	// reused or rebuilt for it (Details["session_sandbox"]); "": not.
	session  string
	life     *lifeline
	cg       *cgroup.Command // nil: none
	memBytes uint64          // the memory limit (a setup OOM names it)
	notif    *notifier       // nil: the command may spawn
	// mayspawn: the command has the spawn capability (violationKinds).
	mayspawn bool
}

func (p *pathInfo) path() *pathInfo { return p }

// ending is how a command's sandbox ended.
type ending struct {
	// rec is the supervisor's status record, when the starter read it
	// (reported); else runCommand reads the lifeline for it.
	rec      sandboxinit.Status
	reported bool
	// state is the sandbox's process (bwrap, or sandbox-init in the
	// Landlock tier) once reaped; nil when the starter did not wait for
	// it (the record said nothing of the command runs any more).
	state   *os.ProcessState
	waitErr error
	// startErr: the sandbox never ran the command (startError says why).
	startErr error
	// killed: the starter killed the sandbox when runCtx ended and has no
	// process state of it (a session's command sandbox-init is the
	// session supervisor's child, not the driver's).
	killed bool
}

// errStartTimedOut: the timeout expired while the command was being
// started; the run reports a timeout, as for any sandbox whose setup
// outlived it.
var errStartTimedOut = errors.New("the timeout expired while the command was started")

// runState is one run as its starter sees it.
type runState struct {
	d      *Driver
	spec   driverapi.RunSpec
	io     *commandIO
	stdout *driverapi.BudgetWriter
	stderr *driverapi.BudgetWriter
	gate   *setupGate
	// unregister ends the command's registration for signals.
	unregister func()
}

// attach makes life the command's lifeline: what bwrap (or the chain)
// writes to stderr before sandbox-init runs is held back (gateOpen: there
// is no such writer, as in a prepared sandbox, whose bwrap writes
// elsewhere), the output copies start, and the command can be signalled
// by its id from now on.
func (r *runState) attach(p *pathInfo, life *lifeline, gateOpen bool) {
	p.life = life
	r.gate = &setupGate{w: r.stderr, life: life, open: gateOpen}
	r.io.copyOut(r.stdout, r.gate)
	if r.spec.CommandID != "" {
		r.unregister = r.d.running.add(r.spec.CommandID, life)
	}
}

func (r *runState) detach() {
	if r.unregister != nil {
		r.unregister()
		r.unregister = nil
	}
}

// runCommand runs spec through st and reports how it ended.
func (d *Driver) runCommand(ctx context.Context, spec driverapi.RunSpec, in *driverapi.StreamInput,
	streams driverapi.Streams, st starter) (driverapi.Exit, error) {
	outBudget, errBudget := driverapi.StreamBudgets(spec.MaxOutputBytes)
	r := &runState{d: d, spec: spec,
		stdout: driverapi.NewBudgetWriter(streams.Stdout, outBudget),
		stderr: driverapi.NewBudgetWriter(streams.Stderr, errBudget)}
	var err error
	if r.io, err = newCommandIO(spec, in); err != nil {
		return driverapi.Exit{}, err
	}
	defer r.io.close()
	runCtx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	p := st.path()
	start := time.Now()
	if err := st.start(ctx, runCtx, r); err != nil {
		r.detach()
		// The starter ended what it started: the copies (if attach began
		// them) read to the end before the streams go back to the caller.
		r.io.sent()
		r.io.wait()
		if errors.Is(err, errStartTimedOut) {
			exit := outputExit(time.Since(start), r.stdout, r.stderr)
			exit.TimedOut, exit.ExitCode, exit.Signal = true, 128+int32(unix.SIGKILL), int32(unix.SIGKILL)
			p.details(&exit)
			return exit, nil
		}
		return driverapi.Exit{}, err
	}
	// Deferred in this order: the registration goes, then the window
	// sizes stop, then the starter releases the sandbox.
	defer st.end()
	if in != nil && in.Resize != nil {
		defer followResize(p.life, in.Resize)()
	}
	defer r.detach()
	// The command was started: the driver's copies of the sandbox's ends
	// go (the copies see the end of the output once the sandbox is gone),
	// and stdin is fed.
	r.io.sent()
	r.io.feed()
	e := st.wait(runCtx)
	dur := time.Since(start)
	if r.io.wait() {
		d.log.Warn("output pipes still open after the sandbox ended", "command", spec.CommandID)
	}
	// Cancellation first: a cancel during the v1 hand-over also surfaces
	// as a failed start, and the caller must see that it cancelled.
	if ctx.Err() != nil {
		return driverapi.Exit{}, ctx.Err()
	}
	if e.startErr != nil {
		return driverapi.Exit{}, st.startError(e.startErr, r.gate)
	}
	exit, err := r.exitOf(runCtx, e, dur, p)
	// Every refusal was counted before its caller resumed: the count is
	// complete once the command has ended (notify_linux.go).
	exit.SpawnRefused = p.notif.finish()
	exit.Violations, exit.ViolationsDropped = p.notif.violations()
	exit.ViolationKinds = violationKinds(p.notif, p.mayspawn)
	return exit, err
}

// details records the tier, the cgroup and whether its OOM killer ended
// the command, and whether a prepared sandbox ran it.
func (p *pathInfo) details(exit *driverapi.Exit) {
	exitDetails(exit, p.cg, p.tier)
	if p.prepared {
		exit.Details["prepared"] = "1"
	}
	if p.session != "" {
		exit.Details[driverapi.ExitDetailSessionSandbox] = p.session
	}
}

// exitOf reports how a command ended (e), with what it wrote.
func (r *runState) exitOf(runCtx context.Context, e ending, dur time.Duration, p *pathInfo) (driverapi.Exit, error) {
	// Started before status: Started peeks at the lifeline for
	// sandbox-init's first byte, which status consumes.
	if !e.reported && !p.life.Started() && runCtx.Err() == nil && e.state != nil {
		// bwrap ended without ever running sandbox-init: its setup failed
		// and the command never started.
		return driverapi.Exit{}, &setupError{Status: e.state.String(), Message: r.gate.message(), Err: p.cg.SetupOOM(p.memBytes)}
	}
	rec, reported := e.rec, e.reported
	if !reported {
		rec, reported, _ = p.life.status()
	}
	r.gate.release()
	exit := outputExit(dur, r.stdout, r.stderr)
	if e.state == nil && !reported && !e.killed {
		if e.waitErr == nil {
			// A session's command sandbox-init ended without its record:
			// its session sandbox was ended (or killed) under it.
			return driverapi.Exit{}, errors.New("bwrap driver: the command's sandbox ended without reporting its status (its session sandbox ended while it ran)")
		}
		return driverapi.Exit{}, fmt.Errorf("bwrap driver: wait: %w", e.waitErr)
	}
	if reported && rec.NotRun != sandboxinit.NotRunNone {
		// The program never ran: the run's error, not an exit status.
		return driverapi.Exit{}, notRunError(r.spec, rec)
	}
	exit.Usage = usageFrom(e.state, rec, reported)
	setStatus(&exit, e.state, rec, reported, errors.Is(runCtx.Err(), context.DeadlineExceeded), e.killed)
	p.details(&exit)
	return exit, nil
}

// usageFrom is the command's resource use: the supervisor's account of
// the command alone when it reported (reported), else the sandbox
// process's, which counts bwrap's and sandbox-init's too.
func usageFrom(state *os.ProcessState, rec sandboxinit.Status, reported bool) driverapi.ResourceUsage {
	if reported {
		return usageOf(rec)
	}
	if state == nil {
		return driverapi.ResourceUsage{}
	}
	ru, ok := state.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return driverapi.ResourceUsage{}
	}
	return driverapi.ResourceUsage{
		MaxRSSKB: int64(ru.Maxrss), // int32 on 32-bit targets
		UserMS:   int64(ru.Utime.Sec)*1000 + int64(ru.Utime.Usec)/1000,
		SystemMS: int64(ru.Stime.Sec)*1000 + int64(ru.Stime.Usec)/1000,
	}
}

// setStatus sets exit's code, signal and timeout from how the command
// ended: the sandbox process's state (nil: not waited for), the
// supervisor's record (reported), and whether the timeout expired.
func setStatus(exit *driverapi.Exit, state *os.ProcessState, rec sandboxinit.Status, reported, deadline, killed bool) {
	var ws syscall.WaitStatus
	if state != nil {
		ws, _ = state.Sys().(syscall.WaitStatus)
	}
	switch {
	case deadline && (state != nil && ws.Signaled() || state == nil && killed):
		// Killed by the timeout (a command that ended by itself just as
		// the deadline passed keeps its own status).
		exit.TimedOut, exit.ExitCode, exit.Signal = true, 128+int32(unix.SIGKILL), int32(unix.SIGKILL)
	case reported:
		// The command's own wait status, from sandbox-init: death by a
		// signal, told apart from an exit status of 128+N.
		setWaitStatus(exit, unix.WaitStatus(rec.Wait))
	case ws.Signaled():
		exit.Signal = int32(ws.Signal())
		exit.ExitCode = 128 + exit.Signal
	default:
		exit.ExitCode = int32(ws.ExitStatus())
		// No report from sandbox-init (it failed, or was killed): bwrap
		// reports a child killed by signal N as exit status 128+N (the
		// shell convention), indistinguishable here from an exit 128+N.
		if c := exit.ExitCode; c > 128 && c <= 128+64 {
			exit.Signal = c - 128
		}
	}
}

// commandIO is a command's stdio: the sandbox's ends, which its starter
// passes on (bwrap's stdio, or the hand-over record's descriptors), and
// the driver's, fed and drained here.
type commandIO struct {
	stdin, stdout, stderr *os.File // the sandbox's ends
	feedW                 *os.File // stdin's write end (nil: /dev/null)
	src                   io.Reader
	outR, errR            *os.File
	copies                sync.WaitGroup
	feedOnce, closeFeed   sync.Once
	closeOnce             sync.Once
}

func newCommandIO(spec driverapi.RunSpec, in *driverapi.StreamInput) (_ *commandIO, err error) {
	c := &commandIO{}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	switch {
	case in != nil || len(spec.Stdin) > 0:
		if c.stdin, c.feedW, err = os.Pipe(); err != nil {
			return nil, fmt.Errorf("bwrap driver: stdin pipe: %w", err)
		}
		if in != nil {
			c.src = in.Stdin
		} else {
			c.src = bytes.NewReader(spec.Stdin)
		}
	default:
		if c.stdin, err = os.Open(os.DevNull); err != nil {
			return nil, fmt.Errorf("bwrap driver: stdin: %w", err)
		}
	}
	if c.outR, c.stdout, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("bwrap driver: stdout pipe: %w", err)
	}
	if c.errR, c.stderr, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("bwrap driver: stderr pipe: %w", err)
	}
	return c, nil
}

// copyOut starts copying the command's output to stdout and stderr.
func (c *commandIO) copyOut(stdout, stderr io.Writer) {
	for _, p := range []struct {
		r *os.File
		w io.Writer
	}{{c.outR, stdout}, {c.errR, stderr}} {
		c.copies.Add(1)
		go func() {
			defer c.copies.Done()
			// Drained to the end: a budget writer keeps counting past its
			// budget, so the command never dies of SIGPIPE.
			_, _ = io.Copy(p.w, p.r)
		}()
	}
}

// sent closes the driver's copies of the sandbox's ends: the sandbox has
// its own (or will never have them).
func (c *commandIO) sent() {
	for _, f := range []*os.File{c.stdin, c.stdout, c.stderr} {
		f.Close()
	}
}

// feed starts feeding stdin, once the command was started.
func (c *commandIO) feed() {
	if c.feedW == nil {
		return
	}
	c.feedOnce.Do(func() {
		go func() {
			if c.src != nil {
				// Ends at the source's end, or with EPIPE once every
				// reader (the sandbox) is gone, or when close closes the
				// pipe under a write the command never reads.
				_, _ = io.Copy(c.feedW, c.src)
			}
			c.closeFeedW()
		}()
	})
}

func (c *commandIO) closeFeedW() { c.closeFeed.Do(func() { c.feedW.Close() }) }

// wait waits for the output copies, bounded: every writer end is in the
// sandbox, whose processes are all gone by now. It reports whether the
// bound cut them short.
func (c *commandIO) wait() (cut bool) {
	done := make(chan struct{})
	go func() { c.copies.Wait(); close(done) }()
	t := time.NewTimer(waitDelay)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		c.outR.Close()
		c.errR.Close()
		<-done
		return true
	}
}

// close releases every descriptor left; a feed blocked on a full pipe is
// woken.
func (c *commandIO) close() {
	c.closeOnce.Do(func() {
		for _, f := range []*os.File{c.stdin, c.stdout, c.stderr, c.outR, c.errR} {
			if f != nil {
				f.Close()
			}
		}
		if c.feedW != nil {
			c.closeFeedW()
		}
	})
}
