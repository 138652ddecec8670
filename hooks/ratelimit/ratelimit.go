// Package ratelimit is a before-hook that limits how fast and how many
// commands run at once: a token bucket per session (golang.org/x/time/rate)
// and caps on concurrent commands per session and overall. A slot taken by
// Before is given back by After. A denial carries RetryAfter and says so in
// its reason. Sessions idle for IdleForgetSeconds with nothing running are
// forgotten, so memory stays bounded by the number of recently active
// sessions; a slot whose After never comes is given back after
// InflightLease. The package owns the [sandbox.rate_limit] configuration
// section: its type (Config), defaults (DefaultConfig), schema and
// validation (ParseConfig).
package ratelimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// HookName is the name the hook reports.
const HookName = "rate_limit"

// Rule names of the denials.
const (
	RuleRate              = "rate"
	RuleSessionConcurrent = "session_concurrency"
	RuleGlobalConcurrent  = "global_concurrency"
)

// Section is the name of the configuration section this package owns,
// [sandbox.rate_limit].
const Section = "rate_limit"

// Config is the [sandbox.rate_limit] section: the one type the in-process
// hook, the aleph-hook-ratelimit plugin and the configuration loader (through
// Schema and ParseConfig) read. The JSON names are the configuration keys.
//
// Zero has one meaning for every limit: no limit in that dimension
// (RatePerSecond, MaxConcurrentPerSession, MaxConcurrentGlobal). Burst 0
// derives the bucket from the rate, max(1, ceil(RatePerSecond));
// IdleForgetSeconds 0 is the default, 600. Negative values are refused.
type Config struct {
	// Enabled says whether the assembly runs the hook in-process; the hook
	// itself ignores it (a disabled limiter is simply not built).
	Enabled bool `json:"enabled"`
	// RatePerSecond is the sustained number of commands a session may
	// start per second.
	RatePerSecond float64 `json:"rate_per_second"`
	// Burst is how many commands a session may start at once.
	Burst int `json:"burst"`
	// MaxConcurrentPerSession caps commands running at once in a session.
	MaxConcurrentPerSession int `json:"max_concurrent_per_session"`
	// MaxConcurrentGlobal caps commands running at once overall.
	MaxConcurrentGlobal int `json:"max_concurrent_global"`
	// IdleForgetSeconds is how long a session without commands is
	// remembered. A session with a command still running is never
	// forgotten (its slot must keep counting against the caps).
	IdleForgetSeconds int64 `json:"idle_forget_seconds"`
	// InflightLease is how long a command holds its concurrency slot
	// without After: a lost After (a hook plugin restarted, a caller that
	// crashed) must not hold a slot for ever, and a command running
	// longer than this loses its place in the count. 0 means 24 hours.
	// Not a configuration key.
	InflightLease time.Duration `json:"-"`
	// ConcurrencyRetryAfter is the RetryAfter given when a concurrency cap
	// is reached (when a slot frees is not knowable); 0 means 1s. Not a
	// configuration key.
	ConcurrencyRetryAfter time.Duration `json:"-"`
}

// DefaultIdleForgetSeconds is what IdleForgetSeconds 0 means.
const DefaultIdleForgetSeconds = 600

// DefaultConfig is the section with nothing set, the only place its
// defaults are written: 10 commands/s with bursts of 20 per session, 4 at
// once per session, 16 overall, enabled.
func DefaultConfig() Config {
	return Config{Enabled: true, RatePerSecond: 10, Burst: 20, MaxConcurrentPerSession: 4,
		MaxConcurrentGlobal: 16, IdleForgetSeconds: DefaultIdleForgetSeconds}
}

// Schema describes the section for the configuration loader, defaults
// taken from DefaultConfig (so the file's defaults cannot drift from the
// hook's).
func Schema() driverapi.ConfigSchema {
	d := DefaultConfig()
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	return driverapi.ConfigSchema{Section: Section, Fields: []driverapi.ConfigField{
		{Name: "enabled", Type: driverapi.ConfigBool, DefaultJSON: js(d.Enabled),
			Description: "run the rate-limit hook in-process"},
		{Name: "rate_per_second", Type: driverapi.ConfigNumber, DefaultJSON: js(d.RatePerSecond),
			Description: "sustained commands per second per session (token bucket); 0 means no rate limit"},
		{Name: "burst", Type: driverapi.ConfigUint, DefaultJSON: js(d.Burst),
			Description: "bucket size; 0 means max(1, ceil(rate_per_second))"},
		{Name: "max_concurrent_per_session", Type: driverapi.ConfigUint, DefaultJSON: js(d.MaxConcurrentPerSession),
			Description: "commands running at once in one session; 0 means no cap"},
		{Name: "max_concurrent_global", Type: driverapi.ConfigUint, DefaultJSON: js(d.MaxConcurrentGlobal),
			Description: "commands running at once overall; 0 means no cap"},
		{Name: "idle_forget_seconds", Type: driverapi.ConfigUint, DefaultJSON: js(d.IdleForgetSeconds),
			Description: "a session idle this long with nothing running is forgotten; 0 means the default, 600"},
	}}
}

// ParseConfig reads the section as one JSON object: keys it does not name
// keep DefaultConfig's values, unknown keys and bad values are refused
// with a *driverapi.ConfigError naming the key. Empty input is the
// defaults.
func ParseConfig(sectionJSON []byte) (Config, error) {
	cfg := DefaultConfig()
	if len(bytes.TrimSpace(sectionJSON)) == 0 {
		return cfg, nil
	}
	dec := json.NewDecoder(bytes.NewReader(sectionJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		key := ""
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			key = te.Field
		} else if _, rest, ok := strings.Cut(err.Error(), `unknown field "`); ok {
			// encoding/json names an unknown key only in its message; it is
			// this package's own decoder, not a peer's text.
			key, _, _ = strings.Cut(rest, `"`)
			return Config{}, &driverapi.ConfigError{Section: Section, Key: key, Reason: "unknown key"}
		}
		return Config{}, &driverapi.ConfigError{Section: Section, Key: key, Reason: err.Error()}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Config{}, &driverapi.ConfigError{Section: Section, Reason: "trailing data after the JSON object"}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Validate refuses values no hook can use, with a *driverapi.ConfigError
// naming the key.
func (c Config) Validate() error {
	bad := func(key, reason string) error {
		return &driverapi.ConfigError{Section: Section, Key: key, Reason: reason}
	}
	switch {
	case math.IsNaN(c.RatePerSecond) || math.IsInf(c.RatePerSecond, 0):
		return bad("rate_per_second", "must be a finite number")
	case c.RatePerSecond < 0:
		return bad("rate_per_second", "must be >= 0 (0 = no rate limit)")
	case c.Burst < 0:
		return bad("burst", "must be >= 0 (0 = derived from rate_per_second)")
	case c.MaxConcurrentPerSession < 0:
		return bad("max_concurrent_per_session", "must be >= 0 (0 = no cap)")
	case c.MaxConcurrentGlobal < 0:
		return bad("max_concurrent_global", "must be >= 0 (0 = no cap)")
	case c.IdleForgetSeconds < 0:
		return bad("idle_forget_seconds", "must be >= 0 (0 = the default, 600)")
	case c.IdleForgetSeconds > maxIdleForgetSeconds:
		return bad("idle_forget_seconds", fmt.Sprintf("must be <= %d (one year)", maxIdleForgetSeconds))
	case c.InflightLease < 0:
		return bad("inflight_lease", "must not be negative")
	}
	return nil
}

// maxIdleForgetSeconds bounds idle_forget_seconds (one year), far from
// time.Duration overflow.
const maxIdleForgetSeconds = 365 * 24 * 3600

// Option adjusts a Hook.
type Option func(*Hook)

// WithClock replaces time.Now (tests).
func WithClock(now func() time.Time) Option { return func(h *Hook) { h.now = now } }

// WithLogger sets the logger (default: none).
func WithLogger(l hclog.Logger) Option { return func(h *Hook) { h.log = l.ResetNamed(HookName) } }

type session struct {
	limiter  *rate.Limiter        // nil when there is no rate limit
	inflight map[string]time.Time // command id -> when it was admitted
	lastSeen time.Time
}

// Hook is the rate limiter. Safe for concurrent use.
type Hook struct {
	cfg        Config
	idleForget time.Duration
	now        func() time.Time
	log        hclog.Logger

	mu        sync.Mutex
	sessions  map[string]*session
	global    int
	lastSweep time.Time
}

var _ driverapi.AfterHook = (*Hook)(nil)

// New validates cfg (Config.Validate) and builds the hook.
func New(cfg Config, opts ...Option) (*Hook, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.IdleForgetSeconds == 0 {
		cfg.IdleForgetSeconds = DefaultIdleForgetSeconds
	}
	if cfg.InflightLease == 0 {
		cfg.InflightLease = 24 * time.Hour
	}
	if cfg.ConcurrencyRetryAfter <= 0 {
		cfg.ConcurrencyRetryAfter = time.Second
	}
	if cfg.RatePerSecond > 0 && cfg.Burst == 0 {
		cfg.Burst = max(1, int(math.Ceil(cfg.RatePerSecond)))
	}
	h := &Hook{cfg: cfg, idleForget: time.Duration(cfg.IdleForgetSeconds) * time.Second, now: time.Now, log: hclog.NewNullLogger(), sessions: map[string]*session{}}
	for _, o := range opts {
		o(h)
	}
	return h, nil
}

// Describe names the hook.
func (h *Hook) Describe(context.Context) (driverapi.HookInfo, error) {
	return driverapi.HookInfo{Name: HookName, Version: "1", Description: fmt.Sprintf(
		"%g commands/s (burst %d) per session, %d at once per session, %d overall",
		h.cfg.RatePerSecond, h.cfg.Burst, h.cfg.MaxConcurrentPerSession, h.cfg.MaxConcurrentGlobal)}, nil
}

// Before takes a token and a concurrency slot for the command, or denies it
// with the time to wait before retrying.
func (h *Hook) Before(_ context.Context, req driverapi.HookRequest) (driverapi.Verdict, error) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	s := h.sessions[req.SessionID]
	if s == nil {
		s = &session{inflight: map[string]time.Time{}}
		if h.cfg.RatePerSecond > 0 {
			s.limiter = rate.NewLimiter(rate.Limit(h.cfg.RatePerSecond), h.cfg.Burst)
		}
		h.sessions[req.SessionID] = s
	}
	s.lastSeen = now
	// Concurrency first: a command refused for lack of a slot must not use
	// up a token.
	if c := h.cfg.MaxConcurrentPerSession; c > 0 && len(s.inflight) >= c {
		return h.deny(req, RuleSessionConcurrent, h.cfg.ConcurrencyRetryAfter,
			fmt.Sprintf("session %q already runs %d commands (limit %d)", req.SessionID, len(s.inflight), c)), nil
	}
	if c := h.cfg.MaxConcurrentGlobal; c > 0 && h.global >= c {
		return h.deny(req, RuleGlobalConcurrent, h.cfg.ConcurrencyRetryAfter,
			fmt.Sprintf("%d commands already run overall (limit %d)", h.global, c)), nil
	}
	if s.limiter != nil {
		r := s.limiter.ReserveN(now, 1)
		if !r.OK() {
			return h.deny(req, RuleRate, h.cfg.ConcurrencyRetryAfter, "rate limit admits no command"), nil
		}
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return h.deny(req, RuleRate, d, fmt.Sprintf("session %q exceeds %g commands/s (burst %d)",
				req.SessionID, h.cfg.RatePerSecond, h.cfg.Burst)), nil
		}
	}
	if _, ok := s.inflight[req.CommandID]; req.CommandID != "" && !ok {
		s.inflight[req.CommandID] = now
		h.global++
	}
	return driverapi.Verdict{Action: driverapi.ActionAllow}, nil
}

func (h *Hook) deny(req driverapi.HookRequest, rule string, retry time.Duration, why string) driverapi.Verdict {
	// Whole milliseconds, rounded up, so "retry after" is never early.
	retry = (retry + time.Millisecond - 1).Truncate(time.Millisecond)
	reason := fmt.Sprintf("rate limit: %s; retry in %s", why, retry)
	h.log.Info("command denied", "rule", rule, "session_id", req.SessionID, "command_id", req.CommandID, "retry_after", retry)
	return driverapi.Verdict{Action: driverapi.ActionDeny, Rule: rule, Reason: reason, RetryAfter: retry, Hook: HookName}
}

// After gives back the command's concurrency slot. Calling it twice, or for
// a command Before did not admit, does nothing.
func (h *Hook) After(_ context.Context, sessionID, commandID string, _ bool) {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sessions[sessionID]
	if s == nil {
		return
	}
	s.lastSeen = now
	if _, ok := s.inflight[commandID]; ok {
		delete(s.inflight, commandID)
		h.global--
	}
}

// sweep gives back slots held longer than InflightLease and forgets
// sessions idle for IdleForgetSeconds with nothing running, at most once per half
// of the shorter of the two so the cost stays amortised.
func (h *Hook) sweep(now time.Time) {
	if now.Sub(h.lastSweep) < min(h.idleForget, h.cfg.InflightLease)/2 {
		return
	}
	h.lastSweep = now
	for id, s := range h.sessions {
		for cid, since := range s.inflight {
			if now.Sub(since) >= h.cfg.InflightLease {
				delete(s.inflight, cid)
				h.global--
			}
		}
		if len(s.inflight) == 0 && now.Sub(s.lastSeen) >= h.idleForget {
			delete(h.sessions, id)
		}
	}
}

// Sessions is the number of sessions remembered (tests, diagnostics).
func (h *Hook) Sessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// InFlight is the number of admitted commands not yet ended.
func (h *Hook) InFlight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.global
}
