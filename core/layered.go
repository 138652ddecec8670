package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aleph-sandbox/aleph-sandbox/core/layer"
	"github.com/aleph-sandbox/aleph-sandbox/core/layer/gitimport"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Layered sessions (Command.Layered): the session sees its workspace
// through an overlay whose upper layer is the session's own, kept under
// the workspace root's LayersDirName; the host's directory changes only
// on Apply. core keeps the layer (package layer), the driver mounts it
// (driverapi.LayeredWorkspace, once per session sandbox).
//
// The first command of a session that starts fixes its mode: a later
// command asking for the other is refused (LayeredModeError), since a
// live command would write the host under a layer that then misreads it,
// and a layered one would hide what live ones wrote. A command refused
// before it started does not (fixMode, settleMode). The mode outlives the
// process as the layer directory does: a session whose layer exists on
// disk is layered.

// LayersDirName is the directory under the workspace root that holds the
// sessions' layers (one per session, named like its workspace).
const LayersDirName = ".layers"

// ErrLayeredMode: a command asks for the other mode than the one its
// session's first command fixed.
var ErrLayeredMode = errors.New("the session's mode (layered or live) is fixed by its first command")

// LayeredModeError says which mode the session has; it matches
// ErrLayeredMode.
type LayeredModeError struct {
	Session string
	// Layered is the session's mode.
	Layered bool
	Reason  string
}

func (e *LayeredModeError) Error() string {
	mode, other := "live", "layered"
	if e.Layered {
		mode, other = "layered", "live"
	}
	s := fmt.Sprintf("session %q is %s (its first command fixed that); a %s command is refused", e.Session, mode, other)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s + " (use another session, or forget this one first)"
}

func (e *LayeredModeError) Is(target error) bool { return target == ErrLayeredMode }

// ErrLayeredUnavailable: layered sessions cannot run here.
var ErrLayeredUnavailable = errors.New("layered sessions are unavailable")

// LayeredUnavailableError says why; it matches ErrLayeredUnavailable.
type LayeredUnavailableError struct {
	Reason string
	// Err, when set, is the error behind it (the driver's refusal, typed),
	// for callers that branch on it.
	Err error
}

func (e *LayeredUnavailableError) Error() string {
	return "layered sessions are unavailable here: " + e.Reason
}

func (e *LayeredUnavailableError) Is(target error) bool { return target == ErrLayeredUnavailable }

func (e *LayeredUnavailableError) Unwrap() error { return e.Err }

// ErrNoLayer: the session has no layer (it ran no layered command, or its
// layer was discarded).
var ErrNoLayer = errors.New("the session has no layer")

// NoLayerError names the session; it matches ErrNoLayer.
type NoLayerError struct{ Session string }

func (e *NoLayerError) Error() string {
	return fmt.Sprintf("session %q has no layer: run a layered command in it first (exec --layered)", e.Session)
}

func (e *NoLayerError) Is(target error) bool { return target == ErrNoLayer }

// layerDir is where sid's layer lives.
func (s *WorkspaceSandbox) layerDir(sid string) string { return sessionLayerDir(s.cfg, sid) }

// sessionLayerDir is where a layered session's layer lives under cfg's workspace
// root.
func sessionLayerDir(cfg Config, sid string) string {
	return filepath.Join(cfg.Sandbox.WorkspaceRoot, LayersDirName, SessionDirName(sid))
}

// OpenSessionLayer opens the layer of session sid as cfg places it, with
// the git importer Apply uses: what a process without the session's
// pipeline (the CLI's session subcommands) reads, applies or discards. A
// session without a layer gives a *NoLayerError.
func OpenSessionLayer(cfg Config, sid string) (*layer.Layer, error) {
	if err := validateSessionID(sid); err != nil {
		return nil, err
	}
	dir := sessionLayerDir(cfg, sid)
	if _, err := os.Lstat(filepath.Join(dir, layer.StateFile)); errors.Is(err, os.ErrNotExist) {
		return nil, &NoLayerError{Session: sid}
	}
	return layer.Open(dir, gitimport.New(""))
}

// gitImporter is the layers' git importer: the host's git on PATH.
func (s *WorkspaceSandbox) gitImporter() layer.GitImporter { return gitimport.New("") }

// fixMode sets sess's mode with its first command, or refuses a command
// of the other mode. ws is the command's workspace: a layered session's
// layer lies over one workspace only. The command calls settle when it
// has ended, saying whether it started: the mode is fixed by the first
// command that starts, so one refused before it ran anything (by a hook,
// the approval gate, the configuration, or the driver before the program
// started: refusedBeforeStart) leaves the session as it found it, and
// the other mode can still be asked for.
func (s *WorkspaceSandbox) fixMode(sess *session, layered bool, ws string) (settle func(ctx context.Context, started bool), err error) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	// A layer on disk, looked for at every command: one left by another
	// process (the one-shot CLI, a restarted service) makes a new session
	// layered for good, and one made by another process sharing the
	// workspace root after this one set the session live refuses its
	// live commands, which would write the host under it.
	_, serr := os.Lstat(filepath.Join(s.layerDir(sess.id), layer.StateFile))
	onDisk := serr == nil
	if !sess.modeSet {
		sess.modeSet, sess.layered, sess.modeFixed = true, layered || onDisk, onDisk
	}
	if sess.layered != layered {
		return nil, &LayeredModeError{Session: sess.id, Layered: sess.layered}
	}
	if !layered && onDisk {
		return nil, &LayeredModeError{Session: sess.id, Layered: true,
			Reason: "another process made its layer after its live commands here"}
	}
	if layered {
		if l, err := layer.Open(s.layerDir(sess.id), nil); err == nil && l.Workspace() != ws {
			return nil, &LayeredModeError{Session: sess.id, Layered: true,
				Reason: fmt.Sprintf("its layer lies over the workspace %s, not %s", l.Workspace(), ws)}
		}
	}
	if sess.modeFixed {
		return func(context.Context, bool) {}, nil
	}
	sess.modeHeld++
	return func(ctx context.Context, started bool) { s.settleMode(ctx, sess, started) }, nil
}

// settleMode ends one command's hold on sess's mode (fixMode). The first
// that started fixes it; when the last one ends with none started, the
// mode is unset, and a layer made for it is dropped if nothing was
// written to it (a layer that holds something, or that a view holds
// open, is kept, and with it the mode).
func (s *WorkspaceSandbox) settleMode(ctx context.Context, sess *session, started bool) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.modeHeld--
	if started {
		sess.modeFixed = true
	}
	if sess.modeFixed || sess.modeHeld > 0 {
		return
	}
	if sess.layered {
		// Not waited for while mu is held: the lock is held by a view of
		// the files API (whose caller may ask for the session's mode
		// meanwhile), Apply or Discard, each a use of the layer that
		// keeps it. Commands hold it only while they run, between
		// fixMode and settleMode.
		if !sess.layerMu.TryLock() {
			sess.modeFixed = true
			return
		}
		defer sess.layerMu.Unlock()
		if !s.dropUnusedLayer(context.WithoutCancel(ctx), sess) {
			sess.modeFixed = true
			return
		}
	}
	sess.modeSet, sess.layered = false, false
}

// dropUnusedLayer removes sess's layer, made for a command that did not
// start, if it is on disk and empty; reports whether no layer is left.
// The driver's sandbox of the session goes first: a refusal after the
// session sandbox was built (a program not found) leaves it with the
// overlay mounted. Callers hold sess.mu and sess.layerMu.
func (s *WorkspaceSandbox) dropUnusedLayer(ctx context.Context, sess *session) bool {
	dir := s.layerDir(sess.id)
	if _, err := os.Lstat(filepath.Join(dir, layer.StateFile)); errors.Is(err, os.ErrNotExist) {
		sess.layer = nil
		return true
	}
	l, err := layer.Open(dir, nil)
	if err != nil {
		return false
	}
	if unused, err := l.Unused(); err != nil || !unused {
		return false
	}
	if err := s.discardLocked(ctx, sess, l); err != nil {
		s.logger.Warn("the session's unused layer is kept", "session", sess.id, "error", err)
		return false
	}
	return true
}

// refusedBeforeStart reports whether err, a command's, is the driver's
// refusal before the program started: a feature it cannot enforce, a
// spec it cannot run (the program not found included), a limit reached,
// a profile it will not take.
func refusedBeforeStart(err error) bool {
	return errors.As(err, new(*driverapi.UnavailableError)) || errors.As(err, new(*driverapi.InvalidSpecError)) ||
		errors.As(err, new(*driverapi.LimitError)) || errors.As(err, new(*driverapi.ProfileError))
}

// layeredReady refuses a layered command the driver or configuration
// cannot run, with the reason.
func (s *WorkspaceSandbox) layeredReady(hc driverapi.HostCapabilities) error {
	if s.cfg.Sandbox.SessionSandboxes != SessionSandboxesAuto {
		return &LayeredUnavailableError{Reason: "sandbox.session_sandboxes is \"off\", and a layered session's overlay lives in its session sandbox"}
	}
	if !hc.Supports(driverapi.CallLayeredWorkspace) {
		why := hc.Details[driverapi.DetailLayeredWorkspace]
		if why == "" {
			why = fmt.Sprintf("the %s driver does not implement layered workspaces (protocol 1.4's %q call)", hc.Backend, driverapi.CallLayeredWorkspace)
		}
		return &LayeredUnavailableError{Reason: why}
	}
	return nil
}

// layerFor is sess's layer over ws, created on its first layered command
// (or opened where an earlier process made it). userNS: the driver mounts
// overlays in a user namespace (driverapi.DetailLayeredUserNS), so a new
// layer's markers are user.overlay.*; a layer made otherwise is refused
// by the driver, typed, rather than misread.
func (s *WorkspaceSandbox) layerFor(ctx context.Context, sess *session, ws string, userNS bool) (*layer.Layer, error) {
	sess.layerMu.Lock()
	defer sess.layerMu.Unlock()
	if sess.layer != nil && isDir(sess.layer.Dir()) {
		return sess.layer, nil
	}
	dir := s.layerDir(sess.id)
	l, err := layer.Open(dir, s.gitImporter())
	if err != nil {
		if _, serr := os.Lstat(filepath.Join(dir, layer.StateFile)); !errors.Is(serr, os.ErrNotExist) {
			return nil, err
		}
		parent := filepath.Dir(dir)
		if err := os.MkdirAll(parent, 0o700); err != nil {
			return nil, &WorkspaceError{Path: parent, Err: err}
		}
		if st, err := os.Lstat(parent); err != nil || !st.IsDir() {
			return nil, &WorkspaceError{Path: parent, Err: errors.New("not a directory (symlinks are refused)")}
		}
		l, err = layer.Create(ctx, dir, ws, s.gitImporter(), layer.Policy{Protected: s.cfg.ProtectedEntries(), Session: sess.id, UserNS: userNS})
		if err != nil {
			return nil, err
		}
	}
	sess.layer = l
	return l, nil
}

// layeredSpec is what the driver mounts for l.
func layeredSpec(l *layer.Layer) *driverapi.LayeredWorkspace {
	m := l.MountSpec()
	return &driverapi.LayeredWorkspace{Upper: m.Upper, Work: m.Work, Lock: filepath.Join(l.Dir(), layer.LockFile), UserNS: m.UserNS}
}

// openLayer is sid's layer, from this process's session or from disk.
func (s *WorkspaceSandbox) openLayer(sid string) (*session, *layer.Layer, error) {
	if err := validateSessionID(sid); err != nil {
		return nil, nil, err
	}
	sess, err := s.session(sid)
	if err != nil {
		return nil, nil, err
	}
	sess.layerMu.RLock()
	l := sess.layer
	sess.layerMu.RUnlock()
	if l != nil && isDir(l.Dir()) {
		return sess, l, nil
	}
	dir := s.layerDir(sid)
	if _, err := os.Lstat(filepath.Join(dir, layer.StateFile)); errors.Is(err, os.ErrNotExist) {
		return nil, nil, &NoLayerError{Session: sid}
	}
	l, err = layer.Open(dir, s.gitImporter())
	if err != nil {
		return nil, nil, err
	}
	return sess, l, nil
}

// Changes lists what the layered session sid changed (layer.Changes): it
// reads the upper layer, not the workspace.
func (s *WorkspaceSandbox) Changes(ctx context.Context, sid string) ([]layer.Change, error) {
	sess, l, err := s.openLayer(sid)
	if err != nil {
		return nil, err
	}
	sess.layerMu.RLock()
	defer sess.layerMu.RUnlock()
	return l.Changes(ctx)
}

// Diff is a unified diff of the layered session's text changes, all or
// those at or below paths (layer.Diff).
func (s *WorkspaceSandbox) Diff(ctx context.Context, sid string, paths ...string) (string, error) {
	sess, l, err := s.openLayer(sid)
	if err != nil {
		return "", err
	}
	sess.layerMu.RLock()
	defer sess.layerMu.RUnlock()
	return l.Diff(ctx, paths...)
}

// Apply brings the layered session's changes (all, or those at or below
// paths) to the host, refusing what must never reach it (layer.Apply). It
// waits for the session's running commands in this process: a command
// writing while its changes are applied would be half applied.
func (s *WorkspaceSandbox) Apply(ctx context.Context, sid string, paths []string, opt layer.ApplyOptions) (layer.ApplyResult, error) {
	sess, l, err := s.openLayer(sid)
	if err != nil {
		return layer.ApplyResult{}, err
	}
	sess.layerMu.Lock()
	defer sess.layerMu.Unlock()
	// What the last command wrote is recorded first (a command of another
	// process may not have).
	if err := l.Observe(ctx); err != nil {
		return layer.ApplyResult{}, err
	}
	return l.Apply(ctx, paths, opt)
}

// Discard drops the layered session's layer: its session sandbox ends
// first (the overlay is unmounted with it), then the layer is removed.
// The host never saw any of it. The session stays layered: its next
// command starts a new layer over the workspace as it is then.
func (s *WorkspaceSandbox) Discard(ctx context.Context, sid string) error {
	sess, l, err := s.openLayer(sid)
	if err != nil {
		return err
	}
	sess.layerMu.Lock()
	defer sess.layerMu.Unlock()
	return s.discardLocked(ctx, sess, l)
}

// discardLocked ends the driver's sandbox of sess, which has l mounted,
// then drops l. The caller holds sess.layerMu exclusively.
func (s *WorkspaceSandbox) discardLocked(ctx context.Context, sess *session, l *layer.Layer) error {
	if f, ok := s.driver.(driverapi.SessionForgetter); ok {
		fctx, cancel := context.WithTimeout(ctx, forgetDriverTimeout)
		err := f.ForgetSession(fctx, sess.id)
		cancel()
		if err != nil {
			return fmt.Errorf("discard: the driver could not end the session's sandbox: %w", err)
		}
	}
	if err := l.Discard(ctx); err != nil {
		return err
	}
	sess.layer = nil
	return nil
}

// discardLayer removes sid's layer when the session is forgotten (its
// sandbox has ended).
func (s *WorkspaceSandbox) discardLayer(sid string) {
	dir := s.layerDir(sid)
	if _, err := os.Lstat(filepath.Join(dir, layer.StateFile)); err != nil {
		return
	}
	l, err := layer.Open(dir, nil)
	if err != nil {
		s.logger.Error("the forgotten session's layer cannot be read; it is left", "session", sid, "error", err)
		return
	}
	if err := l.Discard(context.Background()); err != nil {
		s.logger.Error("the forgotten session's layer could not be discarded", "session", sid, "error", err)
	}
}

// SessionLayered reports whether session sid is layered: its first
// command fixed it so, or a layer of it is on disk (left by another
// process). Front ends that reach the workspace directly (the files API)
// ask first: what they read or write is the host's directory, not the
// session's view.
func (s *WorkspaceSandbox) SessionLayered(sid string) (bool, error) {
	sess, err := s.session(sid)
	if err != nil {
		return false, err
	}
	sess.mu.Lock()
	layered := sess.modeSet && sess.layered
	sess.mu.Unlock()
	if layered {
		return true, nil
	}
	_, err = os.Lstat(filepath.Join(s.layerDir(sid), layer.StateFile))
	return err == nil, nil
}

// SessionView is a layered session's view opened for the files API: Dir
// is the root of the overlay the session's commands see. Close it when
// done.
type SessionView struct {
	Dir  *os.File
	done func(ctx context.Context, changed bool) error
}

// Close releases the view; changed says the caller wrote or removed
// something, whose base is then recorded (Observe) as after a command, so
// Apply judges conflicts on it and Changes lists it.
func (v *SessionView) Close(ctx context.Context, changed bool) error {
	if v == nil || v.done == nil {
		return nil
	}
	done := v.done
	v.done = nil
	return done(ctx, changed)
}

// OpenSessionView opens the view of layered session sid for the host's
// file operations. Writing an overlay's upper directory while the overlay
// is mounted is undefined in overlayfs, so the files API never writes the
// upper directory itself; it goes through an overlay, and only through one
// that no other overlay of the upper exists beside:
//
//   - while a session sandbox of the session has the layer mounted, the
//     driver's own descriptor of that overlay (driverapi.LayeredView):
//     the very mount the session's commands see, shared with them as two
//     processes share any file system. The session's lock is held shared,
//     so commands keep running meanwhile; Apply and Discard wait;
//   - otherwise this process mounts the overlay itself (layer.MountView),
//     holding the layer's locks as a driver does and the session's lock
//     exclusively, so no command of the session can mount it meanwhile
//     (a command of another process is refused by the upper's flock). A
//     read streamed from such a view holds it until it is closed;
//   - otherwise, for a layer made for a user namespace (an unprivileged
//     driver: userxattr, which this process cannot mount, nor enter a
//     user namespace to), an overlay the driver mounts for this process
//     (driverapi.LayeredViewOpener) under the same locks, held as the
//     previous case holds them (openedDriverView).
//
// A view of the sandbox's overlay outlives the sandbox if it ends on its
// own meanwhile (its idle limit, its death): the descriptor keeps the
// overlay alive, and a command of the session would then mount the upper
// again beside it. So the layer's views lock (layer.HoldViews) is held
// shared from before the driver is asked until the view is closed, and
// every mount of the layer (the driver's, MountView) takes it exclusively:
// such a command is refused, typed, rather than mount a second overlay of
// the upper; the host's directory is never written either way.
func (s *WorkspaceSandbox) OpenSessionView(ctx context.Context, sid string) (*SessionView, error) {
	sess, l, err := s.openLayer(sid)
	if err != nil {
		return nil, err
	}
	observe := func(ctx context.Context, changed bool) error {
		if !changed {
			return nil
		}
		return l.Observe(context.WithoutCancel(ctx))
	}
	// driverOnly is the driver's view under the views lock, or nil (the
	// lock released) when no sandbox has the layer mounted.
	driverOnly := func(unlock func()) (*SessionView, error) {
		release, err := l.HoldViews(ctx)
		if err != nil {
			return nil, err
		}
		dir, err := s.driverView(ctx, sid)
		if err != nil || dir == nil {
			release()
			return nil, err
		}
		return &SessionView{Dir: dir, done: func(ctx context.Context, changed bool) error {
			defer unlock()
			// The descriptor first: once the lock is released the layer
			// may be mounted again, and this overlay must be gone by then.
			dir.Close()
			release()
			return observe(ctx, changed)
		}}, nil
	}
	sess.layerMu.RLock()
	v, err := driverOnly(sess.layerMu.RUnlock)
	if err != nil || v != nil {
		if err != nil {
			sess.layerMu.RUnlock()
		}
		return v, err
	}
	sess.layerMu.RUnlock()
	sess.layerMu.Lock()
	// A command may have built the session's sandbox in between.
	v, err = driverOnly(sess.layerMu.Unlock)
	if err != nil || v != nil {
		if err != nil {
			sess.layerMu.Unlock()
		}
		return v, err
	}
	if l.MountSpec().UserNS {
		// The overlay of a layer made for a user namespace can only be
		// mounted from one (userxattr), which this process is not in and
		// cannot enter: the driver mounts it for the host.
		v, err := s.openedDriverView(ctx, sid, l, observe, sess.layerMu.Unlock)
		if err != nil {
			sess.layerMu.Unlock()
			return nil, err
		}
		return v, nil
	}
	mv, err := l.MountView(ctx)
	if err != nil {
		sess.layerMu.Unlock()
		if errors.Is(err, layer.ErrLayerBusy) {
			return nil, &LayeredUnavailableError{Reason: fmt.Sprintf("session %q: %v; the files API reaches its view when the sandbox is this process's (run the session through serve) or none is running", sid, err)}
		}
		return nil, err
	}
	return &SessionView{Dir: mv.Dir, done: func(ctx context.Context, changed bool) error {
		defer sess.layerMu.Unlock()
		err := observe(ctx, changed)
		mv.Close()
		return err
	}}, nil
}

// openedDriverView is the view of a layer no session sandbox has mounted,
// which the driver mounts for this process (driverapi.LayeredViewOpener):
// the layer was made for a user namespace, where only the driver's helper
// can mount it. The caller holds the session's lock exclusively (no
// command of this process mounts meanwhile; the driver's locks refuse one
// of another process) and unlock releases it when the view is closed.
//
// The view lives while the call's context does: done closes this
// process's descriptor, then ends that context and waits for the driver
// to say it let go of its own (LayeredView.Ended), and only then releases
// the views lock and the session's lock, so the session's next command
// finds the upper free. The views lock is taken shared once the driver
// has mounted (it takes it exclusively for the mount): should the driver
// end the view early (it died), this process's descriptor still keeps the
// overlay alive, and no mount of the upper may happen until it is closed.
// The upper directory is never read or written as if it were the view,
// nor the host's directory served in its place: every failure is a
// LayeredUnavailableError.
func (s *WorkspaceSandbox) openedDriverView(ctx context.Context, sid string, l *layer.Layer, observe func(context.Context, bool) error, unlock func()) (*SessionView, error) {
	o, ok := s.driver.(driverapi.LayeredViewOpener)
	if !ok {
		return nil, userNSViewRefusal(sid, nil)
	}
	vctx, end := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, end)
	lv, err := o.OpenLayeredView(vctx, driverapi.LayeredViewRequest{SessionID: sid, Workspace: l.Workspace(), Layered: *layeredSpec(l)})
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		end()
		waitEnded(lv)
		var u *driverapi.UnsupportedCallError
		if errors.As(err, &u) {
			return nil, userNSViewRefusal(sid, err)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &LayeredUnavailableError{Reason: fmt.Sprintf("session %q: the driver could not open a view of its layer: %v", sid, err), Err: err}
	}
	closeDriver := func() {
		end()
		waitEnded(lv)
	}
	if !lv.Mounted {
		closeDriver()
		return nil, &LayeredUnavailableError{Reason: fmt.Sprintf("session %q: the driver answered no view of its layer", sid)}
	}
	release, err := l.HoldViews(ctx)
	if err != nil {
		closeDriver()
		return nil, &LayeredUnavailableError{Reason: fmt.Sprintf("session %q: the layer's views lock: %v", sid, err), Err: err}
	}
	dir, err := openDriverView(lv)
	if err != nil {
		closeDriver()
		release()
		return nil, err
	}
	return &SessionView{Dir: dir, done: func(ctx context.Context, changed bool) error {
		defer unlock()
		dir.Close()
		closeDriver()
		release()
		return observe(ctx, changed)
	}}, nil
}

// waitEnded waits until the driver has released a view it opened.
func waitEnded(lv driverapi.LayeredView) {
	if lv.Ended != nil {
		<-lv.Ended
	}
}

// userNSViewRefusal is today's refusal where the driver cannot mount a
// view of a layer made for a user namespace.
func userNSViewRefusal(sid string, err error) error {
	return &LayeredUnavailableError{Reason: fmt.Sprintf("session %q: its layer is mounted in the session sandbox's user namespace (an unprivileged driver), which the host's files API cannot reach, and the driver cannot mount a view of it for the host (protocol 1.7's %q call); read and write it with commands of the session, and see it with changes and diff", sid, driverapi.CallLayeredViewOpen), Err: err}
}

// driverView is the session sandbox's overlay as the driver keeps it, or
// nil when no sandbox of sid has it mounted (or the driver cannot say).
func (s *WorkspaceSandbox) driverView(ctx context.Context, sid string) (*os.File, error) {
	v, ok := s.driver.(driverapi.LayeredViewer)
	if !ok {
		return nil, nil
	}
	lv, err := v.LayeredView(ctx, sid)
	if err != nil {
		var u *driverapi.UnsupportedCallError
		if errors.As(err, &u) {
			return nil, nil
		}
		return nil, s.driverErr("LayeredView", err)
	}
	if !lv.Mounted {
		return nil, nil
	}
	return openDriverView(lv)
}

// LayerLimitKey names sandbox.layer_max_bytes in a *LimitError.
const LayerLimitKey = "sandbox.layer_max_bytes"

// checkLayerSpace refuses more writes to sid's layer once it holds
// sandbox.layer_max_bytes or more. The limit is measured, not enforced by
// the kernel: the upper directory lies in the data directory, on the
// host's file system, where overlayfs has no quota of its own (a
// size-limited tmpfs would bound it but hold it in memory and lose it
// with the sandbox; a file system per session would cost a loop device
// each). So one command may go past the limit by what it writes; the
// next command of the session and the files API's writes are refused
// until the layer is applied, discarded or made smaller (removing files
// is allowed). Other sessions and the host are not affected: each layer
// is measured on its own.
func (s *WorkspaceSandbox) checkLayerSpace(ctx context.Context, sid string, l *layer.Layer) error {
	limit := s.cfg.Sandbox.LayerMaxBytes
	if limit <= 0 {
		return nil
	}
	n, err := l.UpperBytes(ctx)
	if err != nil {
		return err
	}
	if n >= limit {
		return &LimitError{Limit: LayerLimitKey, Value: limit,
			Reason: fmt.Sprintf("session %q's layer holds %d bytes, at or over its limit: apply or discard its changes, or remove files in it, before writing more", sid, n)}
	}
	return nil
}

// CheckLayerSpace is checkLayerSpace for a write of the files API to
// layered session sid.
func (s *WorkspaceSandbox) CheckLayerSpace(ctx context.Context, sid string) error {
	_, l, err := s.openLayer(sid)
	if err != nil {
		return err
	}
	return s.checkLayerSpace(ctx, sid, l)
}
