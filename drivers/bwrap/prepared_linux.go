//go:build linux

package bwrap

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/preparedpool"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// Prepared sandboxes: the design.
//
// Everything about a sandbox but the command's argv, environment, stdio,
// directory and the protected entries of the workspace as it is now
// follows from the profile: namespaces, the mounts of the system, the
// workspace and the grants, the cgroup and its limits, the session's
// network namespace, the seccomp programs and the Landlock rules. So the
// driver builds sandboxes ahead, per (profile, session): bwrap runs with
// the profile's flags, sandbox-init (PID 1, in the command's cgroup) waits
// on the lifeline, and a Run of that profile in that session hands one
// its command (sandboxinit/handover.go) instead of building one.
//
// Isolation per command is what it is without them:
//   - a prepared sandbox serves one command and is then destroyed
//     (sandbox-init reads one hand-over and becomes that command's
//     supervisor); it is taken from the pool before the hand-over, so two
//     Runs can never be handed the same;
//   - pools are keyed by the profile's bytes and the session id: never
//     shared across sessions, workspaces or grants;
//   - what can change between the preparation and the command is checked
//     at the hand-over: the protected entries are found then (the scan,
//     the placeholders, their mounts, each checked by inode inside), the
//     workspace and grant roots must still be the directories bound (same
//     device and inode), and the /etc view must be the one in use;
//   - the command's timeout starts at the hand-over: a sandbox that waited
//     does not shorten it;
//   - until the hand-over nothing of the command's exists in the sandbox;
//     sandbox-init holds CAP_SYS_ADMIN and CAP_SETPCAP of the sandbox's own
//     user namespace for the hand-over's mounts and drops them on every
//     thread before the command's program is looked up;
//   - root drivers only: unprivileged, bwrap does its mounts as uid 0 of a
//     first user namespace and runs the sandbox in a second one, nested,
//     mapping the user's uid, which holds no capability over the sandbox's
//     mount namespace: no mount can be made in it from inside (EPERM, with
//     any capability kept). An unprivileged driver builds every sandbox for
//     its command.
//
// Lifetime: at most prepared_per_profile per key and prepared_max in all
// wait or are being built; each is destroyed after prepared_idle_ms, on
// forget_session and with the driver: its lifeline hangs up, sandbox-init
// (which waits on it) ends, and bwrap, PID 1 of its PID guard, takes
// everything with it, as for a command whose driver died.
//
// Not prepared (a Run of these always builds its sandbox): terminals (the
// pty is opened before the program), allow_hosts (the bridge's chain),
// the Landlock tier (no bwrap), unprivileged drivers (above), and
// profiles whose pool is off.

// poolKey is what a prepared sandbox may serve: one profile of one session.
type poolKey struct {
	profile [32]byte
	session string
	// layer is a layered command's upper directory: a layered session's
	// sandbox is never one over the live workspace, nor over another
	// layer.
	layer string
}

func keyFor(spec driverapi.RunSpec) poolKey {
	k := poolKey{profile: sha256.Sum256(spec.Profile.Data), session: spec.SessionID}
	if spec.Layered != nil {
		k.layer = spec.Layered.Upper
	}
	return k
}

// preparedSandbox is one sandbox waiting for its command.
type preparedSandbox struct {
	key        poolKey
	sb         *sandbox
	done       <-chan sandboxResult
	cg         *cgroup.Command
	releaseNet func()
	setup      *limitedBuffer // what bwrap or sandbox-init said while setting up
	etcView    string
	// releaseEtc drops the sandbox's reference on its /etc view, once it
	// has ended (a pooled sandbox keeps its view bound until then).
	releaseEtc func()
	roots      []rootID // the workspace and grant roots bound, as they were
	// net is the network namespace bwrap joined (nil: its own), for a
	// session sandbox built ahead, whose namespace becomes its session's.
	net       *netns
	destroyed sync.Once
}

// rootID is a bound root's identity at preparation.
type rootID struct {
	path     string
	dev, ino uint64
}

// preparedStats counts what the pool did (for tests, bench and doctor).
type preparedStats = preparedpool.Stats

// preparedPool holds the waiting sandboxes (internal/preparedpool).
type preparedPool = preparedpool.Pool[poolKey, *preparedSandbox]

func newPreparedPool() *preparedPool {
	return preparedpool.New(func(k poolKey) string { return k.session }, (*preparedSandbox).destroy)
}

// endSandbox tears down ps, whose command has ended and been answered, in
// the background: bwrap ending (the namespaces going away), the lifeline,
// the cgroup and the session network. Close and forget_session wait for
// it, so nothing of a command outlives them.
func (d *Driver) endSandbox(ps *preparedSandbox) {
	done := d.pool.Ending(ps.key.session)
	go func() {
		t := time.NewTimer(endWait)
		select {
		case <-ps.done:
		case <-t.C:
			// The supervisor reported and killed everything; what keeps
			// bwrap from ending now is killed with it.
			if pr := ps.sb.process(); pr != nil {
				_ = pr.Kill()
			}
			<-ps.done
		}
		t.Stop()
		ps.sb.close()
		ps.cg.Remove()
		ps.releaseNet()
		ps.releaseEtc()
		done()
	}()
}

// refillWait bounds how long a refill waits for the command whose take
// started it to be answered (the session sandboxes' refills too).
const refillWait = preparedpool.RefillWait

// maxRefused is how many hand-overs of a key may fail in a row before the
// key is no longer prepared (the sandboxes built ahead of their session
// count the same way).
const maxRefused = preparedpool.MaxRefused

// endWait bounds how long a sandbox whose supervisor has reported may take
// to end by itself.
const endWait = 5 * time.Second

// poolMode is the pool's mode for this driver, off where it cannot work.
func (d *Driver) poolMode() preparedMode {
	o := d.cfg.Options
	if o.Prepared == preparedOff || o.PreparedPerProfile == nil || *o.PreparedPerProfile == 0 {
		return preparedOff
	}
	if h := d.probe(); h.sandboxErr != nil || h.tier != tierBwrap || preparedOffWhy(h) != "" {
		return preparedOff
	}
	return o.Prepared
}

// preparedOffWhy says why this host cannot hand a command over, or "": a
// driver that tried anyway would build, for every command, a sandbox it
// cannot use.
func preparedOffWhy(h *hostProbe) string {
	if os.Geteuid() != 0 {
		// Unprivileged, bwrap makes its mounts as uid 0 of a first user
		// namespace and runs the sandbox in a second, nested one mapping
		// the user's uid (and a third with --disable-userns): none the
		// sandbox is in holds a capability over its mount namespace, so
		// every mount from inside is EPERM, whatever capabilities it kept.
		return "unprivileged: the sandbox's user namespace cannot mount in its own mount namespace, so the hand-over's mounts cannot be made; every sandbox is built for its command"
	}
	return ""
}

// preparable says whether spec's sandbox can be built ahead.
func preparable(plan launchPlan, spec driverapi.RunSpec) bool {
	return spec.Tty == nil && plan.ProxySocket == ""
}

// preparedStats reports the pool's counters.
func (d *Driver) PreparedStats() preparedStats { return d.pool.Stats() }

// errNotPooled: no prepared sandbox ran the command, which never started
// (none waited, or the hand-over failed before the command started); the
// caller builds one the usual way.
var errNotPooled = errors.New("no prepared sandbox ran the command")

// runPooled runs spec in a prepared sandbox when it can, or returns
// errNotPooled.
//
// early gets the signals the command was sent during a hand-over that
// failed before its record went out.
func (d *Driver) runPooled(ctx context.Context, plan launchPlan, cwd string, spec driverapi.RunSpec,
	in *driverapi.StreamInput, streams driverapi.Streams, early *[]syscall.Signal) (driverapi.Exit, error) {
	mode := d.poolMode()
	if mode == preparedOff || !preparable(plan, spec) {
		return driverapi.Exit{}, errNotPooled
	}
	key := keyFor(spec)
	ps, _ := d.pool.Take(key)
	var answered chan struct{}
	if ps != nil {
		// The refill waits until this command is answered (for at most
		// refillWait): a sandbox being built shares the CPUs and the
		// kernel's mount locks with the hand-over, the command and the
		// placeholders' removal, and on two cores made a hit about 1.3x as
		// long (BenchmarkPreparedBackToBack, docs/performance.md), for
		// the same hit rate back to back.
		answered = make(chan struct{})
		defer close(answered)
	}
	d.refill(key, plan, spec.SessionID, mode, answered)
	if ps == nil && mode == preparedAlways && !d.pool.Refusing(key) {
		// Built for this command: its caller's cancel ends the wait.
		var err error
		if ps, err = d.prepare(ctx, key, plan, spec.SessionID); err != nil {
			d.log.Debug("no prepared sandbox", "error", err)
			return driverapi.Exit{}, errNotPooled
		}
	}
	if ps == nil {
		return driverapi.Exit{}, errNotPooled
	}
	exit, err := d.runCommand(ctx, spec, in, streams, &handoverStarter{
		pathInfo: pathInfo{tier: tierBwrap, prepared: true, cg: ps.cg, memBytes: plan.MemoryBytes, notif: ps.sb.notif, mayspawn: plan.AllowSpawn},
		d:        d, ps: ps, plan: plan, cwd: cwd,
	})
	var refused *notHandedOver
	d.pool.NoteHandover(key, !errors.As(err, &refused))
	if refused != nil {
		d.log.Debug("prepared sandbox refused the hand-over", "error", err)
		*early = ps.sb.life.takeHeld()
		return driverapi.Exit{}, errNotPooled
	}
	return exit, err
}

// refill starts building sandboxes for key in the background, up to the
// per-profile and total caps. In auto mode a key is only prepared once it
// has been run twice within the idle time: a driver that runs one command
// (the one-shot CLI) never builds a sandbox nobody takes.
//
// The builds start once after is closed (nil: at once).
func (d *Driver) refill(key poolKey, plan launchPlan, session string, mode preparedMode, after <-chan struct{}) {
	o := d.cfg.Options
	sz := preparedpool.Sizes{PerProfile: int(*o.PreparedPerProfile), Max: int(o.PreparedMax), Idle: time.Duration(o.PreparedIdleMS) * time.Millisecond}
	d.pool.Refill(key, session, sz, mode == preparedAuto, after,
		func() (*preparedSandbox, error) { return d.prepare(context.Background(), key, plan, session) },
		func(err error) { d.log.Debug("preparing a sandbox failed", "error", err) })
}

// Close ends every run still going and waits for its sandbox to be gone,
// then destroys every waiting sandbox, with its processes and its cgroup,
// and any still being built as it is ready (driverapi.Closer: the plugin
// calls it when the host shuts it down). Commands may not be run after it.
func (d *Driver) Close() {
	d.trace.Mark("Close")
	defer d.trace.Mark("Close done")
	// The runs still going first: none of their sandboxes may outlive
	// the driver's stop (runGroup).
	d.runs.close(runsEndWait)
	d.closeSessions()
	d.pool.Close()
}

// forgetPrepared destroys the waiting sandboxes of session.
func (d *Driver) forgetPrepared(session string) { d.pool.Forget(session) }

// preparedReadyWait bounds how long a sandbox may take to be set up.
const preparedReadyWait = 10 * time.Second

// prepare builds one sandbox for key and waits until sandbox-init waits
// for its command, or ctx ends.
func (d *Driver) prepare(ctx context.Context, key poolKey, plan launchPlan, session string) (_ *preparedSandbox, err error) {
	h := d.probe()
	d.trace.Mark("prepare")
	defer d.trace.Mark("prepared")
	ps := &preparedSandbox{key: key, setup: &limitedBuffer{}, releaseNet: func() {}, releaseEtc: func() {}}
	defer func() {
		if err != nil {
			ps.destroy()
		}
	}()
	if ps.cg, err = d.newCommandCgroup(plan); err != nil {
		return nil, err
	}
	plan.prot = nil
	plan.prepared = true
	plan.etcView, ps.releaseEtc = d.useEtcView(plan)
	ps.etcView = plan.etcView
	if ps.roots, err = rootIDs(plan); err != nil {
		return nil, err
	}
	ns, releaseNet, err := d.sessionNetFor(plan, session)
	if plan.attachRoot != "" {
		// No session yet: a namespace of its own, which becomes the
		// session's when one takes the sandbox (sessionahead_linux.go).
		ns, releaseNet, err = d.aheadNet(plan)
	}
	if err != nil {
		return nil, err
	}
	ps.releaseNet, plan.joinNet = releaseNet, ns != nil
	ps.net = ns
	is := d.initSpecFor(&plan, ps.cg, nil)
	is.Prepared = true
	is.SessionSupervisor = plan.sessionSupervisor
	if plan.sessionSupervisor && h.sessionUser {
		is.SessionUser = &sandboxinit.SessionUser{UID: os.Getuid(), GID: os.Getgid()}
		is.SessionOverlay = plan.layerInside
	}
	init, err := commandInitArgs(is)
	if err != nil {
		return nil, err
	}
	// The command's record arrives with the hand-over; bwrap's descriptor
	// is an empty memfd until then.
	cwd := plan.Workspace
	if plan.attachRoot != "" {
		cwd = "/"
	}
	sb, err := d.newSandbox(context.Background(), h.bwrap, plan, cwd, init, ps.cg, ns, nil, nil)
	if err != nil {
		return nil, err
	}
	ps.sb = sb
	sb.cmd.Stderr = ps.setup
	// cmd.Process is written by the goroutine that starts bwrap; the
	// lifeline's started byte orders nothing for the memory model, this
	// channel does (the hand-over and destroy read cmd.Process).
	forked := make(chan struct{})
	ps.done = d.startSandbox(sb, plan, func() { close(forked) })
	<-forked
	ended, err := waitStarted(ctx, sb.life, ps.done)
	if ended != nil {
		// done reports once; destroy reads it again.
		again := make(chan sandboxResult, 1)
		again <- *ended
		ps.done = again
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, ps.setup.String())
	}
	return ps, nil
}

// waitStarted waits for sandbox-init's started and prepared bytes on life,
// or for the sandbox to end (ended: what done reported), or for ctx to.
func waitStarted(ctx context.Context, life *lifeline, done <-chan sandboxResult) (ended *sandboxResult, err error) {
	deadline := time.Now().Add(preparedReadyWait)
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		pfd := []unix.PollFd{{Fd: int32(life.local), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 100)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("lifeline: %w", err)
		}
		if n > 0 {
			// The started byte, then the prepared one: sandbox-init has
			// done what it can before the command arrives.
			var b [2]byte
			got, _, _ := unix.Recvfrom(life.local, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			switch {
			case got == 2 && b[0] == sandboxinit.StartedTag && b[1] == sandboxinit.PreparedTag:
				return nil, nil
			case got != 1 || b[0] != sandboxinit.StartedTag:
				return nil, errors.New("the sandbox ended while it was set up")
			}
			// Started, not ready yet: the poll above would return at once,
			// so the sandbox's end is looked for here as well (one that
			// fails after its started byte leaves that byte alone on the
			// lifeline).
			time.Sleep(200 * time.Microsecond)
		}
		select {
		case r := <-done:
			return &r, fmt.Errorf("the sandbox ended while it was set up: %v %v", r.startErr, r.err)
		default:
		}
	}
	return nil, fmt.Errorf("the sandbox was not set up within %v", preparedReadyWait)
}

// destroy ends ps and releases what it holds; safe to call more than once.
func (ps *preparedSandbox) destroy() {
	ps.destroyed.Do(func() {
		if ps.sb != nil {
			if ps.done != nil {
				if p := ps.sb.process(); p != nil {
					_ = p.Kill()
				}
				<-ps.done
			}
			ps.sb.close()
		}
		ps.cg.Remove()
		ps.releaseNet()
		ps.releaseEtc()
	})
}

// rootIDs are the device and inode of every root the sandbox binds from
// the host tree: the workspace and the grants.
func rootIDs(plan launchPlan) ([]rootID, error) {
	var ids []rootID
	var roots []string
	if plan.attachRoot == "" {
		// A sandbox built ahead of its session binds neither the
		// workspace nor HOME (sessionahead_linux.go).
		roots = append(roots, plan.Workspace)
	}
	roots = append(append(roots, plan.FSRead...), plan.boundWritable()...)
	for _, p := range roots {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return nil, fmt.Errorf("bwrap driver: %s: %w", p, err)
		}
		ids = append(ids, rootID{p, st.Dev, st.Ino})
	}
	return ids, nil
}

// stale says why ps no longer matches the host, or "".
func (d *Driver) stale(ps *preparedSandbox, plan launchPlan) string {
	if v := d.etcViewFor(plan); v != ps.etcView {
		return "the /etc view changed"
	}
	now, err := rootIDs(plan)
	if err != nil {
		return err.Error()
	}
	for i, r := range now {
		if i >= len(ps.roots) || r != ps.roots[i] {
			return r.path + " is no longer the directory the sandbox binds"
		}
	}
	return ""
}

// notHandedOver: the prepared sandbox did not run the command, which never
// started (the sandbox is destroyed); the command is run in a sandbox
// built for it.
type notHandedOver struct{ err error }

func (e *notHandedOver) Error() string {
	return "prepared sandbox not handed the command: " + e.err.Error()
}
func (e *notHandedOver) Unwrap() error { return e.err }

// handoverStarter hands a command to a prepared sandbox (ps), built for
// its profile and session: the record with its directory, the protected
// entries as they are now and its stdio goes on the lifeline, and
// sandbox-init becomes the command's supervisor.
type handoverStarter struct {
	pathInfo
	d    *Driver
	ps   *preparedSandbox
	plan launchPlan
	cwd  string
	// protect, when set, gives the command's protected entries in place of
	// d.protect (a session sandbox's kept ones: sessionprotect_linux.go).
	protect func(launchPlan) (*protection, func(), error)
	// release removes the placeholders of the protected entries; pins
	// hold their inodes until sandbox-init mounted them; cmdFile is the
	// command's record.
	release func()
	pins    []*os.File
	cmdFile *os.File
	// reported: the supervisor's record said nothing of the command runs
	// any more, and the answer did not wait for bwrap (end tears the
	// sandbox down in the background).
	reported bool
}

func (s *handoverStarter) start(ctx, runCtx context.Context, r *runState) (err error) {
	d, ps, plan := s.d, s.ps, s.plan
	// Until the command runs the sandbox is this call's alone: whatever
	// ends the start there (a refusal of the workspace included) ends the
	// sandbox, or it would wait on its lifeline for as long as the driver
	// lives, outside the pool and its caps. It ends before the
	// placeholders go: part of a record may be out.
	defer func() {
		if err != nil {
			ps.destroy()
			s.releaseCommand()
		}
	}()
	d.trace.Mark("handOver")
	if why := d.stale(ps, plan); why != "" {
		d.pool.CountStale()
		return &notHandedOver{errors.New(why)}
	}
	// The protected entries as they are now; a refusal is the one a
	// fresh sandbox would give.
	protect := d.protect
	if s.protect != nil {
		protect = s.protect
	}
	prot, release, err := protect(plan)
	if err != nil {
		return err
	}
	s.release = release
	d.trace.Mark("protected")
	mounts, pins, err := handoverMounts(prot)
	s.pins = pins
	if err != nil {
		return err
	}
	if s.cmdFile, err = commandMemfd(commandArgv(r.spec), envList(r.spec.Env)); err != nil {
		return err
	}
	life := ps.sb.life
	if ps.sb.process() == nil {
		return &notHandedOver{errors.New("the prepared sandbox never started")}
	}
	rec, err := sandboxinit.EncodeHandover(sandboxinit.Handover{Cwd: s.cwd, Mounts: mounts})
	if err != nil {
		return err
	}
	if r.spec.CommandID != "" {
		// Registered before the record goes: once it is sent the command
		// may run (and print, and be signalled) before this goroutine
		// goes on. A signal sent before the record is held until the
		// record is out, then waits on the lifeline until the supervisor
		// reads it, as for a command still being set up.
		life.holdSignals()
	}
	// Only the command writes to these pipes: the sandbox's bwrap wrote
	// to its setup buffer.
	r.attach(&s.pathInfo, life, true)
	fds := []int{int(r.io.stdin.Fd()), int(r.io.stdout.Fd()), int(r.io.stderr.Fd()), int(s.cmdFile.Fd())}
	if err := life.handOver(rec, fds); err != nil {
		return &notHandedOver{err}
	}
	d.trace.Mark("sent")
	if err := life.awaitReady(runCtx); err != nil {
		// sandbox-init may have read the record and be starting the
		// command as this returns: the sandbox ends (deferred above), or
		// the command would run on past its timeout or cancel,
		// unsupervised.
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case runCtx.Err() != nil:
			return errStartTimedOut
		}
		return &notHandedOver{err}
	}
	d.trace.Mark("ready")
	return nil
}

func (s *handoverStarter) wait(runCtx context.Context) ending {
	ps := s.ps
	defer s.d.trace.Mark("status")
	life, proc := ps.sb.life, ps.sb.process()
	// The supervisor's status record means that nothing of the command
	// runs any more and its output is complete (sandboxinit/status.go):
	// the answer does not wait for bwrap and the namespaces to go.
	type reported struct {
		st sandboxinit.Status
		ok bool
	}
	stop, status := make(chan struct{}), make(chan reported, 1)
	go func() {
		st, ok := life.awaitStatus(stop)
		status <- reported{st, ok}
	}()
	// The waiter ends by itself within one poll: a lifeline closed
	// meanwhile reads as hung up (status), whatever its descriptor's
	// number names by then.
	defer close(stop)
	reaped := func(r sandboxResult) ending {
		// ps.done's report orders cmd.ProcessState's write before this read.
		st := ps.sb.cmd.ProcessState
		// A session's command sandbox-init is not the driver's child: no
		// state, and killed when runCtx ended (wait's kills below).
		return ending{state: st, waitErr: r.err, startErr: r.startErr, killed: st == nil && runCtx.Err() != nil}
	}
	select {
	case rep := <-status:
		if rep.ok && rep.st.Alone {
			s.reported = true
			return ending{rec: rep.st, reported: true}
		}
		// No record (the supervisor failed or was killed), or one that
		// cannot say the sandbox is empty: bwrap's status tells.
		select {
		case r := <-ps.done:
			return reaped(r)
		case <-runCtx.Done():
			_ = proc.Kill()
			return reaped(<-ps.done)
		}
	case r := <-ps.done:
		if ps.sb.cmd.ProcessState == nil {
			// A session's command: its end has no status of its own, the
			// record is the only account of it. One on its way (the
			// supervisor sends a KILLed command's after it saw the reaper
			// die) is waited for; the lifeline hangs up at once when no
			// one is left to send it (the session sandbox ended).
			// The reaper is reaped (ps.done reported, once): end releases
			// what is left itself, s.reported stays false.
			select {
			case rep := <-status:
				if rep.ok && rep.st.Alone {
					return ending{rec: rep.st, reported: true}
				}
			case <-runCtx.Done():
			}
		}
		return reaped(r)
	case <-runCtx.Done():
		_ = proc.Kill()
		return reaped(<-ps.done)
	}
}

func (s *handoverStarter) startError(err error, _ *setupGate) error {
	return fmt.Errorf("bwrap driver: prepared sandbox: %w", err)
}

func (s *handoverStarter) end() {
	ps := s.ps
	if s.reported {
		// Torn down in the background: Close and forget_session wait.
		s.d.endSandbox(ps)
	} else {
		// bwrap was reaped (ps.done reported, and reports once): what is
		// left is released here.
		ps.destroyed.Do(func() {
			ps.releaseEtc()
			ps.releaseNet()
			ps.cg.Remove()
			ps.sb.close()
		})
	}
	s.releaseCommand()
}

// releaseCommand removes what the hand-over made for its command.
func (s *handoverStarter) releaseCommand() {
	if s.release != nil {
		s.release()
		s.release = nil
	}
	closeAll(s.pins)
	s.pins = nil
	if s.cmdFile != nil {
		s.cmdFile.Close()
	}
}

// handoverMounts are the mounts of pr for a hand-over, in the order
// BwrapFlags would make them (anchors, existing entries, placeholders;
// parents first), each with the inode the driver found. pins hold the
// entries open until sandbox-init has mounted them, so their inodes cannot
// be reused meanwhile.
func handoverMounts(pr *protection) (ms []sandboxinit.HandoverMount, pins []*os.File, err error) {
	add := func(path, kind string) error {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("bwrap driver: protected %s: %w", path, err)
		}
		pins = append(pins, os.NewFile(uintptr(fd), path))
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("bwrap driver: protected %s: %w", path, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return &driverapi.InvalidSpecError{Field: "workspace", Reason: fmt.Sprintf("%s became a symlink", path)}
		}
		ms = append(ms, sandboxinit.HandoverMount{Path: path, Kind: kind, Dev: st.Dev, Ino: st.Ino})
		return nil
	}
	for _, a := range pr.anchors {
		if err := add(a, sandboxinit.MountReadWrite); err != nil {
			return nil, pins, err
		}
	}
	for _, e := range pr.existing {
		if err := add(e, sandboxinit.MountReadOnly); err != nil {
			return nil, pins, err
		}
	}
	for _, p := range pr.missing {
		if err := add(p, sandboxinit.MountDevNull); err != nil {
			return nil, pins, err
		}
	}
	sort.SliceStable(ms, func(i, j int) bool { return depth(ms[i].Path) < depth(ms[j].Path) })
	return ms, pins, nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// handOver sends the hand-over record rec with fds on the lifeline.
func (l *lifeline) handOver(rec []byte, fds []int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.local < 0 {
		return errLifelineClosed
	}
	// One sendmsg: the descriptors travel with the record's first byte.
	n, err := unix.SendmsgN(l.local, rec, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL)
	if err != nil {
		return fmt.Errorf("bwrap driver: hand-over: %w", err)
	}
	for n < len(rec) {
		m, err := unix.SendmsgN(l.local, rec[n:], nil, nil, unix.MSG_NOSIGNAL)
		if err != nil {
			return fmt.Errorf("bwrap driver: hand-over: %w", err)
		}
		n += m
	}
	return nil
}

// awaitReady reads sandbox-init's answer to the hand-over: nil once it
// runs the command, else why it will not.
func (l *lifeline) awaitReady(ctx context.Context) error {
	read := func(b []byte) error {
		for off := 0; off < len(b); {
			pfd := []unix.PollFd{{Fd: int32(l.local), Events: unix.POLLIN}}
			if _, err := unix.Poll(pfd, 50); err != nil && !errors.Is(err, unix.EINTR) {
				return err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			n, _, err := unix.Recvfrom(l.local, b[off:], unix.MSG_DONTWAIT)
			switch {
			case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
				continue
			case err != nil:
				return err
			case n == 0:
				return errors.New("the prepared sandbox ended before its command started")
			}
			off += n
		}
		return nil
	}
	var b [1]byte
	for {
		if err := read(b[:]); err != nil {
			return err
		}
		switch b[0] {
		case sandboxinit.StartedTag, sandboxinit.PreparedTag:
			continue
		case sandboxinit.ReadyTag:
			l.mu.Lock()
			l.started = true
			// What Signal held back goes now: the supervisor has read the
			// record (a large one may have filled the socket's buffer
			// until then) and reads signals once it has forked the
			// command, as for any sandbox. A send that fails now finds
			// the sandbox gone, as a Signal would.
			held := l.held
			l.holding, l.held = false, nil
			for _, sig := range held {
				_ = l.sendSignal(sig)
			}
			l.mu.Unlock()
			return nil
		case sandboxinit.ErrorTag:
			var n [2]byte
			if err := read(n[:]); err != nil {
				return err
			}
			msg := make([]byte, binary.LittleEndian.Uint16(n[:]))
			if err := read(msg); err != nil {
				return err
			}
			return fmt.Errorf("prepared sandbox: %s", msg)
		default:
			return fmt.Errorf("prepared sandbox: unexpected record %q", b[0])
		}
	}
}
