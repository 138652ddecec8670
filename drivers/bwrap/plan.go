package bwrap

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// layerBindPoint is where an unprivileged driver's session sandbox has
// the layer's directory until its supervisor has mounted the overlay
// (then it is an empty directory of the sandbox's root tmpfs;
// layered_linux.go).
const layerBindPoint = "/.aleph-sandbox-layer"

// backend is this driver's backend name (HostCapabilities.Backend and
// Profile.Backend).
const backend = "bwrap"

// planVersion is the version of the serialized launchPlan; Run refuses others.
const planVersion = 1

// initPath is where the driver binary is bound (read-only) inside every
// sandbox, to run as sandbox-init.
const initPath = initDir + "/init"

// initDir holds the sandbox's own entries (initPath, proxySocketPath).
// Nothing below it is ever granted (forbiddenRoots): the sandbox's own
// tmpfs covers it whenever a grant covers its parent.
const initDir = "/run/aleph-sandbox"

// The network route for allow_hosts: inside the sandbox's own network
// namespace a bridge listens on loopback at these ports (the child's proxy
// variables name them; the host side defines the same numbers) and relays
// to the host proxy's unix socket, bound at proxySocketPath.
const (
	bridgeHTTPPort  = driverapi.BridgeHTTPPort
	bridgeSOCKSPort = driverapi.BridgeSOCKSPort
	proxySocketPath = initDir + "/proxy.sock"
)

// bridgePorts are the loopback ports of the bridge.
func bridgePorts() []uint16 { return []uint16{bridgeHTTPPort, bridgeSOCKSPort} }

// Mount kinds in a launchPlan's system read set.
const (
	mountROBind  = "ro-bind"
	mountSymlink = "symlink"
)

// mount is one entry of the system read set.
type mount struct {
	Kind string `json:"kind"`
	// Src is the host path for ro-bind (equal to Dest) and the link
	// target for symlink.
	Src  string `json:"src"`
	Dest string `json:"dest"`
}

// launchPlan is the Linux launch plan: everything that decides what a command
// can see and do, serialized as the driver's Profile. Paths are canonical
// (absolute, clean, symlinks resolved) when the plan is built and are
// checked again before every run.
type launchPlan struct {
	Version    int        `json:"version"`
	Workspace  string     `json:"workspace"`
	Cwd        string     `json:"cwd"`
	Network    string     `json:"network"`
	ShareNet   bool       `json:"share_net"`
	SocketMode socketMode `json:"socket_mode"`
	AllowSpawn bool       `json:"allow_spawn"`
	// MemoryBytes is the memory ceiling (cgroup where available, RLIMIT_AS
	// always); 0 means none.
	MemoryBytes uint64   `json:"memory_bytes,omitempty"`
	System      []mount  `json:"system"`
	FSRead      []string `json:"fs_read,omitempty"`
	FSWrite     []string `json:"fs_write,omitempty"`
	// Protected are the top-level entry names kept read-only and
	// uncreatable in the workspace and every fs_write grant
	// (ProfileRequest.Protected, default driverapi.DefaultProtectedEntries).
	Protected []string `json:"protected"`
	// Home is a directory bound read-write like an fs_write grant but
	// with no protected entries (ProfileRequest.Home: the sandbox's own
	// HOME, which no host tool opens as a project). It overlaps neither
	// the workspace nor any grant, so no protected entry of theirs is
	// reached through it.
	Home string `json:"home,omitempty"`
	// ProxySocket is the host proxy's unix socket (allow_hosts only),
	// bound at proxySocketPath; bridgePorts are where the bridge listens.
	ProxySocket string   `json:"proxy_socket,omitempty"`
	BridgePorts []uint16 `json:"bridge_ports,omitempty"`

	// TmpfsBytes is what /tmp and /dev/shm hold together (tmpfsBudget):
	// the driver's tmpfs_max_mb, at most MemoryBytes.
	TmpfsBytes uint64 `json:"tmpfs_bytes"`
	// prot is what this run binds for its protected entries, found by
	// Run just before bwrap starts (never serialized: the tree changes
	// between commands).
	prot *protection
	// etcView, when set, is the directory bound read-only at /etc in
	// place of the plan's /etc entries (etcview_linux.go), chosen by Run.
	etcView string
	// seccomp, when set, is the memfd of precompiled seccomp programs
	// (initSpec.SeccompFD), passed to bwrap after the fixed descriptors.
	seccomp   *os.File
	seccompFD int // the number sandbox-init is told (initSpec.SeccompFD)
	// notifyFD, when set, is the number of the notify socket sandbox-init
	// is told (initSpec.NotifyFD): the command may not spawn, and its
	// refused forks are answered and counted (notify_linux.go).
	notifyFD int
	// joinNet: bwrap starts inside the session's network namespace
	// (sessionnet_linux.go) and shares it instead of unsharing its own.
	// Set by Run per command, never serialized.
	joinNet bool
	// prepared: the sandbox is built ahead of its command, which arrives
	// with the hand-over (prepared_linux.go). Never serialized.
	prepared bool
	// sessionSupervisor: the prepared sandbox is a session sandbox, whose
	// sandbox-init is the session supervisor (session_linux.go).
	sessionSupervisor bool
	// layered: the command's workspace is the session's overlay
	// (layered_linux.go): no protected entries are guarded in it. Set by
	// Run per command, never serialized.
	layered *driverapi.LayeredWorkspace
	// layerSrc: the overlay's mount point, bound at Workspace instead of
	// the workspace while the session sandbox is built.
	layerSrc string
	// layerInside: the overlay the session supervisor mounts itself, in
	// the session sandbox's user namespace (an unprivileged driver,
	// layered_linux.go); the workspace is bound read-only below it and the
	// layer's directory at layerBindPoint while the sandbox is built.
	layerInside *sandboxinit.SessionOverlay
	// attachRoot: the sandbox is a session sandbox built ahead of its
	// session (sessionahead_linux.go): a small tmpfs of its own stands at
	// this directory (the workspace's parent) instead of the workspace and
	// the session's HOME below it, which are attached there when a session
	// takes the sandbox. Never serialized.
	attachRoot string
	// early are signals the command was sent while a prepared sandbox's
	// hand-over, which then failed, was under way: the sandbox built
	// instead gets them first (runPooled). Never serialized.
	early []syscall.Signal
}

// systemTopLevel are the root entries of the system read set: bound
// read-only when they are directories, recreated when they are symlinks
// (merged-/usr hosts link /bin to usr/bin).
func systemTopLevel() []string {
	return []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}
}

// systemEtc are the parts of /etc ordinary programs need: the dynamic
// loader's cache, name service configuration, users and groups (no
// passwords: shadow and gshadow are never listed), DNS, TLS roots, time
// zone, locale, the alternatives links. Everything else in /etc (sudoers,
// ssh host keys, credentials of services) stays invisible.
//
// TLS: only the trust roots and OpenSSL's configuration, never all of
// /etc/ssl or /etc/pki: their private/ directories hold the host's TLS
// keys, which a command run by a root driver could otherwise read.
func systemEtc() []string {
	return []string{
		"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
		"/etc/nsswitch.conf", "/etc/passwd", "/etc/group",
		"/etc/hosts", "/etc/host.conf", "/etc/gai.conf", "/etc/resolv.conf",
		"/etc/protocols", "/etc/services",
		// Debian, Ubuntu, Alpine, SUSE.
		"/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ssl/cert.pem", "/etc/ssl/ca-bundle.pem",
		"/etc/ca-certificates", "/etc/ca-certificates.conf",
		// Fedora, RHEL.
		"/etc/pki/tls/certs", "/etc/pki/tls/cert.pem", "/etc/pki/tls/openssl.cnf",
		"/etc/pki/ca-trust/extracted",
		"/etc/localtime", "/etc/timezone",
		"/etc/locale.alias", "/etc/locale.conf", "/etc/locale.gen", "/etc/default/locale",
		"/etc/alternatives",
	}
}

// systemReadSet lists the system mounts present on this host.
func systemReadSet() []mount {
	var out []mount
	for _, p := range systemTopLevel() {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(p); err == nil {
				out = append(out, mount{Kind: mountSymlink, Src: t, Dest: p})
			}
		case fi.IsDir():
			out = append(out, mount{Kind: mountROBind, Src: p, Dest: p})
		}
	}
	for _, p := range systemEtc() {
		// Stat follows a symlink: bwrap binds what it points to, so a
		// dangling link is left out rather than failing the launch.
		if _, err := os.Stat(p); err == nil {
			out = append(out, mount{Kind: mountROBind, Src: p, Dest: p})
		}
	}
	return out
}

// checkSystemMount accepts m only if it is a current system read set entry.
func checkSystemMount(m mount) error {
	known := false
	for _, p := range append(systemTopLevel(), systemEtc()...) {
		if p == m.Dest {
			known = true
		}
	}
	if !known {
		return &driverapi.ProfileError{Reason: fmt.Sprintf("system mount %q is not in the system read set", m.Dest)}
	}
	switch m.Kind {
	case mountROBind:
		if m.Src != m.Dest {
			return &driverapi.ProfileError{Reason: fmt.Sprintf("system mount %q has source %q", m.Dest, m.Src)}
		}
		if _, err := os.Stat(m.Dest); err != nil {
			return &driverapi.ProfileError{Reason: fmt.Sprintf("system path %q is gone: %v", m.Dest, err)}
		}
	case mountSymlink:
		t, err := os.Readlink(m.Dest)
		if err != nil || t != m.Src {
			return &driverapi.ProfileError{Reason: fmt.Sprintf("system symlink %q no longer points to %q", m.Dest, m.Src)}
		}
	default:
		return &driverapi.ProfileError{Reason: fmt.Sprintf("unknown mount kind %q", m.Kind)}
	}
	return nil
}

// forbiddenRoots may never be granted: binding anything from the host's
// /proc, /sys or /dev would hand the sandbox other processes' roots and fds
// (/proc/1/root) or raw kernel interfaces.
// initDir is the sandbox's own (its init binary and proxy socket are
// mounted there, over whatever the host has), and on the host root's
// driver state directory.
var forbiddenRoots = [...]string{"/proc", "/sys", "/dev", initDir}

// canonicalPath resolves p and requires it to be absolute, clean, free of
// NUL bytes, existing, and already canonical (no symlink on the way): a
// path that resolves elsewhere is refused rather than silently followed, so
// what was approved is what gets mounted.
func canonicalPath(field, p string) (string, error) {
	switch {
	case p == "":
		return "", &driverapi.InvalidSpecError{Field: field, Reason: "empty path"}
	case strings.IndexByte(p, 0) >= 0:
		return "", &driverapi.InvalidSpecError{Field: field, Reason: "path contains a NUL byte"}
	case !filepath.IsAbs(p):
		return "", &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q is not an absolute path", p)}
	}
	clean := filepath.Clean(p)
	real, err := filepath.EvalSymlinks(clean)
	if err != nil {
		return "", &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q: %v", p, unwrapPathErr(err))}
	}
	if real != clean {
		return "", &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q is reached through a symlink (it resolves to %q): grant the canonical path", p, real)}
	}
	if real == "/" {
		return "", &driverapi.InvalidSpecError{Field: field, Reason: "the root directory cannot be granted: grant narrower paths"}
	}
	for _, r := range forbiddenRoots {
		if driverapi.PathWithin(real, r) {
			return "", &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q lies in %s, which is never granted", real, r)}
		}
	}
	return real, nil
}

// exactPath is canonicalPath for a path the host hands over already
// canonical (the workspace, a cwd; and every path of a plan, which
// buildPlan stores resolved): one that is canonical only once cleaned
// (".", "..", a doubled or trailing separator) is refused too, not
// repaired, as one through a symlink is. The host resolved it under its
// own checks; repairing it here would act on a path nobody checked.
func exactPath(field, p string) (string, error) {
	if p != "" && filepath.Clean(p) != p {
		return "", &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q is not canonical (it cleans to %q): pass the resolved path itself", p, filepath.Clean(p))}
	}
	return canonicalPath(field, p)
}

func unwrapPathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// coversSystem reports whether granting p writable would replace part of
// the system read set (p is / or an ancestor of a system path).
func coversSystem(p string) bool {
	for _, s := range append(systemTopLevel(), "/etc") {
		if driverapi.PathWithin(s, p) {
			return true
		}
	}
	return false
}

// buildPlan turns a profile request into a launchPlan, resolving and checking
// every path. It is deterministic for equal input on the same host.
func buildPlan(req driverapi.ProfileRequest) (launchPlan, error) {
	ws, err := exactPath("workspace", req.Workspace)
	if err != nil {
		return launchPlan{}, err
	}
	if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
		return launchPlan{}, &driverapi.InvalidSpecError{Field: "workspace", Reason: fmt.Sprintf("%q is not a directory", ws)}
	}
	if coversSystem(ws) {
		return launchPlan{}, &driverapi.InvalidSpecError{Field: "workspace", Reason: fmt.Sprintf("%q contains system directories", ws)}
	}
	cwd := req.Cwd
	if cwd == "" {
		cwd = ws
	}
	if cwd, err = exactPath("cwd", cwd); err != nil {
		return launchPlan{}, err
	}
	if !driverapi.PathWithin(cwd, ws) {
		return launchPlan{}, &driverapi.InvalidSpecError{Field: "cwd", Reason: fmt.Sprintf("%q is outside the workspace %q", cwd, ws)}
	}
	p := launchPlan{
		Version:    planVersion,
		Workspace:  ws,
		Cwd:        cwd,
		Network:    req.Capabilities.Network.Mode.String(),
		AllowSpawn: req.Capabilities.SpawnSubprocess,
		System:     systemReadSet(),
	}
	if p.Protected, err = protectedList(req.Protected); err != nil {
		return launchPlan{}, err
	}
	switch req.Capabilities.Network.Mode {
	case driverapi.NetworkNone:
		// An empty network namespace (the session's, or bwrap's own):
		// inet sockets reach nothing but its loopback. The Landlock tier,
		// which has no namespace, uses unix_only instead (ProfileFor).
		p.SocketMode = socketLoopback
	case driverapi.NetworkAllowAll:
		p.SocketMode, p.ShareNet = socketUnrestricted, true
	case driverapi.NetworkAllowHosts:
		// The sandbox keeps its own network namespace; the only way out
		// is the bridge to the host proxy, which enforces the host list.
		if req.Proxy == nil || req.Proxy.UnixSocket == "" {
			return launchPlan{}, &driverapi.InvalidSpecError{Field: "proxy", Reason: "allow_hosts needs the managed proxy's unix socket, and the host gave none"}
		}
		sock, err := checkSocket(req.Proxy.UnixSocket)
		if err != nil {
			return launchPlan{}, err
		}
		p.SocketMode, p.ProxySocket, p.BridgePorts = socketProxyRouted, sock, bridgePorts()
	default:
		return launchPlan{}, &driverapi.InvalidSpecError{Field: "network", Reason: fmt.Sprintf("unknown mode %d", req.Capabilities.Network.Mode)}
	}
	if mb := req.Capabilities.MaxMemoryMB; mb > 0 {
		if mb > 1<<40 {
			return launchPlan{}, &driverapi.InvalidSpecError{Field: "max_memory_mb", Reason: "too large"}
		}
		p.MemoryBytes = mb << 20
	}
	// The driver's ProfileFor puts its own tmpfs_max_mb in place of the
	// default.
	p.TmpfsBytes = tmpfsBudget(defaultTmpfsMaxMB<<20, p.MemoryBytes)
	write := map[string]bool{}
	for _, g := range req.Capabilities.FSWrite {
		c, err := canonicalPath("fs_write", g)
		if err != nil {
			return launchPlan{}, err
		}
		if coversSystem(c) {
			return launchPlan{}, &driverapi.InvalidSpecError{Field: "fs_write", Reason: fmt.Sprintf("%q contains system directories", c)}
		}
		write[c] = true
	}
	read := map[string]bool{}
	for _, g := range req.Capabilities.FSRead {
		c, err := canonicalPath("fs_read", g)
		if err != nil {
			return launchPlan{}, err
		}
		if coversSystem(c) {
			// bwrap cannot mount the system read set's entries inside a
			// read-only bind of their parent, and the grant would show all
			// of /etc (shadow, sudoers, keys) besides.
			return launchPlan{}, &driverapi.InvalidSpecError{Field: "fs_read", Reason: fmt.Sprintf(
				"%q contains system directories, which are readable already; grant the paths inside it you need", c)}
		}
		if !write[c] {
			read[c] = true
		}
	}
	p.FSRead, p.FSWrite = sortedKeys(read), sortedKeys(write)
	if err := p.checkGrantsVsProtected(); err != nil {
		return launchPlan{}, err
	}
	// A grant equal to or inside the workspace adds nothing (the workspace
	// is readable and writable) and would mount one directory twice from
	// one pinned descriptor, which bwrap cannot do: drop it. Protected
	// entries were checked above, so a grant into .git is still refused.
	p.FSRead, p.FSWrite = outsideOf(ws, p.FSRead), outsideOf(ws, p.FSWrite)
	if req.Home != "" {
		if p.Home, err = canonicalPath("home", req.Home); err != nil {
			return launchPlan{}, err
		}
		if fi, err := os.Stat(p.Home); err != nil || !fi.IsDir() {
			return launchPlan{}, &driverapi.InvalidSpecError{Field: "home", Reason: fmt.Sprintf("%q is not a directory", p.Home)}
		}
		if err := p.checkHome(); err != nil {
			return launchPlan{}, err
		}
	}
	return p, nil
}

// checkHome refuses a Home that would take protection away: one holding
// system directories, or one overlapping the workspace or a grant (equal
// to, inside or containing it), where protected entries would then lie in
// a tree bound writable without them, or be hidden by its bind.
func (p *launchPlan) checkHome() error {
	if coversSystem(p.Home) {
		return &driverapi.InvalidSpecError{Field: "home", Reason: fmt.Sprintf("%q contains system directories", p.Home)}
	}
	overlap := func(a, b string) bool { return driverapi.PathWithin(a, b) || driverapi.PathWithin(b, a) }
	if overlap(p.Home, p.Workspace) {
		return &driverapi.InvalidSpecError{Field: "home", Reason: fmt.Sprintf("%q overlaps the workspace %q; the home must lie outside it", p.Home, p.Workspace)}
	}
	for _, g := range append(append([]string{}, p.FSRead...), p.FSWrite...) {
		if overlap(p.Home, g) {
			return &driverapi.InvalidSpecError{Field: "home", Reason: fmt.Sprintf("%q overlaps the granted path %q; the home must lie apart from every grant", p.Home, g)}
		}
	}
	return nil
}

// writable are the host paths bound read-write besides the workspace: the
// fs_write grants and the home.
func (p launchPlan) writable() []string {
	out := append([]string{}, p.FSWrite...)
	if p.Home != "" {
		out = append(out, p.Home)
	}
	return out
}

// attachRootBytes is the size of the tmpfs at a sandbox's attach root
// (launchPlan.attachRoot): it holds two mount points and is read-only once they
// are made.
const attachRootBytes = 64 << 10

// boundWritable is writable() as bwrap binds it: without the HOME of a
// sandbox built ahead of its session (attached later).
func (p launchPlan) boundWritable() []string {
	if p.attachRoot != "" {
		return append([]string{}, p.FSWrite...)
	}
	return p.writable()
}

// outsideOf keeps the paths not within root (nil when none is left, as in
// an encoded plan without grants).
func outsideOf(root string, paths []string) []string {
	var out []string
	for _, g := range paths {
		if !driverapi.PathWithin(g, root) {
			out = append(out, g)
		}
	}
	return out
}

// protectedList checks the requested protected names (empty: the
// defaults) and returns them without duplicates, in order.
func protectedList(req []string) ([]string, error) {
	if len(req) == 0 {
		return driverapi.DefaultProtectedEntries(), nil
	}
	var out []string
	seen := map[string]bool{}
	for _, n := range req {
		if why := driverapi.ProtectedNameProblem(n); why != "" {
			return nil, &driverapi.InvalidSpecError{Field: "protected", Reason: why}
		}
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// checkGrantsVsProtected refuses grants inside a protected workspace entry:
// they would punch a writable (or merely confusing) hole into it.
func (p *launchPlan) checkGrantsVsProtected() error {
	for _, g := range append(append([]string{}, p.FSRead...), p.FSWrite...) {
		for _, name := range p.Protected {
			if driverapi.PathWithin(g, filepath.Join(p.Workspace, name)) {
				return &driverapi.InvalidSpecError{Field: "fs_read/fs_write", Reason: fmt.Sprintf("%q lies in the protected %s of the workspace", g, name)}
			}
		}
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Encode serializes the plan deterministically.
func (p launchPlan) Encode() ([]byte, error) { return json.Marshal(p) }

// decodePlan parses a plan strictly and re-checks it against the host:
// version, every path still canonical and existing, system mounts from the
// system read set only, the protected list complete, modes consistent.
func decodePlan(data []byte) (launchPlan, error) {
	p, err := decodePlanJSON(data)
	if err != nil {
		return launchPlan{}, err
	}
	if err := p.Check(); err != nil {
		return launchPlan{}, err
	}
	return p, nil
}

// decodePlanJSON is decodePlan without the host check.
func decodePlanJSON(data []byte) (launchPlan, error) {
	var p launchPlan
	if err := driverapi.DecodePlanJSON("plan", data, &p); err != nil {
		return launchPlan{}, err
	}
	return p, nil
}

// clone is p with slices of its own.
func (p launchPlan) clone() launchPlan {
	c := p
	c.System = slices.Clone(p.System)
	c.FSRead = slices.Clone(p.FSRead)
	c.FSWrite = slices.Clone(p.FSWrite)
	c.Protected = slices.Clone(p.Protected)
	c.BridgePorts = slices.Clone(p.BridgePorts)
	return c
}

// planCache keeps the decoded JSON of the profiles run lately: decoding
// one took about 0.1 ms, a tenth of what the driver itself does for a
// prepared hit. Only the decoding is kept: Check (the plan's paths against
// the host now) runs for every command. The key is the profile's exact
// bytes, which Run has verified.
type planCache struct {
	mu sync.Mutex
	m  map[string]launchPlan
}

// maxCachedPlans bounds the cache; it is emptied when full.
const maxCachedPlans = 32

// decode is decodePlan through the cache.
func (c *planCache) decode(data []byte) (launchPlan, error) {
	c.mu.Lock()
	p, ok := c.m[string(data)]
	c.mu.Unlock()
	if !ok {
		var err error
		if p, err = decodePlanJSON(data); err != nil {
			return launchPlan{}, err
		}
		c.mu.Lock()
		if len(c.m) >= maxCachedPlans || c.m == nil {
			c.m = map[string]launchPlan{}
		}
		// p is fresh: the cache keeps it, every caller gets a clone.
		c.m[string(data)] = p
		c.mu.Unlock()
	}
	p = p.clone()
	if err := p.Check(); err != nil {
		return launchPlan{}, err
	}
	return p, nil
}

// Check validates a decoded plan against the host now.
func (p launchPlan) Check() error {
	bad := func(f string, a ...any) error {
		return &driverapi.ProfileError{Reason: "plan: " + fmt.Sprintf(f, a...)}
	}
	if p.Version != planVersion {
		return bad("version %d, this driver runs version %d", p.Version, planVersion)
	}
	if _, err := exactPath("workspace", p.Workspace); err != nil {
		return bad("%v", err)
	}
	if coversSystem(p.Workspace) {
		return bad("workspace %q contains system directories", p.Workspace)
	}
	if _, err := exactPath("cwd", p.Cwd); err != nil || !driverapi.PathWithin(p.Cwd, p.Workspace) {
		return bad("cwd %q is not a directory inside the workspace", p.Cwd)
	}
	for _, g := range p.FSRead {
		if _, err := exactPath("fs_read", g); err != nil {
			return bad("%v", err)
		}
	}
	for _, g := range p.FSWrite {
		if _, err := exactPath("fs_write", g); err != nil {
			return bad("%v", err)
		}
		if coversSystem(g) {
			return bad("fs_write %q contains system directories", g)
		}
	}
	if err := p.checkGrantsVsProtected(); err != nil {
		return bad("%v", err)
	}
	if err := p.checkTmpfs(); err != nil {
		return err
	}
	if p.Home != "" {
		if _, err := exactPath("home", p.Home); err != nil {
			return bad("%v", err)
		}
		if err := p.checkHome(); err != nil {
			return bad("%v", err)
		}
	}
	for _, g := range append(append([]string{}, p.FSRead...), p.FSWrite...) {
		if driverapi.PathWithin(g, p.Workspace) {
			return bad("grant %q lies in the workspace %q", g, p.Workspace)
		}
	}
	for _, m := range p.System {
		if err := checkSystemMount(m); err != nil {
			return err
		}
	}
	if len(p.Protected) == 0 {
		return bad("empty protected list")
	}
	if _, err := protectedList(p.Protected); err != nil {
		return bad("%v", err)
	}
	switch {
	case p.Network == "none" && (p.SocketMode == socketLoopback || p.SocketMode == socketUnixOnly) && !p.ShareNet:
	case p.Network == "allow_all" && p.SocketMode == socketUnrestricted && p.ShareNet:
	case p.Network == "allow_hosts" && p.SocketMode == socketProxyRouted && !p.ShareNet:
		if _, err := checkSocket(p.ProxySocket); err != nil {
			return bad("%v", err)
		}
		if fmt.Sprint(p.BridgePorts) != fmt.Sprint(bridgePorts()) {
			return bad("bridge ports %v, want %v", p.BridgePorts, bridgePorts())
		}
		return nil
	default:
		return bad("network %q with socket mode %q and share_net %v is not a valid combination", p.Network, p.SocketMode, p.ShareNet)
	}
	if p.ProxySocket != "" || len(p.BridgePorts) > 0 {
		return bad("proxy socket or bridge ports without allow_hosts")
	}
	return nil
}

// checkSocket requires a canonical path naming a unix socket.
func checkSocket(path string) (string, error) {
	c, err := canonicalPath("proxy.unix_socket", path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(c)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return "", &driverapi.InvalidSpecError{Field: "proxy.unix_socket", Reason: fmt.Sprintf("%q is not a unix socket", c)}
	}
	return c, nil
}

// unavailableError: the request needs a feature this host cannot enforce.
type unavailableError = driverapi.UnavailableError
