package appcontainer

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Options is the `[sandbox.windows]` configuration section, which reaches
// the driver as JSON in ALEPH_DRIVER_OPTIONS.
type Options struct {
	// MinTier is the weakest tier the driver may use when the stronger
	// ones are absent on the host: "appcontainer" (the default: nothing
	// weaker), "restricted_token" or "job_object". A weaker tier still
	// runs only commands whose needs it enforces.
	MinTier string `json:"min_tier,omitempty"`
	// MaxProcesses is the Job Object's active-process limit when
	// spawn_subprocess is allowed (1 when it is not). Default 64.
	MaxProcesses uint32 `json:"max_processes,omitempty"`
}

// DefaultMinTier is the floor when min_tier is not set: only an
// AppContainer gives what the core requires of every command.
const DefaultMinTier = TierAppContainer

// DefaultMaxProcesses is the active-process limit with spawn_subprocess.
const DefaultMaxProcesses = 64

// ParseOptions reads the driver options, refusing unknown keys and bad
// values.
func ParseOptions(raw string) (Options, error) {
	o := Options{MinTier: DefaultMinTier.String(), MaxProcesses: DefaultMaxProcesses}
	if strings.TrimSpace(raw) == "" {
		return o, nil
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return Options{}, fmt.Errorf("driver options: %w (known keys: min_tier, max_processes)", err)
	}
	if o.MinTier == "" {
		o.MinTier = DefaultMinTier.String()
	}
	if _, err := ParseTier(o.MinTier); err != nil {
		return Options{}, fmt.Errorf("driver options: min_tier: %w", err)
	}
	if o.MaxProcesses == 0 {
		o.MaxProcesses = DefaultMaxProcesses
	}
	return o, nil
}

// Plan is the launch plan ProfileFor makes; its JSON is the profile data.
type Plan struct {
	Format    int      `json:"format"`
	Workspace string   `json:"workspace"`
	Cwd       string   `json:"cwd"`
	Read      []string `json:"read,omitempty"`
	Write     []string `json:"write,omitempty"`
	// ProtectedNames are the protected entry names (ProfileRequest.Protected,
	// default driverapi.DefaultProtectedEntries).
	ProtectedNames []string `json:"protected_names"`
	// Protected are those names in the workspace and in each fs_write
	// grant: protectedPaths(Workspace, Write, ProtectedNames).
	Protected []string `json:"protected"`
	Network   string   `json:"network"`
	// CapabilitySIDs are the AppContainer capabilities granted (SDDL).
	CapabilitySIDs     []string `json:"capability_sids,omitempty"`
	SpawnSubprocess    bool     `json:"spawn_subprocess"`
	ActiveProcessLimit uint32   `json:"active_process_limit"`
	MaxMemoryMB        uint64   `json:"max_memory_mb,omitempty"`
}

// PlanFormat is the current Plan.Format (2: the protected names travel
// with the plan and apply to the fs_write grants too).
const PlanFormat = 2

// Well-known AppContainer capability SIDs.
const (
	SIDInternetClient             = "S-1-15-3-1"
	SIDPrivateNetworkClientServer = "S-1-15-3-3"
)

// CapabilitySIDsFor maps a network policy to AppContainer capabilities:
// AllowAll gets internetClient and privateNetworkClientServer (the
// loopback stays closed: AppContainers cannot reach it without an
// administrator's exemption); None gets nothing, which is what blocks the
// network.
func CapabilitySIDsFor(mode driverapi.NetworkMode) []string {
	if mode == driverapi.NetworkAllowAll {
		return []string{SIDInternetClient, SIDPrivateNetworkClientServer}
	}
	return nil
}

// Resolver resolves host names for the allow_hosts refusal message.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// BuildPlan validates req and makes the plan. fsys is consulted for
// reparse points; resolver only for the allow_hosts refusal.
func BuildPlan(ctx context.Context, req driverapi.ProfileRequest, opts Options, fsys FS, resolver Resolver) (Plan, error) {
	ws, err := ExactPath(fsys, "workspace", req.Workspace)
	if err != nil {
		return Plan{}, err
	}
	if winIsRoot(ws) {
		return Plan{}, &driverapi.InvalidSpecError{Field: "workspace", Reason: "a drive or share root cannot be the workspace"}
	}
	cwd := ws
	if req.Cwd != "" {
		if cwd, err = ExactPath(fsys, "cwd", req.Cwd); err != nil {
			return Plan{}, err
		}
		if !WinWithin(cwd, ws) {
			return Plan{}, &driverapi.InvalidSpecError{Field: "cwd", Reason: fmt.Sprintf("%q is not inside the workspace %q", req.Cwd, req.Workspace)}
		}
	}
	caps := req.Capabilities
	reads, err := cleanList(fsys, "fs_read", caps.FSRead)
	if err != nil {
		return Plan{}, err
	}
	writes, err := cleanList(fsys, "fs_write", caps.FSWrite)
	if err != nil {
		return Plan{}, err
	}
	switch caps.Network.Mode {
	case driverapi.NetworkNone, driverapi.NetworkAllowAll:
	case driverapi.NetworkAllowHosts:
		return Plan{}, allowHostsRefusal(ctx, caps.Network.Hosts, resolver)
	default:
		return Plan{}, &driverapi.InvalidSpecError{Field: "network.mode", Reason: "unknown network mode"}
	}
	p := Plan{
		Format:          PlanFormat,
		Workspace:       ws,
		Cwd:             cwd,
		Read:            reads,
		Write:           writes,
		Network:         caps.Network.Mode.String(),
		CapabilitySIDs:  CapabilitySIDsFor(caps.Network.Mode),
		SpawnSubprocess: caps.SpawnSubprocess,
		MaxMemoryMB:     caps.MaxMemoryMB,
	}
	if p.ProtectedNames, err = protectedNames(req.Protected); err != nil {
		return Plan{}, err
	}
	p.Protected = protectedPaths(ws, writes, p.ProtectedNames)
	p.ActiveProcessLimit = 1
	if caps.SpawnSubprocess {
		p.ActiveProcessLimit = opts.MaxProcesses
		if p.ActiveProcessLimit == 0 {
			p.ActiveProcessLimit = DefaultMaxProcesses
		}
	}
	if fsys != nil {
		if err := CheckReparsePoints(fsys, p); err != nil {
			return Plan{}, err
		}
	}
	return p, nil
}

// protectedNames checks ProfileRequest.Protected (empty: the defaults,
// driverapi.DefaultProtectedEntries) and returns it without duplicates,
// compared case-insensitively as NTFS compares names. A name must be one
// component Windows reads as written: not empty, "." or "..", no
// separator, nothing checkComponent refuses (a trailing dot or space,
// which Windows strips, a colon, which names a stream, wildcards, device
// names) and not shaped like an 8.3 alias (GIT~1), which could stand for
// another entry.
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
		why := ""
		switch {
		case IsShortNameAlias(n):
			why = "looks like an 8.3 short name, which could stand for another entry"
		default:
			why = checkComponent(n)
		}
		if why != "" {
			return nil, &driverapi.InvalidSpecError{Field: "protected", Reason: fmt.Sprintf("%q %s", n, why)}
		}
		if k := strings.ToLower(n); !seen[k] {
			seen[k] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// protectedPaths are names in the workspace and in each fs_write grant, as
// the Linux driver protects them, without duplicates. A grant inside a
// workspace protected entry is no root of its own: PlanSetup drops it,
// and stubs must not be made inside .git.
func protectedPaths(ws string, writes, names []string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(root string) {
		for _, n := range names {
			p := WinJoin(root, n)
			if k := strings.ToLower(p); !seen[k] {
				seen[k] = true
				out = append(out, p)
			}
		}
	}
	add(ws)
	wsProt := append([]string{}, out...)
	for _, w := range writes {
		inside := false
		for _, prot := range wsProt {
			inside = inside || WinWithin(w, prot)
		}
		if !inside {
			add(w)
		}
	}
	return out
}

func cleanList(fsys FS, field string, in []string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for i, raw := range in {
		c, err := CanonicalPath(fsys, fmt.Sprintf("%s[%d]", field, i), raw)
		if err != nil {
			return nil, err
		}
		if winIsRoot(c) {
			return nil, &driverapi.InvalidSpecError{Field: fmt.Sprintf("%s[%d]", field, i), Reason: "granting a whole drive or share is not allowed"}
		}
		if k := strings.ToLower(c); !seen[k] {
			seen[k] = true
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return strings.ToLower(out[i]) < strings.ToLower(out[j]) })
	return out, nil
}

// EncodePlan serialises a plan deterministically.
func EncodePlan(p Plan) ([]byte, error) { return driverapi.EncodePlanJSON(p) }

// DecodePlan parses profile data and re-checks what Run relies on.
func DecodePlan(data []byte) (Plan, error) {
	var p Plan
	if err := driverapi.DecodePlanJSON("appcontainer profile data", data, &p); err != nil {
		return Plan{}, err
	}
	if p.Format != PlanFormat {
		return Plan{}, &driverapi.ProfileError{Reason: fmt.Sprintf("appcontainer profile format %d, this driver reads format %d", p.Format, PlanFormat)}
	}
	if WinClean(p.Workspace) != p.Workspace || p.Workspace == "" || !WinWithin(p.Cwd, p.Workspace) {
		return Plan{}, &driverapi.ProfileError{Reason: "appcontainer profile has a bad workspace or cwd"}
	}
	for _, x := range append(append([]string{p.Workspace, p.Cwd}, p.Read...), p.Write...) {
		if WinClean(x) != x || checkComponents("profile path", x, x, false) != nil {
			return Plan{}, &driverapi.ProfileError{Reason: fmt.Sprintf("appcontainer profile path %q is not in canonical form", x)}
		}
	}
	names, err := protectedNames(p.ProtectedNames)
	if err != nil || len(p.ProtectedNames) == 0 || len(names) != len(p.ProtectedNames) {
		return Plan{}, &driverapi.ProfileError{Reason: "appcontainer profile has no valid list of protected names"}
	}
	want := protectedPaths(p.Workspace, p.Write, p.ProtectedNames)
	if len(p.Protected) != len(want) {
		return Plan{}, &driverapi.ProfileError{Reason: "appcontainer profile does not protect every protected entry"}
	}
	for i := range want {
		if p.Protected[i] != want[i] {
			return Plan{}, &driverapi.ProfileError{Reason: "appcontainer profile protects the wrong paths"}
		}
	}
	if p.ActiveProcessLimit == 0 || (!p.SpawnSubprocess && p.ActiveProcessLimit != 1) {
		return Plan{}, &driverapi.ProfileError{Reason: "appcontainer profile has an active-process limit that contradicts spawn_subprocess"}
	}
	wantSIDs := CapabilitySIDsFor(driverapi.NetworkNone)
	switch p.Network {
	case driverapi.NetworkNone.String():
	case driverapi.NetworkAllowAll.String():
		wantSIDs = CapabilitySIDsFor(driverapi.NetworkAllowAll)
	default:
		return Plan{}, &driverapi.ProfileError{Reason: "appcontainer profile has network mode " + p.Network}
	}
	if strings.Join(p.CapabilitySIDs, ",") != strings.Join(wantSIDs, ",") {
		return Plan{}, &driverapi.ProfileError{Reason: "appcontainer profile capability SIDs do not match its network mode"}
	}
	return p, nil
}

// AllowHostsError refuses network allow_hosts: Windows cannot confine a
// process to a set of addresses without WFP. It lists what the request
// would have allowed, resolved now, so the user can judge network all.
type AllowHostsError struct {
	Hosts []ResolvedHost
}

// ResolvedHost is one allow_hosts entry and the addresses it names now.
type ResolvedHost struct {
	Entry string   `json:"entry"`
	IPs   []string `json:"ips,omitempty"`
	Note  string   `json:"note,omitempty"`
}

func (e *AllowHostsError) Error() string {
	var b strings.Builder
	b.WriteString("network allow_hosts cannot be enforced on Windows: confining a process to some addresses needs Windows Filtering Platform rules, which need administrator rights. The request would have allowed ")
	if len(e.Hosts) == 0 {
		b.WriteString("no host at all")
	}
	for i, h := range e.Hosts {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(h.Entry + " -> ")
		switch {
		case len(h.IPs) > 0:
			b.WriteString(strings.Join(h.IPs, ", "))
		default:
			b.WriteString("(" + h.Note + ")")
		}
	}
	b.WriteString(". Use network none, or network all if reaching every address is acceptable.")
	return b.String()
}

// allowHostsRefusal resolves every entry (IP literals as themselves,
// wildcards not at all) for the refusal message.
func allowHostsRefusal(ctx context.Context, hosts []string, r Resolver) error {
	e := &AllowHostsError{}
	for _, entry := range hosts {
		rh := ResolvedHost{Entry: entry}
		host, port := splitHostPort(entry)
		suffix := ""
		if port != "" {
			suffix = ":" + port
		}
		switch {
		case strings.HasPrefix(host, "*."):
			rh.Note = "wildcard: cannot be resolved in advance"
		case net.ParseIP(host) != nil:
			rh.IPs = []string{fmtIP(net.ParseIP(host), suffix)}
		case r == nil:
			rh.Note = "not resolved: no resolver"
		default:
			addrs, err := r.LookupIPAddr(ctx, host)
			if err != nil {
				rh.Note = "does not resolve: " + err.Error()
				break
			}
			for _, a := range addrs {
				rh.IPs = append(rh.IPs, fmtIP(a.IP, suffix))
			}
			sort.Strings(rh.IPs)
			if len(rh.IPs) == 0 {
				rh.Note = "no addresses"
			}
		}
		e.Hosts = append(e.Hosts, rh)
	}
	return e
}

func fmtIP(ip net.IP, portSuffix string) string {
	if portSuffix != "" && ip.To4() == nil {
		return "[" + ip.String() + "]" + portSuffix
	}
	return ip.String() + portSuffix
}

// splitHostPort reads "host", "host:port", "[v6]:port" and a bare IPv6
// literal.
func splitHostPort(entry string) (host, port string) {
	if net.ParseIP(entry) != nil {
		return entry, ""
	}
	if h, p, err := net.SplitHostPort(entry); err == nil {
		return h, p
	}
	return strings.TrimSuffix(entry, "."), ""
}
