// Package seatbelt is the macOS driver of aleph-sandbox: it turns a
// capability request into a Seatbelt (SBPL) profile and runs the command
// under /usr/bin/sandbox-exec.
//
// Everything that does not need macOS (profile generation, parameter
// naming, validation, the capability report, the process runner, which is
// plain POSIX) lives in files without an OS build tag, so it is unit-tested
// on any Unix. Only the probe that needs the real sandbox-exec is specific
// to darwin.
//
// Paths never appear in the profile text. Each one travels as a
// `-D NAME=VALUE` parameter of sandbox-exec and the profile refers to it as
// (param "NAME"): a workspace called `")(allow default)(` is just a string
// value, it cannot change the policy.
package seatbelt

import (
	"fmt"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Parameter names used in the generated profile. The program's own path is
// added by Run (it is not known when the profile is made).
const (
	ParamWorkspace = "WORKSPACE"
	ParamProgram   = "PROGRAM"
	paramRead      = "READ_"      // READ_0, READ_1, ...: fs_read grants
	paramWrite     = "WRITE_"     // WRITE_0, ...: fs_write grants
	paramProtected = "PROTECTED_" // PROTECTED_n: each protected name in the workspace and in each fs_write grant
	paramAncestor  = "ANCESTOR_"  // ancestors of every granted path (stat only)
	paramWSUp      = "WS_UP_"     // ancestors of the workspace and of the fs_write grants (never renamed)
)

// Param is one `-D NAME=VALUE` argument of sandbox-exec.
type Param struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// baselineReadSubpaths are the system trees every program may read: frameworks,
// libraries, the tools in the default PATH, and the dyld shared cache (which
// lives in the Preboot cryptex on macOS 13 and later).
func baselineReadSubpaths() []string {
	return []string{
		"/System",
		"/usr/lib",
		"/usr/libexec",
		"/usr/share",
		"/usr/bin",
		"/usr/sbin",
		"/bin",
		"/sbin",
		"/private/var/db/dyld",
		"/System/Volumes/Preboot/Cryptexes",
		"/private/var/db/timezone",
		"/Library/Apple/System/Library",
		"/Library/Preferences/Logging",
		"/private/etc/ssl",
		// Package managers' trees: Seatbelt matches resolved paths, and a
		// Homebrew library in lib/ is a symlink into Cellar/. Programs and
		// libraries only: not etc/ (configuration, credentials) nor var/
		// (databases, logs of services Homebrew runs).
		"/opt/homebrew/bin",
		"/opt/homebrew/sbin",
		"/opt/homebrew/lib",
		"/opt/homebrew/libexec",
		"/opt/homebrew/opt",
		"/opt/homebrew/Cellar",
		"/opt/homebrew/share",
		"/opt/homebrew/include",
		"/opt/homebrew/Frameworks",
		"/usr/local/bin",
		"/usr/local/lib",
		"/usr/local/Cellar",
		"/usr/local/opt",
		// The developer tools /usr/bin/git, cc, make... are shims into.
		"/Library/Developer/CommandLineTools",
		"/Applications/Xcode.app/Contents/Developer",
	}
}

// baselineReadLiterals are single system files a process reads while
// starting or resolving users, time zones and services. Not the whole of
// /etc: master.passwd and the like stay out.
func baselineReadLiterals() []string {
	return []string{
		"/private/etc/localtime",
		"/private/etc/hosts",
		"/private/etc/resolv.conf",
		"/private/etc/services",
		"/private/etc/protocols",
		"/private/etc/passwd",
		"/private/etc/group",
		"/private/etc/shells",
		"/private/etc/zshrc",
		"/private/etc/profile",
		"/private/etc/bashrc",
		"/dev/random",
		"/dev/urandom",
		"/dev/autofs_nowait",
		"/private/var/db/xcode_select_link",
	}
}

// baselineMetadataLiterals are the roots and firmlink ancestors that path
// resolution stats on the way to anything (getcwd, realpath, the shell).
func baselineMetadataLiterals() []string {
	return []string{
		"/",
		"/private",
		"/private/var",
		"/private/etc",
		"/private/tmp",
		"/var",
		"/etc",
		"/tmp",
		"/Users",
		"/Volumes",
		"/System/Volumes",
		"/System/Volumes/Data",
		"/Library",
		"/opt",
		"/opt/homebrew",
		"/usr",
		"/usr/local",
		"/dev",
	}
}

// baselineMachServices are the launchd services every command may look
// up: only user and group lookups (getpwuid, getgrgid), as in Codex's base
// policy. Not logd, diagnosticd or analyticsd (logging fails silently
// without them), not cfprefsd, and not trustd or anything else that can
// reach the network on the command's behalf under network none.
func baselineMachServices() []string {
	return []string{
		"com.apple.system.opendirectoryd.libinfo",
	}
}

// networkMachServices are added with network allow_all: name resolution,
// network configuration and TLS certificate evaluation.
func networkMachServices() []string {
	return []string{
		"com.apple.SecurityServer",
		"com.apple.SystemConfiguration.DNSConfiguration",
		"com.apple.SystemConfiguration.configd",
		"com.apple.bsd.dirhelper",
		"com.apple.dnssd.service",
		"com.apple.mDNSResponder",
		"com.apple.networkd",
		"com.apple.ocspd",
		"com.apple.system.opendirectoryd.membership",
		"com.apple.trustd",
		"com.apple.trustd.agent",
	}
}

// baselineSysctls are the sysctl names every command may read: hardware
// and OS identification, as in Codex's base policy, by exact name. No
// whole prefix such as "kern.": kern.procargs2 and kern.proc.* describe
// other processes (their arguments, environment and owners).
func baselineSysctls() []string {
	return []string{
		"hw.activecpu", "hw.busfrequency_compat", "hw.byteorder", "hw.cacheconfig",
		"hw.cachelinesize_compat", "hw.cpufamily", "hw.cpufrequency", "hw.cpufrequency_compat",
		"hw.cputype", "hw.l1dcachesize_compat", "hw.l1icachesize_compat", "hw.l2cachesize_compat",
		"hw.l3cachesize_compat", "hw.logicalcpu", "hw.logicalcpu_max", "hw.machine", "hw.memsize",
		"hw.model", "hw.ncpu", "hw.nperflevels", "hw.packages", "hw.pagesize", "hw.pagesize_compat",
		"hw.physicalcpu", "hw.physicalcpu_max", "hw.tbfrequency_compat", "hw.vectorunit",
		"kern.argmax", "kern.hostname", "kern.maxfilesperproc", "kern.maxproc",
		"kern.osproductversion", "kern.osrelease", "kern.ostype", "kern.osvariant_status",
		"kern.osversion", "kern.secure_kernel", "kern.usrstack64", "kern.version",
		"machdep.cpu.brand_string", "sysctl.proc_cputype", "sysctl.proc_translated", "vm.loadavg",
	}
}

// baselineSysctlPrefixes are CPU feature and performance-level families
// (hw.optional.arm.FEAT_*, hw.perflevel0.*): hardware description only.
func baselineSysctlPrefixes() []string {
	return []string{"hw.optional.arm.", "hw.optional.armv8_", "hw.perflevel"}
}

// protectedNameRegexes match each protected name as a path component, in
// any letter case: APFS is case-insensitive by default, so `.GIT` created
// where no `.git` exists yet is the protected directory, and the exact-
// case (param "PROTECTED_n") rules would not see it. A regex cannot name
// the workspace (paths never enter the profile text), so these bind
// every component so named anywhere below the workspace and the fs_write
// grants: stricter than the top level alone, never weaker. Two regexes per
// name (the component last, or followed by more) keep to the simplest
// regex syntax: letters as a two-letter class, every other character (the
// few protectedNames lets through) as a one-character class, so no name
// can carry regex syntax.
func protectedNameRegexes(names []string) []string {
	var out []string
	for _, d := range names {
		var b strings.Builder
		b.WriteString("/")
		for _, r := range d {
			switch {
			case r >= 'a' && r <= 'z':
				b.WriteString("[" + string(r-'a'+'A') + string(r) + "]")
			case r >= 'A' && r <= 'Z':
				b.WriteString("[" + string(r) + string(r-'A'+'a') + "]")
			case r >= '0' && r <= '9':
				b.WriteRune(r)
			default:
				b.WriteString("[" + string(r) + "]")
			}
		}
		out = append(out, b.String()+"$", b.String()+"/")
	}
	return out
}

// protectedComponent returns the first component of path that is one of
// names in any letter case, or "".
func protectedComponent(path string, names []string) string {
	for _, c := range strings.Split(path, "/") {
		for _, n := range names {
			if strings.EqualFold(c, n) {
				return c
			}
		}
	}
	return ""
}

// protectedNamePunct are the characters besides ASCII letters and digits
// a protected name may hold here. Each is literal inside a regex bracket
// class and needs no escape in an SBPL string.
const protectedNamePunct = "._-~+@#%=,"

// protectedNames checks ProfileRequest.Protected (empty: the defaults,
// driverapi.DefaultProtectedEntries) and returns it without duplicates,
// in order. Besides what no entry name can be (empty, ".", "..", more
// than one component), it refuses what the case-insensitive regexes could
// not match exactly: letters outside ASCII (APFS folds Unicode case,
// a regex class here would not) and punctuation outside
// protectedNamePunct.
func protectedNames(req []string) ([]string, error) {
	if len(req) == 0 {
		return driverapi.DefaultProtectedEntries(), nil
	}
	var out []string
	seen := map[string]bool{}
	for _, n := range req {
		if why := driverapi.ProtectedNameProblem(n); why != "" {
			return nil, &driverapi.InvalidSpecError{Field: "protected", Reason: why}
		}
		for _, r := range n {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(protectedNamePunct, r)) {
				return nil, &driverapi.InvalidSpecError{Field: "protected", Reason: fmt.Sprintf("%q holds %q: the seatbelt driver matches protected names in any letter case "+
					"and takes only ASCII letters, digits and %s", n, r, protectedNamePunct)}
			}
		}
		// APFS compares names case-insensitively: .git and .GIT are one
		// entry, listed once.
		if k := strings.ToLower(n); !seen[k] {
			seen[k] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// Plan is what ProfileFor decides; it is serialised into the profile data.
type Plan struct {
	// Format versions the profile data layout.
	Format int `json:"format"`
	// SBPL is the profile text. It contains no path from the request.
	SBPL string `json:"sbpl"`
	// Params are the -D arguments, sorted by name.
	Params []Param `json:"params"`
	// Network is the network mode the profile enforces.
	Network string `json:"network"`
	// ProxyPort is the loopback port allowed for allow_hosts, else 0.
	ProxyPort int `json:"proxy_port,omitempty"`
	// SpawnSubprocess says whether process-fork is allowed.
	SpawnSubprocess bool `json:"spawn_subprocess"`
	// MaxMemoryMB is applied as RLIMIT_AS by the launch shim (0: none).
	MaxMemoryMB uint64 `json:"max_memory_mb,omitempty"`
}

// PlanFormat is the current Plan.Format.
const PlanFormat = 1

// Canonicalizer turns a path into the form Seatbelt matches against (real
// path, symlinks and firmlinks such as /tmp -> /private/tmp resolved).
// Paths that do not exist are returned cleaned.
type Canonicalizer func(path string) string

// IdentityCanonicalizer only cleans the path; tests use it.
func IdentityCanonicalizer(p string) string { return filepath.Clean(p) }

// EvalSymlinksCanonicalizer resolves symlinks when the path exists.
func EvalSymlinksCanonicalizer(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return filepath.Clean(p)
}

// BuildPlan makes the profile for req. It validates every path (absolute,
// no NUL) and the proxy endpoint; the result is deterministic for equal
// input.
func BuildPlan(req driverapi.ProfileRequest, canon Canonicalizer) (Plan, error) {
	if canon == nil {
		canon = IdentityCanonicalizer
	}
	if err := checkExact("workspace", req.Workspace, canon); err != nil {
		return Plan{}, err
	}
	if req.Cwd != "" {
		if err := checkExact("cwd", req.Cwd, canon); err != nil {
			return Plan{}, err
		}
		if !driverapi.PathWithin(canon(req.Cwd), canon(req.Workspace)) {
			return Plan{}, &driverapi.InvalidSpecError{Field: "cwd", Reason: fmt.Sprintf("%q is not inside the workspace %q", req.Cwd, req.Workspace)}
		}
	}
	caps := req.Capabilities
	ws := canon(req.Workspace)
	if ws == "/" {
		return Plan{}, &driverapi.InvalidSpecError{Field: "workspace", Reason: "the file system root cannot be the workspace"}
	}
	reads, err := canonList("fs_read", caps.FSRead, canon)
	if err != nil {
		return Plan{}, err
	}
	writes, err := canonList("fs_write", caps.FSWrite, canon)
	if err != nil {
		return Plan{}, err
	}
	names, err := protectedNames(req.Protected)
	if err != nil {
		return Plan{}, err
	}
	for i, root := range append([]string{ws}, writes...) {
		if c := protectedComponent(root, names); c != "" {
			field := "workspace"
			if i > 0 {
				field = fmt.Sprintf("fs_write[%d]", i-1)
			}
			return Plan{}, &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q lies in %q, a protected name: the profile denies writing "+
				"below every component so named, in any letter case, so nothing there could be written", root, c)}
		}
	}
	plan := Plan{
		Format:          PlanFormat,
		Network:         caps.Network.Mode.String(),
		SpawnSubprocess: caps.SpawnSubprocess,
		MaxMemoryMB:     caps.MaxMemoryMB,
	}
	switch caps.Network.Mode {
	case driverapi.NetworkNone, driverapi.NetworkAllowAll:
	case driverapi.NetworkAllowHosts:
		port, err := proxyPort(req.Proxy)
		if err != nil {
			return Plan{}, err
		}
		plan.ProxyPort = port
	default:
		return Plan{}, &driverapi.InvalidSpecError{Field: "network.mode", Reason: "unknown network mode"}
	}

	params := []Param{{Name: ParamWorkspace, Value: ws}}
	// Every protected name in the workspace and in each fs_write grant
	// (each writable root), as the Linux driver protects them.
	var protected []string
	seenProt := map[string]bool{}
	for _, root := range append([]string{ws}, writes...) {
		for _, d := range names {
			v := filepath.Join(root, d)
			if seenProt[v] {
				continue
			}
			seenProt[v] = true
			name := paramProtected + strconv.Itoa(len(protected))
			params = append(params, Param{Name: name, Value: v})
			protected = append(protected, name)
		}
	}
	var readNames, writeNames []string
	for i, p := range reads {
		name := paramRead + strconv.Itoa(i)
		params = append(params, Param{Name: name, Value: p})
		readNames = append(readNames, name)
	}
	for i, p := range writes {
		name := paramWrite + strconv.Itoa(i)
		params = append(params, Param{Name: name, Value: p})
		writeNames = append(writeNames, name)
	}
	var ancestorNames []string
	for i, a := range ancestors(append(append([]string{ws}, reads...), writes...)) {
		name := paramAncestor + strconv.Itoa(i)
		params = append(params, Param{Name: name, Value: a})
		ancestorNames = append(ancestorNames, name)
	}
	// The writable roots and everything above them: none may be renamed
	// or removed (moved away, its protected entries written at the new
	// place, moved back). The workspace itself is WORKSPACE; fs_write
	// grants are listed here with their ancestors.
	var wsUpNames []string
	for i, a := range unlinkDenied(ws, writes) {
		name := paramWSUp + strconv.Itoa(i)
		params = append(params, Param{Name: name, Value: a})
		wsUpNames = append(wsUpNames, name)
	}
	sort.Slice(params, func(i, j int) bool { return params[i].Name < params[j].Name })
	plan.Params = params
	plan.SBPL = renderSBPL(sbplInput{
		wsUp:      wsUpNames,
		protected: protected,
		reads:     readNames,
		writes:    writeNames,
		ancestors: ancestorNames,
		writable:  append([]string{ParamWorkspace}, writeNames...),
		names:     names,
		network:   caps.Network.Mode,
		proxyPort: plan.ProxyPort,
		spawn:     caps.SpawnSubprocess,
	})
	return plan, nil
}

func checkPath(field, p string) error {
	switch {
	case p == "":
		return &driverapi.InvalidSpecError{Field: field, Reason: "empty path"}
	case strings.IndexByte(p, 0) >= 0:
		return &driverapi.InvalidSpecError{Field: field, Reason: "contains a NUL byte"}
	case !filepath.IsAbs(p) || p[0] != '/':
		return &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q is not an absolute path", p)}
	}
	return nil
}

// checkExact is checkPath for a path the host hands over canonical (the
// workspace, a cwd): one canon would change (a ".", "..", doubled or
// trailing separator, a symlink on the way) is refused, not resolved, since
// a symlink swapped in after the host's check would be followed.
func checkExact(field, p string, canon Canonicalizer) error {
	if err := checkPath(field, p); err != nil {
		return err
	}
	if c := canon(p); c != p {
		return &driverapi.InvalidSpecError{Field: field, Reason: fmt.Sprintf("%q is not canonical (it resolves to %q): pass the resolved path", p, c)}
	}
	return nil
}

// canonList validates, canonicalises, de-duplicates and sorts grant paths,
// so that equal requests in another order give the same profile.
func canonList(field string, in []string, canon Canonicalizer) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for i, p := range in {
		if err := checkPath(fmt.Sprintf("%s[%d]", field, i), p); err != nil {
			return nil, err
		}
		c := canon(p)
		if c == "/" {
			return nil, &driverapi.InvalidSpecError{Field: fmt.Sprintf("%s[%d]", field, i), Reason: "granting the whole file system is not allowed"}
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out, nil
}

// ancestors lists every proper ancestor of paths (except "/", which the
// baseline covers), de-duplicated and sorted: stat on them is needed to
// resolve and getcwd into the granted trees.
func ancestors(paths []string) []string {
	seen := map[string]bool{}
	for _, p := range paths {
		for d := filepath.Dir(p); d != "/" && d != "." && !seen[d]; d = filepath.Dir(d) {
			seen[d] = true
		}
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// proxyPort extracts the loopback TCP port of the managed proxy. Seatbelt
// network filters can only name "localhost" or "*" as host, so a proxy
// elsewhere cannot be confined to and is refused.
func proxyPort(p *driverapi.ProxyEndpoint) (int, error) {
	if p == nil || p.TCPAddr == "" {
		return 0, &driverapi.InvalidSpecError{Field: "proxy", Reason: "network allow_hosts needs the managed proxy's loopback TCP address (ProfileRequest.Proxy.TCPAddr); seatbelt cannot route through a unix socket proxy"}
	}
	host, portStr, err := net.SplitHostPort(p.TCPAddr)
	if err != nil {
		return 0, &driverapi.InvalidSpecError{Field: "proxy.tcp_addr", Reason: fmt.Sprintf("%q is not host:port: %v", p.TCPAddr, err)}
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0, &driverapi.InvalidSpecError{Field: "proxy.tcp_addr", Reason: fmt.Sprintf("proxy host %q is not a loopback address; seatbelt can only allow localhost", host)}
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != portStr {
		return 0, &driverapi.InvalidSpecError{Field: "proxy.tcp_addr", Reason: fmt.Sprintf("port %q is not a number in 1..65535", portStr)}
	}
	return port, nil
}

// unlinkDenied are the paths never to be renamed or removed besides the
// workspace: its ancestors, each fs_write grant and the grants' ancestors,
// sorted, without the workspace itself (WORKSPACE names it).
func unlinkDenied(ws string, writes []string) []string {
	seen := map[string]bool{}
	for _, a := range ancestors(append([]string{ws}, writes...)) {
		seen[a] = true
	}
	for _, w := range writes {
		seen[w] = true
	}
	delete(seen, ws)
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

type sbplInput struct {
	protected, reads, writes, ancestors, wsUp []string
	writable                                  []string // WORKSPACE and the WRITE_n names
	names                                     []string // the protected entry names
	network                                   driverapi.NetworkMode
	proxyPort                                 int
	spawn                                     bool
}

func sbplString(s string) string {
	// Only constants of this file reach here; strconv.Quote still makes
	// any of them a well-formed SBPL string literal.
	return strconv.Quote(s)
}

func paramRef(name string) string { return `(param ` + sbplString(name) + `)` }

// renderSBPL writes the profile. Every request value enters only as a
// parameter name chosen here; the proxy port is an integer validated by
// proxyPort.
func renderSBPL(in sbplInput) string {
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...); b.WriteByte('\n') }
	w("(version 1)")
	w("(deny default)")
	w("")
	w("; --- platform baseline (read-only) ---")
	b.WriteString("(allow file-read*")
	for _, p := range baselineReadSubpaths() {
		b.WriteString("\n  (subpath " + sbplString(p) + ")")
	}
	for _, p := range baselineReadLiterals() {
		b.WriteString("\n  (literal " + sbplString(p) + ")")
	}
	w(")")
	b.WriteString("(allow file-read-metadata")
	for _, p := range baselineMetadataLiterals() {
		b.WriteString("\n  (literal " + sbplString(p) + ")")
	}
	for _, n := range in.ancestors {
		b.WriteString("\n  (literal " + paramRef(n) + ")")
	}
	w(")")
	w("; devices: null, zero and inherited descriptors. No terminal: the driver never")
	w("; gives the command a pty, and it runs in a session of its own without a")
	w("; controlling terminal, so /dev/tty, /dev/ptmx and the ttys stay closed (TIOCSTI)")
	w(`(allow file-read* file-write-data file-ioctl`)
	w(`  (literal "/dev/null") (literal "/dev/zero") (literal "/dev/dtracehelper") (subpath "/dev/fd"))`)
	w("; /tmp scratch (world-shared on macOS already)")
	w(`(allow file-read* file-write* (subpath "/private/tmp"))`)
	w("; mach services: user and group lookups only")
	b.WriteString("(allow mach-lookup")
	for _, s := range baselineMachServices() {
		b.WriteString("\n  (global-name " + sbplString(s) + ")")
	}
	w(")")
	w("; sysctls: hardware and OS identification, by name")
	b.WriteString("(allow sysctl-read")
	for _, n := range baselineSysctls() {
		b.WriteString("\n  (sysctl-name " + sbplString(n) + ")")
	}
	for _, n := range baselineSysctlPrefixes() {
		b.WriteString("\n  (sysctl-name-prefix " + sbplString(n) + ")")
	}
	w(")")
	w(`(allow process-info* (target self))`)
	w(`(allow signal (target same-sandbox))`)
	w("")
	w("; --- processes ---")
	if in.spawn {
		w(`(allow process-fork)`)
		w(`(allow process-exec)`)
	} else {
		// exec without fork replaces the image and creates no process, so
		// the system binary directories stay exec-able: a script target
		// needs its #! interpreter, and `exec tool` in a shell is fine.
		w("; spawn_subprocess=false: no fork; exec of the target and of system binaries (no new process)")
		w(`(allow process-exec (literal %s) (subpath "/bin") (subpath "/usr/bin"))`, paramRef(ParamProgram))
	}
	w(`(allow file-read* (literal %s))`, paramRef(ParamProgram))
	w("")
	w("; --- workspace and grants ---")
	notProtected := ""
	for _, n := range in.protected {
		notProtected += " (require-not (subpath " + paramRef(n) + "))"
	}
	w(`(allow file-read* (subpath %s))`, paramRef(ParamWorkspace))
	w(`(allow file-write* (require-all (subpath %s)%s))`, paramRef(ParamWorkspace), notProtected)
	for _, n := range in.reads {
		w(`(allow file-read* (subpath %s))`, paramRef(n))
	}
	for _, n := range in.writes {
		w(`(allow file-read* (subpath %s))`, paramRef(n))
		w(`(allow file-write* (require-all (subpath %s)%s))`, paramRef(n), notProtected)
	}
	w("")
	w("; --- network: %s ---", in.network)
	switch in.network {
	case driverapi.NetworkAllowAll:
		w("; IP in and out. Unix-domain sockets stay closed but for the resolver's: a")
		w("; host socket (docker.sock, SSH_AUTH_SOCK, a database) is not reachable")
		w(`(allow network-outbound (remote ip "*:*"))`)
		w(`(allow network-inbound (local ip "*:*"))`)
		w(`(allow network-bind (local ip "*:*"))`)
		w(`(allow system-socket (socket-domain AF_UNIX))`)
		w(`(allow network-outbound (remote unix-socket (subpath "/private/var/run/mDNSResponder")))`)
		w(`(allow system-socket (require-all (socket-domain AF_SYSTEM) (socket-protocol 2)))`)
		w(`(allow sysctl-read (sysctl-name-prefix "net.routetable."))`)
		b.WriteString("(allow mach-lookup")
		for _, s := range networkMachServices() {
			b.WriteString("\n  (global-name " + sbplString(s) + ")")
		}
		w(")")
	case driverapi.NetworkAllowHosts:
		w("; only the managed proxy on loopback; it enforces the host list")
		w(`(allow network-outbound (remote tcp "localhost:%d"))`, in.proxyPort)
	default:
		w("; none: no network rule at all")
	}
	w("")
	w("; --- protected paths: never writable, never creatable, never moved ---")
	w("; Later rules win, so these denies override every allow above.")
	if len(in.protected) > 0 {
		b.WriteString("(deny file-write*")
		for _, n := range in.protected {
			b.WriteString("\n  (subpath " + paramRef(n) + ") (literal " + paramRef(n) + ")")
		}
		w(")")
		w("; any letter case, at any depth below the workspace and the fs_write grants (APFS ignores case)")
		b.WriteString("(deny file-write* (require-all (require-any")
		for _, n := range in.writable {
			b.WriteString(" (subpath " + paramRef(n) + ")")
		}
		b.WriteString(")\n  (require-any")
		for _, re := range protectedNameRegexes(in.names) {
			b.WriteString("\n    (regex #" + sbplString(re) + ")")
		}
		w(")))")
	}
	w("; the workspace, the fs_write grants and their ancestors cannot be renamed or")
	w("; removed: moving one away, writing the protected paths at their new place and")
	w("; moving it back would bypass every rule above")
	b.WriteString("(deny file-write-unlink\n  (literal " + paramRef(ParamWorkspace) + ")")
	for _, n := range in.wsUp {
		b.WriteString("\n  (literal " + paramRef(n) + ")")
	}
	w(")")
	return b.String()
}
