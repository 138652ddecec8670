package core

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestServeSection: [serve] keys are read, an unknown one in the section
// is refused by name, and bad values are refused by Validate.
func TestServeSection(t *testing.T) {
	write := func(text string) string {
		p := filepath.Join(t.TempDir(), "c.toml")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg, err := loadConfig(write("[serve]\nlisten = [\"unix:/run/a.sock\"]\nallowed_uids = [1001]\ngrace_seconds = 3\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Serve; len(s.Listen) != 1 || s.Listen[0] != "unix:/run/a.sock" || len(s.AllowedUIDs) != 1 || s.AllowedUIDs[0] != 1001 || s.GraceSeconds != 3 {
		t.Errorf("serve section %+v", s)
	}
	_, err = loadConfig(write("[serve]\ntokens = [\"x\"]\n"), nil)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Key != "serve.tokens" {
		t.Errorf("unknown serve key: %v", err)
	}
	for _, bad := range []ServeConfig{{GraceSeconds: -1}, {AllowedUIDs: []int64{-2}}} {
		if err := bad.Validate(); !errors.As(err, &ce) {
			t.Errorf("%+v: want a ConfigError, got %v", bad, err)
		}
	}
}

// TestServeEnvVarsAreNotOverrides: ALEPH_SANDBOX_HOST (exec --host) and
// ALEPH_SANDBOX_LOG_FORMAT (serve's log) are not refused as mistyped
// configuration overrides, while a mistyped one still is.
func TestServeEnvVarsAreNotOverrides(t *testing.T) {
	if _, err := loadConfig("", []string{"ALEPH_SANDBOX_HOST=unix:/run/a.sock", "ALEPH_SANDBOX_LOG_FORMAT=json"}); err != nil {
		t.Fatal(err)
	}
	if _, err := loadConfig("", []string{"ALEPH_SANDBOX_HOSTS=x"}); err == nil {
		t.Error("a mistyped variable was accepted")
	}
}

// TestServeTLSSection: [serve.tls], [serve.metrics_tls], tokens_file and
// metrics_listen are read; half a key pair, a client CA without a
// certificate (of either table) and a metrics address that is not tcp:
// are refused by Validate, naming the key.
func TestServeTLSSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.toml")
	text := "[serve]\nnode_id = \"pod-1\"\ntokens_file = \"/etc/t\"\nmetrics_listen = \"tcp:127.0.0.1:9464\"\n[serve.tls]\ncert = \"/c.pem\"\nkey = \"/k.pem\"\nclient_ca = \"/ca.pem\"\n[serve.metrics_tls]\ncert = \"/mc.pem\"\nkey = \"/mk.pem\"\nclient_ca = \"/mca.pem\"\n"
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadConfig(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Serve
	if s.NodeID != "pod-1" || s.TokensFile != "/etc/t" || s.MetricsListen != "tcp:127.0.0.1:9464" || s.TLS.Cert != "/c.pem" || s.TLS.Key != "/k.pem" || s.TLS.ClientCA != "/ca.pem" ||
		s.MetricsTLS != (ServeTLSConfig{Cert: "/mc.pem", Key: "/mk.pem", ClientCA: "/mca.pem"}) {
		t.Fatalf("serve section %+v", s)
	}
	if err := s.Validate(); err != nil {
		t.Errorf("valid section refused: %v", err)
	}
	for key, bad := range map[string]ServeConfig{
		"serve.tls":                   {TLS: ServeTLSConfig{Cert: "/c.pem"}},
		"serve.tls.client_ca":         {TLS: ServeTLSConfig{ClientCA: "/ca.pem"}},
		"serve.metrics_listen":        {MetricsListen: "127.0.0.1:9464"},
		"serve.metrics_tls":           {MetricsTLS: ServeTLSConfig{Key: "/mk.pem"}},
		"serve.metrics_tls.client_ca": {MetricsTLS: ServeTLSConfig{ClientCA: "/mca.pem"}},
		"serve.node_id":               {NodeID: "pod 1"},
	} {
		var ce *ConfigError
		if err := bad.Validate(); !errors.As(err, &ce) || ce.Key != key {
			t.Errorf("%s: %v", key, err)
		}
	}
}

// TestServeSessionIdleTTL: unset is the default (a day), "0" never
// expires, a duration is taken as given; what is not a duration, is
// negative or under a second is refused with the key named.
func TestServeSessionIdleTTL(t *testing.T) {
	for v, want := range map[string]time.Duration{"": defaultServeSessionIdleTTL, "0": 0, "90s": 90 * time.Second, " 2h ": 2 * time.Hour} {
		c := ServeConfig{SessionIdleTTL: v}
		if err := c.Validate(); err != nil {
			t.Errorf("%q refused: %v", v, err)
		}
		if got := c.Limits(1 << 20).SessionIdleTTL; got != want {
			t.Errorf("%q: ttl %s, want %s", v, got, want)
		}
	}
	for _, v := range []string{"soon", "-1m", "500ms", "9000h", "10"} {
		var ce *ConfigError
		if err := (ServeConfig{SessionIdleTTL: v}).Validate(); !errors.As(err, &ce) || ce.Key != "serve.session_idle_ttl" {
			t.Errorf("%q: %v", v, err)
		}
	}
}
