//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// Session sandboxes: the design.
//
// A command that asks for its session's sandbox (RunSpec.SessionSandbox)
// runs in a sandbox that lives as long as the session: one per (session,
// profile), the prepared pool's key. A different capability set is a
// different profile (network mode, grants, spawn), so nothing of one
// set's sandbox (its /tmp, its network namespace, its grant mounts) can
// reach a command of another: an elevated command never sees what an
// unelevated one left in its /tmp. The workspace, shared with the host,
// is the one channel between capability sets, and no sandbox can make
// that channel safe fully (a file left there is the host's file).
//
// The session sandbox is bwrap with sandbox-init as its PID 1 in the
// session-supervisor mode (sandboxinit/session_linux.go, where its
// security is argued): it never runs a command, it starts, for every
// spawn record on its lifeline, the command's own PID 1 in a new PID and
// mount namespace: a raw reaper whose lifeline the supervisor speaks (the
// fork path, sandboxinit/sessionserve_linux.go) or, where that cannot
// run, a sandbox-init in the prepared mode. Both speak the same lifeline,
// so the driver hands that one its command exactly as it hands a
// prepared sandbox one
// (handoverStarter): per command stay its own PID namespace (its tree dies
// with it, background processes included, the session lives on), its own
// mount namespace (the protected entries' mounts), its own cgroup and
// limits (the driver moves the new sandbox-init into them before it lets
// it go on: nothing of it has run but sandbox-init's own start), seccomp,
// Landlock and the no-spawn filter applied after the fork, its status
// record on its own lifeline. What the session's commands share: /tmp,
// the network namespace (a server one command starts on loopback is
// reachable by the next, while it runs), the profile's mounts.
//
// /proc stays the session's: a command sees the session's processes
// listed there (those of its capability set), but has no number for any
// outside its own PID namespace to signal or trace, and the supervisor
// is not dumpable. A fresh proc mount for the command's namespace would
// undo bwrap's covers of /proc (the kernel refuses one in a user
// namespace while covers hide parts of the old one).
//
// Lifetime: until forget_session, session_idle_ms without a command,
// Close, or its death; the next command then builds a new one and says
// "rebuilt" (Exit.Details["session_sandbox"]). A session sandbox whose
// workspace or grant roots were replaced, or whose /etc view changed, is
// ended and rebuilt the same way. The driver killed, the lifelines hang
// up: the supervisor ends, and as PID 1 of the session's PID namespace it
// takes everything with it, and bwrap (under the PID guard) with them.

// sessionSandbox is one (session, profile)'s persistent sandbox.
type sessionSandbox struct {
	key poolKey
	sup *preparedSandbox // bwrap and the session supervisor
	// layer, for a layered session: its lock, held while the sandbox
	// lives (layered_linux.go).
	layer *mountedLayer
	// notify: the profile's commands get a notify socket (no-spawn or the
	// unix socket guard).
	notify bool
	// dead is closed once bwrap has ended (result in ended).
	dead  chan struct{}
	ended sandboxResult
	// prot is the protected entries kept for its commands.
	prot protState

	mu      sync.Mutex
	ahead   *preparedSandbox // a command's sandbox-init waiting
	filling bool             // one is being started
	running int
	timer   *time.Timer
	// drop ends the sandbox-init waiting ahead once the session has been
	// idle for aheadIdle (dropAhead).
	drop    *time.Timer
	dropped int  // how many were dropped (tests)
	gone    bool // ended or ending: no new command
	ending  bool // endSession ran
}

// sessionSet holds the session sandboxes.
type sessionSet struct {
	mu   sync.Mutex
	m    map[poolKey]*sessionSandbox
	lost map[poolKey]bool // had one that died, went stale or idled out
	// layers maps a mounted layer's upper directory to the sandbox's key
	// that mounted it: never two mounts of one upper.
	layers map[string]poolKey
	// building serialises the build of one key's sandbox.
	building map[poolKey]chan struct{}
	closed   bool
	// aheadIdle overrides defaultAheadIdle (tests).
	aheadIdle time.Duration
	// inflight counts the sandboxes being ended and the refills running
	// (Close waits for them); idle is signalled when it drops to zero.
	inflight int
	idle     *sync.Cond
	// ahead holds the session sandboxes built ahead of their session
	// (sessionahead_linux.go).
	ahead aheadPool
}

// enter counts one more thing Close waits for.
func (s *sessionSet) enter() {
	s.mu.Lock()
	s.inflight++
	s.mu.Unlock()
}

// leave counts one done.
func (s *sessionSet) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight--; s.inflight == 0 && s.idle != nil {
		s.idle.Broadcast()
	}
}

// waitIdle waits until nothing counted by enter is left.
func (s *sessionSet) waitIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idle == nil {
		s.idle = sync.NewCond(&s.mu)
	}
	for s.inflight > 0 {
		s.idle.Wait()
	}
}

// maxLost bounds sessionSet.lost: beyond it, the oldest knowledge of
// what a session had is dropped (a command then says "new").
const maxLost = 4096

// sessionOffWhy says why this driver keeps per-command sandboxes for
// commands that ask for their session's, or "".
func (d *Driver) sessionOffWhy() string {
	if d.cfg.Options.SessionSandbox == sessionSandboxOff {
		return "session_sandbox = \"off\" in the driver options"
	}
	h := d.probe()
	switch {
	case h.sandboxErr != nil:
		return "no sandbox here: " + h.sandboxErr.Error()
	case h.tier != tierBwrap:
		return "Landlock tier: no namespaces to keep a session in"
	case os.Geteuid() != 0 && !h.sessionUser:
		// A command's sandbox-init needs mounts in its own mount namespace
		// (the protected entries): unprivileged, the session sandbox runs
		// as uid 0 of bwrap's user namespace and gives each command a user
		// namespace of its own (sandboxinit/sessionuser_linux.go), where
		// the trial says it works.
		return "unprivileged, and a session sandbox cannot give each command a user namespace of its own here (" + h.sessionUserWhy + "), so every command gets a sandbox of its own"
	}
	return ""
}

// sessionIdle is session_idle_ms.
func (d *Driver) sessionIdle() time.Duration {
	return time.Duration(d.cfg.Options.SessionIdleMS) * time.Millisecond
}

// runSession runs spec in its session's sandbox, or returns errNotPooled
// (the command then gets a sandbox of its own).
func (d *Driver) runSession(ctx context.Context, plan launchPlan, cwd string, spec driverapi.RunSpec,
	in *driverapi.StreamInput, streams driverapi.Streams) (driverapi.Exit, error) {
	if !d.wantsSession(spec) || spec.SessionID == "" || !preparable(plan, spec) || d.sessionOffWhy() != "" {
		return driverapi.Exit{}, errNotPooled
	}
	key := keyFor(spec)
	for attempt := 0; ; attempt++ {
		d.trace.Mark("session sandbox")
		ss, how, err := d.sessionFor(ctx, key, plan)
		d.trace.Mark("session sandbox: " + how)
		if err != nil {
			if ctx.Err() != nil {
				return driverapi.Exit{}, ctx.Err()
			}
			return driverapi.Exit{}, err
		}
		ps, err := ss.take(ctx, d, plan)
		d.trace.Mark("command's sandbox-init taken")
		if err != nil {
			ss.release(d)
			if ctx.Err() != nil {
				return driverapi.Exit{}, ctx.Err()
			}
			// The session sandbox could not start the command's: it is
			// ended, and built again once.
			d.endSession(ss, true)
			if attempt == 0 {
				continue
			}
			return driverapi.Exit{}, fmt.Errorf("bwrap driver: session sandbox: %w", err)
		}
		answered := make(chan struct{})
		// Close waits for it: no cgroup of a refill outlives the driver.
		d.sessions.enter()
		go func() {
			defer d.sessions.leave()
			ss.refill(d, plan, answered)
		}()
		if how != driverapi.SessionSandboxReused {
			// A new session of this profile: the next one's sandbox is
			// built ahead (sessionahead_linux.go).
			d.refillAhead(key, plan, answered)
		}
		hs := &handoverStarter{
			pathInfo: pathInfo{tier: tierBwrap, session: how, cg: ps.cg, memBytes: plan.MemoryBytes, notif: ps.sb.notif, mayspawn: plan.AllowSpawn},
			d:        d, ps: ps, plan: plan, cwd: cwd,
		}
		if d.cfg.Options.SessionPlaceholders == sessionPlaceholdersSession {
			hs.protect = func(p launchPlan) (*protection, func(), error) { return ss.protectFor(d, p) }
		}
		exit, err := d.runCommand(ctx, spec, in, streams, hs)
		close(answered)
		ss.release(d)
		var refused *notHandedOver
		if errors.As(err, &refused) {
			// Stale (a root replaced, the /etc view changed) or gone: the
			// command never started; the session's sandbox is built anew.
			d.endSession(ss, true)
			if attempt == 0 {
				continue
			}
			// Twice: the command gets a sandbox of its own.
			d.log.Debug("session sandbox refused the hand-over twice", "error", err)
			return driverapi.Exit{}, errNotPooled
		}
		return exit, err
	}
}

// sessionFor is key's session sandbox, built when there is none (or it
// died or went stale), and how it came: new, reused or rebuilt. The
// caller holds it (running) until release.
func (d *Driver) sessionFor(ctx context.Context, key poolKey, plan launchPlan) (*sessionSandbox, string, error) {
	s := &d.sessions
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, "", errors.New("bwrap driver: closed")
		}
		if s.m == nil {
			s.m, s.lost, s.building = map[poolKey]*sessionSandbox{}, map[poolKey]bool{}, map[poolKey]chan struct{}{}
			s.layers = map[string]poolKey{}
		}
		if ss := s.m[key]; ss != nil {
			why := ""
			select {
			case <-ss.dead:
				why = "ended"
			default:
				why = d.stale(ss.sup, plan)
			}
			if why == "" && ss.hold() {
				s.mu.Unlock()
				return ss, driverapi.SessionSandboxReused, nil
			}
			s.mu.Unlock()
			d.log.Debug("session sandbox rebuilt", "why", why)
			d.endSession(ss, true)
			continue
		}
		if wait, ok := s.building[key]; ok {
			s.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return nil, "", ctx.Err()
			}
			continue
		}
		if key.layer != "" {
			if other, ok := s.layers[key.layer]; ok && other != key {
				s.mu.Unlock()
				why := "the session's layer is mounted in the sandbox of another capability set of the session (overlayfs forbids two mounts sharing an upper)"
				if other.session != key.session {
					why = "the layer is mounted in another session's sandbox (overlayfs forbids two mounts sharing an upper)"
				}
				return nil, "", layeredRefusal(why + "; run the session's commands with one capability set, or forget the session first")
			}
			s.layers[key.layer] = key
		}
		done := make(chan struct{})
		s.building[key] = done
		how := driverapi.SessionSandboxNew
		if s.lost[key] {
			how = driverapi.SessionSandboxRebuilt
		}
		s.mu.Unlock()
		// One built ahead for the profile, made this session's, when one
		// waits; else built now.
		ss := d.takeAhead(ctx, key, plan)
		var err error
		if ss == nil {
			ss, err = d.buildSession(ctx, key, plan)
		}
		s.mu.Lock()
		delete(s.building, key)
		close(done)
		if err == nil && s.closed {
			err = errors.New("bwrap driver: closed")
			s.mu.Unlock()
			ss.mu.Lock()
			ahead := ss.ahead
			ss.ahead = nil
			ss.mu.Unlock()
			if ahead != nil {
				// Taken from those built ahead: its waiting
				// sandbox-init's cgroup goes with it.
				ahead.destroy()
			}
			ss.sup.destroy()
			return nil, "", err
		}
		if err != nil {
			if key.layer != "" && s.layers[key.layer] == key {
				delete(s.layers, key.layer)
			}
			s.mu.Unlock()
			return nil, "", err
		}
		delete(s.lost, key)
		s.m[key] = ss
		ss.running = 1
		s.mu.Unlock()
		return ss, how, nil
	}
}

// buildSession builds key's session sandbox and waits until its
// supervisor takes spawn records.
func (d *Driver) buildSession(ctx context.Context, key poolKey, plan launchPlan) (*sessionSandbox, error) {
	plan.sessionSupervisor = true
	var layer *mountedLayer
	if plan.layered != nil {
		var err error
		if layer, err = d.mountLayer(plan.Workspace, plan.layered); err != nil {
			return nil, err
		}
		plan.layerSrc = layer.point
		if layer.point == "" {
			// An unprivileged driver: the supervisor mounts it.
			plan.layerInside = &sandboxinit.SessionOverlay{Target: plan.Workspace, Layer: layerBindPoint,
				Upper: layerBindPoint + "/" + filepath.Base(plan.layered.Upper), Work: layerBindPoint + "/" + filepath.Base(plan.layered.Work),
				Options: overlayOptionsUserNS}
		}
	}
	sup, err := d.prepare(ctx, key, plan, key.session)
	if layer != nil {
		// bwrap has bound it (or failed): the driver's own mount goes.
		layer.detach()
	}
	if err != nil {
		if layer != nil {
			layer.release()
		}
		return nil, err
	}
	ss, err := d.sessionFromPrepared(key, sup, layer)
	if err != nil && layer != nil {
		layer.release()
	}
	return ss, err
}

// sessionFromPrepared is the session sandbox of sup, a prepared sandbox
// whose sandbox-init is a session supervisor (destroyed on error).
func (d *Driver) sessionFromPrepared(key poolKey, sup *preparedSandbox, layer *mountedLayer) (*sessionSandbox, error) {
	// The supervisor's started and prepared bytes: nothing else ever comes
	// from it on this lifeline. A layered session's supervisor that
	// mounted the overlay itself sends its root with the prepared byte.
	var b [2]byte
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, err := unix.Recvmsg(sup.sb.life.local, b[:], oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	fds := receivedFDs(oob[:max(oobn, 0)])
	if err != nil || n != 2 {
		closeFDs(fds)
		sup.destroy()
		return nil, fmt.Errorf("bwrap driver: session sandbox: read its readiness: %d bytes, %v", n, err)
	}
	if layer != nil {
		layer.mounted(fds)
	} else {
		closeFDs(fds)
	}
	ss := &sessionSandbox{key: key, sup: sup, layer: layer, notify: sup.sb.notif != nil, dead: make(chan struct{})}
	// One reader of bwrap's end: the watcher, which passes it on to
	// destroy.
	orig, again := sup.done, make(chan sandboxResult, 1)
	sup.done = again
	go func() {
		r := <-orig
		ss.ended = r
		again <- r
		close(ss.dead)
	}()
	return ss, nil
}

// hold counts one more command of ss running (s.mu held), unless it is
// being ended.
func (ss *sessionSandbox) hold() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.gone {
		return false
	}
	ss.running++
	if ss.timer != nil {
		ss.timer.Stop()
	}
	if ss.drop != nil {
		ss.drop.Stop()
	}
	return true
}

// release counts a command of ss done and arms the idle timer.
func (ss *sessionSandbox) release(d *Driver) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.running--
	if ss.running > 0 || ss.gone {
		return
	}
	if ss.timer == nil {
		ss.timer = time.AfterFunc(d.sessionIdle(), func() { d.idleSession(ss) })
	} else {
		ss.timer.Reset(d.sessionIdle())
	}
	ss.armDrop(d)
}

// defaultAheadIdle is how long an idle session keeps a command's
// sandbox-init waiting ahead. Within it, commands back to back (an
// agent's tool calls) find one ready; beyond it, the session holds only
// bwrap and its supervisor (a waiting sandbox-init is a Go process of its
// own, most of an idle session's memory), and its next command starts
// one as it comes, paying that start once.
const defaultAheadIdle = 2 * time.Second

// armDrop (ss.mu held, ss idle) arms the drop of the sandbox-init
// waiting ahead.
func (ss *sessionSandbox) armDrop(d *Driver) {
	wait := d.sessions.aheadIdle
	if wait <= 0 {
		wait = defaultAheadIdle
	}
	if ss.drop == nil {
		ss.drop = time.AfterFunc(wait, func() { d.dropAhead(ss) })
	} else {
		ss.drop.Reset(wait)
	}
}

// dropAhead ends ss's sandbox-init waiting ahead if no command ran since
// the drop was armed.
func (d *Driver) dropAhead(ss *sessionSandbox) {
	s := &d.sessions
	s.mu.Lock()
	if s.closed {
		// Close ends it with its session.
		s.mu.Unlock()
		return
	}
	// Close waits for the destroy below (its cgroup goes with it).
	s.inflight++
	s.mu.Unlock()
	defer s.leave()
	ss.mu.Lock()
	var ps *preparedSandbox
	if ss.running == 0 && !ss.gone {
		ps, ss.ahead = ss.ahead, nil
		if ps != nil {
			ss.dropped++
		}
	}
	ss.mu.Unlock()
	if ps != nil {
		ps.destroy()
	}
}

// idleSession ends ss if no command ran in it since its timer was armed.
func (d *Driver) idleSession(ss *sessionSandbox) {
	ss.mu.Lock()
	busy := ss.running > 0
	if !busy {
		// From here no command is let in (hold): none can start in a
		// sandbox that is about to end.
		ss.gone = true
	}
	ss.mu.Unlock()
	if !busy {
		d.endSession(ss, true)
		d.dropAheadIfIdle(false)
	}
}

// take is a command's sandbox-init waiting in ss, started now if none is.
func (ss *sessionSandbox) take(ctx context.Context, d *Driver, plan launchPlan) (*preparedSandbox, error) {
	ss.mu.Lock()
	ps := ss.ahead
	ss.ahead = nil
	ss.mu.Unlock()
	if ps != nil {
		select {
		case r := <-ps.done:
			// It died while it waited (its session with it, or a kill).
			// done reports once, and destroy waits for that report: it is
			// put back, or destroy would wait for ever.
			again := make(chan sandboxResult, 1)
			again <- r
			ps.done = again
			ps.destroy()
		default:
			return ps, nil
		}
	}
	return d.spawnInSession(ctx, ss, plan)
}

// refill starts the next command's sandbox-init once this command was
// answered (or after refillWait): a command's latency is then the
// hand-over.
func (ss *sessionSandbox) refill(d *Driver, plan launchPlan, after <-chan struct{}) {
	ss.mu.Lock()
	if ss.ahead != nil || ss.filling || ss.gone {
		ss.mu.Unlock()
		return
	}
	ss.filling = true
	ss.mu.Unlock()
	t := time.NewTimer(refillWait)
	select {
	case <-after:
	case <-t.C:
	}
	t.Stop()
	ps, err := d.spawnInSession(context.Background(), ss, plan)
	ss.mu.Lock()
	ss.filling = false
	if err == nil && ss.ahead == nil && !ss.gone {
		ss.ahead, ps = ps, nil
		if ss.running == 0 {
			// Ready after its session went idle: dropped in turn.
			ss.armDrop(d)
		}
	}
	ss.mu.Unlock()
	if ps != nil {
		ps.destroy()
	}
	if err != nil {
		d.log.Debug("session sandbox: starting a command's sandbox-init ahead failed", "error", err)
	}
}

// spawnInSession asks ss's supervisor for a command's sandbox-init and
// waits until it waits for its command, in the command's cgroup.
func (d *Driver) spawnInSession(ctx context.Context, ss *sessionSandbox, plan launchPlan) (_ *preparedSandbox, err error) {
	d.trace.Mark("session spawn")
	sup := ss.sup
	ps := &preparedSandbox{key: ss.key, setup: sup.setup, etcView: sup.etcView, roots: sup.roots,
		releaseNet: func() {}, releaseEtc: func() {}}
	sb := &sandbox{started: make(chan struct{}), cmd: &exec.Cmd{}}
	ps.sb = sb
	defer func() {
		if err != nil {
			ps.destroy()
		}
	}()
	if sb.life, err = newLifeline(); err != nil {
		return nil, err
	}
	// The kernel puts the sender's pid, as the driver's PID namespace
	// numbers it, on the new sandbox-init's first byte: how the driver
	// learns which process to move into the command's cgroup and watch.
	if err := unix.SetsockoptInt(sb.life.local, unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		return nil, fmt.Errorf("bwrap driver: lifeline: %w", err)
	}
	if ps.cg, err = d.newCommandCgroup(plan); err != nil {
		return nil, err
	}
	fds := []int{int(sb.life.remote.Fd())}
	if ss.notify {
		local, remote, err := notifySocket()
		if err != nil {
			return nil, err
		}
		sb.notifyRemote = remote
		if sb.notif, err = startNotifier(local, nil, newUnixGuard(plan.SocketMode, plan.BridgePorts)); err != nil {
			return nil, err
		}
		fds = append(fds, int(remote.Fd()))
	}
	if err := sup.sb.life.spawn(fds); err != nil {
		return nil, err
	}
	// The supervisor has its copies (or closes them if it cannot fork).
	sb.closeSetup()
	pid, err := awaitSpawned(ctx, sb.life, ss.dead)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, sup.setup.String())
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("bwrap driver: session sandbox: pidfd_open %d: %w", pid, err)
	}
	// The pid named the new sandbox-init when it sent its byte; it waits
	// for the go-ahead, so it cannot have ended and its number been
	// reused unless it was killed (its session sandbox gone): the pidfd's
	// process must still hold the lifeline's other end.
	if lifelineHungUp(sb.life.local) {
		unix.Close(pidfd)
		return nil, errors.New("bwrap driver: session sandbox: the command's sandbox-init ended before its go-ahead")
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		unix.Close(pidfd)
		return nil, err
	}
	sb.cmd.Process = proc
	close(sb.started)
	done := make(chan sandboxResult, 1)
	ps.done = done
	go func() {
		defer unix.Close(pidfd)
		for {
			pfd := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
			if _, err := unix.Poll(pfd, -1); errors.Is(err, unix.EINTR) {
				continue
			}
			done <- sandboxResult{}
			return
		}
	}()
	if ps.cg != nil {
		// Before the go-ahead: nothing of the command's runs outside its
		// limits.
		if err := ps.cg.Join(pid); err != nil {
			return nil, fmt.Errorf("bwrap driver: %w", err)
		}
	}
	if err := sb.life.goAhead(); err != nil {
		return nil, err
	}
	if err := awaitPrepared(ctx, sb.life, done); err != nil {
		return nil, fmt.Errorf("%w: %s", err, sup.setup.String())
	}
	return ps, nil
}

// spawn sends a spawn record with fds on a session supervisor's lifeline.
func (l *lifeline) spawn(fds []int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.local < 0 {
		return errLifelineClosed
	}
	if _, err := unix.SendmsgN(l.local, []byte{sandboxinit.SpawnTag}, unix.UnixRights(fds...), nil, unix.MSG_NOSIGNAL); err != nil {
		return fmt.Errorf("bwrap driver: session sandbox: spawn: %w", err)
	}
	return nil
}

// goAhead lets a session's new sandbox-init go on.
func (l *lifeline) goAhead() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.local < 0 {
		return errLifelineClosed
	}
	if err := unix.Sendto(l.local, []byte{sandboxinit.GoAheadTag}, unix.MSG_NOSIGNAL, nil); err != nil {
		return fmt.Errorf("bwrap driver: session sandbox: go-ahead: %w", err)
	}
	return nil
}

// lifelineHungUp says whether the other end of the lifeline local is gone.
func lifelineHungUp(local int) bool {
	pfd := []unix.PollFd{{Fd: int32(local), Events: unix.POLLRDHUP}}
	n, err := unix.Poll(pfd, 0)
	return err != nil || n > 0 && pfd[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
}

// awaitSpawned reads a session's new sandbox-init's started byte and the
// pid the kernel put on it.
func awaitSpawned(ctx context.Context, life *lifeline, dead <-chan struct{}) (int, error) {
	deadline := time.Now().Add(preparedReadyWait)
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		select {
		case <-dead:
			return 0, errors.New("bwrap driver: the session sandbox ended")
		default:
		}
		pfd := []unix.PollFd{{Fd: int32(life.local), Events: unix.POLLIN}}
		if n, err := unix.Poll(pfd, 100); n <= 0 {
			if err != nil && !errors.Is(err, unix.EINTR) {
				return 0, fmt.Errorf("bwrap driver: lifeline: %w", err)
			}
			continue
		}
		var b [1]byte
		n, oobn, _, _, err := unix.Recvmsg(life.local, b[:], oob, unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, fmt.Errorf("bwrap driver: lifeline: %w", err)
		case n == 0:
			return 0, errors.New("bwrap driver: the session sandbox did not start the command's sandbox-init")
		case b[0] != sandboxinit.StartedTag:
			return 0, fmt.Errorf("bwrap driver: session sandbox: unexpected record %q", b[0])
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			return 0, fmt.Errorf("bwrap driver: session sandbox: no credentials on the started byte (%v)", err)
		}
		cred, err := unix.ParseUnixCredentials(&msgs[0])
		if err != nil || cred.Pid <= 0 {
			return 0, fmt.Errorf("bwrap driver: session sandbox: credentials: %v", err)
		}
		return int(cred.Pid), nil
	}
	return 0, fmt.Errorf("bwrap driver: the command's sandbox-init did not start within %v", preparedReadyWait)
}

// awaitPrepared waits for a session's new sandbox-init's prepared byte
// (consumed: the hand-over's answer follows it).
func awaitPrepared(ctx context.Context, life *lifeline, done <-chan sandboxResult) error {
	deadline := time.Now().Add(preparedReadyWait)
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return err
		}
		pfd := []unix.PollFd{{Fd: int32(life.local), Events: unix.POLLIN}}
		if n, err := unix.Poll(pfd, 100); n <= 0 {
			if err != nil && !errors.Is(err, unix.EINTR) {
				return fmt.Errorf("bwrap driver: lifeline: %w", err)
			}
			select {
			case <-done:
				return errors.New("bwrap driver: the command's sandbox-init ended while it was set up")
			default:
			}
			continue
		}
		var b [1]byte
		n, _, err := unix.Recvfrom(life.local, b[:], unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("bwrap driver: lifeline: %w", err)
		case n == 0:
			return errors.New("bwrap driver: the command's sandbox-init ended while it was set up")
		case b[0] == sandboxinit.PreparedTag:
			life.mu.Lock()
			life.started = true
			life.mu.Unlock()
			return nil
		default:
			return fmt.Errorf("bwrap driver: session sandbox: unexpected record %q", b[0])
		}
	}
	return fmt.Errorf("bwrap driver: the command's sandbox-init was not set up within %v", preparedReadyWait)
}

// endSession ends ss (its commands, its supervisor, its sandbox) and
// waits until nothing of it is left; lost: the session's next command
// says "rebuilt".
func (d *Driver) endSession(ss *sessionSandbox, lost bool) {
	s := &d.sessions
	s.mu.Lock()
	if s.m[ss.key] == ss {
		delete(s.m, ss.key)
		if lost {
			if len(s.lost) >= maxLost {
				clear(s.lost)
			}
			s.lost[ss.key] = true
		}
	}
	s.mu.Unlock()
	ss.mu.Lock()
	first := !ss.ending
	ss.gone, ss.ending = true, true
	ahead := ss.ahead
	ss.ahead = nil
	if ss.timer != nil {
		ss.timer.Stop()
	}
	if ss.drop != nil {
		ss.drop.Stop()
	}
	ss.mu.Unlock()
	if ahead != nil {
		ahead.destroy()
	}
	if first {
		s.enter()
		defer s.leave()
	}
	// Idempotent: the supervisor's bwrap killed and reaped, its cgroup,
	// network and /etc view released. Commands still running in it die
	// with it (their PID namespaces are below the supervisor's).
	ss.sup.destroy()
	// Commands that still hold it let go as they end.
	ss.prot.end()
	if ss.layer != nil {
		// The overlay's last mount went with the sandbox: another may
		// mount the upper now.
		ss.layer.release()
		s.mu.Lock()
		if s.layers[ss.key.layer] == ss.key && s.m[ss.key] == nil {
			delete(s.layers, ss.key.layer)
		}
		s.mu.Unlock()
	}
}

// forgetSessions ends the session sandboxes of session (every profile).
func (d *Driver) forgetSessions(session string) {
	s := &d.sessions
	s.mu.Lock()
	var gone []*sessionSandbox
	for k, ss := range s.m {
		if k.session == session {
			gone = append(gone, ss)
		}
	}
	for k := range s.lost {
		if k.session == session {
			delete(s.lost, k)
		}
	}
	s.mu.Unlock()
	for _, ss := range gone {
		d.endSession(ss, false)
	}
	// The last session gone: nothing built ahead is kept either.
	d.dropAheadIfIdle(true)
}

// closeSessions ends every session sandbox; none is built after it.
func (d *Driver) closeSessions() {
	s := &d.sessions
	s.mu.Lock()
	s.closed = true
	var gone []*sessionSandbox
	for _, ss := range s.m {
		gone = append(gone, ss)
	}
	s.mu.Unlock()
	for _, ss := range gone {
		d.endSession(ss, false)
	}
	// Those built ahead too; one still being built ends once ready.
	d.emptyAhead()
	s.waitIdle()
}

// SessionSandboxes implements driverapi.SessionSandboxer: whether this
// driver honours RunSpec.SessionSandbox here (sessionOffWhy says why not).
func (d *Driver) SessionSandboxes() bool { return d.sessionOffWhy() == "" }

// liveSessions is how many session sandboxes live (tests, bench).
func (d *Driver) liveSessions() int {
	s := &d.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
