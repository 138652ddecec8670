package core

import (
	"fmt"
	"strings"
)

// ServeConfig is the [serve] table: how `aleph-sandbox serve` listens and
// shuts down. docs/serve.md describes each key.
type ServeConfig struct {
	// Listen addresses (unix:PATH or tcp:HOST:PORT); --listen replaces them.
	Listen []string `koanf:"listen" json:"listen,omitempty" toml:"listen"`
	// AllowedUIDs are peer uids accepted on the unix socket besides the
	// server's own.
	AllowedUIDs []int64 `koanf:"allowed_uids" json:"allowed_uids,omitempty" toml:"allowed_uids"`
	// GraceSeconds is how long running commands may take to finish after
	// SIGTERM or SIGINT before they are killed. 0: 10 s.
	GraceSeconds int64 `koanf:"grace_seconds" json:"grace_seconds,omitempty" toml:"grace_seconds"`
	// TLS is the certificate of TCP listeners and, with ClientCA, the
	// authority their clients' certificates must chain to (mutual TLS).
	TLS ServeTLSConfig `koanf:"tls" json:"tls,omitempty" toml:"tls"`
	// TokensFile holds the bearer tokens TCP clients may present, one a
	// line. Tokens come from a file (mode 0600, the server's own), never
	// from the command line, where every user could read them.
	TokensFile string `koanf:"tokens_file" json:"tokens_file,omitempty" toml:"tokens_file"`
	// MetricsListen, when set (tcp:HOST:PORT), serves /metrics in the
	// Prometheus text format there; --metrics replaces it.
	MetricsListen string `koanf:"metrics_listen" json:"metrics_listen,omitempty" toml:"metrics_listen"`
}

// ServeTLSConfig is the [serve.tls] table: PEM files.
type ServeTLSConfig struct {
	Cert     string `koanf:"cert" json:"cert,omitempty" toml:"cert"`
	Key      string `koanf:"key" json:"key,omitempty" toml:"key"`
	ClientCA string `koanf:"client_ca" json:"client_ca,omitempty" toml:"client_ca"`
}

// Validate refuses values serve cannot use.
func (c ServeConfig) Validate() error {
	if c.GraceSeconds < 0 {
		return &ConfigError{Key: "serve.grace_seconds", Reason: fmt.Sprintf("must be >= 0, got %d", c.GraceSeconds)}
	}
	for i, u := range c.AllowedUIDs {
		if u < 0 || u > 1<<32-1 {
			return &ConfigError{Key: fmt.Sprintf("serve.allowed_uids[%d]", i), Reason: fmt.Sprintf("not a uid: %d", u)}
		}
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		return &ConfigError{Key: "serve.tls", Reason: "cert and key go together: set both or neither"}
	}
	if c.TLS.ClientCA != "" && c.TLS.Cert == "" {
		return &ConfigError{Key: "serve.tls.client_ca", Reason: "needs serve.tls.cert and serve.tls.key (the server's own certificate)"}
	}
	if c.MetricsListen != "" && !strings.HasPrefix(c.MetricsListen, "tcp:") {
		return &ConfigError{Key: "serve.metrics_listen", Reason: fmt.Sprintf("%q: want tcp:HOST:PORT", c.MetricsListen)}
	}
	return nil
}
