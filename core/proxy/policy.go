package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// RuleKind is the shape of an allowlist entry.
type RuleKind int

const (
	// RuleExact matches one host name.
	RuleExact RuleKind = iota + 1
	// RuleSuffix ("*.example.com") matches every name strictly below the
	// suffix, at any depth, and not the suffix itself: list "example.com"
	// as well to allow the apex. Keeping the apex out makes a wildcard
	// never wider than it reads.
	RuleSuffix
	// RuleIP matches one IP address, given as a literal.
	RuleIP
)

// Rule is one parsed allowlist entry. Port 0 means any port.
type Rule struct {
	Kind RuleKind
	// Name is the normalised ASCII name (RuleExact) or suffix without the
	// leading "*." (RuleSuffix).
	Name string
	IP   netip.Addr
	Port uint16
}

// String renders the rule in the form ParseRule accepts.
func (r Rule) String() string {
	var host string
	switch r.Kind {
	case RuleSuffix:
		host = "*." + r.Name
	case RuleIP:
		host = r.IP.String()
		if r.IP.Is6() && r.Port != 0 {
			host = "[" + host + "]"
		}
	default:
		host = r.Name
	}
	if r.Port != 0 {
		return host + ":" + strconv.Itoa(int(r.Port))
	}
	return host
}

func (r Rule) portMatches(port uint16) bool { return r.Port == 0 || r.Port == port }

// nameMatches reports whether a normalised name falls under the rule.
func (r Rule) nameMatches(name string) bool {
	switch r.Kind {
	case RuleExact:
		return name == r.Name
	case RuleSuffix:
		return strings.HasSuffix(name, "."+r.Name)
	}
	return false
}

// RuleError says why an allowlist entry was refused.
type RuleError struct {
	Entry  string
	Reason string
}

func (e *RuleError) Error() string {
	return fmt.Sprintf("invalid network allowlist entry %q: %s", e.Entry, e.Reason)
}

// ParseRule parses one allowlist entry: an exact host name, a "*.suffix"
// wildcard or an IP literal (IPv6 bare, or in brackets when a port
// follows), each with an optional ":port".
func ParseRule(entry string) (Rule, error) {
	bad := func(reason string) (Rule, error) { return Rule{}, &RuleError{Entry: entry, Reason: reason} }
	host, portStr, err := splitEntry(entry)
	if err != nil {
		return bad(err.Error())
	}
	var r Rule
	if portStr != "" {
		p, err := parsePort(portStr)
		if err != nil {
			return bad(err.Error())
		}
		r.Port = p
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return bad("IPv6 zones are not allowed")
		}
		r.Kind, r.IP = RuleIP, ip.Unmap()
		return r, nil
	}
	if strings.HasPrefix(host, "[") {
		return bad("bracketed host is not an IP literal")
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		name, err := NormalizeName(rest)
		if err != nil {
			return bad(err.Error())
		}
		r.Kind, r.Name = RuleSuffix, name
		return r, nil
	}
	name, err := NormalizeName(host)
	if err != nil {
		return bad(err.Error())
	}
	r.Kind, r.Name = RuleExact, name
	return r, nil
}

// splitEntry separates an entry's host and optional port.
func splitEntry(s string) (host, port string, err error) {
	if s == "" {
		return "", "", errors.New("empty")
	}
	if strings.ContainsAny(s, "/@?# \t\r\n\x00") {
		return "", "", errors.New("want host[:port], not a URL")
	}
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", errors.New("missing ']'")
		}
		host, rest := s[1:end], s[end+1:]
		if _, err := netip.ParseAddr(host); err != nil || !strings.Contains(host, ":") {
			return "", "", errors.New("brackets hold only an IPv6 literal")
		}
		if rest == "" {
			return host, "", nil
		}
		if !strings.HasPrefix(rest, ":") {
			return "", "", errors.New("unexpected text after ']'")
		}
		if rest == ":" {
			return "", "", errors.New("empty port")
		}
		return host, rest[1:], nil
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", nil
	case 1:
		host, port, _ := strings.Cut(s, ":")
		if port == "" {
			return "", "", errors.New("empty port")
		}
		return host, port, nil
	}
	// Several colons and no brackets: a bare IPv6 literal, never with a port.
	return s, "", nil
}

func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, errors.New("port must be a number from 1 to 65535")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, errors.New("port must be a number from 1 to 65535")
	}
	return uint16(n), nil
}

// NormalizeName turns a host name into the form rules and requests are
// compared in: one trailing dot dropped, IDNA (UTS #46 lookup mapping,
// which also folds case) to ASCII, and strict LDH labels. A name whose last
// label is numeric is refused: resolvers may read it as an IPv4 number
// ("127.1", "2130706433") and no real top-level domain looks like that.
func NormalizeName(name string) (string, error) {
	name = strings.TrimSuffix(name, ".")
	if name == "" {
		return "", errors.New("empty host name")
	}
	if len(name) > 253*4 {
		return "", errors.New("host name too long")
	}
	if !utf8.ValidString(name) {
		return "", errors.New("host name is not valid UTF-8")
	}
	ascii, err := idna.Lookup.ToASCII(name)
	if err != nil {
		return "", fmt.Errorf("host name is not a valid domain name: %v", err)
	}
	// The result must be a fixed point: an A-label that does not decode
	// back to a valid name (a punycoded U+FFFD, say) would be compared in
	// a form no resolver agrees on.
	if again, err := idna.Lookup.ToASCII(ascii); err != nil || again != ascii {
		return "", errors.New("host name is not a valid domain name: its A-labels do not round-trip")
	}
	if len(ascii) > 253 {
		return "", errors.New("host name longer than 253 bytes")
	}
	labels := strings.Split(ascii, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", errors.New("host name has an empty or over-long label")
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", errors.New("host name has a character outside letters, digits and '-'")
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" ||
		strings.HasPrefix(labels[len(labels)-1], "0x") {
		return "", errors.New("host name ends in a numeric label")
	}
	return ascii, nil
}

// Allowlist is a parsed set of rules. The zero value allows nothing.
type Allowlist struct {
	rules []Rule
}

// ParseAllowlist parses every entry; the first bad entry is an error
// (a *RuleError), so a typo never silently narrows or widens a policy.
func ParseAllowlist(entries []string) (*Allowlist, error) {
	a := &Allowlist{}
	for _, e := range entries {
		r, err := ParseRule(e)
		if err != nil {
			return nil, err
		}
		a.rules = append(a.rules, r)
	}
	return a, nil
}

// Rules returns a copy of the parsed rules.
func (a *Allowlist) Rules() []Rule { return append([]Rule(nil), a.rules...) }

// listsIP reports whether an IP-literal rule names addr at port.
func (a *Allowlist) listsIP(addr netip.Addr, port uint16) bool {
	addr = addr.Unmap().WithZone("")
	for _, r := range a.rules {
		if r.Kind == RuleIP && r.IP == addr && r.portMatches(port) {
			return true
		}
	}
	return false
}

// matchName checks a normalised name against the name rules.
func (a *Allowlist) matchName(name string, port uint16) *denial {
	portMiss := false
	for _, r := range a.rules {
		if r.nameMatches(name) {
			if r.portMatches(port) {
				return nil
			}
			portMiss = true
		}
	}
	if portMiss {
		return &denial{code: ReasonPortNotAllowed, detail: "the allowlist names this host on other ports only"}
	}
	return &denial{code: ReasonHostNotAllowed, detail: "no allowlist entry names this host"}
}

// Resolver looks names up; *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Target is what a client asked to reach, after parsing. Host is either a
// normalised name or the canonical text of IP.
type Target struct {
	Host string
	IP   netip.Addr // valid when the client gave an IP literal
	Port uint16
}

// ParseTarget parses a client-supplied host and port. An IP literal may be
// bracketed; names are normalised.
func ParseTarget(host string, port uint16) (Target, error) {
	if port == 0 {
		return Target{}, errors.New("port 0")
	}
	h := host
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
		ip, err := netip.ParseAddr(h)
		if err != nil || !ip.Is6() {
			return Target{}, errors.New("brackets hold only an IPv6 literal")
		}
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return Target{}, errors.New("IPv6 zones are not allowed")
		}
		ip = ip.Unmap()
		return Target{Host: ip.String(), IP: ip, Port: port}, nil
	}
	name, err := NormalizeName(h)
	if err != nil {
		return Target{}, err
	}
	return Target{Host: name, Port: port}, nil
}

// Vet decides whether the target may be reached and returns the exact
// addresses the proxy may dial, in resolver order. An IP literal must be
// listed. A name must match a name rule; it is then resolved here, and each
// resolved address that is special (see Classify) is dropped unless an
// IP-literal rule lists it. When nothing is left the denial names the
// class of the first refused address.
func (a *Allowlist) Vet(ctx context.Context, res Resolver, t Target) ([]netip.AddrPort, error) {
	if t.IP.IsValid() {
		if a.listsIP(t.IP, t.Port) {
			return []netip.AddrPort{netip.AddrPortFrom(t.IP, t.Port)}, nil
		}
		return nil, &denial{code: ReasonIPLiteralNotAllowed, detail: "IP addresses are reachable only when listed as IP literals"}
	}
	if d := a.matchName(t.Host, t.Port); d != nil {
		return nil, d
	}
	addrs, err := res.LookupNetIP(ctx, "ip", t.Host)
	if err != nil || len(addrs) == 0 {
		detail := "no addresses"
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			detail = "no such host"
		} else if err != nil {
			detail = "lookup failed"
		}
		return nil, &denial{code: ReasonResolveFailed, detail: detail}
	}
	var out []netip.AddrPort
	var first *denial
	seen := map[netip.Addr]bool{}
	for _, ip := range addrs {
		ip = ip.Unmap().WithZone("")
		if seen[ip] {
			continue
		}
		seen[ip] = true
		if c := Classify(ip); c != ClassPublic && !a.listsIP(ip, t.Port) {
			if first == nil {
				first = &denial{code: c.reason(), detail: fmt.Sprintf("name resolves to %s address %s, which is not listed as an IP literal", c, ip)}
			}
			continue
		}
		out = append(out, netip.AddrPortFrom(ip, t.Port))
	}
	if len(out) == 0 {
		return nil, first
	}
	return out, nil
}
