package appcontainer

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

const wsPath = `C:\Users\dev\ws`

func winReq(c driverapi.Capabilities) driverapi.ProfileRequest {
	return driverapi.ProfileRequest{Capabilities: c, Workspace: wsPath, Cwd: wsPath + `\sub`}
}

func mustBuild(t *testing.T, r driverapi.ProfileRequest, fsys FS) Plan {
	t.Helper()
	p, err := BuildPlan(t.Context(), r, Options{MaxProcesses: 10}, fsys, nil)
	if err != nil {
		t.Fatalf("BuildPlan: %v", err)
	}
	return p
}

func TestBuildPlan(t *testing.T) {
	p := mustBuild(t, winReq(driverapi.Capabilities{
		FSRead:  []string{`D:\data\`, `c:/tools`, `C:\TOOLS`},
		FSWrite: []string{`C:\out\x\..\y`},
	}), MapFS{})
	if p.Workspace != wsPath || p.Cwd != wsPath+`\sub` {
		t.Errorf("workspace/cwd %q %q", p.Workspace, p.Cwd)
	}
	if strings.Join(p.Read, "|") != `C:\tools|D:\data` {
		t.Errorf("reads not cleaned, deduplicated case-insensitively and sorted: %q", p.Read)
	}
	if strings.Join(p.Write, "|") != `C:\out\y` {
		t.Errorf("writes %q", p.Write)
	}
	// The whole default set, in the workspace and in the fs_write grant.
	var want []string
	for _, root := range []string{wsPath, `C:\out\y`} {
		for _, e := range driverapi.DefaultProtectedEntries() {
			want = append(want, root+`\`+e)
		}
	}
	if strings.Join(p.Protected, "|") != strings.Join(want, "|") {
		t.Errorf("protected %q\nwant %q", p.Protected, want)
	}
	if p.ActiveProcessLimit != 1 || p.SpawnSubprocess {
		t.Errorf("no spawn: limit %d", p.ActiveProcessLimit)
	}
	if len(p.CapabilitySIDs) != 0 || p.Network != "none" {
		t.Errorf("network none must grant no capability SIDs: %v", p.CapabilitySIDs)
	}
	q := mustBuild(t, winReq(driverapi.Capabilities{SpawnSubprocess: true, MaxMemoryMB: 256,
		Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}}), MapFS{})
	if q.ActiveProcessLimit != 10 || q.MaxMemoryMB != 256 {
		t.Errorf("spawn: limit %d mem %d", q.ActiveProcessLimit, q.MaxMemoryMB)
	}
	if strings.Join(q.CapabilitySIDs, ",") != SIDInternetClient+","+SIDPrivateNetworkClientServer {
		t.Errorf("allow_all capability SIDs %v", q.CapabilitySIDs)
	}
	// Deterministic, and it round-trips through the profile data.
	a, _ := EncodePlan(p)
	b, _ := EncodePlan(mustBuild(t, winReq(driverapi.Capabilities{
		FSRead: []string{`D:\data`, `c:\tools`}, FSWrite: []string{`C:\out\y`}}), MapFS{}))
	if string(a) != string(b) {
		t.Errorf("equivalent requests gave different profiles:\n%s\n%s", a, b)
	}
	back, err := DecodePlan(a)
	if err != nil || back.Workspace != p.Workspace || len(back.Read) != 2 {
		t.Errorf("round trip: %+v %v", back, err)
	}
}

func TestBuildPlanRejects(t *testing.T) {
	cases := map[string]func(r *driverapi.ProfileRequest){
		"relative workspace": func(r *driverapi.ProfileRequest) { r.Workspace, r.Cwd = `ws`, "" },
		"posix workspace":    func(r *driverapi.ProfileRequest) { r.Workspace, r.Cwd = `/home/x`, "" },
		"drive root":         func(r *driverapi.ProfileRequest) { r.Workspace, r.Cwd = `C:\`, "" },
		"verbatim":           func(r *driverapi.ProfileRequest) { r.Workspace, r.Cwd = `\\?\C:\ws`, "" },
		"cwd outside":        func(r *driverapi.ProfileRequest) { r.Cwd = `C:\Users\dev\wsx` },
		"cwd dotdot":         func(r *driverapi.ProfileRequest) { r.Cwd = wsPath + `\..\other` },
		// Spellings of a canonical path are refused, not cleaned.
		"workspace dot":             func(r *driverapi.ProfileRequest) { r.Workspace, r.Cwd = wsPath+`\.`, "" },
		"workspace trailing":        func(r *driverapi.ProfileRequest) { r.Workspace, r.Cwd = wsPath+`\`, "" },
		"workspace forward slashes": func(r *driverapi.ProfileRequest) { r.Workspace, r.Cwd = strings.ReplaceAll(wsPath, `\`, "/"), "" },
		"cwd dotdot inside":         func(r *driverapi.ProfileRequest) { r.Cwd = wsPath + `\sub\..` },
		"cwd doubled":               func(r *driverapi.ProfileRequest) { r.Cwd = wsPath + `\\sub` },
		"relative read":             func(r *driverapi.ProfileRequest) { r.Capabilities.FSRead = []string{`data`} },
		"drive write":               func(r *driverapi.ProfileRequest) { r.Capabilities.FSWrite = []string{`D:\`} },
		"nul":                       func(r *driverapi.ProfileRequest) { r.Capabilities.FSWrite = []string{"C:\\a\x00"} },
		"bad mode":                  func(r *driverapi.ProfileRequest) { r.Capabilities.Network.Mode = 9 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			r := winReq(driverapi.Capabilities{})
			mutate(&r)
			_, err := BuildPlan(t.Context(), r, Options{}, MapFS{}, nil)
			var ise *driverapi.InvalidSpecError
			if !errors.As(err, &ise) {
				t.Fatalf("got %v, want *InvalidSpecError", err)
			}
		})
	}
	// Positive control: the request as the host sends it.
	if _, err := BuildPlan(t.Context(), winReq(driverapi.Capabilities{}), Options{}, MapFS{}, nil); err != nil {
		t.Fatalf("canonical request: %v", err)
	}
}

type fakeResolver map[string][]string

func (f fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	ips, ok := f[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	var out []net.IPAddr
	for _, s := range ips {
		out = append(out, net.IPAddr{IP: net.ParseIP(s)})
	}
	return out, nil
}

func TestAllowHostsRefusedWithResolvedAddresses(t *testing.T) {
	r := winReq(driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts,
		Hosts: []string{"example.com:443", "*.github.com", "10.1.2.3", "[2001:db8::1]:8443", "::1", "nxdomain.invalid", "api.example.org"}}})
	res := fakeResolver{
		"example.com":     {"93.184.216.34", "2606:2800:220:1::1"},
		"api.example.org": {"198.51.100.7", "198.51.100.5"},
	}
	_, err := BuildPlan(t.Context(), r, Options{}, MapFS{}, res)
	var ahe *AllowHostsError
	if !errors.As(err, &ahe) {
		t.Fatalf("got %v, want *AllowHostsError", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"cannot be enforced on Windows", "administrator",
		"example.com:443 -> 93.184.216.34:443, [2606:2800:220:1::1]:443",
		"*.github.com -> (wildcard: cannot be resolved in advance)",
		"10.1.2.3 -> 10.1.2.3",
		"[2001:db8::1]:8443 -> [2001:db8::1]:8443",
		"::1 -> ::1",
		"nxdomain.invalid -> (does not resolve: no such host)",
		"api.example.org -> 198.51.100.5, 198.51.100.7",
		"network none, or network all",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if len(ahe.Hosts) != 7 {
		t.Errorf("entries %d", len(ahe.Hosts))
	}
}

func TestDecodePlanRefusesTampering(t *testing.T) {
	good := mustBuild(t, winReq(driverapi.Capabilities{}), MapFS{})
	mutations := map[string]func(p *Plan){
		"format":            func(p *Plan) { p.Format = PlanFormat + 1 },
		"names dropped":     func(p *Plan) { p.ProtectedNames = p.ProtectedNames[:1] },
		"names emptied":     func(p *Plan) { p.ProtectedNames = nil },
		"bad name":          func(p *Plan) { p.ProtectedNames = []string{".git::$INDEX_ALLOCATION"} },
		"network widened":   func(p *Plan) { p.CapabilitySIDs = []string{SIDInternetClient} },
		"unknown network":   func(p *Plan) { p.Network = "allow_hosts" },
		"protected dropped": func(p *Plan) { p.Protected = p.Protected[:3] },
		"protected moved":   func(p *Plan) { p.Protected[0] = `C:\elsewhere\.git` },
		"process limit":     func(p *Plan) { p.ActiveProcessLimit = 50 },
		"cwd outside":       func(p *Plan) { p.Cwd = `C:\Windows` },
		"workspace unclean": func(p *Plan) { p.Workspace = wsPath + `\` },
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			p := good
			p.Protected = append([]string{}, good.Protected...)
			p.ProtectedNames = append([]string{}, good.ProtectedNames...)
			mutate(&p)
			data, _ := EncodePlan(p)
			var pe *driverapi.ProfileError
			if _, err := DecodePlan(data); !errors.As(err, &pe) {
				t.Fatalf("got %v, want *ProfileError", err)
			}
		})
	}
	data, _ := EncodePlan(good)
	if _, err := DecodePlan(data); err != nil {
		t.Errorf("control: %v", err)
	}
	// A second object after a good plan: what this driver checked would
	// not be all the data said.
	var pe *driverapi.ProfileError
	if _, err := DecodePlan(append(append([]byte{}, data...), data...)); !errors.As(err, &pe) {
		t.Errorf("data after the plan accepted: %v", err)
	}
}

func TestReparsePoints(t *testing.T) {
	p := mustBuild(t, winReq(driverapi.Capabilities{FSWrite: []string{`D:\out\deep\dir`}, FSRead: []string{`E:\ref`}}), MapFS{})
	cases := []struct {
		name  string
		fs    MapFS
		wantP string // "" = accepted
	}{
		{"clean", MapFS{wsPath: {IsDir: true}, wsPath + `\.git`: {IsDir: true}}, ""},
		{"link above the workspace is the host's", MapFS{`C:\Users`: {IsDir: true, Reparse: true}}, ""},
		{"workspace is a junction", MapFS{wsPath: {Reparse: true}}, wsPath},
		{".git is a junction", MapFS{wsPath: {IsDir: true}, wsPath + `\.git`: {Reparse: true}}, wsPath + `\.git`},
		{".agents is a symlink", MapFS{wsPath: {IsDir: true}, wsPath + `\.AGENTS`: {Reparse: true}}, wsPath + `\.agents`},
		{"write grant is a link", MapFS{`D:\out\deep\dir`: {Reparse: true}}, `D:\out\deep\dir`},
		{"read grant is a link", MapFS{`E:\ref`: {Reparse: true}}, `E:\ref`},
		{"link above a write grant", MapFS{`D:\out`: {Reparse: true}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckReparsePoints(c.fs, p)
			if c.wantP == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var re *ReparsePointError
			if !errors.As(err, &re) || !strings.EqualFold(re.Path, c.wantP) {
				t.Fatalf("got %v, want a reparse refusal at %s", err, c.wantP)
			}
			if !strings.Contains(err.Error(), "symbolic link or junction") {
				t.Errorf("message: %v", err)
			}
		})
	}
	// A link inside a writable tree on the way to a grant is refused: a
	// command could have planted it.
	q := mustBuild(t, winReq(driverapi.Capabilities{FSWrite: []string{wsPath + `\sub\out`}}), MapFS{})
	var re *ReparsePointError
	if err := CheckReparsePoints(MapFS{wsPath: {IsDir: true}, wsPath + `\sub`: {Reparse: true}}, q); !errors.As(err, &re) || re.Path != wsPath+`\sub` {
		t.Errorf("planted link on the way: %v", err)
	}
	// ProfileFor applies the check.
	if _, err := BuildPlan(t.Context(), winReq(driverapi.Capabilities{}), Options{}, MapFS{wsPath: {IsDir: true}, wsPath + `\.git`: {Reparse: true}}, nil); !errors.As(err, &re) {
		t.Errorf("BuildPlan did not check reparse points: %v", err)
	}
}

func TestParseOptions(t *testing.T) {
	o, err := ParseOptions("")
	if err != nil || o.MinTier != "appcontainer" || o.MaxProcesses != DefaultMaxProcesses {
		t.Errorf("defaults: %+v %v", o, err)
	}
	o, err = ParseOptions(`{"min_tier":"restricted_token","max_processes":5}`)
	if err != nil || o.MinTier != "restricted_token" || o.MaxProcesses != 5 {
		t.Errorf("explicit: %+v %v", o, err)
	}
	for _, bad := range []string{`{"min_tier":"none"}`, `{"max_pids":3}`, `{"max_processes":-1}`, `[]`} {
		if _, err := ParseOptions(bad); err == nil {
			t.Errorf("ParseOptions(%s) accepted", bad)
		}
	}
}

// TestProtectedFromRequest: ProfileRequest.Protected replaces the default
// set, once per name in any letter case (NTFS compares names so); a name
// Windows would read as another (a trailing dot or space, a stream, an
// 8.3 alias, a device) is refused with the field named.
func TestProtectedFromRequest(t *testing.T) {
	r := winReq(driverapi.Capabilities{FSWrite: []string{`D:\out`}})
	r.Protected = []string{".git", ".GIT", ".custom"}
	p := mustBuild(t, r, MapFS{})
	want := []string{wsPath + `\.git`, wsPath + `\.custom`, `D:\out\.git`, `D:\out\.custom`}
	if strings.Join(p.Protected, "|") != strings.Join(want, "|") || strings.Join(p.ProtectedNames, "|") != ".git|.custom" {
		t.Errorf("protected %q names %q, want %q", p.Protected, p.ProtectedNames, want)
	}
	data, _ := EncodePlan(p)
	if _, err := DecodePlan(data); err != nil {
		t.Errorf("a plan with its own list does not decode: %v", err)
	}
	for _, bad := range []string{"", ".", "..", `a\b`, "a/b", ".git.", ".git ", ".git::$INDEX_ALLOCATION", "GIT~1", "NUL", "con.txt", "a*b", "a\x01b", strings.Repeat("x", 256)} {
		r.Protected = []string{".git", bad}
		_, err := BuildPlan(t.Context(), r, Options{MaxProcesses: 10}, MapFS{}, nil)
		var ise *driverapi.InvalidSpecError
		if !errors.As(err, &ise) || ise.Field != "protected" {
			t.Errorf("protected %q: %v, want an InvalidSpecError for protected", bad, err)
		}
	}
}
