package seatbelt

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

var update = flag.Bool("update", false, "rewrite testdata/*.sbpl golden files")

const ws = "/Users/dev/work space"

func req(c driverapi.Capabilities) driverapi.ProfileRequest {
	return driverapi.ProfileRequest{Capabilities: c, Workspace: ws, Cwd: ws,
		Proxy: &driverapi.ProxyEndpoint{TCPAddr: "127.0.0.1:18080"}}
}

// goldenCases covers every capability dimension the profile depends on.
func goldenCases() map[string]driverapi.ProfileRequest {
	hosts := driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}
	all := driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}
	grants := driverapi.Capabilities{FSRead: []string{"/opt/data", "/Users/dev/ref"}, FSWrite: []string{"/Users/dev/out"}}
	withNet := func(c driverapi.Capabilities, n driverapi.NetworkPolicy) driverapi.Capabilities {
		c.Network = n
		return c
	}
	withSpawn := func(c driverapi.Capabilities) driverapi.Capabilities { c.SpawnSubprocess = true; return c }
	withMem := func(c driverapi.Capabilities) driverapi.Capabilities { c.MaxMemoryMB = 512; return c }
	return map[string]driverapi.ProfileRequest{
		"strict":               req(driverapi.Capabilities{}),
		"spawn":                req(withSpawn(driverapi.Capabilities{})),
		"net_all":              req(withNet(driverapi.Capabilities{}, all)),
		"net_hosts":            req(withNet(driverapi.Capabilities{}, hosts)),
		"net_all_spawn":        req(withSpawn(withNet(driverapi.Capabilities{}, all))),
		"net_hosts_spawn":      req(withSpawn(withNet(driverapi.Capabilities{}, hosts))),
		"grants":               req(grants),
		"grants_spawn":         req(withSpawn(grants)),
		"grants_net_hosts":     req(withNet(grants, hosts)),
		"grants_net_all_spawn": req(withSpawn(withNet(grants, all))),
		"memory":               req(withMem(driverapi.Capabilities{})),
		"everything":           req(withMem(withSpawn(withNet(grants, all)))),
	}
}

func mustPlan(t *testing.T, r driverapi.ProfileRequest) Plan {
	t.Helper()
	p, err := BuildPlan(r, IdentityCanonicalizer)
	if err != nil {
		t.Fatalf("BuildPlan: %v", err)
	}
	return p
}

func TestGoldenProfiles(t *testing.T) {
	for name, r := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			p := mustPlan(t, r)
			data, err := EncodePlan(p)
			if err != nil {
				t.Fatal(err)
			}
			got := "; params: " + string(mustJSONParams(t, p)) + "\n" + p.SBPL
			path := filepath.Join("testdata", name+".sbpl")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("profile %s differs from %s (run go test -update after checking the change):\n%s", name, path, got)
			}
			// The serialised profile round-trips.
			back, err := DecodePlan(data)
			if err != nil {
				t.Fatalf("DecodePlan: %v", err)
			}
			if back.SBPL != p.SBPL || len(back.Params) != len(p.Params) {
				t.Errorf("plan did not round-trip")
			}
		})
	}
}

func mustJSONParams(t *testing.T, p Plan) []byte {
	t.Helper()
	var parts []string
	for _, prm := range p.Params {
		parts = append(parts, prm.Name+"="+prm.Value)
	}
	return []byte(strings.Join(parts, " | "))
}

func TestProfileIsDeterministic(t *testing.T) {
	d := New(Config{Canonicalize: IdentityCanonicalizer, GOOS: "darwin"})
	a := req(driverapi.Capabilities{FSRead: []string{"/b", "/a", "/a/"}, FSWrite: []string{"/z", "/y"}, SpawnSubprocess: true})
	b := req(driverapi.Capabilities{FSRead: []string{"/a", "/b"}, FSWrite: []string{"/y", "/z", "/z"}, SpawnSubprocess: true})
	p1, err := d.ProfileFor(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := d.ProfileFor(t.Context(), a)
	if err != nil {
		t.Fatal(err)
	}
	p3, err := d.ProfileFor(t.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	if string(p1.Data) != string(p2.Data) || p1.Digest != p2.Digest {
		t.Error("equal requests gave different profiles")
	}
	if p1.Digest != p3.Digest {
		t.Error("the same grants in another order (and duplicated) gave a different profile")
	}
	// Positive control: a real difference changes the digest.
	c := b
	c.Capabilities.SpawnSubprocess = false
	p4, _ := d.ProfileFor(t.Context(), c)
	if p4.Digest == p1.Digest {
		t.Error("a different request gave the same profile")
	}
}

// TestOddPathsCannotChangeProfile: whatever bytes a path holds, the profile
// text is the one a plain path of the same depth gets; the path travels
// only as a parameter value.
func TestOddPathsCannotChangeProfile(t *testing.T) {
	odd := []string{
		`/Users/dev/")(allow default)(`,
		`/Users/dev/a"b`,
		`/Users/dev/(allow network*)`,
		"/Users/dev/new\nline(allow default)",
		`/Users/dev/back\slash\"`,
		`/Users/dev/; comment`,
		`/Users/dev/#"regex"`,
		`/Users/dev/=D=X`,
		`/Users/dev/  spaces  `,
		"/Users/dev/ünïcödé ✓",
	}
	plain := func(ws string, read, write string) driverapi.ProfileRequest {
		return driverapi.ProfileRequest{Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{
			FSRead: []string{read}, FSWrite: []string{write}}}
	}
	base := mustPlan(t, plain("/Users/dev/plain", "/Users/dev/r", "/Users/dev/w"))
	for _, o := range odd {
		p := mustPlan(t, plain(o, o+"-r", o+"-w"))
		if p.SBPL != base.SBPL {
			t.Errorf("path %q changed the profile text", o)
		}
		if strings.Contains(p.SBPL, "/Users/dev") || strings.Contains(p.SBPL, filepath.Base(o)) {
			t.Errorf("path %q leaked into the profile text", o)
		}
		found := false
		for _, prm := range p.Params {
			if prm.Name == ParamWorkspace && prm.Value == filepath.Clean(o) {
				found = true
			}
		}
		if !found {
			t.Errorf("path %q not carried verbatim in the WORKSPACE parameter: %+v", o, p.Params)
		}
	}
}

func TestProfileContents(t *testing.T) {
	cases := []struct {
		name    string
		caps    driverapi.Capabilities
		must    []string
		mustNot []string
	}{
		{"strict", driverapi.Capabilities{},
			[]string{"(deny default)", `(allow process-exec (literal (param "PROGRAM")) (subpath "/bin") (subpath "/usr/bin"))`, `(subpath (param "WORKSPACE"))`,
				"(deny file-write*\n  (subpath (param \"PROTECTED_0\")) (literal (param \"PROTECTED_0\"))\n  (subpath (param \"PROTECTED_1\")) (literal (param \"PROTECTED_1\"))",
				`(require-not (subpath (param "PROTECTED_0")))`},
			[]string{"(allow process-fork)", "(allow network", "allow default", "(allow process-exec)\n"}},
		{"spawn", driverapi.Capabilities{SpawnSubprocess: true},
			[]string{"(allow process-fork)", "(allow process-exec)\n"},
			[]string{"(allow network"}},
		{"all", driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowAll}},
			[]string{`(allow network-outbound (remote ip "*:*"))`, `"com.apple.mDNSResponder"`, `"com.apple.trustd.agent"`,
				`(allow network-outbound (remote unix-socket (subpath "/private/var/run/mDNSResponder")))`},
			// Unix-domain sockets other than the resolver's stay closed:
			// no blanket network rule, no unix-socket rule but that one.
			[]string{"(allow process-fork)", "localhost:", "(allow network*)", "(allow network-outbound)\n", "(allow system-socket)\n", `(path-regex`}},
		{"hosts", driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"x.org"}}},
			[]string{`(allow network-outbound (remote tcp "localhost:18080"))`},
			[]string{"(allow network*)", "x.org", "mDNSResponder"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := mustPlan(t, req(c.caps))
			for _, m := range c.must {
				if !strings.Contains(p.SBPL, m) {
					t.Errorf("profile lacks %q", m)
				}
			}
			for _, m := range c.mustNot {
				if strings.Contains(p.SBPL, m) {
					t.Errorf("profile has %q", m)
				}
			}
		})
	}
}

func TestProtectedAndGrantParams(t *testing.T) {
	p := mustPlan(t, req(driverapi.Capabilities{FSRead: []string{"/opt/r"}, FSWrite: []string{"/opt/w/x"}}))
	got := map[string]string{}
	for _, prm := range p.Params {
		got[prm.Name] = prm.Value
	}
	want := map[string]string{
		"WORKSPACE":  ws,
		"READ_0":     "/opt/r",
		"WRITE_0":    "/opt/w/x",
		"ANCESTOR_0": "/Users",
		"ANCESTOR_1": "/Users/dev",
		"ANCESTOR_2": "/opt",
		"ANCESTOR_3": "/opt/w",
		// Never renamed: the workspace's and the grant's ancestors, and
		// the grant itself.
		"WS_UP_0": "/Users",
		"WS_UP_1": "/Users/dev",
		"WS_UP_2": "/opt",
		"WS_UP_3": "/opt/w",
		"WS_UP_4": "/opt/w/x",
	}
	// The whole default set, in the workspace and then in the fs_write
	// grant, as the Linux driver protects it.
	defaults := driverapi.DefaultProtectedEntries()
	for i, root := range []string{ws, "/opt/w/x"} {
		for j, e := range defaults {
			want["PROTECTED_"+strconv.Itoa(i*len(defaults)+j)] = root + "/" + e
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("param %s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("params %v, want exactly %v", got, want)
	}
	if !strings.Contains(p.SBPL, `(allow file-write* (require-all (subpath (param "WRITE_0"))`) {
		t.Error("fs_write grant not writable")
	}
	if strings.Contains(p.SBPL, `(allow file-write* (require-all (subpath (param "READ_0"))`) {
		t.Error("fs_read grant is writable")
	}
	// Every protected path is denied outright and excluded from each
	// writable root's allow.
	for i := 0; i < 2*len(defaults); i++ {
		n := strconv.Itoa(i)
		for _, rule := range []string{`(subpath (param "PROTECTED_` + n + `")) (literal (param "PROTECTED_` + n + `"))`,
			`(require-not (subpath (param "PROTECTED_` + n + `")))`} {
			if !strings.Contains(p.SBPL, rule) {
				t.Errorf("profile lacks %s", rule)
			}
		}
	}
	if !strings.Contains(p.SBPL, `(deny file-write* (require-all (require-any (subpath (param "WORKSPACE")) (subpath (param "WRITE_0")))`) {
		t.Errorf("the any-case names are not denied below both writable roots:\n%s", p.SBPL)
	}
}

// TestProtectedFromRequest: ProfileRequest.Protected replaces the default
// set (in the workspace and each fs_write grant), once per name whatever
// its letter case; names the profile could not match exactly are refused
// with the field named.
func TestProtectedFromRequest(t *testing.T) {
	r := req(driverapi.Capabilities{FSWrite: []string{"/opt/w"}})
	r.Protected = []string{".git", ".custom-1", ".GIT", "Make_file"}
	p := mustPlan(t, r)
	var prot []string
	for _, prm := range p.Params {
		if strings.HasPrefix(prm.Name, paramProtected) {
			prot = append(prot, prm.Value)
		}
	}
	want := []string{ws + "/.git", ws + "/.custom-1", ws + "/Make_file", "/opt/w/.git", "/opt/w/.custom-1", "/opt/w/Make_file"}
	if strings.Join(prot, "|") != strings.Join(want, "|") {
		// Params are sorted by name: PROTECTED_0..5 in that order.
		t.Errorf("protected params %q, want %q", prot, want)
	}
	for _, re := range []string{`(regex #"/[.][Cc][Uu][Ss][Tt][Oo][Mm][-]1$")`, `(regex #"/[Mm][Aa][Kk][Ee][_][Ff][Ii][Ll][Ee]/")`} {
		if !strings.Contains(p.SBPL, re) {
			t.Errorf("profile lacks %s", re)
		}
	}
	// A writable root below a directory with a protected name could not
	// be written at all: refused, saying so.
	for _, bad := range []driverapi.ProfileRequest{
		{Workspace: "/Users/dev/.Git/inner", Cwd: "/Users/dev/.Git/inner"},
		{Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{FSWrite: []string{"/opt/.vscode/x"}}},
	} {
		if _, err := BuildPlan(bad, IdentityCanonicalizer); err == nil || !strings.Contains(err.Error(), "protected name") {
			t.Errorf("%+v: %v, want a refusal naming the protected component", bad, err)
		}
	}
	if strings.Contains(p.SBPL, `[Cc][Ll][Aa][Uu][Dd][Ee]`) {
		t.Error("a request with its own list still protects the default .claude")
	}
	for _, bad := range []string{"", ".", "..", "a/b", `a\b`, "a\x00b", ".git]", "na\u00efve", "x(y)", "a b", `q"`, strings.Repeat("x", 256)} {
		r.Protected = []string{".git", bad}
		_, err := BuildPlan(r, IdentityCanonicalizer)
		var ise *driverapi.InvalidSpecError
		if !errors.As(err, &ise) || ise.Field != "protected" {
			t.Errorf("protected %q: %v, want an InvalidSpecError for protected", bad, err)
		}
	}
}

func TestBuildPlanRejectsBadInput(t *testing.T) {
	good := req(driverapi.Capabilities{})
	cases := map[string]func(r *driverapi.ProfileRequest){
		"relative workspace": func(r *driverapi.ProfileRequest) { r.Workspace = "ws"; r.Cwd = "" },
		"empty workspace":    func(r *driverapi.ProfileRequest) { r.Workspace = ""; r.Cwd = "" },
		"root workspace":     func(r *driverapi.ProfileRequest) { r.Workspace = "/"; r.Cwd = "/" },
		"nul workspace":      func(r *driverapi.ProfileRequest) { r.Workspace = "/a\x00b"; r.Cwd = "" },
		"cwd outside":        func(r *driverapi.ProfileRequest) { r.Cwd = "/etc" },
		"cwd prefix trick":   func(r *driverapi.ProfileRequest) { r.Cwd = ws + "x" },
		// Spellings of a canonical path are refused, not cleaned.
		"workspace with .":         func(r *driverapi.ProfileRequest) { r.Workspace = ws + "/."; r.Cwd = "" },
		"workspace trailing slash": func(r *driverapi.ProfileRequest) { r.Workspace = ws + "/"; r.Cwd = "" },
		"cwd with ..":              func(r *driverapi.ProfileRequest) { r.Cwd = ws + "/sub/.." },
		"cwd doubled slash":        func(r *driverapi.ProfileRequest) { r.Cwd = ws + "//sub" },
		"relative read":            func(r *driverapi.ProfileRequest) { r.Capabilities.FSRead = []string{"etc"} },
		"root write":               func(r *driverapi.ProfileRequest) { r.Capabilities.FSWrite = []string{"/"} },
		"nul write":                func(r *driverapi.ProfileRequest) { r.Capabilities.FSWrite = []string{"/tmp/\x00"} },
		"hosts no proxy": func(r *driverapi.ProfileRequest) {
			r.Capabilities.Network.Mode = driverapi.NetworkAllowHosts
			r.Proxy = nil
		},
		"hosts unix proxy only": func(r *driverapi.ProfileRequest) {
			r.Capabilities.Network.Mode = driverapi.NetworkAllowHosts
			r.Proxy = &driverapi.ProxyEndpoint{UnixSocket: "/tmp/p.sock"}
		},
		"hosts remote proxy": func(r *driverapi.ProfileRequest) {
			r.Capabilities.Network.Mode = driverapi.NetworkAllowHosts
			r.Proxy = &driverapi.ProxyEndpoint{TCPAddr: "10.0.0.1:8080"}
		},
		"hosts bad port": func(r *driverapi.ProfileRequest) {
			r.Capabilities.Network.Mode = driverapi.NetworkAllowHosts
			r.Proxy = &driverapi.ProxyEndpoint{TCPAddr: "127.0.0.1:08080"}
		},
		"hosts port zero": func(r *driverapi.ProfileRequest) {
			r.Capabilities.Network.Mode = driverapi.NetworkAllowHosts
			r.Proxy = &driverapi.ProxyEndpoint{TCPAddr: "127.0.0.1:0"}
		},
		"unknown network mode": func(r *driverapi.ProfileRequest) { r.Capabilities.Network.Mode = 7 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			r := good
			r.Capabilities = driverapi.Capabilities{}
			mutate(&r)
			_, err := BuildPlan(r, IdentityCanonicalizer)
			var ise *driverapi.InvalidSpecError
			if !errors.As(err, &ise) {
				t.Fatalf("got %v, want *InvalidSpecError", err)
			}
		})
	}
	// Positive controls: the good request and loopback proxies pass.
	for _, addr := range []string{"127.0.0.1:1", "[::1]:65535", "localhost:3128"} {
		r := good
		r.Capabilities.Network.Mode = driverapi.NetworkAllowHosts
		r.Proxy = &driverapi.ProxyEndpoint{TCPAddr: addr}
		if _, err := BuildPlan(r, IdentityCanonicalizer); err != nil {
			t.Errorf("proxy %s refused: %v", addr, err)
		}
	}
}

func TestDecodePlanRefusesTampering(t *testing.T) {
	p := mustPlan(t, req(driverapi.Capabilities{}))
	good, _ := EncodePlan(p)
	if _, err := DecodePlan(good); err != nil {
		t.Fatalf("good plan refused: %v", err)
	}
	bad := map[string]func(p *Plan){
		"format":          func(p *Plan) { p.Format = 99 },
		"no deny default": func(p *Plan) { p.SBPL = "(version 1)\n(allow default)\n" },
		"program param":   func(p *Plan) { p.Params = append(p.Params, Param{Name: ParamProgram, Value: "/bin/sh"}) },
		"eq in name":      func(p *Plan) { p.Params = append(p.Params, Param{Name: "A=B", Value: "x"}) },
		"nul value":       func(p *Plan) { p.Params[0].Value = "/x\x00" },
		"no workspace":    func(p *Plan) { p.Params = nil },
	}
	for name, mutate := range bad {
		t.Run(name, func(t *testing.T) {
			q := mustPlan(t, req(driverapi.Capabilities{}))
			mutate(&q)
			data, _ := EncodePlan(q)
			_, err := DecodePlan(data)
			var pe *driverapi.ProfileError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want *ProfileError", err)
			}
		})
	}
	var pe *driverapi.ProfileError
	if _, err := DecodePlan([]byte(`{"format":1,"sbpl":"x","extra":1}`)); !errors.As(err, &pe) {
		t.Errorf("unknown field accepted: %v", err)
	}
	// A second object after a good plan: what this driver checked would
	// not be all the data said.
	if _, err := DecodePlan(append(append([]byte{}, good...), good...)); !errors.As(err, &pe) {
		t.Errorf("data after the plan accepted: %v", err)
	}
}

func TestSandboxArgv(t *testing.T) {
	p := Plan{SBPL: "(version 1)", Params: []Param{{"A", "1"}, {"WORKSPACE", "/w=x"}}}
	got := SandboxArgv("/usr/bin/sandbox-exec", p, "/bin/echo", []string{"-p", "", "x y"})
	want := []string{"/usr/bin/sandbox-exec", "-p", "(version 1)", "-D", "A=1", "-D", "WORKSPACE=/w=x",
		"-D", "PROGRAM=/bin/echo", "/bin/echo", "-p", "", "x y"}
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Errorf("argv\n got %q\nwant %q", got, want)
	}
	s := ShimArgv([]string{"/drv", ShimArg}, 1<<20, got[:2])
	if strings.Join(s, " ") != "/drv "+ShimArg+" --as-bytes 1048576 -- /usr/bin/sandbox-exec -p" {
		t.Errorf("shim argv %q", s)
	}
	n, argv, err := parseShimArgs(s[2:])
	if err != nil || n != 1<<20 || argv[0] != "/usr/bin/sandbox-exec" {
		t.Errorf("parseShimArgs = %d %q %v", n, argv, err)
	}
	for _, bad := range [][]string{nil, {"--as-bytes", "x", "--", "/a"}, {"--as-bytes", "0", "--", "/a"}, {"--as-bytes", "1", "--", "rel"}, {"--as", "1", "--", "/a"}} {
		if _, _, err := parseShimArgs(bad); err == nil {
			t.Errorf("parseShimArgs(%q) accepted", bad)
		}
	}
}

func TestParseOptions(t *testing.T) {
	for _, ok := range []string{"", "  ", "{}"} {
		if err := ParseOptions(ok); err != nil {
			t.Errorf("ParseOptions(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{`{"max_pids": 3}`, `[1]`, `nope`} {
		if err := ParseOptions(bad); err == nil {
			t.Errorf("ParseOptions(%q) accepted", bad)
		}
	}
}

func BenchmarkProfileFor(b *testing.B) {
	d := New(Config{Canonicalize: IdentityCanonicalizer, GOOS: "darwin"})
	r := goldenCases()["everything"]
	for b.Loop() {
		if _, err := d.ProfileFor(b.Context(), r); err != nil {
			b.Fatal(err)
		}
	}
}

// TestProtectedPathsCannotBeMovedOrRecased: the workspace and each of its
// ancestors are denied file-write-unlink (rename and removal), so the
// workspace cannot be moved away, its .git written at the new place, and
// moved back; a protected name in any letter case is denied below the
// workspace; and the denies come after every allow (in SBPL the last
// matching rule wins).
func TestProtectedPathsCannotBeMovedOrRecased(t *testing.T) {
	// The fs_write grant /Users/dev holds the workspace: it and /Users
	// are the only paths above the workspace not to be moved.
	p := mustPlan(t, req(driverapi.Capabilities{FSWrite: []string{"/Users/dev"}}))
	unlink := strings.Index(p.SBPL, "(deny file-write-unlink\n  (literal (param \"WORKSPACE\"))\n  (literal (param \"WS_UP_0\"))\n  (literal (param \"WS_UP_1\")))")
	if unlink < 0 {
		t.Fatalf("no rename/removal deny on the workspace and its ancestors:\n%s", p.SBPL)
	}
	got := map[string]string{}
	for _, prm := range p.Params {
		got[prm.Name] = prm.Value
	}
	if got["WS_UP_0"] != "/Users" || got["WS_UP_1"] != "/Users/dev" || got["WS_UP_2"] != "" {
		t.Errorf("workspace ancestors %v", got)
	}
	lastAllow := strings.LastIndex(p.SBPL, "(allow ")
	for _, deny := range []string{"(deny file-write*\n", "(deny file-write* (require-all (require-any (subpath (param \"WORKSPACE\"))", "(deny file-write-unlink"} {
		if i := strings.Index(p.SBPL, deny); i < lastAllow {
			t.Errorf("%q at %d is not after the last allow (%d): an allow would override it", deny, i, lastAllow)
		}
	}
	for _, re := range []string{`(regex #"/[.][Gg][Ii][Tt]$")`, `(regex #"/[.][Gg][Ii][Tt]/")`, `(regex #"/[.][Aa][Gg][Ee][Nn][Tt][Ss]/")`,
		`(regex #"/[.][Mm][Cc][Pp][.][Jj][Ss][Oo][Nn]$")`, `(regex #"/[.][Ee][Nn][Vv][Rr][Cc]$")`, `(regex #"/[.][Vv][Ss][Cc][Oo][Dd][Ee]/")`} {
		if !strings.Contains(p.SBPL, re) {
			t.Errorf("profile lacks %s", re)
		}
	}
}

// TestProtectedNameRegexesMatchEveryCase runs the regexes with Go's
// engine (their syntax is the common subset: bracket classes, $ and
// literal characters) against spellings APFS treats as the same name,
// and against names that must stay writable.
func TestProtectedNameRegexesMatchEveryCase(t *testing.T) {
	var res []*regexp.Regexp
	for _, r := range protectedNameRegexes(driverapi.DefaultProtectedEntries()) {
		res = append(res, regexp.MustCompile(r))
	}
	match := func(p string) bool {
		for _, re := range res {
			if re.MatchString(p) {
				return true
			}
		}
		return false
	}
	for _, p := range []string{ws + "/.git", ws + "/.GIT", ws + "/.Git/hooks/pre-commit", ws + "/sub/.gIt/config", ws + "/.CODEX", ws + "/.Agents/x", ws + "/.ALEPH",
		ws + "/.Claude/settings.json", ws + "/.VSCODE/tasks.json", ws + "/.Idea", ws + "/.CURSOR/rules", ws + "/.EnvRC", ws + "/.MCP.JSON"} {
		if !match(p) {
			t.Errorf("%s not matched", p)
		}
	}
	for _, p := range []string{ws + "/.gitignore", ws + "/git", ws + "/x.git", ws + "/.github/workflows/ci.yml", ws + "/.codexrc", ws + "/src/main.go",
		ws + "/.envrc.example", ws + "/.mcp.jsonx", ws + "/.mcpXjson", ws + "/mcp.json", ws + "/.ideas"} {
		if match(p) {
			t.Errorf("%s matched", p)
		}
	}
}

// TestBaselineIsNarrow: the services and sysctls that let a command reach
// the network or see other processes are not in the baseline.
func TestBaselineIsNarrow(t *testing.T) {
	p := mustPlan(t, req(driverapi.Capabilities{}))
	var rules []string // the profile without its comments
	for _, l := range strings.Split(p.SBPL, "\n") {
		if !strings.HasPrefix(l, ";") {
			rules = append(rules, l)
		}
	}
	p.SBPL = strings.Join(rules, "\n")
	for _, bad := range []string{"trustd", "analyticsd", "IOSurface", `(sysctl-name-prefix "kern.`, `(sysctl-name-prefix "vm.`,
		`(sysctl-name-prefix "hw.")`, `(subpath "/opt/homebrew")`, `"/dev/tty"`, "ttys", "pseudo-tty", "/dev/ptmx", "network", "cfprefsd"} {
		if strings.Contains(p.SBPL, bad) {
			t.Errorf("network-none baseline has %s", bad)
		}
	}
	for _, good := range []string{`(global-name "com.apple.system.opendirectoryd.libinfo")`, `(sysctl-name "hw.ncpu")`, `(subpath "/opt/homebrew/bin")`} {
		if !strings.Contains(p.SBPL, good) {
			t.Errorf("baseline lacks %s", good)
		}
	}
}

// A Home, which this driver does not report supporting, is refused, not
// dropped; the same request without it is accepted.
func TestProfileRefusesHome(t *testing.T) {
	d := New(Config{Canonicalize: IdentityCanonicalizer, GOOS: "darwin"})
	r := req(driverapi.Capabilities{})
	if _, err := d.ProfileFor(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	r.Home = "/h"
	var ie *driverapi.InvalidSpecError
	if _, err := d.ProfileFor(t.Context(), r); !errors.As(err, &ie) || ie.Field != "home" {
		t.Fatalf("ProfileFor with a home: %v, want an InvalidSpecError for home", err)
	}
}
