package core

import (
	"fmt"
	"strings"
	"time"
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
	// MetricsTLS, when its cert and key are set, serves the metrics
	// listener (/metrics, /healthz, /readyz) over TLS with them; with
	// ClientCA only to clients whose certificate chains to it. Unset:
	// plain HTTP, for a kubelet's probes and a scraper on the pod network.
	MetricsTLS ServeTLSConfig `koanf:"metrics_tls" json:"metrics_tls,omitempty" toml:"metrics_tls"`

	// The bounds below hold serve's memory and descriptors under load and
	// hostile clients; 0 means the default (docs/serve.md lists them).

	// MaxRequestBytes bounds one request body (the largest is an
	// Execute with stdin). Default 4 MiB.
	MaxRequestBytes int64 `koanf:"max_request_bytes" json:"max_request_bytes,omitempty" toml:"max_request_bytes"`
	// MaxOutputBytes is the ceiling of a request's max_output. Default:
	// sandbox.max_output_bytes (1 MiB unless configured).
	MaxOutputBytes int64 `koanf:"max_output_bytes" json:"max_output_bytes,omitempty" toml:"max_output_bytes"`
	// MaxSessions bounds the sessions the service holds. Default 1024.
	MaxSessions int64 `koanf:"max_sessions" json:"max_sessions,omitempty" toml:"max_sessions"`
	// MaxConnections bounds open connections, in total and per peer (a
	// TCP client's address; on the unix socket every peer is one).
	// Defaults 1024 and 128.
	MaxConnections        int64 `koanf:"max_connections" json:"max_connections,omitempty" toml:"max_connections"`
	MaxConnectionsPerPeer int64 `koanf:"max_connections_per_peer" json:"max_connections_per_peer,omitempty" toml:"max_connections_per_peer"`
	// ReadHeaderTimeoutSeconds, ReadTimeoutSeconds (a whole request,
	// body included) and IdleTimeoutSeconds (a kept-alive connection with
	// no request) end stalled connections. Defaults 10, 60, 120.
	ReadHeaderTimeoutSeconds int64 `koanf:"read_header_timeout_seconds" json:"read_header_timeout_seconds,omitempty" toml:"read_header_timeout_seconds"`
	ReadTimeoutSeconds       int64 `koanf:"read_timeout_seconds" json:"read_timeout_seconds,omitempty" toml:"read_timeout_seconds"`
	IdleTimeoutSeconds       int64 `koanf:"idle_timeout_seconds" json:"idle_timeout_seconds,omitempty" toml:"idle_timeout_seconds"`
	// TermGraceSeconds: when grace_seconds is over, the commands still
	// running get SIGTERM and this long to end before they are killed.
	// Default 5.
	TermGraceSeconds int64 `koanf:"term_grace_seconds" json:"term_grace_seconds,omitempty" toml:"term_grace_seconds"`
	// FilesMaxBytes bounds one file the files API reads or writes (the
	// service's, the runtime's and MCP's). Default 64 MiB.
	FilesMaxBytes int64 `koanf:"files_max_bytes" json:"files_max_bytes,omitempty" toml:"files_max_bytes"`
	// FilesMaxListEntries bounds the entries of one directory listing.
	// Default 10000.
	FilesMaxListEntries int64 `koanf:"files_max_list_entries" json:"files_max_list_entries,omitempty" toml:"files_max_list_entries"`
	// FilesMaxUploads bounds the files being written in parts at once
	// (each holds a temporary file until its last part). Default 64.
	FilesMaxUploads int64 `koanf:"files_max_uploads" json:"files_max_uploads,omitempty" toml:"files_max_uploads"`
	// SessionIdleTTL deletes a session (as Sessions delete does: its
	// processes end, its workspace, HOME and grants are removed) once it
	// has had no call and no running command or process for this long: a
	// Go duration ("30m", "24h"). "" is the default, 24h; "0" never
	// expires a session. A day, because an agent's session is its scratch
	// space, not the user's project (a workspace the caller named is never
	// removed): a client that crashed or forgot its session should not
	// hold a seat among max_sessions and its disk for ever, while a pause
	// overnight, or a process running for hours, keeps it.
	SessionIdleTTL string `koanf:"session_idle_ttl" json:"session_idle_ttl,omitempty" toml:"session_idle_ttl"`
	// NodeID names this server in every result, so that a client behind a
	// router can tell which server holds its session; --node-id replaces
	// it. Empty: the hostname. 1-63 characters of A-Z a-z 0-9 . _ -.
	NodeID string `koanf:"node_id" json:"node_id,omitempty" toml:"node_id"`
}

// ServeLimits are the effective bounds of a ServeConfig (its defaults
// filled in).
type ServeLimits struct {
	MaxRequestBytes int64
	MaxOutputBytes  int64
	// DefaultOutputBytes is sandbox.max_output_bytes, the budget of a
	// request that names none.
	DefaultOutputBytes    int64
	MaxSessions           int
	MaxConnections        int
	MaxConnectionsPerPeer int
	ReadHeaderTimeout     time.Duration
	ReadTimeout           time.Duration
	IdleTimeout           time.Duration
	// FilesMaxBytes and FilesMaxListEntries bound the files API.
	FilesMaxBytes       int64
	FilesMaxListEntries int
	FilesMaxUploads     int
	// SessionIdleTTL is serve.session_idle_ttl; 0: sessions never expire.
	SessionIdleTTL time.Duration
	// DefaultTimeout is sandbox.default_timeout_seconds, the time limit
	// of a command naming none, said to clients (Capabilities); the
	// caller fills it in (it is not a [serve] key). 0: not said.
	DefaultTimeout time.Duration
}

// Defaults of the [serve] bounds.
const (
	defaultServeMaxRequestBytes       = 4 << 20
	defaultServeMaxSessions           = 1024
	defaultServeMaxConnections        = 1024
	defaultServeMaxConnectionsPerPeer = 128
	defaultServeReadHeaderTimeout     = 10 * time.Second
	defaultServeReadTimeout           = 60 * time.Second
	defaultServeIdleTimeout           = 120 * time.Second
	defaultServeFilesMaxBytes         = 64 << 20
	defaultServeFilesMaxListEntries   = 10000
	defaultServeFilesMaxUploads       = 64
	defaultServeSessionIdleTTL        = 24 * time.Hour
)

// Limits is c's bounds with the defaults filled in; sandboxOutput is
// sandbox.max_output_bytes, the default output ceiling.
func (c ServeConfig) Limits(sandboxOutput int64) ServeLimits {
	or := func(v, d int64) int64 {
		if v > 0 {
			return v
		}
		return d
	}
	secs := func(v int64, d time.Duration) time.Duration {
		if v > 0 {
			return time.Duration(v) * time.Second
		}
		return d
	}
	return ServeLimits{
		MaxRequestBytes:       or(c.MaxRequestBytes, defaultServeMaxRequestBytes),
		MaxOutputBytes:        or(c.MaxOutputBytes, sandboxOutput),
		DefaultOutputBytes:    sandboxOutput,
		MaxSessions:           int(or(c.MaxSessions, defaultServeMaxSessions)),
		MaxConnections:        int(or(c.MaxConnections, defaultServeMaxConnections)),
		MaxConnectionsPerPeer: int(or(c.MaxConnectionsPerPeer, defaultServeMaxConnectionsPerPeer)),
		ReadHeaderTimeout:     secs(c.ReadHeaderTimeoutSeconds, defaultServeReadHeaderTimeout),
		ReadTimeout:           secs(c.ReadTimeoutSeconds, defaultServeReadTimeout),
		IdleTimeout:           secs(c.IdleTimeoutSeconds, defaultServeIdleTimeout),
		FilesMaxBytes:         or(c.FilesMaxBytes, defaultServeFilesMaxBytes),
		FilesMaxListEntries:   int(or(c.FilesMaxListEntries, defaultServeFilesMaxListEntries)),
		FilesMaxUploads:       int(or(c.FilesMaxUploads, defaultServeFilesMaxUploads)),
		SessionIdleTTL:        c.sessionIdleTTL(),
	}
}

// sessionIdleTTL is SessionIdleTTL parsed: the default when unset, 0 for
// never; a value Validate refuses is taken as the default.
func (c ServeConfig) sessionIdleTTL() time.Duration {
	d, err := parseIdleTTL(c.SessionIdleTTL)
	if err != nil {
		return defaultServeSessionIdleTTL
	}
	return d
}

func parseIdleTTL(v string) (time.Duration, error) {
	switch strings.TrimSpace(v) {
	case "":
		return defaultServeSessionIdleTTL, nil
	case "0":
		return 0, nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (\"30m\", \"24h\"; \"0\" never expires a session)", v)
	}
	if d < 0 || d > maxConfigSeconds*time.Second {
		return 0, fmt.Errorf("%q: must lie between 0 (never) and %d seconds", v, int64(maxConfigSeconds))
	}
	if d > 0 && d < time.Second {
		return 0, fmt.Errorf("%q: shorter than a second would delete a session between two calls of one client", v)
	}
	return d, nil
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
	if (c.MetricsTLS.Cert == "") != (c.MetricsTLS.Key == "") {
		return &ConfigError{Key: "serve.metrics_tls", Reason: "cert and key go together: set both or neither"}
	}
	if c.MetricsTLS.ClientCA != "" && c.MetricsTLS.Cert == "" {
		return &ConfigError{Key: "serve.metrics_tls.client_ca", Reason: "needs serve.metrics_tls.cert and serve.metrics_tls.key (the metrics listener's own certificate)"}
	}
	for _, b := range []struct {
		key string
		v   int64
		max int64
	}{
		{"max_request_bytes", c.MaxRequestBytes, 1 << 30},
		{"max_output_bytes", c.MaxOutputBytes, 1 << 30},
		{"max_sessions", c.MaxSessions, 1 << 20},
		{"max_connections", c.MaxConnections, 1 << 20},
		{"max_connections_per_peer", c.MaxConnectionsPerPeer, 1 << 20},
		{"read_header_timeout_seconds", c.ReadHeaderTimeoutSeconds, maxConfigSeconds},
		{"read_timeout_seconds", c.ReadTimeoutSeconds, maxConfigSeconds},
		{"idle_timeout_seconds", c.IdleTimeoutSeconds, maxConfigSeconds},
		{"term_grace_seconds", c.TermGraceSeconds, maxConfigSeconds},
		{"files_max_bytes", c.FilesMaxBytes, 1 << 40},
		{"files_max_list_entries", c.FilesMaxListEntries, 1 << 24},
		{"files_max_uploads", c.FilesMaxUploads, 1 << 16},
	} {
		if b.v < 0 || b.v > b.max {
			return &ConfigError{Key: "serve." + b.key, Reason: fmt.Sprintf("must be between 0 (the default) and %d, got %d", b.max, b.v)}
		}
	}
	if _, err := parseIdleTTL(c.SessionIdleTTL); err != nil {
		return &ConfigError{Key: "serve.session_idle_ttl", Reason: err.Error()}
	}
	if c.NodeID != "" {
		if err := ValidateNodeID("serve.node_id", c.NodeID); err != nil {
			return err
		}
	}
	if c.MetricsListen != "" && !strings.HasPrefix(c.MetricsListen, "tcp:") {
		return &ConfigError{Key: "serve.metrics_listen", Reason: fmt.Sprintf("%q: want tcp:HOST:PORT", c.MetricsListen)}
	}
	return nil
}

// ValidateNodeID refuses a node id that is not 1-63 characters of
// A-Z a-z 0-9 . _ - (a label a proxy, a metric and a pod name all take);
// key names where it came from (serve.node_id, --node-id).
func ValidateNodeID(key, id string) error {
	if id == "" || len(id) > 63 {
		return &ConfigError{Key: key, Reason: fmt.Sprintf("%q: a node id is 1-63 characters of A-Z a-z 0-9 . _ -, this one has %d", id, len(id))}
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return &ConfigError{Key: key, Reason: fmt.Sprintf("%q: byte %d (%q) is not one of A-Z a-z 0-9 . _ -", id, i, c)}
		}
	}
	return nil
}
