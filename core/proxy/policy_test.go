package proxy

import (
	"context"
	"errors"
	"net/netip"
	"testing"
)

func TestParseRule(t *testing.T) {
	good := []struct {
		in   string
		kind RuleKind
		name string
		ip   string
		port uint16
		str  string
	}{
		{"example.com", RuleExact, "example.com", "", 0, "example.com"},
		{"Example.COM.", RuleExact, "example.com", "", 0, "example.com"},
		{"example.com:8443", RuleExact, "example.com", "", 8443, "example.com:8443"},
		{"*.example.com", RuleSuffix, "example.com", "", 0, "*.example.com"},
		{"*.Example.com:443", RuleSuffix, "example.com", "", 443, "*.example.com:443"},
		{"bücher.example", RuleExact, "xn--bcher-kva.example", "", 0, "xn--bcher-kva.example"},
		{"BÜCHER.example", RuleExact, "xn--bcher-kva.example", "", 0, "xn--bcher-kva.example"},
		{"10.0.0.1", RuleIP, "", "10.0.0.1", 0, "10.0.0.1"},
		{"10.0.0.1:80", RuleIP, "", "10.0.0.1", 80, "10.0.0.1:80"},
		{"2001:db8::1", RuleIP, "", "2001:db8::1", 0, "2001:db8::1"},
		{"[2001:db8::1]", RuleIP, "", "2001:db8::1", 0, "2001:db8::1"},
		{"[2001:db8::1]:443", RuleIP, "", "2001:db8::1", 443, "[2001:db8::1]:443"},
		{"::ffff:127.0.0.1", RuleIP, "", "127.0.0.1", 0, "127.0.0.1"},
	}
	for _, g := range good {
		r, err := ParseRule(g.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", g.in, err)
			continue
		}
		if r.Kind != g.kind || r.Name != g.name || r.Port != g.port || (g.ip != "" && r.IP != netip.MustParseAddr(g.ip)) {
			t.Errorf("ParseRule(%q) = %+v", g.in, r)
		}
		if r.String() != g.str {
			t.Errorf("ParseRule(%q).String() = %q, want %q", g.in, r.String(), g.str)
		}
	}
	bad := []string{
		"", "*", "*.", "*.com.*", "a*.example.com", "http://example.com", "example.com/path",
		"user@example.com", "example.com:0", "example.com:65536", "example.com:http",
		"example.com:", "[::1", "[10.0.0.1]:80", "[::1]x", "fe80::1%eth0", "exa mple.com",
		"under_score.example", "127.1", "2130706433", "0x7f.1", "-bad.example", "a..b",
	}
	for _, in := range bad {
		_, err := ParseRule(in)
		var re *RuleError
		if !errors.As(err, &re) {
			t.Errorf("ParseRule(%q) = %v, want *RuleError", in, err)
		}
	}
}

func TestClassify(t *testing.T) {
	cases := map[string]AddressClass{
		"93.184.216.34":          ClassPublic,
		"203.0.113.2":            ClassPublic, // documentation range: unroutable, not special here
		"2606:4700::1":           ClassPublic,
		"127.0.0.1":              ClassLoopback,
		"127.255.0.9":            ClassLoopback,
		"::1":                    ClassLoopback,
		"::ffff:127.0.0.1":       ClassLoopback,
		"64:ff9b::7f00:1":        ClassLoopback,
		"2002:7f00:1::1":         ClassLoopback,
		"10.1.2.3":               ClassPrivate,
		"172.16.0.1":             ClassPrivate,
		"192.168.1.1":            ClassPrivate,
		"fd12::1":                ClassPrivate,
		"fec0::1":                ClassPrivate,
		"169.254.1.1":            ClassLinkLocal,
		"fe80::1":                ClassLinkLocal,
		"100.64.0.1":             ClassCGNAT,
		"100.127.255.254":        ClassCGNAT,
		"224.0.0.1":              ClassMulticast,
		"239.1.1.1":              ClassMulticast,
		"ff02::1":                ClassMulticast,
		"0.0.0.0":                ClassUnspecified,
		"0.1.2.3":                ClassUnspecified,
		"::":                     ClassUnspecified,
		"169.254.169.254":        ClassMetadata,
		"fd00:ec2::254":          ClassMetadata,
		"::ffff:169.254.169.254": ClassMetadata,
		"100.100.100.200":        ClassMetadata,
		"255.255.255.255":        ClassReserved,
		"240.0.0.1":              ClassReserved,
		"198.18.0.1":             ClassReserved,
	}
	for in, want := range cases {
		if got := Classify(netip.MustParseAddr(in)); got != want {
			t.Errorf("Classify(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestVet(t *testing.T) {
	res := fakeResolver{
		"api.example.com":      addrs("93.184.216.34"),
		"rebind.example.com":   addrs("127.0.0.1"),
		"mixed.example.com":    addrs("10.0.0.5", "93.184.216.35", "127.0.0.1"),
		"meta.example.com":     addrs("169.254.169.254"),
		"cgnat.example.com":    addrs("100.64.1.1"),
		"v6loop.example.com":   addrs("::ffff:127.0.0.1"),
		"a.b.wild.example.com": addrs("93.184.216.36"),
		"wild.example.com":     addrs("93.184.216.37"),
		"listed.example.com":   addrs("127.0.0.1"),
	}
	a, err := ParseAllowlist([]string{
		"api.example.com:443", "rebind.example.com", "mixed.example.com", "meta.example.com",
		"cgnat.example.com", "v6loop.example.com", "*.wild.example.com", "listed.example.com",
		"127.0.0.1:8080", "[2001:db8::1]:443",
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host string
		port uint16
		want ReasonCode // "" = allowed
		dial []string
	}{
		{"api.example.com", 443, "", []string{"93.184.216.34:443"}},
		{"API.Example.com.", 443, "", []string{"93.184.216.34:443"}},
		{"api.example.com", 80, ReasonPortNotAllowed, nil},
		{"other.example.com", 443, ReasonHostNotAllowed, nil},
		{"rebind.example.com", 80, ReasonRefusedLoopback, nil},
		{"mixed.example.com", 80, "", []string{"93.184.216.35:80"}},
		{"meta.example.com", 80, ReasonRefusedMetadata, nil},
		{"cgnat.example.com", 80, ReasonRefusedCGNAT, nil},
		{"v6loop.example.com", 80, ReasonRefusedLoopback, nil},
		{"a.b.wild.example.com", 80, "", []string{"93.184.216.36:80"}},
		{"wild.example.com", 80, ReasonHostNotAllowed, nil}, // wildcard excludes the apex
		{"listed.example.com", 8080, "", []string{"127.0.0.1:8080"}},
		{"listed.example.com", 8081, ReasonRefusedLoopback, nil}, // literal listed for 8080 only
		{"127.0.0.1", 8080, "", []string{"127.0.0.1:8080"}},
		{"127.0.0.1", 8081, ReasonIPLiteralNotAllowed, nil},
		{"[::ffff:127.0.0.1]", 8080, "", []string{"127.0.0.1:8080"}},
		{"93.184.216.34", 443, ReasonIPLiteralNotAllowed, nil}, // names never admit their IPs
		{"[2001:db8::1]", 443, "", []string{"[2001:db8::1]:443"}},
		{"nxdomain.wild.example.com", 80, ReasonResolveFailed, nil},
	}
	for _, c := range cases {
		tg, err := ParseTarget(c.host, c.port)
		if err != nil {
			t.Errorf("ParseTarget(%q): %v", c.host, err)
			continue
		}
		got, err := a.Vet(context.Background(), res, tg)
		if c.want == "" {
			if err != nil {
				t.Errorf("Vet(%s:%d) = %v, want allowed", c.host, c.port, err)
				continue
			}
			var s []string
			for _, ap := range got {
				s = append(s, ap.String())
			}
			if len(s) != len(c.dial) || s[0] != c.dial[0] {
				t.Errorf("Vet(%s:%d) dials %v, want %v", c.host, c.port, s, c.dial)
			}
			continue
		}
		var d *denial
		if !errors.As(err, &d) || d.code != c.want {
			t.Errorf("Vet(%s:%d) = %v, want %s", c.host, c.port, err, c.want)
		}
	}
}

func TestEmptyAllowlistAllowsNothing(t *testing.T) {
	a, err := ParseAllowlist(nil)
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := ParseTarget("example.com", 80)
	if _, err := a.Vet(context.Background(), fakeResolver{"example.com": addrs("93.184.216.34")}, tg); err == nil {
		t.Fatal("empty allowlist allowed a host")
	}
}
