package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// processSection is the configuration section the process table owns,
// [sandbox.processes]: its type (ProcessConfig), defaults
// (DefaultProcessConfig), schema (ProcessSchema) and parser
// (ParseProcessConfig). Core keeps it as a Section like the hooks' ones,
// so the same loader rules apply (unknown keys refused by full name).
const processSection = "processes"

// ProcessConfig is [sandbox.processes]: the bounds of the processes a
// service starts (StartProcess) and, for max_lifetime_seconds, the
// default time limit of an interactive `exec -i/-t`. The JSON names are
// the configuration keys.
type ProcessConfig struct {
	MaxPerSession      int   `json:"max_per_session"`
	MaxTotal           int   `json:"max_total"`
	RingBytes          int   `json:"ring_bytes"`
	StdinBytes         int   `json:"stdin_bytes"`
	MaxLifetimeSeconds int64 `json:"max_lifetime_seconds"`
}

// Upper bounds of the section's values: far above any real use, and far
// from overflow and from one process taking the host's memory by a typo.
const (
	maxProcessCount      = 100000
	maxProcessRingBytes  = 1 << 30
	maxProcessStdinBytes = 64 << 20
)

// DefaultProcessConfig is the section with nothing set, the only place its
// defaults are written (defaultProcessLimits and the schema read it).
func DefaultProcessConfig() ProcessConfig {
	return ProcessConfig{MaxPerSession: 16, MaxTotal: 64, RingBytes: 1 << 20, StdinBytes: 64 << 10,
		MaxLifetimeSeconds: 24 * 3600}
}

// defaultProcessLimits are the limits with nothing configured.
func defaultProcessLimits() ProcessLimits { return DefaultProcessConfig().Limits() }

// Limits are the ProcessLimits the section gives.
func (c ProcessConfig) Limits() ProcessLimits {
	return ProcessLimits{PerSession: c.MaxPerSession, Total: c.MaxTotal, RingBytes: c.RingBytes,
		StdinBytes: c.StdinBytes, MaxLifetime: time.Duration(c.MaxLifetimeSeconds) * time.Second}
}

// ProcessSchema describes the section for the configuration loader, its
// defaults taken from DefaultProcessConfig.
func ProcessSchema() driverapi.ConfigSchema {
	d := DefaultProcessConfig()
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	return driverapi.ConfigSchema{Section: processSection, Fields: []driverapi.ConfigField{
		{Name: "max_per_session", Type: driverapi.ConfigUint, DefaultJSON: js(d.MaxPerSession),
			Description: "processes one session may hold (running, or ended and not yet waited for)"},
		{Name: "max_total", Type: driverapi.ConfigUint, DefaultJSON: js(d.MaxTotal),
			Description: "processes the service may hold over all sessions"},
		{Name: "ring_bytes", Type: driverapi.ConfigUint, DefaultJSON: js(d.RingBytes),
			Description: "output kept per process for ReadProcess; older bytes are dropped"},
		{Name: "stdin_bytes", Type: driverapi.ConfigUint, DefaultJSON: js(d.StdinBytes),
			Description: "written stdin held unread per process (or per exec -i); a writer past it waits"},
		{Name: "max_lifetime_seconds", Type: driverapi.ConfigUint, DefaultJSON: js(d.MaxLifetimeSeconds),
			Description: "a process (and an exec -i/-t without --timeout) is ended after running this long"},
	}}
}

// ParseProcessConfig reads the section as one JSON object: keys it does
// not name keep the defaults, unknown keys and bad values are refused with
// a *driverapi.ConfigError naming the key. Empty input is the defaults.
func ParseProcessConfig(sectionJSON []byte) (ProcessConfig, error) {
	cfg := DefaultProcessConfig()
	if len(bytes.TrimSpace(sectionJSON)) == 0 {
		return cfg, nil
	}
	dec := json.NewDecoder(bytes.NewReader(sectionJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return ProcessConfig{}, &driverapi.ConfigError{Section: processSection, Key: te.Field, Reason: err.Error()}
		}
		if _, rest, ok := strings.Cut(err.Error(), `unknown field "`); ok {
			// encoding/json names an unknown key only in its message.
			key, _, _ := strings.Cut(rest, `"`)
			return ProcessConfig{}, &driverapi.ConfigError{Section: processSection, Key: key, Reason: "unknown key"}
		}
		return ProcessConfig{}, &driverapi.ConfigError{Section: processSection, Reason: err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return ProcessConfig{}, &driverapi.ConfigError{Section: processSection, Reason: "trailing data after the JSON object"}
	}
	if err := cfg.Validate(); err != nil {
		return ProcessConfig{}, err
	}
	return cfg, nil
}

// Validate refuses values the table cannot use, naming the key.
func (c ProcessConfig) Validate() error {
	bad := func(key, reason string) error {
		return &driverapi.ConfigError{Section: processSection, Key: key, Reason: reason}
	}
	switch {
	case c.MaxPerSession < 1 || c.MaxPerSession > maxProcessCount:
		return bad("max_per_session", fmt.Sprintf("must lie between 1 and %d", maxProcessCount))
	case c.MaxTotal < 1 || c.MaxTotal > maxProcessCount:
		return bad("max_total", fmt.Sprintf("must lie between 1 and %d", maxProcessCount))
	case c.RingBytes < 1 || c.RingBytes > maxProcessRingBytes:
		return bad("ring_bytes", fmt.Sprintf("must lie between 1 and %d (1 GiB)", maxProcessRingBytes))
	case c.StdinBytes < 1 || c.StdinBytes > maxProcessStdinBytes:
		return bad("stdin_bytes", fmt.Sprintf("must lie between 1 and %d (64 MiB)", maxProcessStdinBytes))
	case c.MaxLifetimeSeconds < 1 || c.MaxLifetimeSeconds > int64(MaxTimeout/time.Second):
		return bad("max_lifetime_seconds", fmt.Sprintf("must lie between 1 and %d (one year)", int64(MaxTimeout/time.Second)))
	}
	return nil
}

// ProcessConfigOf is [sandbox.processes] as cfg gives it.
func ProcessConfigOf(cfg Config) (ProcessConfig, error) {
	return ParseProcessConfig(cfg.Sandbox.Processes.JSON())
}
