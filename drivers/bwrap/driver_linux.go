//go:build linux

package bwrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/ownertag"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/protectjournal"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/sessionpool"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
	"github.com/aleph-sandbox/aleph-sandbox/internal/starttrace"
)

// driverVersion is the driver's version, reported in HostCapabilities.
const driverVersion = "0.1.0"

// waitDelay bounds how long Wait waits for output pipes after bwrap exits.
// Every sandbox process dies with bwrap (PID namespace), so the pipes close
// at once; the bound is for the impossible case, so Wait can never hang.
const waitDelay = 2 * time.Second

// config configures a Driver. The zero value is the production setup.
type config struct {
	// options is the [sandbox.linux] configuration (see parseOptions).
	Options options
	// InitBinary is the binary bound read-only into each sandbox to run
	// sandbox-init. Default: aleph-sandbox-init beside the driver binary
	// when trustworthy, else the driver binary.
	InitBinary string
	// DriverBinary is the driver binary itself (default: this executable).
	// allow_hosts sandboxes run it instead of InitBinary: only it carries
	// the network bridge.
	DriverBinary string
	// CgroupRoot is where cgroup filesystems are mounted. Default /sys/fs/cgroup.
	CgroupRoot string
	// SelfCgroup is the file describing this process's cgroups. Default
	// /proc/self/cgroup. Tests point both at a fake cgroupfs.
	SelfCgroup string
	// Logger receives the driver's own diagnostics (never command output).
	Logger hclog.Logger
	// StateDir holds the driver's records of the placeholders it made, so
	// that a later driver removes what a killed one left. Default: see
	// defaultStateDir. Never inside a workspace.
	StateDir string

	// legacySetup restores the set-up before the /etc view and the
	// precompiled seccomp programs (one bind per /etc entry, programs built
	// in every sandbox-init): the benchmarks measure both in one run.
	legacySetup bool
	// MaxSessionNetworks caps the network namespaces held for sessions
	// under network none (sessionnet_linux.go); when every one has a
	// command running, a command of one more session is refused. Default
	// defaultMaxSessionNetworks.
	MaxSessionNetworks int
	// SessionNetworkIdle is how long a session's network namespace is
	// kept with no command running in it. Default defaultSessionNetworkIdle.
	SessionNetworkIdle time.Duration
	// probeKeyExtra are more files the probe cache's key includes (tests).
	probeKeyExtra []string
	// overlayTrialOptions replaces the overlay options of the layered
	// sessions' trial (probeSessionOverlay) alone: tests break them to see
	// the refusal a kernel that refuses the mount gets. Empty: the real
	// ones.
	overlayTrialOptions string
	// upperTrialOptions likewise replaces the options of the trial on a
	// layer's upper file system (checkUpperFS) alone.
	upperTrialOptions string
	// OneCommand says the host runs one command with this driver process
	// (driverapi.OneCommandEnv): no network namespace is held for the
	// session, whose only command gets bwrap's own (probe_linux.go).
	OneCommand bool
}

// Driver is the bubblewrap driver. It is safe for concurrent use.
type Driver struct {
	cfg   config
	log   hclog.Logger
	once  sync.Once
	host  *hostProbe
	plans planCache
	mu    sync.Mutex // serialises placeholder set-up and removal
	owner string     // ownertag.Self of this process, for its cgroups
	// journal is the placeholder journal in the state directory
	// (protect_linux.go).
	journal *protectjournal.Journal

	recoverOnce sync.Once // placeholders killed drivers left, removed at start
	janitorOnce sync.Once // starts the janitor (janitor_linux.go)
	janitorPipe *os.File  // its end closes when this process ends
	// optErr is why the section the process was started with was refused:
	// the driver then serves, so the host gets a typed error from
	// SetConfig, but runs nothing (the probe reports the sandbox unavailable).
	optErr error
	// running are the commands being run, for signalCommand.
	running commandTable
	// runs are the runs in flight, which Close ends and waits for.
	runs runGroup
	// etc is the /etc view in use (etcview_linux.go).
	etc etcViews
	// etcEntriesHook, when set (tests only), replaces the host's /etc
	// entries of the system read set by stand-ins the test can change.
	etcEntriesHook func() []string
	// progs are the precompiled seccomp programs (seccompfd_linux.go).
	progs seccompPrograms
	// nets are the sessions' network namespaces (network none).
	nets *sessionpool.Pool[*netns]
	// pool holds the prepared sandboxes (prepared_linux.go).
	pool *preparedPool
	// sessions holds the session sandboxes (session_linux.go).
	sessions sessionSet
	// upperFS are the file systems a layer's upper was tried on
	// (layerfs_linux.go).
	upperFS upperFSTrials
	// trace marks the steps of a start for measurement (nil: off).
	trace *starttrace.Trace
}

var (
	_ driverapi.Driver       = (*Driver)(nil)
	_ driverapi.Preparer     = (*Driver)(nil)
	_ driverapi.Closer       = (*Driver)(nil)
	_ driverapi.Configurable = (*Driver)(nil)

	_ driverapi.SessionForgetter = (*Driver)(nil)
)

// newDriver returns a driver; the host is probed on first use.
func newDriver(cfg config) (*Driver, error) {
	cfg.Options = cfg.Options.withDefaults()
	if err := cfg.Options.Validate(); err != nil {
		return nil, err
	}
	if cfg.DriverBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bwrap driver: locate own binary: %w", err)
		}
		cfg.DriverBinary = exe
	}
	if cfg.InitBinary == "" {
		cfg.InitBinary = chooseInit(cfg.DriverBinary)
	}
	if cfg.CgroupRoot == "" {
		cfg.CgroupRoot = "/sys/fs/cgroup"
	}
	if cfg.SelfCgroup == "" {
		cfg.SelfCgroup = "/proc/self/cgroup"
	}
	lg := cfg.Logger
	if lg == nil {
		lg = hclog.NewNullLogger()
	}
	if cfg.StateDir == "" {
		cfg.StateDir = defaultStateDir()
	}
	if cfg.MaxSessionNetworks <= 0 {
		cfg.MaxSessionNetworks = int(cfg.Options.MaxSessionNetworks)
	}
	if cfg.MaxSessionNetworks <= 0 {
		cfg.MaxSessionNetworks = defaultMaxSessionNetworks
	}
	if cfg.SessionNetworkIdle <= 0 {
		cfg.SessionNetworkIdle = defaultSessionNetworkIdle
	}
	d := &Driver{cfg: cfg, log: lg, owner: ownertag.Self()}
	d.journal = protectjournal.New(cfg.StateDir, d.owner, lg)
	d.pool = newPreparedPool()
	d.nets = sessionpool.New(cfg.MaxSessionNetworks, cfg.SessionNetworkIdle,
		func() (*netns, error) { return makeNetns(cfg.DriverBinary, os.Geteuid() != 0) }, (*netns).close)
	return d, nil
}

// initBinaryName is the small in-sandbox binary the driver prefers when it
// is installed beside the driver binary.
const initBinaryName = "aleph-sandbox-init"

// chooseInit picks the binary bwrap runs as sandbox-init: the small
// aleph-sandbox-init beside the driver binary exe when it is as trustworthy
// as exe itself (a regular file, not a symlink, owned by root or by exe's
// owner, writable by nobody else, in a directory writable by nobody else),
// else exe (which has the same mode built in). The host pins the driver
// binary's checksum; a sibling in a directory others can write to could be
// swapped, so it is never used there.
func chooseInit(exe string) string {
	sib := filepath.Join(filepath.Dir(exe), initBinaryName)
	var exeSt, sibSt, dirSt unix.Stat_t
	if unix.Stat(exe, &exeSt) != nil || unix.Lstat(sib, &sibSt) != nil || unix.Stat(filepath.Dir(exe), &dirSt) != nil {
		return exe
	}
	trusted := func(st unix.Stat_t) bool {
		return (st.Uid == 0 || st.Uid == exeSt.Uid) && st.Mode&0o022 == 0
	}
	if sibSt.Mode&unix.S_IFMT != unix.S_IFREG || sibSt.Mode&0o111 == 0 || !trusted(sibSt) || !trusted(dirSt) {
		return exe
	}
	return sib
}

// NewFromEnv returns a driver configured from optionsEnv, as the plugin
// binary runs it.
//
// A section it refuses does not stop the process: the driver serves with
// nothing enforceable, so the host learns the refused key from SetConfig
// (a typed error) instead of a plugin that died before its handshake.
func NewFromEnv(lg hclog.Logger) (*Driver, error) {
	o, optErr := parseOptions(os.Getenv(optionsEnv))
	if optErr != nil {
		o = options{}
	}
	d, err := newDriver(config{Options: o, Logger: lg, OneCommand: os.Getenv(driverapi.OneCommandEnv) == "1"})
	if err != nil {
		return nil, err
	}
	d.optErr = optErr
	d.trace = starttrace.FromEnv("driver")
	return d, nil
}

// ProfileFor builds the launch plan for req.
func (d *Driver) ProfileFor(ctx context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	d.trace.Mark("ProfileFor")
	if err := ctx.Err(); err != nil {
		return driverapi.Profile{}, err
	}
	p, err := buildPlan(req)
	if err != nil {
		return driverapi.Profile{}, err
	}
	p.TmpfsBytes = tmpfsBudget(d.cfg.Options.TmpfsMaxBytes(), p.MemoryBytes)
	if p.SocketMode == socketLoopback && d.probe().tier == tierLandlock {
		// No network namespace in the Landlock tier: network none keeps
		// denying inet sockets there.
		p.SocketMode = socketUnixOnly
	}
	if err := d.enforceable(p); err != nil {
		return driverapi.Profile{}, err
	}
	data, err := p.Encode()
	if err != nil {
		return driverapi.Profile{}, err
	}
	return driverapi.NewProfile(backend, data), nil
}

// enforceable refuses a plan that needs something this host lacks: the
// sandbox itself, or a memory limit without a memory cgroup.
func (d *Driver) enforceable(p launchPlan) error {
	h := d.probe()
	if h.sandboxErr != nil {
		return &unavailableError{Feature: "sandbox", Reason: h.sandboxErr.Error(), Fix: h.sandboxFix}
	}
	if err := d.stateDirRefusal(p); err != nil {
		return err
	}
	if p.MemoryBytes > 0 && !h.cg.Has(cgroup.Memory) {
		return &unavailableError{Feature: driverapi.FeatureMemoryLimit, Reason: h.cg.Reason(cgroup.Memory), Fix: cgroupFix}
	}
	if p.Network == "allow_hosts" {
		if f, reason := d.viaProxy(h); !f {
			return &unavailableError{Feature: driverapi.FeatureNetworkViaProxy, Reason: reason, Fix: "use a kernel with Landlock ABI >= 4 and seccomp"}
		}
	}
	if !p.AllowSpawn && !h.seccomp {
		return &unavailableError{Feature: driverapi.FeatureSubprocessControl, Reason: "seccomp filters cannot be installed here",
			Fix: "use a kernel with CONFIG_SECCOMP_FILTER, or allow spawn_subprocess"}
	}
	return nil
}

// Run runs spec in the sandbox its profile describes.
func (d *Driver) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	d.trace.Mark("Run")
	defer d.trace.Mark("Run returns")
	if spec.Tty != nil {
		return driverapi.Exit{}, &driverapi.InvalidSpecError{Field: "tty", Reason: "a pseudo-terminal needs RunStream"}
	}
	exit, err := d.run(ctx, spec, nil, streams)
	d.forgetProbeCache(err)
	return exit, err
}

// run is Run, and RunStream when in is set (stream_linux.go).
func (d *Driver) run(ctx context.Context, spec driverapi.RunSpec, in *driverapi.StreamInput, streams driverapi.Streams) (driverapi.Exit, error) {
	ctx, leave := d.runs.enter(ctx, spec.SessionID)
	defer leave()
	if err := spec.Profile.Verify(backend); err != nil {
		return driverapi.Exit{}, err
	}
	if err := driverapi.ValidateRunSpec(spec); err != nil {
		return driverapi.Exit{}, err
	}
	// Before anything is built: a command the kernel would refuse at its
	// exec is the caller's to fix, and says which field.
	xl, err := execLimits()
	if err != nil {
		return driverapi.Exit{}, err
	}
	if err := checkExecSize(spec, xl); err != nil {
		return driverapi.Exit{}, err
	}
	plan, err := d.plans.decode(spec.Profile.Data)
	if err != nil {
		return driverapi.Exit{}, err
	}
	cwd, err := plan.checkCwd(spec.Cwd)
	if err != nil {
		return driverapi.Exit{}, err
	}
	if err := d.enforceable(plan); err != nil {
		return driverapi.Exit{}, err
	}
	if err := ctx.Err(); err != nil {
		return driverapi.Exit{}, err
	}
	h := d.probe()
	if spec.Layered != nil {
		// Never over the live workspace: the session's sandbox with the
		// overlay, or a refusal.
		if err := d.checkLayered(ctx, plan, spec); err != nil {
			return driverapi.Exit{}, err
		}
		plan.layered = spec.Layered
		exit, err := d.runSession(ctx, plan, cwd, spec, in, streams)
		if errors.Is(err, errNotPooled) {
			return driverapi.Exit{}, layeredRefusal("the session's sandbox could not take the command, and a layered command never runs in a sandbox of its own (over the live workspace)")
		}
		return exit, err
	}
	if h.tier == tierBwrap {
		// The session's sandbox, when the command asks for it.
		if exit, err := d.runSession(ctx, plan, cwd, spec, in, streams); !errors.Is(err, errNotPooled) {
			return exit, err
		}
		// A sandbox prepared for this profile and session, when one waits.
		if exit, err := d.runPooled(ctx, plan, cwd, spec, in, streams, &plan.early); !errors.Is(err, errNotPooled) {
			return exit, err
		}
	}
	// The cgroup comes first: on v1 its directories must exist before the
	// grace period it starts passes (both need the kernel's cgroup mutex).
	cg, err := d.newCommandCgroup(plan)
	if err != nil {
		return driverapi.Exit{}, err
	}
	defer cg.Remove()
	if h.tier == tierLandlock {
		if in != nil {
			return driverapi.Exit{}, streamUnavailable(spec)
		}
		// No bwrap here (tier_linux.go): no placeholders either, the tier
		// refuses workspaces with protected entries instead.
		return d.runCommand(ctx, spec, in, streams, &tierStarter{
			pathInfo: pathInfo{tier: tierLandlock, cg: cg, memBytes: plan.MemoryBytes, mayspawn: plan.AllowSpawn},
			d:        d, plan: plan, cwd: cwd,
		})
	}
	st, release, err := d.newLaunch(plan, cwd, cg, spec)
	if err != nil {
		return driverapi.Exit{}, err
	}
	defer release()
	d.trace.Mark("launch")
	return d.runCommand(ctx, spec, in, streams, st)
}

// newCommandCgroup makes the cgroup of one command of plan (or of a
// prepared sandbox for it), or nil where none is in force.
func (d *Driver) newCommandCgroup(plan launchPlan) (*cgroup.Command, error) {
	h := d.probe()
	lim := cgroup.Limits{MemoryBytes: plan.MemoryBytes, Pids: d.cfg.Options.Pids(), CPUQuotaPercent: d.cfg.Options.CPUQuotaPercent}
	if h.cg.Mode() == cgroup.None || (lim.MemoryBytes == 0 && lim.Pids == 0 && lim.CPUQuotaPercent == 0) {
		return nil, nil
	}
	cg, err := h.cg.Create(lim, d.owner)
	if err != nil {
		return nil, fmt.Errorf("bwrap driver: %w", err)
	}
	if cg.Mode() == cgroup.V1 {
		// The move of bwrap's child into the command's cgroups waits for
		// an RCU grace period; start one now, so it passes while the
		// placeholders are made and bwrap starts.
		go h.cg.PrimeV1(cg)
	}
	return cg, nil
}

// sessionNetFor is the session's network namespace for a command of plan,
// shared with the session's other commands, or nil: without a session (or
// where it cannot be entered) the sandbox gets bwrap's own. release gives
// it back once the command's sandbox has ended.
func (d *Driver) sessionNetFor(plan launchPlan, session string) (_ *netns, release func(), _ error) {
	if plan.SocketMode != socketLoopback || session == "" || d.probe().sessionNet == "" {
		return nil, func() {}, nil
	}
	d.trace.Mark("session network")
	n, release, err := d.nets.Acquire(session)
	d.trace.Mark("session network acquired")
	if err != nil {
		var full *sessionpool.FullError
		if errors.As(err, &full) {
			// A capacity limit, not a failure of the sandbox: the host
			// reports it as resource_exhausted naming the key.
			return nil, nil, &driverapi.LimitError{Limit: "sandbox.linux.max_session_networks", Value: int64(full.Max),
				Reason: err.Error() + "; forget the sessions that are done, wait for a command to end, or raise the limit"}
		}
		return nil, nil, fmt.Errorf("bwrap driver: session network namespace: %w", err)
	}
	return n, release, nil
}

// newLaunch is the starter of a sandbox built for spec, in cgroup cg:
// with the protected entries' placeholders, the /etc view and the
// session's network namespace it holds until release, once the sandbox
// has ended.
func (d *Driver) newLaunch(plan launchPlan, cwd string, cg *cgroup.Command, spec driverapi.RunSpec) (_ *launchStarter, release func(), err error) {
	var releases []func()
	releaseAll := func() {
		for i := len(releases) - 1; i >= 0; i-- {
			releases[i]()
		}
	}
	defer func() {
		if err != nil {
			releaseAll()
		}
	}()
	prot, releaseProt, err := d.protect(plan)
	if err != nil {
		return nil, nil, err
	}
	releases = append(releases, releaseProt)
	plan.prot = prot
	var releaseEtc func()
	plan.etcView, releaseEtc = d.useEtcView(plan)
	releases = append(releases, releaseEtc)
	ns, releaseNet, err := d.sessionNetFor(plan, spec.SessionID)
	if err != nil {
		return nil, nil, err
	}
	releases = append(releases, releaseNet)
	plan.joinNet = ns != nil
	is := d.initSpecFor(&plan, cg, spec.Tty)
	init, err := commandInitArgs(is)
	if err != nil {
		return nil, nil, err
	}
	return &launchStarter{
		pathInfo: pathInfo{tier: tierBwrap, cg: cg, memBytes: plan.MemoryBytes, mayspawn: plan.AllowSpawn},
		d:        d, bwrap: d.probe().bwrap, plan: plan, cwd: cwd, init: init, ns: ns,
	}, releaseAll, nil
}

// initSpecFor is what sandbox-init enforces for plan in cgroup cg, with a
// terminal of tty's size when set; it sets the plan's precompiled seccomp
// descriptor.
func (d *Driver) initSpecFor(plan *launchPlan, cg *cgroup.Command, tty *driverapi.WindowSize) initSpec {
	h := d.probe()
	is := plan.InitSpec()
	is.CommandFD, is.LifelineFD = commandFD, lifelineFD
	// sandbox-init stays as the command's parent: PID 1 of the sandbox,
	// confined and not dumpable, instead of bwrap's unconfined reaper
	// (sandboxinit/supervise_linux.go).
	is.Supervise = true
	if tty != nil {
		is.Tty = &sandboxinit.TtySpec{Rows: tty.Rows, Cols: tty.Cols}
	}
	if cg != nil && cg.Dir(cgroup.Memory) != "" {
		// The cgroup enforces the real limit; RLIMIT_AS only bounds
		// address space, which runtimes reserve far beyond what they use.
		is.RlimitASBytes = addressSpaceCeiling(plan.MemoryBytes)
	}
	if (cg == nil || cg.Dir(cgroup.Pids) == "") && h.nprocPerSandbox() {
		// No pids cgroup: RLIMIT_NPROC, counted in the sandbox's own user
		// namespace, caps its tasks (threads included) instead.
		is.RlimitNproc = d.cfg.Options.Pids()
	}
	notify := !plan.AllowSpawn || sandboxinit.GuardsUnixSockets(&is)
	if notify {
		// Set before the programs are chosen: the target's leaves the
		// fork rules and the unix sockets' calls to the notification
		// filter when there is one (sandboxinit.KeyOf). Its number is
		// settled below.
		is.NotifyFD = lifelineFD + 1
	}
	// The descriptors sandbox-init inherits after commandFD and lifelineFD
	// (and the three of the v1 hand-over), in the order newSandbox passes
	// them and checks: the seccomp programs, then the notify socket.
	next := lifelineFD + 1
	if cg != nil && cg.Mode() == cgroup.V1 && cg.Used() {
		next += 3
	}
	if f := d.precompiled(is); f != nil {
		is.SeccompFD = next
		next++
		plan.seccomp, plan.seccompFD = f, is.SeccompFD
	}
	if notify {
		is.NotifyFD = next
		plan.notifyFD = is.NotifyFD
	}
	return is
}

// viaProxy says whether allow_hosts can be enforced here: the child's only
// way out is the bridge, which needs the seccomp socket gate and Landlock's
// TCP rules (ABI >= 4) pinning connects to the bridge ports.
func (d *Driver) viaProxy(h *hostProbe) (bool, string) {
	switch {
	case h.sandboxErr != nil:
		return false, h.sandboxErr.Error()
	case h.tier == tierLandlock:
		return false, "Landlock tier: no network namespace to hold the bridge"
	case !h.seccomp:
		return false, "seccomp filters cannot be installed here (socket gate)"
	case h.landlock < 4:
		return false, fmt.Sprintf("Landlock ABI %d lacks TCP connect rules (ABI 4)", h.landlock)
	}
	return true, ""
}

// checkCwd accepts a canonical directory inside the workspace or a grant,
// and refuses any other spelling of one (driverapi.CheckCanonicalDir).
func (p launchPlan) checkCwd(cwd string) (string, error) {
	c, err := exactPath("cwd", cwd)
	if err != nil {
		return "", err
	}
	for _, root := range append(append([]string{p.Workspace}, p.FSRead...), p.FSWrite...) {
		if driverapi.PathWithin(c, root) {
			return c, nil
		}
	}
	return "", &driverapi.InvalidSpecError{Field: "cwd", Reason: fmt.Sprintf("%q is outside the workspace and every granted path", c)}
}

// commandArgv is the child's argv: its program, then its arguments.
func commandArgv(spec driverapi.RunSpec) []string {
	return append([]string{spec.Program}, spec.Args...)
}

// envList renders the child's environment exactly as given.
func envList(env []driverapi.EnvVar) []string {
	// A non-nil empty slice: exec.Cmd inherits the host environment for nil.
	out := make([]string, 0, len(env))
	for _, e := range env {
		out = append(out, e.Name+"="+e.Value)
	}
	return out
}

// launchStarter starts a sandbox built for its command: bwrap (or the
// nsenter chain into the session's network namespace ns) with the
// command's record on its descriptor.
type launchStarter struct {
	pathInfo
	d     *Driver
	bwrap string
	plan  launchPlan
	cwd   string
	init  []string
	ns    *netns
	sb    *sandbox
	done  <-chan sandboxResult
}

func (s *launchStarter) start(_, runCtx context.Context, r *runState) error {
	// runCtx bounds bwrap itself (exec.CommandContext): the timeout
	// counts the sandbox's setup, which is the command's.
	sb, err := s.d.newSandbox(runCtx, s.bwrap, s.plan, s.cwd, s.init, s.cg, s.ns, commandArgv(r.spec), envList(r.spec.Env))
	if err != nil {
		return err
	}
	s.sb, s.notif = sb, sb.notif
	r.attach(&s.pathInfo, sb.life, false)
	if r.spec.CommandID != "" {
		for _, sig := range s.plan.early {
			// Sent while a prepared sandbox's hand-over failed: they wait
			// on this lifeline for the supervisor, as any sent now would.
			_ = sb.life.Signal(sig)
		}
	}
	sb.cmd.Stdin, sb.cmd.Stdout, sb.cmd.Stderr = r.io.stdin, r.io.stdout, r.io.stderr
	forked := make(chan struct{})
	s.done = s.d.startSandbox(sb, s.plan, func() { close(forked) })
	<-forked
	return nil
}

func (s *launchStarter) wait(context.Context) ending {
	// bwrap is killed when runCtx ends (exec.CommandContext), and every
	// process of the sandbox with it (its PID namespace).
	r := <-s.done
	return ending{state: s.sb.cmd.ProcessState, waitErr: r.err, startErr: r.startErr}
}

func (s *launchStarter) startError(err error, gate *setupGate) error {
	return s.sb.startError(err, gate, s.cg, s.memBytes)
}

func (s *launchStarter) end() { s.sb.close() }

// sandbox is one bwrap (or nsenter chain) about to start or started, with
// the descriptors it inherits.
type sandbox struct {
	cmd     *exec.Cmd
	life    *lifeline
	cmdFile *os.File // the command record (commandFD)
	pinned  []*os.File
	ns      *netns
	// viaNsenter: cmd is the unprivileged nsenter chain into ns; else
	// bwrap itself, under the PID guard when guarded.
	viaNsenter, guarded bool
	// The v1 cgroup hand-over's pipes (joinV1), when v1.
	v1                               bool
	cg                               *cgroup.Command
	blockR, blockW, statusR, statusW *os.File
	// notifyRemote is sandbox-init's end of the notify socket; notif
	// answers what arrives on the driver's (notify_linux.go). Both nil
	// when the command may spawn.
	notifyLocal, notifyRemote *os.File
	notif                     *notifier
	// started is closed once the start was attempted: cmd.Process is set
	// (or never will be) and may be read.
	started chan struct{}
}

// sandboxResult is how a sandbox's process ended: startErr when it never
// ran (or the cgroup hand-over failed), else Wait's error.
type sandboxResult struct {
	err      error
	startErr error
}

// newSandbox builds the command that runs bwrap for plan, with the
// command argv and its environment env on their descriptor (none yet for
// a prepared sandbox: nil argv), the lifeline, the v1 cgroup pipes, the
// seccomp programs and the pinned paths, in the order the init spec says.
// ctx bounds the process (exec.CommandContext). The caller sets stdio.
func (d *Driver) newSandbox(ctx context.Context, bwrapPath string, plan launchPlan, cwd string, init []string,
	cg *cgroup.Command, ns *netns, argv, env []string) (_ *sandbox, err error) {
	sb := &sandbox{ns: ns, cg: cg, guarded: true}
	defer func() {
		if err != nil {
			sb.close()
		}
	}()
	// fds 3 and 4 in bwrap (commandFD, lifelineFD): the child's argv and
	// environment, which apply only at the target's execve, and the
	// lifeline.
	if sb.life, err = newLifeline(); err != nil {
		return nil, err
	}
	if sb.cmdFile, err = commandMemfd(argv, env); err != nil {
		return nil, err
	}
	extraFiles := []*os.File{sb.cmdFile, sb.life.remote}

	sb.v1 = cg != nil && cg.Mode() == cgroup.V1 && cg.Used()
	var extra []string
	if plan.ProxySocket == "" {
		// No reaper of bwrap's: sandbox-init is PID 1. The allow_hosts
		// chain starts with the network supervisor, which needs Landlock
		// (ABI >= 4) whose ptrace restriction keeps the command away from
		// bwrap's reaper there; sandbox-init is the subreaper below it.
		extra = append(extra, "--as-pid-1")
	}
	switch {
	case plan.sessionSupervisor && d.probe().sessionUser:
		// Unprivileged: the supervisor as uid 0 of bwrap's user namespace,
		// which owns the sandbox's mounts, making each command's user
		// namespace (sandboxinit/sessionuser_linux.go says why this holds).
		extra = append(extra, sessionUserFlags()...)
		if plan.layerInside != nil {
			// For the overlay's mount alone: the supervisor drops it
			// before it starts any command (sandboxinit's
			// mountSessionOverlay says why it needs it and how it goes).
			extra = append(extra, "--cap-add", "CAP_DAC_OVERRIDE")
		}
	case plan.prepared:
		// The hand-over's mounts (sandboxinit/handover.go): sandbox-init
		// keeps these two in the sandbox's user namespace until it has
		// made them, and drops them on every thread before anything of
		// the command's runs.
		extra = append(extra, "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP")
		fallthrough
	default:
		extra = append(extra, d.probe().userns...)
	}
	if sb.v1 {
		if sb.blockR, sb.blockW, err = os.Pipe(); err != nil {
			return nil, err
		}
		if sb.statusR, sb.statusW, err = os.Pipe(); err != nil {
			return nil, err
		}
		extra = append(extra, "--block-fd", "5", "--json-status-fd", "6")
		// fds 5 and 6 in bwrap; 7 is bwrap's own copy of the status pipe's
		// read end, so its child-pid write never meets a closed pipe
		// (SIGPIPE) when the driver dies during setup: a bwrap killed
		// there would leave its child blocked for good before it reaches
		// sandbox-init.
		extraFiles = append(extraFiles, sb.blockR, sb.statusW, sb.statusR)
	}
	seccompFD := 0
	if plan.seccomp != nil {
		// Shared by every command with the same programs: never closed here.
		extraFiles = append(extraFiles, plan.seccomp)
		seccompFD = 2 + len(extraFiles)
		if seccompFD != plan.seccompFD {
			return nil, fmt.Errorf("bwrap driver: the seccomp programs would be descriptor %d, sandbox-init is told %d", seccompFD, plan.seccompFD)
		}
	}
	if plan.notifyFD > 0 {
		if sb.notifyLocal, sb.notifyRemote, err = notifySocket(); err != nil {
			return nil, err
		}
		extraFiles = append(extraFiles, sb.notifyRemote)
		if fd := 2 + len(extraFiles); fd != plan.notifyFD {
			return nil, fmt.Errorf("bwrap driver: the notify socket would be descriptor %d, sandbox-init is told %d", fd, plan.notifyFD)
		}
		// Answered from now on: a prepared sandbox's waiting child sends
		// its listener before its command arrives.
		local := sb.notifyLocal
		sb.notifyLocal = nil
		if sb.notif, err = startNotifier(local, nil, newUnixGuard(plan.SocketMode, plan.BridgePorts)); err != nil {
			return nil, err
		}
	}
	if err := ownInitDir(plan); err != nil {
		return nil, err
	}
	pinned, fdOf, err := pinPaths(plan, 3+len(extraFiles))
	if err != nil {
		return nil, err
	}
	sb.pinned = pinned
	extraFiles = append(extraFiles, pinned...)
	initBinary := d.cfg.InitBinary
	tail := []string{"--", initPath}
	if plan.ProxySocket != "" {
		// The bridge lives in the driver binary; it starts first and runs
		// the sandbox-init chain as its child.
		initBinary = d.cfg.DriverBinary
		tail = append(tail, netSupervisorCommand, "--socket", proxySocketPath)
		for _, port := range plan.BridgePorts {
			tail = append(tail, "--listen", "127.0.0.1:"+strconv.Itoa(int(port)))
		}
		tail = append(tail, "--lifeline", strconv.Itoa(lifelineFD),
			"--fd", strconv.Itoa(commandFD), "--fd", strconv.Itoa(lifelineFD))
		if seccompFD > 0 {
			tail = append(tail, "--fd", strconv.Itoa(seccompFD))
		}
		if plan.notifyFD > 0 {
			tail = append(tail, "--fd", strconv.Itoa(plan.notifyFD))
		}
		tail = append(tail, "--")
	}
	args := plan.BwrapFlags(cwd, initBinary, fdOf, d.probe().procCover, extra...)
	args = append(args, tail...)
	args = append(args, sandboxInitCommand)
	args = append(args, init...)

	prog, progName := bwrapPath, "bwrap"
	sb.viaNsenter = ns != nil && d.probe().sessionNet == sessionNetNsenter
	if sb.viaNsenter {
		// Unprivileged: nsenter enters the session's user and network
		// namespaces, unshare makes the setup guard's namespaces inside
		// them, bwrap runs below (sessionnet_linux.go). The descriptors
		// go on to bwrap, whose sandbox-init closes them.
		h := d.probe()
		userFD, netFD := 3+len(extraFiles), 4+len(extraFiles)
		extraFiles = append(extraFiles, ns.user, ns.net)
		args = nsenterChain(h.unshare, bwrapPath, userFD, netFD, args...)
		prog, progName, sb.guarded = h.nsenter, "nsenter", false
	}
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Args[0] = progName
	// bwrap gets nothing of the driver's environment nor of the child's
	// (see launchEnv): its PID-1 reaper keeps the environment it was
	// started with, readable inside as /proc/1/environ.
	cmd.Env = launchEnv()
	cmd.Dir = "/"
	cmd.WaitDelay = waitDelay
	// No Pdeathsig here: --die-with-parent makes bwrap arm its own right
	// after it cloned the sandbox's first process and just before it lets
	// that process go on. Killed earlier (while cloning, which takes
	// milliseconds), it would leave that process waiting forever for a
	// go-ahead that never comes; unkilled, it lets it go on, and
	// sandbox-init finds the lifeline closed and starts nothing.
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	// ...and for the microseconds between that arming and the go-ahead,
	// bwrap is PID 1 of a namespace of its own: its death, whenever, ends
	// everything it cloned (pidguard_linux.go).
	if sb.guarded {
		d.probe().guard.apply(cmd.SysProcAttr)
	}
	cmd.ExtraFiles = extraFiles
	if cg != nil && cg.Mode() == cgroup.V2 {
		// CLONE_INTO_CGROUP: bwrap is born inside the command's cgroup, so
		// nothing of the sandbox ever runs outside its limits.
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, cg.FD()
	}
	sb.cmd = cmd
	return sb, nil
}

// process is the started process, or nil when its start failed; it waits
// for the start to have been attempted (startSandbox).
func (sb *sandbox) process() *os.Process {
	<-sb.started
	return sb.cmd.Process
}

// closeSetup closes the driver's copies of what bwrap inherited: once it
// has started (it has its own) or will never start.
func (sb *sandbox) closeSetup() {
	for _, f := range sb.pinned {
		f.Close()
	}
	for _, f := range []*os.File{sb.cmdFile, sb.blockR, sb.statusW} {
		if f != nil {
			f.Close()
		}
	}
	if sb.life != nil {
		sb.life.remote.Close()
	}
	if sb.notifyRemote != nil {
		sb.notifyRemote.Close()
	}
}

// close releases everything the driver holds for sb (the lifeline last).
func (sb *sandbox) close() {
	sb.closeSetup()
	for _, f := range []*os.File{sb.blockW, sb.statusR, sb.notifyLocal} {
		if f != nil {
			f.Close()
		}
	}
	sb.notif.finish()
	if sb.life != nil {
		sb.life.Close()
	}
}

// startError is the error of a sandbox whose start failed (r.startErr).
func (sb *sandbox) startError(err error, gate *setupGate, cg *cgroup.Command, memBytes uint64) error {
	cmd := sb.cmd
	if cmd.ProcessState != nil && !sb.life.Started() {
		// bwrap ran but the hand-over failed: say what bwrap said.
		if oom := cg.SetupOOM(memBytes); oom != nil {
			err = fmt.Errorf("%w: %w", oom, err)
		}
		return &setupError{Status: cmd.ProcessState.String(), Message: gate.message(), Err: err}
	}
	return fmt.Errorf("bwrap driver: start sandbox: %w", err)
}

// startSandbox starts sb on a goroutine that keeps its OS thread locked
// until the sandbox has been reaped, and reports on the channel how it
// ended. afterStart runs once the process exists (or failed to).
func (d *Driver) startSandbox(sb *sandbox, plan launchPlan, afterStart func()) <-chan sandboxResult {
	done := make(chan sandboxResult, 1)
	cmd := sb.cmd
	sb.started = make(chan struct{})
	go func() {
		// Pdeathsig fires when the forking OS thread exits, not the process
		// (golang/go#27505). This goroutine keeps its thread locked from
		// fork to reap and never unlocks it, so the runtime cannot retire
		// the thread (and kill the sandbox) while the command runs; the
		// thread exits with the goroutine, after Wait.
		runtime.LockOSThread()
		start := cmd.Start
		if sb.ns != nil && !sb.viaNsenter {
			// As root: this thread enters the session's namespace, bwrap
			// forked from it starts there, and the thread goes back to
			// its own namespace (it may be the main thread, which the
			// runtime keeps even when its goroutine exits locked, and
			// which would hold the namespace for the driver's life).
			start = func() error { return startInNetns(cmd, sb.ns) }
		}
		var err error
		if readOnlyDevicesNeeded(sb.viaNsenter) {
			// The device nodes bwrap binds are the host's, owned by the
			// root command: bound read-only (devices_linux.go).
			err = startWithReadOnlyDevices(start)
		} else {
			err = start()
		}
		// Recovery waits for this sandbox to be gone before it removes
		// placeholders a dead driver left (janitor_linux.go). A prepared
		// sandbox is recorded while it is built, off its command's path,
		// and before it can be handed one: that command's placeholders
		// are only known then.
		unrecord := func() {}
		if err == nil && (plan.prepared || plan.prot != nil && len(plan.prot.missing) > 0) {
			unrecord = d.journal.RecordUser(cmd.Process.Pid)
		}
		// bwrap has its copies (or never will): the driver's go now.
		sb.closeSetup()
		close(sb.started)
		if afterStart != nil {
			afterStart()
		}
		if err != nil {
			done <- sandboxResult{startErr: err}
			return
		}
		if sb.v1 {
			if err := joinV1(sb.cg, cmd.Process.Pid, sb.statusR, sb.blockW); err != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				unrecord()
				done <- sandboxResult{startErr: err}
				return
			}
		}
		werr := cmd.Wait()
		// bwrap is reaped: the record goes before the result does, so
		// whoever waits for the result (destroy, Close) finds none left.
		unrecord()
		done <- sandboxResult{err: werr}
	}()
	return done
}

// outputExit is an Exit with what the command wrote.
func outputExit(dur time.Duration, stdout, stderr *driverapi.BudgetWriter) driverapi.Exit {
	return driverapi.Exit{
		Duration:    dur,
		StdoutBytes: stdout.Total(),
		StderrBytes: stderr.Total(),
		Truncated:   stdout.Truncated() || stderr.Truncated(),
	}
}

// usageOf is the resource use of a supervisor's status record.
func usageOf(rec sandboxinit.Status) driverapi.ResourceUsage {
	return driverapi.ResourceUsage{MaxRSSKB: rec.MaxRSSKB, UserMS: rec.UserUS / 1000, SystemMS: rec.SystemUS / 1000}
}

// setWaitStatus sets exit's code and signal from the command's own wait
// status.
func setWaitStatus(exit *driverapi.Exit, ws unix.WaitStatus) {
	if ws.Signaled() {
		exit.Signal = int32(ws.Signal())
		exit.ExitCode = 128 + exit.Signal
		return
	}
	exit.ExitCode = int32(ws.ExitStatus())
}

// exitDetails records the tier and the cgroup a command ran under, and
// whether the cgroup's OOM killer ended it.
func exitDetails(exit *driverapi.Exit, cg *cgroup.Command, tier string) {
	// The tier is chosen per driver start and recorded per command: the
	// audit shows what each command ran under.
	exit.Details = map[string]string{"tier": tier}
	if cg != nil {
		exit.OOMKilled = cg.OOMKilled()
		exit.Details["cgroup"], exit.Details["cgroup_name"] = string(cg.Mode()), cg.Name()
	}
}

// joinV1 waits for bwrap to report its child's pid, moves that process
// into the command's v1 cgroups and only then lets it go on. bwrap's child
// blocks on --block-fd before it forks the reaper or execs anything, so
// every process of the sandbox starts inside the cgroups.
func joinV1(cg *cgroup.Command, bwrapPID int, status io.Reader, block *os.File) error {
	dec := json.NewDecoder(io.LimitReader(status, 1<<16))
	for {
		var m map[string]json.RawMessage
		if err := dec.Decode(&m); err != nil {
			return fmt.Errorf("bwrap did not report its child (json-status): %w", err)
		}
		raw, ok := m["child-pid"]
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil || pid < 1 {
			return fmt.Errorf("bwrap reported child-pid %s", raw)
		}
		// bwrap counts in its own PID namespace (the guard's, if any).
		if pid, err = childHostPID(bwrapPID, pid); err != nil {
			return err
		}
		if err := cg.Join(pid); err != nil {
			return err
		}
		if _, err := block.Write([]byte{'1'}); err != nil {
			return fmt.Errorf("release bwrap's child: %w", err)
		}
		return block.Close()
	}
}

// rawBwrapCommand returns bwrap with exactly the namespace and mount flags
// Run would use for spec, running spec.Program directly: no sandbox-init
// (so no Landlock, seccomp or rlimits), no cgroup, no output budget. It
// exists to measure what the driver adds on top of bubblewrap (the bench
// command through rawRunsCommand, and the package benchmarks); never use it
// to run untrusted code.
//
// The caller must call release once the command has ended: it removes the
// protected-entry placeholders the command needed.
func (d *Driver) rawBwrapCommand(ctx context.Context, spec driverapi.RunSpec) (cmd *exec.Cmd, release func(), err error) {
	if err := spec.Profile.Verify(backend); err != nil {
		return nil, nil, err
	}
	if err := driverapi.ValidateRunSpec(spec); err != nil {
		return nil, nil, err
	}
	plan, err := decodePlan(spec.Profile.Data)
	if err != nil {
		return nil, nil, err
	}
	cwd, err := plan.checkCwd(spec.Cwd)
	if err != nil {
		return nil, nil, err
	}
	h := d.probe()
	if h.sandboxErr != nil {
		return nil, nil, &unavailableError{Feature: "sandbox", Reason: h.sandboxErr.Error(), Fix: h.sandboxFix}
	}
	if h.tier == tierLandlock {
		return nil, nil, &unavailableError{Feature: "sandbox", Reason: "raw bwrap: " + h.tierWhy, Fix: tierFix}
	}
	prot, release, err := d.protect(plan)
	if err != nil {
		return nil, nil, err
	}
	plan.prot = prot
	var releaseEtc func()
	plan.etcView, releaseEtc = d.useEtcView(plan)
	pinned, fdOf, err := pinPaths(plan, 3)
	if err != nil {
		releaseEtc()
		release()
		return nil, nil, err
	}
	// The child's environment is set by bwrap after it started, so the
	// loader variables in it act on the program only (see launchEnv).
	envArgs := []string{"--clearenv"}
	for _, e := range spec.Env {
		envArgs = append(envArgs, "--setenv", e.Name, e.Value)
	}
	// The program, its arguments and its environment go on bwrap's own
	// command line here, as a plain bwrap invocation has them: bwrap
	// refuses more than 9000 arguments (three per variable), which the
	// bench's small command is far from. A run puts them on the command
	// record's descriptor instead (commandMemfd).
	args := append(plan.BwrapFlags(cwd, "", fdOf, h.procCover, envArgs...), "--", spec.Program)
	args = append(args, spec.Args...)
	cmd = exec.CommandContext(ctx, h.bwrap, args...)
	cmd.Env = launchEnv()
	cmd.ExtraFiles = pinned
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	unprotect := release
	release = func() {
		for _, f := range pinned {
			f.Close()
		}
		unprotect()
		releaseEtc()
	}
	return cmd, release, nil
}

// runGroup is the runs in flight. A plugin whose host shuts it down stops
// serving at once (its handlers' contexts are cancelled, and nothing waits
// for them) and exits after Close: a run still killing its sandbox then
// went with the process, and the sandbox ended on its own (bwrap's parent-
// death signal), after the host had been told the driver stopped. Close
// ends every run still going (its context is cancelled, so its bwrap is
// killed and reaped, and its output drained) and waits for it, bounded.
//
// It also counts each session's runs, so that ForgetSession can wait for
// them: the host's call of a cancelled command returns as soon as its
// context ends, while the driver may still be killing the sandbox and
// removing the placeholders it made in the workspace. A host that deletes
// the session's workspace right after forgetting it would race with that
// clean-up (an entry made or removed under its removal).
type runGroup struct {
	mu       sync.Mutex
	closed   bool
	wg       sync.WaitGroup
	end      context.Context
	cancel   context.CancelFunc
	sessions map[string]*sessionRuns
}

// sessionRuns is the count of one session's runs in flight; idle is
// closed when it drops to zero (the entry is then removed).
type sessionRuns struct {
	n    int
	idle chan struct{}
}

// enter registers a run: the returned context also ends when the group is
// closed, and leave must be called when the run returns. Runs after close
// are not tracked (Close has returned).
func (g *runGroup) enter(ctx context.Context, session string) (context.Context, func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ctx, func() {}
	}
	if g.end == nil {
		g.end, g.cancel = context.WithCancel(context.Background())
	}
	g.wg.Add(1)
	var sr *sessionRuns
	if session != "" {
		if g.sessions == nil {
			g.sessions = map[string]*sessionRuns{}
		}
		sr = g.sessions[session]
		if sr == nil {
			sr = &sessionRuns{idle: make(chan struct{})}
			g.sessions[session] = sr
		}
		sr.n++
	}
	rctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(g.end, cancel)
	return rctx, func() {
		stop()
		cancel()
		if sr != nil {
			g.mu.Lock()
			if sr.n--; sr.n == 0 {
				close(sr.idle)
				delete(g.sessions, session)
			}
			g.mu.Unlock()
		}
		g.wg.Done()
	}
}

// waitSession waits until no run of session is in flight, or ctx ends.
func (g *runGroup) waitSession(ctx context.Context, session string) error {
	g.mu.Lock()
	sr := g.sessions[session]
	g.mu.Unlock()
	if sr == nil {
		return nil
	}
	select {
	case <-sr.idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close ends the runs in flight and waits for them, at most bound.
func (g *runGroup) close(bound time.Duration) {
	g.mu.Lock()
	g.closed = true
	cancel := g.cancel
	g.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// runsEndWait bounds how long Close waits for the runs it ended: a killed
// bwrap is reaped at once, and its output drained within waitDelay.
const runsEndWait = 5 * waitDelay

// ownInitDir makes sure the sandbox's own tmpfs over initDir (BwrapFlags)
// has its mount point when a grant covers initDir: bwrap cannot create it
// inside the grant's read-only mount. Root creates it (private, as its
// state directory there is); another user cannot, and is told what to do
// rather than getting bwrap's setup failure.
func ownInitDir(plan launchPlan) error {
	if !plan.coversInitDir() {
		return nil
	}
	if _, err := os.Lstat(initDir); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("bwrap driver: the sandbox's own directory %s: %w", initDir, err)
	}
	if os.Geteuid() == 0 {
		if err := os.Mkdir(initDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("bwrap driver: the sandbox's own directory %s: %w", initDir, err)
		}
		return nil
	}
	return &driverapi.InvalidSpecError{Field: "fs_read", Reason: fmt.Sprintf(
		"a grant of %s needs the directory %s on the host (the sandbox mounts its own files there) and this user cannot create it: create it as root (mkdir -m 700 %s) or grant narrower paths",
		filepath.Dir(initDir), initDir, initDir)}
}
