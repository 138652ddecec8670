//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// The Landlock tier (sandbox.linux.fallback = "landlock").
//
// Where bwrap cannot create its namespaces (an unprivileged container, user
// namespaces disabled by sysctl or AppArmor), the driver can run commands
// without bwrap: sandbox-init is started directly on the host and confines
// itself and the command with what needs no namespace: Landlock (the
// filesystem rules, TCP bind/connect, signal and abstract-socket scopes),
// the seccomp program (the socket gate, the denylist, no namespace creation,
// clone3 ENOSYS, no setsid/setpgid, no socket(AF_UNIX) even under network
// all), no_new_privs, every capability dropped, rlimits, and the cgroup when
// one is writable. The environment is still exactly the given one (the
// sealed memfd).
//
// What it cannot give: a private /tmp (none is writable unless granted), a
// /proc of its own (the host's is left unreadable, so the host's processes
// are not listed, but neither is /proc/self), an IPC namespace (the SysV
// IPC calls are denied instead), a PID namespace
// (the command is ended by killing its process group, which setsid and
// setpgid being denied make inescapable), the allow_hosts bridge (no network
// namespace to put it in), and protected entries (see protectedRefusal).
//
// The minimum it must claim, or the tier refuses to start: filesystem read
// and write isolation and the signal scope (Landlock ABI >= 6: without the
// scope the command, the same uid as the driver, could signal it), network
// none and subprocess control (seccomp), and the timeout (process group).

// Tiers, reported as Details["tier"] in the capabilities and every Exit.
const (
	tierBwrap    = "bwrap"
	tierLandlock = "landlock"
)

// minTierLandlockABI is the Landlock ABI the tier needs: filesystem rules
// (1), truncate (3), TCP rules (4) and the scopes (6).
const minTierLandlockABI = 6

// namespaceFix is how a host where bwrap cannot create namespaces gets a
// sandbox: one line, naming the setting first.
const namespaceFix = `set sandbox.linux.fallback = "landlock" for the weaker Landlock tier (docs/linux.md), ` +
	"or allow namespaces: sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, " +
	"kernel.apparmor_restrict_unprivileged_userns=0; in a container, run it with --privileged or a seccomp " +
	"profile that allows unshare and clone with namespace flags"

// namespaceError is bwrap's trial sandbox failing: the namespaces are
// refused here, bwrap itself works.
type namespaceError struct{ msg string }

func (e *namespaceError) Error() string { return "bwrap cannot create namespaces here: " + e.msg }

// What the Landlock tier does not give, as the report states it.
const (
	tierLimitTmp  = "no private /tmp (/tmp is not writable unless granted)"
	tierLimitProc = "no /proc of its own: /proc is not readable at all (no /proc/self either); host pids can be probed with stat, not listed or read"
	tierLimitPID  = "no PID namespace (the command is ended by killing its process group; setsid and setpgid are denied)"
	tierLimitUnix = "socket(AF_UNIX) denied under every network mode (socketpair allowed)"
	tierLimitDev  = "no /dev of its own: only /dev/null, /dev/zero, /dev/full, /dev/random and /dev/urandom can be opened, /dev cannot be listed, no pty (/dev/ptmx and /dev/pts closed)"
	// Landlock has no right for metadata: the driver answers those calls
	// itself (metaguard_linux.go).
	tierLimitMeta = "chmod, chown, utimes, xattrs and inotify watches are answered by the driver, inside the write grants only (a watch: where readable); " +
		"inode flags (chattr), fs-verity and fanotify marks are refused everywhere"
)

// tierFix is how a host in the Landlock tier gets the full sandbox.
const tierFix = "allow namespaces for bwrap (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, " +
	"kernel.apparmor_restrict_unprivileged_userns=0; in a container, --privileged or a seccomp profile that allows unshare and clone with namespace flags)"

// landlockTierUsable checks the tier's minimum claimed set on this kernel.
func landlockTierUsable(abi int, seccomp bool) (error, string) {
	const fix = "use a kernel with Landlock ABI >= 6 (Linux 6.7) in the LSM list and seccomp filters, or allow namespaces for bwrap"
	switch {
	case abi < minTierLandlockABI:
		return fmt.Errorf("bwrap cannot create namespaces here, and the Landlock tier needs Landlock ABI >= %d "+
			"(filesystem and TCP rules, signal scoping); this kernel offers %d", minTierLandlockABI, abi), fix
	case !seccomp:
		return errors.New("bwrap cannot create namespaces here, and the Landlock tier needs seccomp filters, which cannot be installed"), fix
	}
	return nil, ""
}

// landlockCapabilities is the report of the Landlock tier: only what holds.
func (d *Driver) landlockCapabilities(h *hostProbe) driverapi.HostCapabilities {
	hc := driverapi.HostCapabilities{
		Backend:         backend,
		DriverVersion:   driverVersion,
		ProtocolVersion: driverapi.ProtocolVersion,
		OS:              runtime.GOOS,
		Arch:            runtime.GOARCH,
		Seccomp:         h.seccomp && h.sandboxErr == nil,
		CgroupMode:      string(h.cg.Mode()),
		Details: map[string]string{
			"tier":           tierLandlock,
			"tier_reason":    h.tierWhy,
			"kernel":         h.kernel,
			"max_pids":       strconv.FormatUint(d.cfg.Options.Pids(), 10),
			"cpu_quota_pct":  strconv.FormatUint(d.cfg.Options.CPUQuotaPercent, 10),
			"cgroup_setting": string(d.cfg.Options.Cgroup),
			"euid":           strconv.Itoa(os.Geteuid()),
			"sandbox_init":   d.cfg.InitBinary,
			"driver_binary":  d.cfg.DriverBinary,
			"tmp":            tierLimitTmp,
			"proc":           tierLimitProc,
			"pid_namespace":  tierLimitPID,
			"unix_sockets":   tierLimitUnix,
			"dev":            tierLimitDev,
			"metadata":       tierLimitMeta,
			"capabilities":   "all dropped (bounding and ambient sets included)",
			"tier_limits": strings.Join([]string{tierLimitTmp, tierLimitProc, tierLimitPID, tierLimitUnix, tierLimitDev, tierLimitMeta,
				"no protected_paths (workspaces with protected entries are refused)", "no allow_hosts"}, "; "),
		},
	}
	if h.landlock > 0 && h.sandboxErr == nil {
		hc.LandlockABI = uint32(h.landlock)
	}
	hc.Details[driverapi.DetailLinuxLandlockABI] = strconv.FormatUint(uint64(hc.LandlockABI), 10)
	hc.Details[driverapi.DetailLinuxSeccomp] = strconv.FormatBool(hc.Seccomp)
	hc.Details[driverapi.DetailLinuxCgroupMode] = hc.CgroupMode
	// Session sandboxes need namespaces: every command gets its own run.
	hc.Details[detailSessionSandbox] = d.sessionOffWhy()
	hc.Details[driverapi.DetailLayeredWorkspace] = d.layeredOffWhy()
	un := func(f, reason, fix string) {
		hc.Unavailable = append(hc.Unavailable, driverapi.Unavailable{Feature: f, Reason: reason, Fix: fix})
	}
	if h.sandboxErr != nil {
		for _, f := range driverapi.KnownFeatures() {
			un(f, h.sandboxErr.Error(), h.sandboxFix)
		}
		return hc
	}
	hc.Features = append(hc.Features,
		driverapi.FeatureFSReadIsolation, driverapi.FeatureFSWriteIsolation,
		driverapi.FeatureNetworkNone, driverapi.FeatureNetworkAll,
		driverapi.FeatureEnvIsolation, driverapi.FeatureSubprocessControl, driverapi.FeatureProcessTreeKill)
	un(driverapi.FeatureProtectedPaths, "Landlock tier: rights are inherited down the tree, so a writable workspace "+
		"would make every .git in it writable; workspaces with protected entries are refused", tierFix)
	un(driverapi.FeatureNetworkViaProxy, "Landlock tier: no network namespace to hold the bridge", tierFix)
	hc.Details["network_none"] = "inet sockets denied: the Landlock tier has no network namespace, so no loopback of its own either"
	if h.cg.Has(cgroup.Memory) {
		hc.Features = append(hc.Features, driverapi.FeatureMemoryLimit)
	} else {
		un(driverapi.FeatureMemoryLimit, h.cg.Reason(cgroup.Memory), cgroupFix)
	}
	switch {
	case d.cfg.Options.Pids() == 0:
		un(driverapi.FeaturePidLimit, "max_pids = 0 in [sandbox.linux]", "set max_pids")
	case h.cg.Has(cgroup.Pids):
		hc.Features = append(hc.Features, driverapi.FeaturePidLimit)
		hc.Details["pid_limit_via"] = "cgroup"
	default:
		// RLIMIT_NPROC would count every process of the uid on the host.
		un(driverapi.FeaturePidLimit, h.cg.Reason(cgroup.Pids)+" (Landlock tier: no user namespace for RLIMIT_NPROC)", cgroupFix)
	}
	switch {
	case !h.cg.Has(cgroup.CPU):
		un(driverapi.FeatureCPULimit, h.cg.Reason(cgroup.CPU), cgroupFix)
	case d.cfg.Options.CPUQuotaPercent == 0:
		un(driverapi.FeatureCPULimit, "cpu_quota_percent is not set in [sandbox.linux]", "set cpu_quota_percent")
	default:
		hc.Features = append(hc.Features, driverapi.FeatureCPULimit)
	}
	return hc
}

// protectedRefusal refuses a Landlock-tier command whose workspace or
// fs_write grant holds a protected entry.
//
// Why refuse instead of protect: Landlock rights are inherited down the
// tree and rules attach to inodes that exist when the ruleset is built. A
// writable workspace makes every .git below it writable. Granting write per
// existing top-level entry instead would leave the workspace root itself
// without creation rights (no new file at the top, the commonest write),
// would have to split every directory on the way to a nested repository
// the same way, and could still not stop a missing .git from being created
// (Landlock cannot name a file that does not exist). So the tier does not
// claim protected_paths, and a command whose writable roots contain one is
// refused, with the reason. A protected entry that does not exist yet can
// be created by the command: that is what not claiming protected_paths
// means, and the report says it.
func (d *Driver) protectedRefusal(p launchPlan) error {
	targets, err := scanProtected(p, d.scanLimits())
	if err != nil {
		return err
	}
	for _, t := range targets {
		if _, err := os.Lstat(t.path); err == nil {
			return &unavailableError{Feature: driverapi.FeatureProtectedPaths,
				Reason: fmt.Sprintf("the Landlock tier cannot keep %s read-only inside a writable workspace or grant", t.path),
				Fix:    "use a workspace without protected entries, or " + tierFix}
		}
	}
	return nil
}

// tierDevices are the device files the command may read and write in the
// Landlock tier (there is no private /dev).
func tierDevices() []string {
	return []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}
}

// landlockInitSpec is what sandbox-init enforces in the Landlock tier:
// the system read set and the init binary read-only, the fs_read
// grants readable, the workspace, the fs_write grants and the harmless
// devices writable; no /tmp.
func (d *Driver) landlockInitSpec(p launchPlan) initSpec {
	mode := p.SocketMode
	if mode == socketLoopback {
		// No network namespace here: an inet socket would reach the
		// host's network (ProfileFor makes this plan unix_only already).
		mode = socketUnixOnly
	}
	s := initSpec{
		SocketMode:        mode,
		AllowSpawn:        p.AllowSpawn,
		RlimitASBytes:     p.MemoryBytes,
		ScopeSignals:      true,
		ScopeAbstractUnix: true,
		NoNamespaces:      true,
		Supervise:         true,
		CommandFD:         commandFD,
		LifelineFD:        lifelineFD,
	}
	for _, m := range p.System {
		if m.Kind == mountROBind {
			s.ReadOnly = append(s.ReadOnly, m.Dest)
		}
	}
	// Not /proc: it is the host's, and its listing and files would show
	// every host process's command line. Unreadable, the host's
	// processes stay out of sight (stat and readlink, which Landlock does
	// not govern, can still probe a pid), at the price of /proc/self.
	s.ReadOnly = append(s.ReadOnly, d.cfg.InitBinary)
	s.ReadOnly = append(s.ReadOnly, p.FSRead...)
	s.ReadWrite = append(s.ReadWrite, p.Workspace)
	s.ReadWrite = append(s.ReadWrite, tierDevices()...)
	s.ReadWrite = append(s.ReadWrite, p.writable()...)
	return s
}

// tierStarter starts a Landlock-tier command: sandbox-init straight on
// the host, in a session and process group of its own, with the
// metadata guard answering its notification filter.
type tierStarter struct {
	pathInfo
	d    *Driver
	plan launchPlan
	cwd  string
	cmd  *exec.Cmd
	// held are the driver's descriptors of the command: its record, the
	// notify socket's two ends (closed at the end).
	held []*os.File
}

func (s *tierStarter) start(_, runCtx context.Context, r *runState) (err error) {
	defer func() {
		if err != nil {
			s.end()
		}
	}()
	plan := s.plan
	if err := s.d.protectedRefusal(plan); err != nil {
		return err
	}
	is := s.d.landlockInitSpec(plan)
	if s.cg != nil && s.cg.Dir(cgroup.Memory) != "" {
		is.RlimitASBytes = addressSpaceCeiling(plan.MemoryBytes)
	}
	// The notification filter (notify_linux.go): the metadata guard's
	// calls and, without spawn, the fork family. The child that execs the
	// target sends its listener on this socket.
	guardLocal, guardRemote, err := notifySocket()
	if err != nil {
		return err
	}
	s.held = append(s.held, guardLocal, guardRemote)
	is.NotifyFD, is.MetaGuard = tierNotifyFD, true
	init, err := commandInitArgs(is)
	if err != nil {
		return err
	}
	life, err := newLifeline()
	if err != nil {
		return err
	}
	s.life = life
	cmdFile, err := commandMemfd(commandArgv(r.spec), envList(r.spec.Env))
	if err != nil {
		return err
	}
	s.held = append(s.held, cmdFile)

	cmd := exec.CommandContext(runCtx, s.d.cfg.InitBinary, append([]string{sandboxInitCommand}, init...)...)
	s.cmd = cmd
	cmd.Env = launchEnv()
	cmd.Dir = s.cwd
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.io.stdin, r.io.stdout, r.io.stderr
	cmd.WaitDelay = waitDelay
	cmd.ExtraFiles = []*os.File{cmdFile, life.remote, guardRemote} // commandFD, lifelineFD, tierNotifyFD
	// A session of its own: no controlling terminal (no TIOCSTI into the
	// host's), and a process group the command cannot leave. No
	// Pdeathsig: it would kill sandbox-init alone and leave the command;
	// the lifeline's hang-up makes sandbox-init kill the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Cancel = func() error {
		// The group's leader is not reaped before the group is killed
		// (see wait), so its pid still names this group.
		return unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
	r.attach(&s.pathInfo, life, false)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bwrap driver: start sandbox-init: %w", err)
	}
	cmdFile.Close()
	life.remote.Close()
	guardRemote.Close()
	pid := cmd.Process.Pid
	// Whatever fails from here, sandbox-init has not had its go-ahead:
	// its group is killed and reaped before the error goes.
	kill := func(err error) error {
		_ = unix.Kill(-pid, unix.SIGKILL)
		_ = cmd.Wait()
		return fmt.Errorf("bwrap driver: %w", err)
	}
	local, err := dupFile(guardLocal)
	if err != nil {
		return kill(err)
	}
	if s.notif, err = startNotifier(local, newMetaGuard(plan, is), newUnixGuard(plan.SocketMode, plan.BridgePorts)); err != nil {
		return kill(err)
	}
	// sandbox-init waits for this go-ahead before it confines itself any
	// further or starts anything: it is inside the command's cgroup first.
	if s.cg != nil {
		if err := s.cg.Join(pid); err != nil {
			return kill(err)
		}
	}
	if _, err := unix.Write(life.local, []byte{sandboxinit.GoAheadTag}); err != nil {
		return kill(fmt.Errorf("lifeline: %w", err))
	}
	return nil
}

func (s *tierStarter) wait(context.Context) ending {
	// Wait for sandbox-init without reaping it, kill what is left of its
	// group (background processes of the command), then reap: until it is
	// reaped its pid, the group's id, cannot be reused. runCtx's end
	// kills the group (cmd.Cancel).
	pid := s.cmd.Process.Pid
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	_ = unix.Kill(-pid, unix.SIGKILL)
	waitErr := s.cmd.Wait()
	return ending{state: s.cmd.ProcessState, waitErr: waitErr}
}

// startError is never called: a start that fails is start's error.
func (s *tierStarter) startError(err error, _ *setupGate) error { return err }

func (s *tierStarter) end() {
	s.notif.finish()
	if s.life != nil {
		s.life.Close()
	}
	closeAll(s.held)
}

// tierNotifyFD is where sandbox-init finds the notify socket in the
// Landlock tier (after commandFD and lifelineFD).
const tierNotifyFD = lifelineFD + 1
