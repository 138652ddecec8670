package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

const secretValue = "s3cr3t-VALUE-9f8e7d"

func TestSecretInjectionPlainHTTP(t *testing.T) {
	// The upstream reports only whether it got the right value, never the
	// value itself, so anything the client sees is the proxy's doing.
	check := func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Authorization") {
		case "Bearer " + secretValue:
			io.WriteString(w, "authorized")
		case "":
			io.WriteString(w, "no-credential")
		default:
			fmt.Fprintf(w, "other-credential:%s", r.Header.Get("Authorization"))
		}
	}
	api := httpServer(t, "127.0.0.1:0", http.HandlerFunc(check))
	otherSrv := httpServer(t, "127.0.0.2:0", http.HandlerFunc(check))
	_, apiPort, _ := net.SplitHostPort(api)
	res := fakeResolver{"api.example.com": addrs("127.0.0.1")}
	p, log := startProxy(t, []string{"api.example.com", "127.0.0.1:" + apiPort, otherSrv}, res, func(c *Config) {
		c.Secrets = map[string]string{"API_TOKEN": secretValue}
		c.Injections = []SecretInjection{{Host: "api.example.com", Header: "authorization", Secret: "API_TOKEN", Format: "Bearer {secret}"}}
	})

	var captured strings.Builder
	client := proxyClient(t, p, true, nil)
	get := func(u string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		// The child only knows the placeholder, and may send it.
		req.Header.Set("Authorization", "Bearer "+Placeholder("API_TOKEN"))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		captured.WriteString(resp.Status)
		for k, v := range resp.Header {
			captured.WriteString(k + ": " + strings.Join(v, ",") + "\n")
		}
		b := body(t, resp)
		captured.WriteString(b)
		return b
	}

	if got := get("http://api.example.com:" + apiPort + "/"); got != "authorized" {
		t.Fatalf("allowed host with injection rule got %q", got)
	}
	d := log.last(t)
	if !d.Allowed || !strings.Contains(d.Detail, "API_TOKEN") || !strings.Contains(d.Detail, "Authorization") {
		t.Errorf("audit should name the secret and header: %+v", d)
	}
	// Another allowed host: no injection, the placeholder goes as sent.
	if got := get("http://" + otherSrv + "/"); got != "other-credential:Bearer "+Placeholder("API_TOKEN") {
		t.Fatalf("host without a rule got %q", got)
	}
	// The same server by IP literal does not match a name rule.
	if got := get("http://" + api + "/"); strings.Contains(got, "authorized") {
		t.Fatalf("rule for a name fired for an IP literal: %q", got)
	}

	// Through CONNECT the proxy cannot inject: the bytes are the child's.
	c := dialProxy(t, p, true)
	resp, br := connect(t, c, "api.example.com:"+apiPort)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", Placeholder("API_TOKEN"))
	tb, _ := io.ReadAll(br)
	captured.Write(tb)
	if strings.Contains(string(tb), "authorized") && !strings.Contains(string(tb), "other-credential") {
		t.Fatalf("CONNECT tunnel unexpectedly carried the secret: %q", tb)
	}

	// Nothing the child or the audit trail saw holds the value.
	for _, e := range p.Env() {
		captured.WriteString(e.Name + "=" + e.Value + "\n")
	}
	for _, d := range log.all() {
		captured.WriteString(fmt.Sprintf("%+v\n", d))
	}
	if strings.Contains(captured.String(), secretValue) {
		t.Fatal("secret value reached the client, env or audit record")
	}
	if !strings.Contains(captured.String(), "API_TOKEN="+Placeholder("API_TOKEN")) {
		t.Error("placeholder missing from the child's env")
	}
}

func TestSecretValidation(t *testing.T) {
	base := func(secrets map[string]string, rules ...SecretInjection) error {
		_, err := New(context.Background(), Config{Secrets: secrets, Injections: rules, Resolver: fakeResolver{}})
		return err
	}
	rule := SecretInjection{Host: "api.example.com", Header: "Authorization", Secret: "TOK", Format: "Bearer {secret}"}
	bad := map[string]error{
		"CR in value":      base(map[string]string{"TOK": "a\rb"}, rule),
		"LF in value":      base(map[string]string{"TOK": "a\nX-Evil: 1"}, rule),
		"NUL in value":     base(map[string]string{"TOK": "a\x00b"}, rule),
		"bad name":         base(map[string]string{"1TOK": "v"}),
		"missing secret":   base(map[string]string{"OTHER": "v"}, rule),
		"forbidden header": base(map[string]string{"TOK": "v"}, SecretInjection{Host: "a.example", Header: "Host", Secret: "TOK"}),
		"bad header name":  base(map[string]string{"TOK": "v"}, SecretInjection{Host: "a.example", Header: "X Bad", Secret: "TOK"}),
		"no placeholder":   base(map[string]string{"TOK": "v"}, SecretInjection{Host: "a.example", Header: "X-Key", Secret: "TOK", Format: "static"}),
		"CRLF in format":   base(map[string]string{"TOK": "v"}, SecretInjection{Host: "a.example", Header: "X-Key", Secret: "TOK", Format: "{secret}\r\nX: y"}),
		"bad host pattern": base(map[string]string{"TOK": "v"}, SecretInjection{Host: "http://a.example", Header: "X-Key", Secret: "TOK"}),
	}
	for name, err := range bad {
		var se *SecretError
		if !errors.As(err, &se) {
			t.Errorf("%s: got %v, want *SecretError", name, err)
			continue
		}
		if strings.Contains(err.Error(), "X-Evil") || strings.Contains(err.Error(), "a\x00b") {
			t.Errorf("%s: error echoes the secret value: %v", name, err)
		}
	}
	// Positive controls.
	p, err := New(context.Background(), Config{Secrets: map[string]string{"TOK": "v\tw"}, Injections: []SecretInjection{rule}, Resolver: fakeResolver{}})
	if err != nil {
		t.Fatalf("valid secret refused: %v", err)
	}
	p.Close()
	p, err = New(context.Background(), Config{Injections: []SecretInjection{rule}, Resolver: fakeResolver{}})
	if err != nil {
		t.Fatalf("rule without secrets refused: %v", err)
	}
	p.Close()
}

func TestEnv(t *testing.T) {
	p, _ := startProxy(t, nil, fakeResolver{}, func(c *Config) {
		c.Route = RouteBridge
		c.Secrets = map[string]string{"B": secretValue, "A": secretValue}
	})
	env := map[string]string{}
	var order []string
	for _, e := range p.Env() {
		env[e.Name] = e.Value
		order = append(order, e.Name)
	}
	want := map[string]string{
		"HTTP_PROXY": "http://127.0.0.1:3128", "https_proxy": "http://127.0.0.1:3128",
		"ALL_PROXY": "socks5h://127.0.0.1:1080", "all_proxy": "socks5h://127.0.0.1:1080",
		"NO_PROXY": "", "no_proxy": "", "A": "aleph:secret:A", "B": "aleph:secret:B",
	}
	for k, v := range want {
		if got, ok := env[k]; !ok || got != v {
			t.Errorf("env %s = %q (set %v), want %q", k, got, ok, v)
		}
	}
	if order[len(order)-2] != "A" || order[len(order)-1] != "B" {
		t.Errorf("placeholders not sorted: %v", order)
	}

	for k, v := range env {
		if strings.Contains(v, "@") {
			t.Errorf("bridge route %s = %q carries a credential", k, v)
		}
	}

	// Host loopback: every proxy variable names the TCP listener with the
	// proxy's credential as user information.
	p2, _ := startProxy(t, nil, fakeResolver{}, hostLoopback)
	env2 := envOf(p2)
	for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"} {
		u, err := url.Parse(env2[name])
		scheme := "http"
		if strings.HasSuffix(strings.ToLower(name), "all_proxy") {
			scheme = "socks5h"
		}
		if err != nil || u.Scheme != scheme || u.Host != p2.Endpoint().TCPAddr || u.Path != "" {
			t.Errorf("host-loopback route %s = %q", name, env2[name])
			continue
		}
		if pass, ok := u.User.Password(); !ok || u.User.Username() != p2.cred.user || pass != p2.cred.token {
			t.Errorf("host-loopback route %s does not carry the proxy's credential", name)
		}
	}
	if env2["NO_PROXY"] != "" || env2["no_proxy"] != "" {
		t.Errorf("NO_PROXY = %q, no_proxy = %q", env2["NO_PROXY"], env2["no_proxy"])
	}
}

func TestMediator(t *testing.T) {
	echo := echoServer(t, "127.0.0.1:0")
	log := &auditLog{}
	m := &Mediator{Audit: log.add, Resolver: fakeResolver{}, Route: RouteHostLoopback}
	var med Mediation
	med, err := m.Start(context.Background(), "sess", "cmd", []string{echo}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer med.Close()
	c, err := net.Dial("unix", med.Endpoint().UnixSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The Route setting reached the proxy: it listens on host loopback
	// and wants the child's credential on the unix socket too.
	if med.Endpoint().TCPAddr == "" {
		t.Fatal("RouteHostLoopback did not reach the proxy: no TCP listener")
	}
	var auth string
	for _, e := range med.Env() {
		if e.Name == "HTTP_PROXY" {
			u, err := url.Parse(e.Value)
			if err != nil {
				t.Fatal(err)
			}
			pass, _ := u.User.Password()
			auth = basicAuth(u.User.Username(), pass)
		}
	}
	resp, _ := connect(t, c, echo, auth)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if d := log.last(t); d.SessionID != "sess" || d.CommandID != "cmd" || !d.Allowed {
		t.Errorf("audit = %+v", d)
	}
	if _, err := m.Start(context.Background(), "s", "c", []string{"http://bad"}, nil); err == nil {
		t.Error("bad allowlist entry accepted")
	}
}
