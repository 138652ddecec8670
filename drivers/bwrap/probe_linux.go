//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
)

// cgroupFix is how a user without writable cgroups gets resource limits.
const cgroupFix = "run the driver as root, or inside a delegated cgroup v2 subtree " +
	"(systemd-run --user --scope -p Delegate=yes ...) with the memory, pids and cpu controllers"

// hostProbe is what the driver found out about this host, once.
type hostProbe struct {
	bwrap        string
	bwrapVersion string
	// sandboxErr says why no sandbox can be built here (nil: it can).
	sandboxErr error
	sandboxFix string
	landlock   int
	seccomp    bool
	cg         *cgroup.System
	kernel     string
	// guard is how bwrap is started (pidguard_linux.go).
	guard pidGuard
	// procCover is the bwrap argv covering /proc's host-wide entries
	// (procCoverArgs): the host's /proc is looked at once per driver.
	procCover []string
	// userns are bwrap flags that keep the sandbox from making user
	// namespaces of its own (--disable-userns), where bwrap gives it one.
	userns    []string
	usernsWhy string // why userns is empty, for the report
	// sessionUser: an unprivileged driver's session sandboxes run as uid
	// 0 of bwrap's user namespace and make each command's own
	// (sandboxinit/sessionuser_linux.go); sessionUserWhy says why not.
	sessionUser    bool
	sessionUserWhy string
	// sessionOverlayWhy says why such a session sandbox's supervisor
	// cannot mount a layered session's overlay (probeSessionOverlay's
	// trial failed), or "": layered workspaces are then refused, typed.
	sessionOverlayWhy string
	// sessionOverlayFS is the file system that trial mounted the upper
	// on, when it passed (sessionOverlayTried): a layer whose upper is on
	// another is tried there before its sandbox is built (checkUpperFS).
	sessionOverlayFS    fsIdentity
	sessionOverlayTried bool
	// tier is how commands run: tierBwrap, or tierLandlock where bwrap
	// cannot create namespaces and fallback = "landlock" (tier_linux.go).
	tier string
	// tierWhy says why the Landlock tier is in use (bwrap's refusal).
	tierWhy string
	// sessionNet is how the commands of a session share their network
	// namespace under network none (sessionnet_linux.go): sessionNetSetns,
	// sessionNetNsenter, or "" (each command has its own; sessionNetWhy
	// says why). nsenter and unshare are the tools sessionNetNsenter runs.
	sessionNet, sessionNetWhy string
	nsenter, unshare          string
	// probeCached says a trial was skipped on the probe cache's word
	// (probecache_linux.go); probeCacheWhy why the cache is off, if it is.
	probeCached   bool
	probeCacheWhy string
}

// Prepare probes the host now instead of on first use (driverapi.Preparer:
// the plugin calls it in the background as it starts, so the probe, a trial
// sandbox among other things, overlaps the host's handshake instead of
// delaying the first command). Safe to call any number of times,
// concurrently with everything else.
//
// It also removes what a killed driver left: its placeholders in
// workspaces (protect_linux.go) and, through the probe, its cgroups.
func (d *Driver) Prepare() {
	d.trace.Mark("Prepare")
	if d.cfg.OneCommand {
		// The one command all but always needs the janitor (its
		// placeholders, the /etc view): started now, its process start
		// overlaps the handshake instead of delaying the command. A
		// placeholder made before it is up waits for it (janitorOnce).
		go d.janitorOnce.Do(d.startJanitor)
	}
	d.probe()
	d.recoverOnce.Do(d.recoverPlaceholders)
	if d.cfg.OneCommand {
		d.warmForOneCommand()
	}
	d.trace.Mark("Prepare done")
}

// probe inspects the host on first use: bwrap's presence and version,
// whether it can create the namespaces here, Landlock, seccomp, cgroups.
func (d *Driver) probe() *hostProbe {
	d.once.Do(func() {
		d.trace.Mark("probe")
		defer d.trace.Mark("probe done")
		h := &hostProbe{landlock: landlockABI(), seccomp: seccompAvailable(), procCover: procCoverArgs()}
		var uts unix.Utsname
		if unix.Uname(&uts) == nil {
			h.kernel = unix.ByteSliceToString(uts.Release[:])
		}
		// cgroups are looked at while bwrap is tried: independent, and
		// both mostly wait on the kernel.
		cgDone := make(chan *cgroup.System, 1)
		go func() { cgDone <- d.probeCgroups() }()
		var cache *probeCache
		h.bwrap, h.bwrapVersion, h.guard, h.sandboxErr, h.sandboxFix = probeBwrap(d.cfg.Options.BwrapPath, h.procCover,
			func(path string) *probeCache { cache = d.openProbeCache(path); return cache })
		h.tier = tierBwrap
		var nsErr *namespaceError
		if errors.As(h.sandboxErr, &nsErr) && d.cfg.Options.Fallback == fallbackLandlock {
			// Only the namespaces are missing, and the configuration
			// asks for the Landlock tier there.
			h.tier, h.tierWhy = tierLandlock, h.sandboxErr.Error()
			h.sandboxErr, h.sandboxFix = landlockTierUsable(h.landlock, h.seccomp)
		}
		if d.optErr != nil {
			// Fail closed: nothing runs on a configuration the driver refused.
			h.sandboxErr, h.sandboxFix = toConfigError(d.optErr), "correct [sandbox.linux] in the configuration"
		}
		if h.sandboxErr == nil {
			if fi, err := os.Stat(d.cfg.InitBinary); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
				h.sandboxErr = fmt.Errorf("driver binary %s cannot serve as sandbox-init", d.cfg.InitBinary)
				h.sandboxFix = "reinstall aleph-driver-bwrap"
			}
		}
		if h.sandboxErr == nil && h.tier == tierBwrap {
			h.userns, h.usernsWhy = probeDisableUserns(h.bwrap, h.guard, h.procCover, cache)
			h.sessionUser, h.sessionUserWhy = probeSessionUser(h.bwrap, d.cfg.InitBinary, h.guard, h.procCover, cache, h.seccomp,
				d.cfg.OneCommand && d.cfg.Options.SessionSandbox != sessionSandboxAlways)
			if h.sessionUser && d.cfg.Options.SessionSandbox != sessionSandboxOff && overlayAvailable() {
				opts := overlayOptionsUserNS
				if d.cfg.overlayTrialOptions != "" {
					opts = d.cfg.overlayTrialOptions
				}
				parent := d.layerMountParent()
				// The parent may be reached through a link (the
				// trial's MkdirTemp follows it too).
				if real, err := filepath.EvalSymlinks(parent); err == nil {
					parent = real
				}
				if fs, err := fsIdentityOf(parent); err != nil {
					h.sessionOverlayWhy = "the overlay trial's directory: " + err.Error()
				} else {
					h.sessionOverlayWhy = probeSessionOverlay(h.bwrap, d.cfg.InitBinary, parent, fs, opts, h.guard, h.procCover, cache)
					h.sessionOverlayFS, h.sessionOverlayTried = fs, h.sessionOverlayWhy == ""
				}
			}
		}
		if cache != nil {
			h.probeCached, h.probeCacheWhy = cache.used, cache.why
			if h.sandboxErr == nil && h.tier == tierBwrap {
				cache.save(d.cfg.StateDir)
			}
		}
		d.trace.Mark("probe: bwrap tried")
		h.cg = <-cgDone
		d.trace.Mark("probe: cgroups found")
		if d.cfg.OneCommand && h.sandboxErr == nil && h.tier == tierBwrap {
			// A session's network namespace is shared by its commands
			// running at the same time; this process runs one. Holding one
			// would cost a process start here and another at the command.
			h.sessionNetWhy = "one command per driver process (" + driverapi.OneCommandEnv + ")"
		} else {
			h.sessionNet, h.sessionNetWhy = d.probeSessionNet(h)
		}
		d.trace.Mark("probe: session network decided")
		if h.sandboxErr == nil {
			if err := d.cgroupSettingsErr(h); err != nil {
				// Fail closed: a limit the configuration asks for and
				// this host cannot enforce must not turn into commands
				// that silently run without it.
				h.sandboxErr, h.sandboxFix = err, cgroupSettingsFix
			}
		}
		d.host = h
	})
	return d.host
}

// cgroupSettingsFix is the way out of cgroupSettingsErr's refusals.
const cgroupSettingsFix = "change [sandbox.linux] to what this host can enforce (aleph-sandbox doctor shows it: " +
	"cgroup = \"auto\" picks what is there), or " + cgroupFix

// cgroupSettingsErr refuses configured limits the host cannot enforce: an
// explicit cgroup mode ("v1", "v2") that is not available, a pids limit
// under an explicit mode without the pids controller, and a CPU quota
// without the cpu controller. (With cgroup = "auto", the default max_pids
// is best effort, as the capability report says.)
func (d *Driver) cgroupSettingsErr(h *hostProbe) error {
	o := d.cfg.Options
	explicit := o.Cgroup == cgroupV1 || o.Cgroup == cgroupV2
	switch {
	case explicit && h.cg.Mode() != cgroup.Mode(o.Cgroup):
		return fmt.Errorf("[sandbox.linux] cgroup = %q cannot be enforced here: %s", o.Cgroup, h.cg.Reason("*"))
	case explicit && o.Pids() > 0 && !h.cg.Has(cgroup.Pids) && !h.nprocPerSandbox():
		return fmt.Errorf("[sandbox.linux] max_pids = %d cannot be enforced with cgroup = %q: %s", o.Pids(), o.Cgroup, h.cg.Reason(cgroup.Pids))
	case o.CPUQuotaPercent > 0 && !h.cg.Has(cgroup.CPU):
		return fmt.Errorf("[sandbox.linux] cpu_quota_percent = %d cannot be enforced here: %s", o.CPUQuotaPercent, h.cg.Reason(cgroup.CPU))
	}
	return nil
}

// probeCgroups finds the cgroup mode and sweeps what killed drivers left.
func (d *Driver) probeCgroups() *cgroup.System {
	self, err := os.ReadFile(d.cfg.SelfCgroup)
	if err != nil {
		return cgroup.Unavailable("cannot read " + d.cfg.SelfCgroup)
	}
	cs := cgroup.Detect(d.cfg.CgroupRoot, self, cgroup.Mode(d.cfg.Options.Cgroup), os.Getpid())
	cs.Sweep()
	return cs
}

// cacheFor opens the probe cache for the bwrap found (probecache_linux.go);
// nil means no cache.
func probeBwrap(path string, procCover []string, cacheFor func(bwrap string) *probeCache) (bin, version string, guard pidGuard, err error, fix string) {
	const install = "install bubblewrap (apt install bubblewrap / dnf install bubblewrap)"
	configured := path != ""
	if path == "" {
		p, lerr := exec.LookPath("bwrap")
		if lerr != nil {
			return "", "", pidGuard{mode: guardNone}, errors.New("bwrap is not installed (not found on PATH)"), install
		}
		path = p
	}
	guard = choosePIDGuard(path)
	var cache *probeCache
	if cacheFor != nil {
		cache = cacheFor(path)
	}
	if v, ok := cache.version(); ok && cache.confirmed(trialGuard(guard.mode)) {
		// This very bwrap printed v and built a sandbox with this very
		// guard on a host with this key: neither is run again.
		cache.used = true
		return path, v, guard, nil, ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The version query and the trial sandbox are independent: run them
	// side by side.
	type versionResult struct {
		out []byte
		err error
	}
	vc := make(chan versionResult, 1)
	go func() {
		out, err := exec.CommandContext(ctx, path, "--version").Output()
		vc <- versionResult{out, err}
	}()
	trialErr := trialSandbox(ctx, path, guard, procCover)
	if trialErr != nil && guard.mode != guardNone {
		if plainErr := trialSandbox(ctx, path, pidGuard{mode: guardNone}, procCover); plainErr == nil {
			// bwrap works, only not inside the guard's namespaces (a seccomp
			// profile or LSM of a container refusing them): run unguarded and
			// say so, rather than not at all.
			guard, trialErr = pidGuard{mode: guardNone, why: "the guard's namespaces are refused here: " + trialErr.Error()}, nil
		} else {
			// bwrap's own words say more than the guard's failed clone.
			trialErr = plainErr
		}
	}
	v := <-vc
	out := strings.TrimSpace(string(v.out))
	if v.err == nil && !strings.HasPrefix(out, "bubblewrap") {
		v.err = fmt.Errorf("--version printed %q, not \"bubblewrap VERSION\"", firstLine(out, 80))
	}
	if v.err != nil {
		if configured {
			// Installing bubblewrap would not help: the configuration
			// points somewhere else.
			return path, "", guard, fmt.Errorf("the configured bwrap_path %q is not a working bubblewrap: %s --version: %v", path, path, v.err),
				"set [sandbox.linux] bwrap_path to the bubblewrap binary (its --version prints \"bubblewrap X.Y\"), or remove it to use bwrap from PATH"
		}
		return path, "", guard, fmt.Errorf("%s --version: %v", path, v.err), install
	}
	version = strings.TrimSpace(strings.TrimPrefix(out, "bubblewrap"))
	if trialErr != nil {
		return path, version, guard, &namespaceError{msg: trialErr.Error()}, namespaceFix
	}
	if guard.why == "" {
		// Only the setup choosePIDGuard picks is confirmed: a fallback
		// to no guard is tried again at every start.
		cache.confirm(trialGuard(guard.mode), version)
	}
	return path, version, guard, nil, ""
}

// firstLine is s up to its first line break, at most n bytes, for quoting
// a program's output in an error.
func firstLine(s string, n int) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// trialSandbox builds one sandbox with the real namespace set and the
// system read set and /proc covered as Run covers it, running true:
// whether bwrap can work here at all.
// Unprivileged users need user namespaces, and containers often forbid
// them; --version alone says nothing about that. It is run at a driver
// start unless the probe cache confirms its success for this host's key,
// which covers the sysctls, LSM policy revisions, namespaces and
// credentials that could make the answer change (probecache_linux.go).
func trialSandbox(ctx context.Context, path string, guard pidGuard, procCover []string, extra ...string) error {
	tr := "/usr/bin/true"
	if _, err := os.Stat(tr); err != nil {
		tr = "/bin/true"
	}
	return trialSandboxRun(ctx, path, guard, procCover, extra, nil, tr)
}

// trialSandboxRun is trialSandbox with binds made after the system read
// set's (a program's own binary) and prog run.
func trialSandboxRun(ctx context.Context, path string, guard pidGuard, procCover, extra, binds []string, prog ...string) error {
	args := append([]string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"}, extra...)
	args = append(args, "--proc", "/proc")
	args = append(args, procCover...)
	args = append(args, "--dev", "/dev", "--tmpfs", "/tmp")
	for _, m := range systemReadSet() {
		if m.Kind == mountSymlink {
			args = append(args, "--symlink", m.Src, m.Dest)
		} else {
			args = append(args, "--ro-bind", m.Src, m.Dest)
		}
	}
	args = append(args, binds...)
	args = append(append(args, "--"), prog...)
	var stderr bytes.Buffer
	c := exec.CommandContext(ctx, path, args...)
	c.Env = []string{}
	c.Stderr = &stderr
	c.SysProcAttr = &syscall.SysProcAttr{}
	guard.apply(c.SysProcAttr)
	if err := c.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return errors.New(msg)
		}
		return err
	}
	return nil
}

// probeDisableUserns decides on bwrap's --disable-userns: where bwrap gives
// the sandbox a user namespace (a driver that is not root, running a bwrap
// that is not setuid), it stops the sandbox from creating further ones,
// below seccomp's denial of unshare, setns and CLONE_NEWUSER. bwrap insists
// on an explicit --unshare-user for it (--unshare-all's "try" does not
// count), and bwrap before 0.8 lacks it: a trial sandbox decides. A root
// driver's sandbox is not given the flag: its user namespace (from
// --unshare-all, uid 0 mapped to uid 0) is where its mounts are made, and
// the prepared sandboxes' hand-over makes its mounts there too; seccomp
// alone denies creating further user namespaces in it.
func probeDisableUserns(path string, guard pidGuard, procCover []string, cache *probeCache) ([]string, string) {
	if os.Geteuid() == 0 {
		return nil, "root: not used (seccomp denies new user namespaces in the sandbox)"
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSetuid != 0 {
		return nil, path + " is setuid"
	}
	flags := []string{"--unshare-user", "--disable-userns"}
	if cache.confirmed(trialUserns(guard.mode)) {
		// A refusal is never cached: the flags are only ever added on
		// the cache's word, not left out.
		cache.used = true
		return flags, ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := trialSandbox(ctx, path, guard, procCover, flags...); err != nil {
		return nil, "bwrap refused --disable-userns: " + err.Error()
	}
	cache.confirm(trialUserns(guard.mode), "")
	return flags, ""
}

// Capabilities reports what this host enforces now.
func (d *Driver) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	d.trace.Mark("Capabilities")
	if err := ctx.Err(); err != nil {
		return driverapi.HostCapabilities{}, err
	}
	h := d.probe()
	if h.tier == tierLandlock {
		return d.landlockCapabilities(h), nil
	}
	hc := driverapi.HostCapabilities{
		Backend:         backend,
		DriverVersion:   driverVersion,
		ProtocolVersion: driverapi.ProtocolVersion,
		OS:              runtime.GOOS,
		Arch:            runtime.GOARCH,
		Seccomp:         h.seccomp && h.sandboxErr == nil,
		CgroupMode:      string(h.cg.Mode()),
		Details: map[string]string{
			"bwrap":          h.bwrap,
			"bwrap_version":  h.bwrapVersion,
			"kernel":         h.kernel,
			"max_pids":       strconv.FormatUint(d.cfg.Options.Pids(), 10),
			"cpu_quota_pct":  strconv.FormatUint(d.cfg.Options.CPUQuotaPercent, 10),
			"cgroup_setting": string(d.cfg.Options.Cgroup),
			"euid":           strconv.Itoa(os.Geteuid()),
			"sandbox_init":   d.cfg.InitBinary,
			"driver_binary":  d.cfg.DriverBinary,
			"setup_guard":    h.guard.mode,
			"tier":           tierBwrap,
			"host_probe":     "trial sandboxes run at this start",
		},
	}
	if h.probeCached {
		hc.Details["host_probe"] = "trial sandboxes skipped: confirmed by the probe cache for this host's key"
	} else if h.probeCacheWhy != "" {
		hc.Details["host_probe"] += " (" + h.probeCacheWhy + ")"
	}
	if h.guard.why != "" {
		hc.Details["setup_guard_off"] = h.guard.why
	}
	// Prepared sandboxes (prepared_linux.go): the mode in force, and what
	// the pool has done so far.
	if m := d.poolMode(); m == preparedOff {
		hc.Details["prepared"] = string(preparedOff)
		if why := preparedOffWhy(h); why != "" && d.cfg.Options.Prepared != preparedOff {
			hc.Details["prepared"] += " (" + why + ")"
		}
	} else {
		st := d.PreparedStats()
		hc.Details["prepared"] = fmt.Sprintf("%s: up to %d per profile and session, %d in all, %d ms idle; %d waiting, %d hits, %d misses",
			m, *d.cfg.Options.PreparedPerProfile, d.cfg.Options.PreparedMax, d.cfg.Options.PreparedIdleMS, st.Waiting, st.Hits, st.Misses)
	}
	// Session sandboxes (session_linux.go): on, or why not.
	if why := d.sessionOffWhy(); why != "" {
		hc.Details[detailSessionSandbox] = why
	} else {
		hc.Details[detailSessionSandbox] = fmt.Sprintf("on: one per session and profile, %d ms idle", d.cfg.Options.SessionIdleMS)
		if h.sessionUser {
			hc.Details[detailSessionSandbox] += "; unprivileged: each command in a user namespace of its own, none built ahead"
		}
	}
	if why := d.layeredOffWhy(); why != "" {
		hc.Details[driverapi.DetailLayeredWorkspace] = why
	} else {
		hc.Details[driverapi.DetailLayeredWorkspace] = "on: the workspace as an overlay in the session's sandbox"
		if d.layerInNamespace() {
			hc.Details[driverapi.DetailLayeredWorkspace] += "; unprivileged: mounted by the session's supervisor in the sandbox's user namespace (user.overlay.* markers); no files-API view"
			hc.Details[driverapi.DetailLayeredUserNS] = "true"
		}
	}
	if len(h.userns) > 0 {
		hc.Details["nested_userns"] = "disabled (bwrap --disable-userns, and seccomp)"
		if h.sessionUser && d.sessionOffWhy() == "" {
			// sessionUserFlags: a session sandbox goes without the flag.
			hc.Details["nested_userns"] += "; in session sandboxes denied by seccomp alone"
		}
	} else if h.usernsWhy != "" {
		hc.Details["nested_userns"] = "denied by seccomp (" + h.usernsWhy + ")"
	}
	if h.landlock > 0 && h.sandboxErr == nil {
		hc.LandlockABI = uint32(h.landlock)
	}
	hc.Details[driverapi.DetailLinuxLandlockABI] = strconv.FormatUint(uint64(hc.LandlockABI), 10)
	hc.Details[driverapi.DetailLinuxSeccomp] = strconv.FormatBool(hc.Seccomp)
	hc.Details[driverapi.DetailLinuxCgroupMode] = hc.CgroupMode
	// ProfileRequest.Home is bound writable without protected entries
	// (launchPlan.Home), in either tier.
	hc.Details[driverapi.DetailProfileHome] = "1"
	un := func(f, reason, fix string) {
		hc.Unavailable = append(hc.Unavailable, driverapi.Unavailable{Feature: f, Reason: reason, Fix: fix})
	}
	if h.sandboxErr != nil {
		for _, f := range driverapi.KnownFeatures() {
			un(f, h.sandboxErr.Error(), h.sandboxFix)
		}
		return hc, nil
	}
	hc.Features = append(hc.Features,
		driverapi.FeatureFSReadIsolation, driverapi.FeatureFSWriteIsolation, driverapi.FeatureProtectedPaths,
		driverapi.FeatureNetworkNone, driverapi.FeatureNetworkAll,
		driverapi.FeatureEnvIsolation, driverapi.FeatureProcessTreeKill)
	if ok, reason := d.viaProxy(h); ok {
		hc.Features = append(hc.Features, driverapi.FeatureNetworkViaProxy)
		hc.Details[driverapi.DetailNetworkRoute] = string(driverapi.RouteNamespaceBridge)
	} else {
		un(driverapi.FeatureNetworkViaProxy, reason, "use a kernel with Landlock ABI >= 4 and seccomp")
	}
	if h.sessionNet != "" {
		hc.Details[driverapi.DetailNetworkNoneLoopback] = "session"
		hc.Details["network_none"] = "loopback only, in a network namespace per session shared by its commands (entered by " + h.sessionNet + ")"
	} else {
		hc.Details[driverapi.DetailNetworkNoneLoopback] = "command"
		hc.Details["network_none"] = "loopback only, in a network namespace per command (not shared: " + h.sessionNetWhy + ")"
	}
	if h.seccomp {
		// The command's connects and addressed sends go to the driver's
		// unix-socket guard (unixguard_linux.go), which reaches no socket
		// of the host's; under allow_hosts too.
		hc.Details[driverapi.DetailNetworkNoneUnixSockets] = "own"
	}
	if h.seccomp {
		// Refused forks are counted where they are refused, through the
		// command's notification filter (notify_linux.go).
		// The denylist and the socket guard's refusals are answered there
		// too: violations (Exit.ViolationKinds says which were watched).
		hc.Features = append(hc.Features, driverapi.FeatureSubprocessControl, driverapi.FeatureSpawnRefusedReport,
			driverapi.FeatureViolationReport)
	} else {
		un(driverapi.FeatureSubprocessControl, "seccomp filters cannot be installed here", "use a kernel with CONFIG_SECCOMP_FILTER")
		un(driverapi.FeatureSpawnRefusedReport, "seccomp filters cannot be installed here", "use a kernel with CONFIG_SECCOMP_FILTER")
		un(driverapi.FeatureViolationReport, "seccomp filters cannot be installed here", "use a kernel with CONFIG_SECCOMP_FILTER")
	}
	// Streamed runs, the pty and signals (stream_linux.go): the pty comes
	// from the sandbox's own devpts, and the seccomp filter is what keeps
	// TIOCSTI and TIOCLINUX away from it.
	hc.Features = append(hc.Features, driverapi.FeatureStdinStream, driverapi.FeatureSignals)
	if h.seccomp {
		hc.Features = append(hc.Features, driverapi.FeaturePTY)
	} else {
		un(driverapi.FeaturePTY, "seccomp filters cannot be installed here (TIOCSTI on the terminal could not be denied)", "use a kernel with CONFIG_SECCOMP_FILTER")
	}
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
	case h.nprocPerSandbox():
		hc.Features = append(hc.Features, driverapi.FeaturePidLimit)
		hc.Details["pid_limit_via"] = "rlimit_nproc"
	default:
		un(driverapi.FeaturePidLimit, h.cg.Reason(cgroup.Pids), cgroupFix)
	}
	switch {
	case !h.cg.Has(cgroup.CPU):
		un(driverapi.FeatureCPULimit, h.cg.Reason(cgroup.CPU), cgroupFix)
	case d.cfg.Options.CPUQuotaPercent == 0:
		un(driverapi.FeatureCPULimit, "cpu_quota_percent is not set in [sandbox.linux]", "set cpu_quota_percent")
	default:
		hc.Features = append(hc.Features, driverapi.FeatureCPULimit)
	}
	if h.landlock == 0 {
		hc.Details["landlock"] = "unavailable: filesystem isolation rests on mount namespaces alone"
	}
	if h.landlock < 6 {
		// Scopes came with ABI 6. network none and allow_hosts have a
		// network namespace of their own; all shares the host's.
		hc.Details["abstract_unix"] = "with network all, abstract unix sockets bound on the host are reachable (Landlock ABI < 6 has no scopes)"
	}
	if h.cg.Mode() == cgroup.V1 && h.cg.Has(cgroup.Memory) && !h.cg.Memsw() {
		hc.Details["memory_swap"] = "not limited (cgroup v1 without memsw accounting)"
	}
	return hc, nil
}

// nprocPerSandbox reports whether RLIMIT_NPROC, set inside the sandbox,
// caps the sandbox's own tasks: where the kernel counts it per user
// namespace (Linux 5.14 and later) and the sandbox has one of its own (an
// unprivileged driver running a bwrap that is not setuid). Elsewhere it
// counts every process of the uid on the host, or (for root) nothing.
func (h *hostProbe) nprocPerSandbox() bool {
	return h.tier == tierBwrap && os.Geteuid() != 0 && h.guard.mode == guardUserPID && kernelAtLeast(h.kernel, 5, 14)
}

// kernelAtLeast compares a kernel release ("6.18.44-foo") with major.minor.
func kernelAtLeast(release string, major, minor int) bool {
	f := strings.FieldsFunc(release, func(r rune) bool { return r < '0' || r > '9' })
	if len(f) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(f[0])
	mi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// MarkTrace adds event to the start-up trace, when one is on
// (internal/starttrace).
func (d *Driver) MarkTrace(event string) { d.trace.Mark(event) }
