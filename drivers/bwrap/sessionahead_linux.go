//go:build linux

package bwrap

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/sessionpool"
)

// Session sandboxes built ahead: the design.
//
// A new session's first command would build its session sandbox on its
// path: bwrap (namespaces, ~30 mounts), the supervisor's Go start, then a
// command's sandbox-init. For the profiles recently used, the driver keeps
// session_ahead of them built ahead of any session, and a new session
// takes one whole on its first command.
//
// What in a session sandbox depends on the session, and how each is made
// the session's when it is taken:
//   - the workspace and the session's HOME (both below the workspace root,
//     named after the session id): bwrap cannot bind what it does not
//     know, so the sandbox is built with a small tmpfs of its own at the
//     workspace's parent (launchPlan.attachRoot) and nothing in it. When a
//     session takes it, the driver opens the workspace and HOME on the host
//     (no symlink followed, each descriptor checked to be the path, as
//     bwrap's own binds are pinned), makes detached copies of them
//     (open_tree), nosuid and nodev as bwrap's binds are, enters the
//     sandbox's mount namespace on a thread of its own (setns by pidfd;
//     the thread never runs anything else and ends with its goroutine),
//     makes their mount points in that tmpfs, attaches them (move_mount)
//     and makes the tmpfs read-only. This is done in the supervisor's
//     namespace (the next commands' sandbox-inits copy it) and in that of
//     the command's sandbox-init already waiting (it copied the
//     supervisor's before the attach, and its mounts are private);
//   - Landlock: the rules of a command name the workspace's parent in
//     place of the workspace (launchPlan.InitSpec). Landlock checks a file
//     against the rules of the directories above it, skipping a covered
//     mount point, so the rule on the parent covers the workspace and HOME
//     attached below it; nothing else is below it (the tmpfs is empty but
//     for their mount points, and read-only), and a profile whose
//     workspace's parent holds or lies in another mount of the plan (a
//     grant, the system's) is never built ahead. A command's sandbox-init
//     plans its rules after the attach (the one waiting was spawned by the
//     supervisor before, but a rule names an inode: the tmpfs's root,
//     there since bwrap made it);
//   - /tmp, /dev/shm, the PID and IPC namespaces, the cgroups: bwrap's and
//     the driver's own, fresh: the sandbox never served anyone;
//   - the network namespace under network none, which a session's
//     commands share: one of its own, made for it, becomes the session's
//     (sessionpool.Adopt) when the session has none yet; a session that
//     has one (it ran a command of another capability set first) does not
//     take a sandbox built ahead (it is put back, untouched);
//   - the /etc view and the grants: the profile's, checked at the take as
//     at any hand-over (the /etc view in use, each grant root the inode
//     bound);
//   - the protected entries: found at each command's hand-over, as for
//     every session command.
//
// Security:
//   - a sandbox built ahead serves one session or none: it is removed from
//     the pool before anything of the session is attached, and a take
//     that fails after that ends it; it never returns to the pool once a
//     session's workspace was attached;
//   - it is keyed by the profile's bytes without the workspace, the
//     working directory and HOME (and the parent they are attached
//     under): a sandbox of one capability set never serves another;
//   - bounded: session_ahead per profile, for at most maxAheadProfiles
//     profiles; each ends after session_ahead_idle_ms (its PSS: bwrap, the
//     supervisor and a command's sandbox-init, ~12 MiB alone);
//     they are kept only while the driver holds a session sandbox (the
//     last one forgotten or idle ends them: dropAheadIfIdle);
//     session_ahead = 0 builds none; Close ends them all;
//   - the driver killed: each one's lifeline hangs up, its supervisor ends
//     and takes everything in its PID namespace with it, as for a session
//     sandbox; its cgroups are the janitor's on the next start, as a
//     session sandbox's are.
//
// Not built ahead: where session sandboxes are off (the Landlock tier,
// unprivileged drivers: their sandboxes cannot mount in their own mount
// namespace, and here neither can a driver that is not root), layered
// sessions (an overlay per session, mounted before bwrap), terminals and
// allow_hosts (not preparable at all), and profiles whose workspace's
// parent is "/" or overlaps another mount of the plan.

// maxAheadProfiles bounds the profiles for which session sandboxes are
// built ahead at once.
const maxAheadProfiles = 4

// aheadKey is what a session sandbox built ahead may serve: the profile
// without its session's paths, the directory they are attached under, and
// whether the session has a HOME of its own there.
type aheadKey struct {
	profile [32]byte
	root    string
	home    bool
}

// aheadEntry is one session sandbox built ahead, with the command's
// sandbox-init waiting in it (ss.ahead).
type aheadEntry struct {
	key aheadKey
	ss  *sessionSandbox
	// supFD is a pidfd of the supervisor, whose mount namespace the
	// workspace is attached in.
	supFD int
	timer *time.Timer
}

// aheadPool holds the session sandboxes built ahead (sessionSet.mu).
type aheadPool struct {
	idle     map[aheadKey][]*aheadEntry
	building map[aheadKey]int
	total    int // waiting + being built
	// refused counts the takes of a key that failed in a row: from
	// maxRefused on the key is not built ahead any more.
	refused map[aheadKey]int
	// ready is closed when a build of the key ends; kick, when a new
	// session waits for one (its build then starts at once).
	ready, kick map[aheadKey]chan struct{}
	stats       aheadStats
}

// aheadStats counts what the session sandboxes built ahead did (tests,
// bench).
type aheadStats struct {
	Built, Taken, Missed, Expired, Failed, Refused int
}

// aheadPerProfile is session_ahead (0: none built ahead).
func (d *Driver) aheadPerProfile() int {
	if d.probe().sessionUser {
		// Unprivileged: the take attaches the workspace from the driver's
		// side (open_tree of the host's directories, then setns into the
		// sandbox's mount namespace), which needs CAP_SYS_ADMIN over the
		// driver's own mount namespace: EPERM. A copy made inside would not
		// do either: open_tree clones only mounts of the caller's own
		// namespace (EINVAL for a descriptor from the host's).
		return 0
	}
	if n := d.cfg.Options.SessionAhead; n != nil {
		return int(*n)
	}
	return defaultSessionAhead
}

// aheadKeyFor is the key plan's session sandbox could be built ahead
// under, or false when it cannot be.
func aheadKeyFor(plan launchPlan, key poolKey) (aheadKey, bool) {
	if key.layer != "" || plan.layered != nil || plan.ProxySocket != "" {
		return aheadKey{}, false
	}
	root := filepath.Dir(plan.Workspace)
	if root == "/" || root == "." || plan.Workspace == "" {
		return aheadKey{}, false
	}
	if plan.Home != "" {
		// HOME is attached below the same root, beside the workspace.
		if !driverapi.PathWithin(plan.Home, root) || plan.Home == root ||
			driverapi.PathWithin(plan.Home, plan.Workspace) || driverapi.PathWithin(plan.Workspace, plan.Home) {
			return aheadKey{}, false
		}
	}
	// The root's tmpfs must neither hide another mount of the plan nor
	// stand in one: the Landlock rule on it covers exactly what is
	// attached below it. /tmp (the sandbox's own tmpfs, writable anyway)
	// may hold it.
	others := append([]string{"/etc", "/proc", "/dev", initDir}, plan.FSRead...)
	others = append(others, plan.FSWrite...)
	for _, m := range plan.System {
		others = append(others, m.Dest)
	}
	for _, o := range others {
		if driverapi.PathWithin(o, root) || driverapi.PathWithin(root, o) {
			return aheadKey{}, false
		}
	}
	q := plan
	q.Workspace, q.Cwd, q.Home = "", "", ""
	b, err := json.Marshal(q)
	if err != nil {
		return aheadKey{}, false
	}
	return aheadKey{profile: sha256.Sum256(b), root: root, home: plan.Home != ""}, true
}

// takeAhead is a session sandbox built ahead for key's profile, made key's
// (its workspace and HOME attached, its network namespace the session's),
// or nil when none can be.
func (d *Driver) takeAhead(ctx context.Context, key poolKey, plan launchPlan) *sessionSandbox {
	ak, ok := aheadKeyFor(plan, key)
	if !ok || d.aheadPerProfile() == 0 {
		return nil
	}
	s := &d.sessions
	for {
		s.mu.Lock()
		l := s.ahead.idle[ak]
		if len(l) == 0 && s.ahead.building[ak] > 0 && !s.closed {
			// One is being built: it started before this command came,
			// so it is ready sooner than one built now, and a second
			// build beside it would halve the CPU each gets.
			ready := s.ahead.ready[ak]
			if k := s.ahead.kick[ak]; k != nil {
				close(k)
				delete(s.ahead.kick, ak)
			}
			s.mu.Unlock()
			d.trace.Mark("ahead: waits for the one being built")
			select {
			case <-ready:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		if len(l) == 0 {
			s.ahead.stats.Missed++
			s.mu.Unlock()
			d.trace.Mark("ahead: missed")
			return nil
		}
		e := l[0]
		if s.ahead.idle[ak] = l[1:]; len(s.ahead.idle[ak]) == 0 {
			delete(s.ahead.idle, ak)
		}
		s.ahead.total--
		e.timer.Stop()
		s.mu.Unlock()
		select {
		case <-e.ss.dead:
			d.endAhead(e)
			continue
		default:
		}
		d.trace.Mark("ahead: taken")
		err := d.bindAhead(e, key, plan)
		d.trace.Mark("ahead: bound")
		var busy *aheadNetBusy
		switch {
		case errors.As(err, &busy):
			// Untouched: another new session may take it.
			d.putAhead(e)
			return nil
		case err != nil:
			d.log.Debug("session sandbox built ahead: take failed", "error", err)
			d.endAhead(e)
			s.mu.Lock()
			s.ahead.stats.Failed++
			s.ahead.refused[ak]++
			s.mu.Unlock()
			return nil
		}
		s.mu.Lock()
		s.ahead.stats.Taken++
		delete(s.ahead.refused, ak)
		s.mu.Unlock()
		return e.ss
	}
}

// aheadNetBusy: the session has a network namespace already; the sandbox
// built ahead, with one of its own, is not for it.
type aheadNetBusy struct{}

func (*aheadNetBusy) Error() string { return "the session has a network namespace already" }

// putAhead puts e back, untouched by the session that did not take it.
func (d *Driver) putAhead(e *aheadEntry) {
	s := &d.sessions
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		d.endAhead(e)
		return
	}
	s.ahead.idle[e.key] = append(s.ahead.idle[e.key], e)
	s.ahead.total++
	e.timer.Reset(d.aheadIdle())
	s.mu.Unlock()
}

// bindAhead makes e's sandbox key's: the checks a hand-over makes, the
// network namespace, then the workspace and HOME attached.
func (d *Driver) bindAhead(e *aheadEntry, key poolKey, plan launchPlan) error {
	ss, sup := e.ss, e.ss.sup
	ss.mu.Lock()
	child := ss.ahead
	ss.mu.Unlock()
	if child == nil {
		return errors.New("no command's sandbox-init waits in it")
	}
	if v := d.etcViewFor(plan); v != sup.etcView {
		return errors.New("the /etc view changed")
	}
	q := plan
	q.attachRoot = e.key.root
	grants, err := rootIDs(q)
	if err != nil {
		return err
	}
	if len(grants) != len(sup.roots) {
		return errors.New("the grants changed")
	}
	for i := range grants {
		if grants[i] != sup.roots[i] {
			return errors.New(grants[i].path + " is no longer the directory the sandbox binds")
		}
	}
	// The session's network namespace first: a session that has one does
	// not take this sandbox, which is then still untouched.
	if sup.net != nil {
		release, ok, err := d.nets.Adopt(key.session, sup.net)
		if errors.As(err, new(*sessionpool.FullError)) {
			// Not this sandbox's fault: the session's own build says so.
			return &aheadNetBusy{}
		}
		if err != nil {
			return fmt.Errorf("network namespace: %w", err)
		}
		if !ok {
			return &aheadNetBusy{}
		}
		// The pool closes it now, once the session is done with it.
		sup.releaseNet = release
	}
	srcs := []string{plan.Workspace}
	if plan.Home != "" {
		srcs = append(srcs, plan.Home)
	}
	var items []attachItem
	defer func() {
		for _, it := range items {
			it.src.Close()
		}
	}()
	for _, p := range srcs {
		it, err := openAttachSource(p, e.key.root)
		if err != nil {
			return err
		}
		items = append(items, it)
	}
	childFD, err := unix.PidfdOpen(child.sb.process().Pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(childFD)
	// The pid named the waiting sandbox-init when it was spawned; it holds
	// its lifeline until it ends, so a lifeline still up means the pidfd
	// is that process.
	if lifelineHungUp(child.sb.life.local) {
		return errors.New("the command's sandbox-init waiting in it ended")
	}
	for _, fd := range []int{e.supFD, childFD} {
		if err := attachIn(fd, e.key.root, items); err != nil {
			return err
		}
	}
	// What is bound now, as a sandbox built for the session records it.
	roots, err := rootIDs(plan)
	if err != nil {
		return err
	}
	for _, it := range items {
		found := false
		for _, r := range roots {
			if r.path == it.path && r.dev == it.dev && r.ino == it.ino {
				found = true
			}
		}
		if !found {
			return errors.New(it.path + " changed while it was attached")
		}
	}
	ss.key, sup.key, child.key = key, key, key
	sup.roots, child.roots = roots, roots
	unix.Close(e.supFD)
	e.supFD = -1
	return nil
}

// attachItem is one directory of the session's to attach: its host path,
// its path below the attach root, its identity and a descriptor of it.
type attachItem struct {
	path, rel string
	dev, ino  uint64
	src       *os.File
}

// openAttachSource opens path (a directory below root) without following
// a symlink and checks the descriptor is the path, as bwrap's pinned binds
// are (pinPaths).
func openAttachSource(path, root string) (attachItem, error) {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return attachItem{}, fmt.Errorf("%s is not below %s", path, root)
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return attachItem{}, fmt.Errorf("open %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || real != path {
		f.Close()
		return attachItem{}, &driverapi.InvalidSpecError{Field: "workspace", Reason: fmt.Sprintf("%s resolves to %q since it was checked", path, real)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return attachItem{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return attachItem{path: path, rel: rel, dev: st.Dev, ino: st.Ino, src: f}, nil
}

// attachIn attaches items below root in the mount namespace of the process
// pidfd names, then makes root's tmpfs read-only there.
func attachIn(pidfd int, root string, items []attachItem) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread leaves the driver's mount namespace
		// and must run nothing else; it ends with this goroutine.
		runtime.LockOSThread()
		errc <- attachOnThread(pidfd, root, items)
	}()
	return <-errc
}

func attachOnThread(pidfd int, root string, items []attachItem) error {
	// The copies are made in the driver's namespace (open_tree clones
	// only a mount of the caller's own), with bwrap's bind flags: nosuid
	// and nodev on every mount of the tree, and its propagation a slave of
	// the host's as bwrap's --bind is.
	trees := make([]int, 0, len(items))
	defer func() {
		for _, t := range trees {
			unix.Close(t)
		}
	}()
	for _, it := range items {
		t, err := unix.OpenTree(int(it.src.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
		if err != nil {
			return fmt.Errorf("%s: open_tree: %w", it.path, err)
		}
		trees = append(trees, t)
		attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_SLAVE}
		if err := unix.MountSetattr(t, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
			return fmt.Errorf("%s: mount_setattr: %w", it.path, err)
		}
	}
	// setns of a mount namespace needs a thread that shares no
	// filesystem attributes with the others.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare(CLONE_FS): %w", err)
	}
	if err := unix.Setns(pidfd, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter the sandbox's mount namespace: %w", err)
	}
	// From here paths are the sandbox's. Nothing of a command ever ran in
	// it, still no symlink is followed, and the root must be the tmpfs
	// bwrap made (a mount of its own).
	rfd, err := unix.Openat2(unix.AT_FDCWD, root, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return fmt.Errorf("%s in the sandbox: %w", root, err)
	}
	defer unix.Close(rfd)
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(rfd, &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		return fmt.Errorf("%s in the sandbox is not its tmpfs (%v)", root, err)
	}
	for i, it := range items {
		target, err := mountPointAt(rfd, it.rel)
		if err != nil {
			return fmt.Errorf("%s: %w", it.path, err)
		}
		err = unix.MoveMount(trees[i], "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH)
		unix.Close(target)
		if err != nil {
			return fmt.Errorf("%s: move_mount: %w", it.path, err)
		}
	}
	if err := unix.MountSetattr(rfd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("%s: read-only: %w", root, err)
	}
	return nil
}

// mountPointAt makes the directories of rel below rfd (those there
// already are kept: a second namespace shares the tmpfs) and opens the
// last, never leaving rfd's mount.
func mountPointAt(rfd int, rel string) (int, error) {
	parts := strings.Split(rel, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		if err := unix.Mkdirat(rfd, p, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("mount point %s: %w", p, err)
		}
	}
	fd, err := unix.Openat2(rfd, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return -1, fmt.Errorf("mount point %s: %w", rel, err)
	}
	return fd, nil
}

// aheadIdle is session_ahead_idle_ms.
func (d *Driver) aheadIdle() time.Duration {
	ms := d.cfg.Options.SessionAheadIdleMS
	if ms == 0 {
		ms = defaultSessionAheadIdleMS
	}
	return time.Duration(ms) * time.Millisecond
}

// refillAhead builds session sandboxes ahead for plan's profile, up to
// session_ahead, once after is closed (or after refillWait): a session
// sandbox was just built or taken for it, so it is a profile in use.
func (d *Driver) refillAhead(key poolKey, plan launchPlan, after <-chan struct{}) {
	ak, ok := aheadKeyFor(plan, key)
	n := d.aheadPerProfile()
	if !ok || n == 0 {
		return
	}
	s := &d.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ahead.refused[ak] >= maxRefused {
		return
	}
	if s.ahead.idle == nil {
		s.ahead.idle, s.ahead.building, s.ahead.refused = map[aheadKey][]*aheadEntry{}, map[aheadKey]int{}, map[aheadKey]int{}
		s.ahead.ready, s.ahead.kick = map[aheadKey]chan struct{}{}, map[aheadKey]chan struct{}{}
	}
	if _, known := s.ahead.idle[ak]; !known && s.ahead.building[ak] == 0 {
		// A profile not held yet: at most maxAheadProfiles are.
		held := map[aheadKey]bool{}
		for k := range s.ahead.idle {
			held[k] = true
		}
		for k := range s.ahead.building {
			held[k] = true
		}
		if len(held) >= maxAheadProfiles {
			return
		}
	}
	for want := n - len(s.ahead.idle[ak]) - s.ahead.building[ak]; want > 0 && s.ahead.total < n*maxAheadProfiles; want-- {
		s.ahead.building[ak]++
		s.ahead.total++
		if s.ahead.ready[ak] == nil {
			s.ahead.ready[ak] = make(chan struct{})
		}
		if s.ahead.kick[ak] == nil {
			s.ahead.kick[ak] = make(chan struct{})
		}
		kick := s.ahead.kick[ak]
		// Close waits for it.
		s.inflight++
		go func() {
			defer s.leave()
			t := time.NewTimer(refillWait)
			select {
			case <-after:
			case <-kick:
			case <-t.C:
			}
			t.Stop()
			d.trace.Mark("ahead: build")
			e, err := d.buildAhead(ak, plan)
			d.trace.Mark("ahead: build ends")
			s.mu.Lock()
			if s.ahead.building[ak]--; s.ahead.building[ak] == 0 {
				delete(s.ahead.building, ak)
				delete(s.ahead.kick, ak)
			}
			// Whoever waits for a build of the key looks again.
			if r := s.ahead.ready[ak]; r != nil {
				close(r)
				delete(s.ahead.ready, ak)
				if s.ahead.building[ak] > 0 {
					s.ahead.ready[ak] = make(chan struct{})
				}
			}
			if err != nil || s.closed || len(s.m) == 0 {
				// Closed, or every session ended meanwhile: a driver
				// without sessions holds nothing of its own
				// (dropAheadIfIdle).
				s.ahead.total--
				if err != nil {
					s.ahead.stats.Failed++
				}
				s.mu.Unlock()
				if err != nil {
					d.log.Debug("building a session sandbox ahead failed", "error", err)
				} else {
					d.endAhead(e)
				}
				return
			}
			s.ahead.stats.Built++
			s.ahead.idle[ak] = append(s.ahead.idle[ak], e)
			e.timer = time.AfterFunc(d.aheadIdle(), func() { d.expireAhead(e) })
			s.mu.Unlock()
		}()
	}
}

// buildAhead builds a session sandbox for ak's profile and no session,
// with a command's sandbox-init waiting in it.
func (d *Driver) buildAhead(ak aheadKey, plan launchPlan) (_ *aheadEntry, err error) {
	q := plan
	q.attachRoot = ak.root
	q.sessionSupervisor = true
	key := poolKey{profile: ak.profile}
	sup, err := d.prepare(context.Background(), key, q, "")
	if err != nil {
		return nil, err
	}
	ss, err := d.sessionFromPrepared(key, sup, nil)
	if err != nil {
		return nil, err
	}
	e := &aheadEntry{key: ak, ss: ss, supFD: -1}
	defer func() {
		if err != nil {
			d.endAhead(e)
		}
	}()
	child, err := d.spawnInSession(context.Background(), ss, q)
	if err != nil {
		return nil, err
	}
	ss.ahead = child
	// The supervisor is the waiting sandbox-init's parent; a pidfd of it,
	// opened while that child still waits (a child outlives no supervisor:
	// it is PID 1 of the session's PID namespace), cannot name another.
	pid := child.sb.process().Pid
	ppid, err := parentOf(pid)
	if err != nil {
		return nil, err
	}
	if e.supFD, err = unix.PidfdOpen(ppid, 0); err != nil {
		return nil, fmt.Errorf("pidfd_open: %w", err)
	}
	if again, err := parentOf(pid); err != nil || again != ppid || lifelineHungUp(child.sb.life.local) {
		return nil, errors.New("the command's sandbox-init ended while the sandbox was built ahead")
	}
	return e, nil
}

// parentOf reads pid's parent from /proc.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no PPid in /proc/%d/status", pid)
}

// expireAhead ends e if it still waits.
func (d *Driver) expireAhead(e *aheadEntry) {
	s := &d.sessions
	s.mu.Lock()
	l := s.ahead.idle[e.key]
	i := slices.Index(l, e)
	if i < 0 {
		s.mu.Unlock()
		return
	}
	if s.ahead.idle[e.key] = append(l[:i:i], l[i+1:]...); len(s.ahead.idle[e.key]) == 0 {
		delete(s.ahead.idle, e.key)
	}
	s.ahead.total--
	s.ahead.stats.Expired++
	s.inflight++
	s.mu.Unlock()
	defer s.leave()
	d.endAhead(e)
}

// endAhead ends e: the waiting sandbox-init, the supervisor's sandbox and
// what they hold (cgroups, the network namespace unless a session adopted
// it).
func (d *Driver) endAhead(e *aheadEntry) {
	ss := e.ss
	ss.mu.Lock()
	ss.gone, ss.ending = true, true
	child := ss.ahead
	ss.ahead = nil
	ss.mu.Unlock()
	if child != nil {
		child.destroy()
	}
	ss.sup.destroy()
	if e.supFD >= 0 {
		unix.Close(e.supFD)
		e.supFD = -1
	}
}

// dropAheadIfIdle ends the session sandboxes built ahead once the driver
// holds no session sandbox (the last one forgotten or idle): a driver
// without sessions holds no process, cgroup or namespace of its own (what
// the conformance suite checks after forget_session), and an idle
// service no memory. wait: also wait (bounded) for those being built,
// which end as they are ready.
func (d *Driver) dropAheadIfIdle(wait bool) {
	s := &d.sessions
	idle := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.m) == 0 && len(s.building) == 0
	}
	if !idle() {
		return
	}
	d.emptyAhead()
	deadline := time.Now().Add(2 * preparedReadyWait)
	for wait && time.Now().Before(deadline) {
		s.mu.Lock()
		building := len(s.ahead.building)
		s.mu.Unlock()
		if building == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if wait && idle() {
		// One that was ready just before its build saw no session.
		d.emptyAhead()
	}
}

// emptyAhead ends every session sandbox built ahead that waits (Close,
// tests); those being built end when ready once the set is closed.
func (d *Driver) emptyAhead() {
	s := &d.sessions
	s.mu.Lock()
	var gone []*aheadEntry
	for k, l := range s.ahead.idle {
		gone = append(gone, l...)
		s.ahead.total -= len(l)
		delete(s.ahead.idle, k)
	}
	s.mu.Unlock()
	for _, e := range gone {
		e.timer.Stop()
		d.endAhead(e)
	}
}

// aheadStats reports the counters of the session sandboxes built ahead,
// Refused being the keys no longer built ahead.
func (d *Driver) AheadStats() (st aheadStats, waiting int) {
	s := &d.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	st = s.ahead.stats
	for _, n := range s.ahead.refused {
		if n >= maxRefused {
			st.Refused++
		}
	}
	for _, l := range s.ahead.idle {
		waiting += len(l)
	}
	return st, waiting
}

// aheadNet is the network namespace of a session sandbox built ahead of
// its session under network none: one of its own, or nil where bwrap's
// own is what a session's would be (sessionNetFor).
func (d *Driver) aheadNet(plan launchPlan) (*netns, func(), error) {
	if plan.SocketMode != socketLoopback || d.probe().sessionNet != sessionNetSetns {
		return nil, func() {}, nil
	}
	ns, err := makeNetns(d.cfg.DriverBinary, false)
	if err != nil {
		return nil, nil, fmt.Errorf("bwrap driver: network namespace: %w", err)
	}
	return ns, ns.close, nil
}
