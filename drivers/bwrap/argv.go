package bwrap

import (
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/initmain"
)

// BwrapFlags is the bubblewrap argv (without the program) that builds the
// sandbox of plan p with working directory cwd. initBinary, when set, is
// bound read-only at initPath. pinned maps host paths to descriptors bwrap
// inherits: those are mounted with --bind-fd/--ro-bind-fd (see pinPaths).
// procCover follows the sandbox's /proc mount (procCoverArgs, probed once
// per driver). extra is inserted before the mounts (fd options). The same flags serve Run
// and the raw-bwrap benchmark, so the comparison is like for like.
func (p launchPlan) BwrapFlags(cwd, initBinary string, pinned map[string]int, procCover []string, extra ...string) []string {
	bind := func(ro bool, src, dest string) []string {
		if fd, ok := pinned[src]; ok {
			if ro {
				return []string{"--ro-bind-fd", strconv.Itoa(fd), dest}
			}
			return []string{"--bind-fd", strconv.Itoa(fd), dest}
		}
		if ro {
			return []string{"--ro-bind", src, dest}
		}
		return []string{"--bind", src, dest}
	}
	args := []string{
		// Every namespace bwrap knows: mount, PID, IPC, UTS, cgroup, network
		// and (where unprivileged) user.
		"--unshare-all",
	}
	if p.ShareNet || p.joinNet {
		args = append(args, "--share-net")
	}
	args = append(args,
		// The sandbox dies when bwrap does (and bwrap when the driver's
		// spawning thread does: Pdeathsig). As PID 1 of the namespace,
		// bwrap's reaper takes every descendant with it.
		"--die-with-parent",
		// setsid: no controlling terminal, so no TIOCSTI into the host's tty.
		"--new-session",
		// bwrap run as root would otherwise keep every capability inside.
		"--cap-drop", "ALL",
	)
	args = append(args, extra...)
	args = append(args, "--proc", "/proc")
	args = append(args, procCover...)
	args = append(args, "--dev", "/dev")
	args = append(args, p.devArgs()...)

	type mnt struct {
		dest string
		args []string
	}
	var ms []mnt
	ms = append(ms, mnt{"/tmp", p.tmpArgs()})
	if p.etcView != "" {
		ms = append(ms, mnt{"/etc", []string{"--ro-bind", p.etcView, "/etc"}})
	}
	for _, m := range p.System {
		if p.etcView != "" && m.Kind == mountROBind && driverapi.PathWithin(m.Dest, "/etc") {
			// In the view.
			continue
		}
		if m.Kind == mountSymlink {
			ms = append(ms, mnt{m.Dest, []string{"--symlink", m.Src, m.Dest}})
		} else {
			ms = append(ms, mnt{m.Dest, []string{"--ro-bind", m.Src, m.Dest}})
		}
	}
	switch {
	case p.attachRoot != "":
		// Built ahead of its session (sessionahead_linux.go): the
		// workspace and HOME are attached below this tmpfs later, which
		// holds nothing but their mount points.
		ms = append(ms, mnt{p.attachRoot, []string{"--size", strconv.Itoa(attachRootBytes), "--tmpfs", p.attachRoot}})
	case p.layerInside != nil:
		// The overlay's lower, read-only: the supervisor mounts the
		// session's overlay over it before any command runs (and ends if
		// it cannot), with the layer's directory bound beside it until
		// then (layered_linux.go).
		ms = append(ms, mnt{p.Workspace, bind(true, p.Workspace, p.Workspace)},
			mnt{layerBindPoint, []string{"--bind", filepath.Dir(p.layered.Upper), layerBindPoint}})
	case p.layerSrc != "":
		// The session's overlay (layered_linux.go) stands at the workspace.
		ms = append(ms, mnt{p.Workspace, []string{"--bind", p.layerSrc, p.Workspace}})
	default:
		ms = append(ms, mnt{p.Workspace, bind(false, p.Workspace, p.Workspace)})
	}
	for _, g := range p.FSRead {
		ms = append(ms, mnt{g, bind(true, g, g)})
	}
	for _, g := range p.boundWritable() {
		ms = append(ms, mnt{g, bind(false, g, g)})
	}
	// The anchors, existing protected entries and placeholders Run's
	// protect found for this command (protect.go) sort in with the rest:
	// an anchor must not hide a grant below it. Nothing is mounted below
	// a protected entry (protect refuses such grants), and at equal depth
	// they come after the grants.
	for _, m := range p.prot.mounts(bind) {
		ms = append(ms, mnt{m.path, m.args})
	}
	// Parents before children: a later mount covers an earlier one, so a
	// grant below another grant (or below the workspace) keeps its own mode,
	// and a grant never hides a more specific one. The sort is stable so
	// equal depths keep the order above (system before grants).
	sort.SliceStable(ms, func(i, j int) bool { return depth(ms[i].dest) < depth(ms[j].dest) })
	for _, m := range ms {
		args = append(args, m.args...)
	}
	// The sandbox's own entries (init, proxy socket) live in initDir. When
	// a grant covers it (a read or write grant of /run; / itself is never
	// granted), bwrap could not create their mount points in that
	// read-only (or, written there, host-backed) mount: a fresh tmpfs of
	// the sandbox's own goes over initDir first. It also hides whatever the
	// host keeps there (root's driver state directory). The mount point
	// must exist on the host; Run checks that (ownInitDir) and says so.
	ownDir := p.coversInitDir()
	if ownDir {
		args = append(args, "--tmpfs", initDir)
	}
	if p.ProxySocket != "" {
		// Connecting to a unix socket needs no write access to the mount.
		args = append(args, bind(true, p.ProxySocket, proxySocketPath)...)
	}
	if initBinary != "" {
		args = append(args, "--ro-bind", initBinary, initPath)
	}
	if ownDir {
		// The tmpfs is not under the root's final --remount-ro: read-only
		// it is, so the command can neither add nor replace anything
		// beside its init binary (with or without Landlock).
		args = append(args, "--remount-ro", initDir)
	}
	// The root itself is bwrap's tmpfs: read-only, so nothing can be
	// created beside the mounts (Landlock denies it too; this holds
	// without Landlock).
	args = append(args, "--remount-ro", "/", "--chdir", cwd)
	return args
}

// coversInitDir reports whether a mount of p's lands on initDir or above
// it, hiding the sandbox's own mount points there.
func (p launchPlan) coversInitDir() bool {
	dests := append([]string{p.Workspace}, p.FSRead...)
	dests = append(dests, p.writable()...)
	for _, m := range p.System {
		dests = append(dests, m.Dest)
	}
	for _, d := range dests {
		if d != "" && driverapi.PathWithin(initDir, d) {
			return true
		}
	}
	return false
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

// initSpec is what sandbox-init enforces for plan p.
func (p launchPlan) InitSpec() initSpec {
	s := initSpec{
		SocketMode:    p.SocketMode,
		BridgePorts:   p.BridgePorts,
		AllowSpawn:    p.AllowSpawn,
		RlimitASBytes: p.MemoryBytes,
		// Landlock scopes (ABI >= 6): no signals to processes outside the
		// sandbox, no connecting to abstract unix sockets bound outside it.
		// They matter most with a shared network namespace (allow_all),
		// where the host's abstract sockets (X11, dbus) are reachable.
		ScopeSignals:      true,
		ScopeAbstractUnix: true,
	}
	for _, m := range p.System {
		if m.Kind == mountROBind {
			s.ReadOnly = append(s.ReadOnly, m.Dest)
		}
	}
	s.ReadOnly = append(s.ReadOnly, "/proc", initPath)
	s.ReadOnly = append(s.ReadOnly, p.FSRead...)
	ws := p.Workspace
	if p.attachRoot != "" {
		// The session's workspace and HOME are attached below it once the
		// sandbox is taken, before any command's sandbox-init plans its
		// rules: the rule on their parent covers them (Landlock checks
		// the directories above a file, a mount's covered mount point
		// aside), and the tmpfs itself is read-only by then.
		ws = p.attachRoot
	}
	s.ReadWrite = append(s.ReadWrite, ws, "/tmp", "/dev")
	s.ReadWrite = append(s.ReadWrite, p.boundWritable()...)
	return s
}

// addressSpaceHeadroom is what RLIMIT_AS allows above a memory limit the
// cgroup enforces. Address space is not memory: at start the Go runtime
// reserves ~800 MiB of it (its page allocator's summaries), HotSpot 1 GiB
// of compressed class space plus a heap sized from the limit, glibc 64 MiB
// per malloc arena; with RLIMIT_AS equal to a small limit none of them
// starts. 4 GiB lets Go, Java 17, Node and Python start under a 64 MiB
// limit while still stopping a runaway mapping well before it exhausts the
// host's address space or overcommit; resident memory, tmpfs and page cache
// are the cgroup's job.
const addressSpaceHeadroom = 4 << 30

// addressSpaceCeiling is RLIMIT_AS for a memory limit the cgroup enforces.
func addressSpaceCeiling(memoryBytes uint64) uint64 {
	return memoryBytes + addressSpaceHeadroom
}

// pwdCommand is the optional prefix of the in-sandbox mode that restores
// the PWD the child was given (bwrap always sets it); see initmain.
const pwdCommand = initmain.PWDCommand
