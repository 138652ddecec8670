package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// FuzzReadProxyRequest: the request-head parser must never panic, and
// whatever it accepts must name a target that is itself well formed (a
// normalised name or an IP literal, a non-zero port), with a Host header
// that agrees.
func FuzzReadProxyRequest(f *testing.F) {
	for _, s := range []string{
		"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
		"GET http://[2001:db8::1]:8080/x HTTP/1.0\r\n\r\n",
		"POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\n\r\nabc",
		"GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\n continued\r\n\r\n",
		"GET http://a.example/ HTTP/1.1\nHost: b.example\n\n",
		"GET http://a.example/ HTTP/1.1\r\nHost : b.example\r\n\r\n",
		"GET http://xn--bcher-kva.example/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), 1024)
		pr, err := readProxyRequest(br, 1024)
		if err != nil {
			var re *requestError
			if errors.As(err, &re) && re.code == "" {
				t.Fatalf("request error without a reason code: %v", err)
			}
			return
		}
		tg := pr.target
		if tg.Port == 0 || tg.Host == "" {
			t.Fatalf("accepted empty target %+v", tg)
		}
		if !tg.IP.IsValid() {
			if n, err := NormalizeName(tg.Host); err != nil || n != tg.Host {
				t.Fatalf("accepted unnormalised host %q", tg.Host)
			}
		}
		for k := range pr.req.Header {
			if !httpguts.ValidHeaderFieldName(k) {
				t.Fatalf("accepted header field name %q", k)
			}
		}
		if pr.req.Method != http.MethodConnect && !strings.EqualFold(pr.req.URL.Scheme, "http") {
			t.Fatalf("accepted scheme %q", pr.req.URL.Scheme)
		}
		if hv := pr.req.Header.Values("Host"); len(hv) == 1 && hv[0] != "" {
			def := uint16(80)
			if pr.req.Method == http.MethodConnect {
				def = tg.Port
			}
			if ht, err := hostHeaderTarget(hv[0], def); err != nil || ht != tg {
				t.Fatalf("accepted disagreeing Host %q for %+v", hv[0], tg)
			}
		}
		pr.req.Body.Close()
	})
}

// FuzzSOCKS: the SOCKS5 greeting and request parsers must never panic,
// and an accepted CONNECT names a well-formed target.
func FuzzSOCKS(f *testing.F) {
	f.Add([]byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 80})
	f.Add([]byte{5, 2, 0, 2, 5, 1, 0, 3, 11, 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm', 1, 187})
	f.Add([]byte{5, 1, 0, 5, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 53})
	f.Add([]byte{5, 1, 0, 5, 1, 0, 3, 9, '1', '2', '7', '.', '0', '.', '0', '.', '1', 0, 80})
	f.Add([]byte{5, 1, 2, 1, 5, 'a', 'l', 'e', 'p', 'h', 2, 'a', 'b', 5, 1, 0, 1, 127, 0, 0, 1, 0, 80})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		m, err := readSOCKSGreeting(r)
		if err != nil {
			return
		}
		// On the host-loopback route (both listeners) a username/password
		// exchange comes next; on the bridge route the request does.
		if m.userPass && !m.noAuth {
			if _, _, err := readSOCKSUserPass(r); err != nil {
				return
			}
		} else if !m.noAuth {
			return
		}
		req, err := readSOCKSRequest(r)
		if err != nil || req.cmd != socksCmdConnect {
			return
		}
		tg := req.target
		if tg.Port == 0 || tg.Host == "" {
			t.Fatalf("accepted empty target %+v", tg)
		}
		if !tg.IP.IsValid() {
			if n, err := NormalizeName(tg.Host); err != nil || n != tg.Host {
				t.Fatalf("accepted unnormalised host %q", tg.Host)
			}
		}
	})
}

// FuzzParseRule: entries either parse to a rule whose String form parses
// back to the same rule, or fail with a *RuleError.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:443", "[::1]:80", "10.0.0.1", "BÜCHER.example.", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			var re *RuleError
			if !errors.As(err, &re) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		r2, err := ParseRule(r.String())
		if err != nil || r2 != r {
			t.Fatalf("round trip %q -> %q -> %+v, %v", s, r.String(), r2, err)
		}
	})
}
