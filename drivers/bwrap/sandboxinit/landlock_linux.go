//go:build linux

package sandboxinit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/net/bpf"
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

// applyLandlock enforces plan on the calling OS thread only (see
// ruleset.restrict).
func applyLandlock(plan landlockPlan) error {
	rs, err := buildRuleset(plan)
	if err != nil {
		return err
	}
	defer rs.close()
	return rs.restrict()
}

// ruleset is a Landlock ruleset built and not yet enforced: building opens
// every path of its rules, enforcing is one system call. fd is -1 when
// nothing is handled (no Landlock, or a plan that handles no right).
type ruleset struct {
	fd    int
	flags uint32
}

// buildRuleset builds plan's ruleset. The rules name the inodes its paths
// resolve to now: a prepared sandbox builds its supervisor's before the
// hand-over, when they resolve to what bwrap mounted (the hand-over's own
// mounts cover protected entries only, which no rule names: a grant in a
// protected entry is refused).
func buildRuleset(plan landlockPlan) (ruleset, error) {
	if plan.ABI == 0 {
		return ruleset{fd: -1}, nil
	}
	fd, flags, err := plan.Config.NewRulesetFD(plan.Rules...)
	if err != nil {
		return ruleset{fd: -1}, fmt.Errorf("landlock: building ruleset: %w", err)
	}
	if fd < 0 {
		return ruleset{fd: -1}, nil // nothing handled
	}
	return ruleset{fd: fd, flags: flags}, nil
}

// restrict enforces the ruleset on the calling OS thread only. The caller
// holds runtime.LockOSThread, has set no_new_privs, and execs (or forks)
// on this thread: the exec'd image inherits this thread's domain (see
// loadSeccomp for why the other runtime threads do not matter).
// go-landlock's Restrict would instead use psx to reach all threads, which
// fails in cgo binaries and is not needed.
func (r ruleset) restrict() error {
	if r.fd < 0 {
		return nil
	}
	if err := llsys.LandlockRestrictSelf(r.fd, r.flags); err != nil {
		return fmt.Errorf("landlock: restrict_self: %w", err)
	}
	return nil
}

func (r *ruleset) close() {
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// confinement is what sandbox-init loads on itself: its seccomp program
// (the supervisor's when it supervises, else the target's) and its Landlock
// ruleset, computed before anything of the process is changed.
type confinement struct {
	prog []bpf.Instruction
	rs   ruleset
}

// planConfinement builds spec's confinement. preforked says a waiting
// child will become the command: the supervisor's own domain must then let
// it signal that child, which is in a sibling domain (prefork_linux.go says
// why that costs nothing). The child keeps the scope, and so does one
// forked instead should the waiting child fail (it plans from spec).
func planConfinement(spec *InitSpec, preforked bool) (*confinement, error) {
	prog, err := initProgram(spec)
	if err != nil {
		return nil, err
	}
	own := *spec
	if preforked {
		own.ScopeSignals = false
	}
	plan, err := planLandlock(&own, effectiveLandlockABI())
	if err != nil {
		return nil, err
	}
	rs, err := buildRuleset(plan)
	if err != nil {
		return nil, err
	}
	return &confinement{prog: prog, rs: rs}, nil
}

// restrict enforces the ruleset on the calling thread and closes it.
func (c *confinement) restrict() error {
	defer c.rs.close()
	return c.rs.restrict()
}

func (c *confinement) close() { c.rs.close() }
