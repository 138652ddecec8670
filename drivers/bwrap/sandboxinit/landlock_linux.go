//go:build linux

package sandboxinit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// maxLandlockABI is the newest Landlock ABI go-landlock v0.11.2 knows
// (landlock.V11). A newer kernel is driven at this level, never above.
const maxLandlockABI = 11

// kernelLandlockABI asks the kernel directly (0: Landlock absent or
// disabled). go-landlock's BestEffort would silently do nothing on ABI 0, so
// the level enforced and reported is always derived from this number.
func kernelLandlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// effectiveLandlockABI is the level this package enforces on this kernel.
func effectiveLandlockABI() int {
	return min(kernelLandlockABI(), maxLandlockABI)
}

// landlockPreset returns go-landlock's full config for exactly ABI v.
func landlockPreset(v int) (landlock.Config, bool) {
	presets := []landlock.Config{
		landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6,
		landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11,
	}
	if v < 1 || v > len(presets) {
		return landlock.Config{}, false
	}
	return presets[v-1], true
}

// Access rights that apply to a regular file (the kernel's ACCESS_FILE);
// directory-only rights on a file make landlock_add_rule fail with EINVAL.
const landlockFileRights = llsys.AccessFSExecute | llsys.AccessFSWriteFile |
	llsys.AccessFSReadFile | llsys.AccessFSTruncate | llsys.AccessFSIoctlDev

// landlockReadRights: read and execute; nothing that changes the tree.
const landlockReadRights = llsys.AccessFSExecute | llsys.AccessFSReadFile | llsys.AccessFSReadDir

// landlockPlan is the ruleset for one spec at one ABI, computed without
// touching the process so it can be inspected in tests.
type landlockPlan struct {
	ABI    int
	Config landlock.Config
	Rules  []landlock.Rule
}

// planLandlock builds the ruleset. Every right the ABI knows is handled
// (denied unless granted); ReadOnly paths get read+execute, ReadWrite paths
// get every handled right (refer, truncate, ioctl on devices included).
// The config is exact for the ABI, not BestEffort: a rule the kernel rejects
// is an error (fail closed) instead of a silent fall back to no enforcement,
// which is what BestEffort does with a refer rule on ABI 1.
func planLandlock(spec *InitSpec, abi int) (landlockPlan, error) {
	cfg, ok := landlockPreset(abi)
	if !ok {
		return landlockPlan{ABI: 0}, nil
	}
	handledFS := uint64(cfg.HandledAccessFS)

	var rules []landlock.Rule
	add := func(paths []string, dirRights uint64) error {
		for _, p := range paths {
			st, err := os.Stat(p)
			if errors.Is(err, fs.ErrNotExist) {
				// Granting nothing on a missing path is the strict reading:
				// it cannot be used, and a parent without rights cannot
				// create it.
				continue
			}
			if err != nil {
				return fmt.Errorf("landlock: %s: %w", p, err)
			}
			rights := dirRights & handledFS
			if !st.IsDir() {
				rights &= landlockFileRights
			}
			if rights == 0 {
				continue
			}
			rules = append(rules, landlock.PathAccess(landlock.AccessFSSet(rights), p))
		}
		return nil
	}
	if err := add(spec.ReadOnly, landlockReadRights); err != nil {
		return landlockPlan{}, err
	}
	if err := add(spec.ReadWrite, handledFS); err != nil {
		return landlockPlan{}, err
	}

	// TCP (ABI >= 4; UDP too from ABI 10). In unrestricted mode network
	// rights are not handled at all. Otherwise every port is denied for
	// bind and connect, except connect to the bridge ports in proxy_routed
	// mode: the child can reach the in-namespace bridge and nothing else,
	// even if it opens AF_INET sockets the seccomp gate lets through.
	// Landlock does not cover MPTCP; the seccomp gate only allows the
	// default protocol families and bwrap's network namespace has no route.
	if spec.SocketMode == SocketUnrestricted || spec.SocketMode == SocketLoopback {
		// loopback: the empty network namespace is the boundary, and
		// every port in it is the sandbox's own.
		cfg.HandledAccessNet = 0
	} else if cfg.HandledAccessNet != 0 && spec.SocketMode == SocketProxyRouted {
		for _, port := range spec.BridgePorts {
			rules = append(rules, landlock.ConnectTCP(port))
		}
	} else if cfg.HandledAccessNet != 0 && spec.SocketMode == SocketBridge {
		rules = append(rules, bridgeLandlockRules(spec)...)
	}

	// Scopes (ABI >= 6): abstract unix sockets and signals created/owned
	// outside this domain become unreachable. Abstract sockets ignore the
	// filesystem, so only this (or a network namespace) stops them.
	var scoped uint64
	if spec.ScopeAbstractUnix {
		scoped |= llsys.ScopeAbstractUnixSocket
	}
	if spec.ScopeSignals {
		scoped |= llsys.ScopeSignal
	}
	cfg.Scoped &= landlock.ScopedSet(scoped)

	return landlockPlan{ABI: abi, Config: cfg, Rules: rules}, nil
}

// applyLandlock enforces plan on the calling OS thread only. The caller holds
// runtime.LockOSThread, has set no_new_privs, and execs on this thread: the
// exec'd image inherits this thread's domain (see loadSeccomp for why the
// other runtime threads do not matter). go-landlock's Restrict would instead
// use psx to reach all threads, which fails in cgo binaries and is not needed.
func applyLandlock(plan landlockPlan) error {
	if plan.ABI == 0 {
		return nil
	}
	fd, flags, err := plan.Config.NewRulesetFD(plan.Rules...)
	if err != nil {
		return fmt.Errorf("landlock: building ruleset: %w", err)
	}
	if fd < 0 {
		return nil // nothing handled
	}
	defer unix.Close(fd)
	if err := llsys.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock: restrict_self: %w", err)
	}
	return nil
}
