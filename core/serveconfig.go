package core

import "fmt"

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
	return nil
}
