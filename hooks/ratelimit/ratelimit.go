// Package ratelimit is a before-hook that limits how fast and how many
// commands run at once: a token bucket per session (golang.org/x/time/rate)
// and caps on concurrent commands per session and overall. A slot taken by
// Before is given back by After. A denial carries RetryAfter and says so in
// its reason. Sessions idle for IdleForget with nothing running are
// forgotten, so memory stays bounded by the number of recently active
// sessions; a slot whose After never comes is given back after
// InflightLease.
package ratelimit

import (
	"context"
	"fmt"
	"math"
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

// Config is the [sandbox.rate_limit] section. A zero or negative limit
// means "no limit" for that dimension.
type Config struct {
	// RatePerSecond is the sustained number of commands a session may
	// start per second.
	RatePerSecond float64 `json:"rate_per_second" koanf:"rate_per_second" toml:"rate_per_second"`
	// Burst is how many commands a session may start at once; 0 means
	// max(1, ceil(RatePerSecond)).
	Burst int `json:"burst" koanf:"burst" toml:"burst"`
	// MaxConcurrentPerSession caps commands running at once in a session.
	MaxConcurrentPerSession int `json:"max_concurrent_per_session" koanf:"max_concurrent_per_session" toml:"max_concurrent_per_session"`
	// MaxConcurrentGlobal caps commands running at once overall.
	MaxConcurrentGlobal int `json:"max_concurrent_global" koanf:"max_concurrent_global" toml:"max_concurrent_global"`
	// IdleForget is how long a session without commands is remembered;
	// 0 means 10 minutes. A session with a command still running is never
	// forgotten (its slot must keep counting against the caps).
	IdleForget time.Duration `json:"-"`
	// InflightLease is how long a command holds its concurrency slot
	// without After: a lost After (a hook plugin restarted, a caller that
	// crashed) must not hold a slot for ever, and a command running
	// longer than this loses its place in the count. 0 means 24 hours.
	InflightLease time.Duration `json:"-"`
	// ConcurrencyRetryAfter is the RetryAfter given when a concurrency cap
	// is reached (when a slot frees is not knowable); 0 means 1s.
	ConcurrencyRetryAfter time.Duration `json:"-"`
}

// DefaultConfig is a generous default: 10 commands/s with bursts of 20,
// 8 at once per session, 64 overall.
func DefaultConfig() Config {
	return Config{RatePerSecond: 10, Burst: 20, MaxConcurrentPerSession: 8, MaxConcurrentGlobal: 64, IdleForget: 10 * time.Minute}
}

// ConfigError is a configuration value that cannot be used.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return fmt.Sprintf("rate limit: %s: %s", e.Field, e.Reason) }

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
	cfg Config
	now func() time.Time
	log hclog.Logger

	mu        sync.Mutex
	sessions  map[string]*session
	global    int
	lastSweep time.Time
}

var _ driverapi.AfterHook = (*Hook)(nil)

// New validates cfg and builds the hook.
func New(cfg Config, opts ...Option) (*Hook, error) {
	switch {
	case math.IsNaN(cfg.RatePerSecond) || math.IsInf(cfg.RatePerSecond, 0):
		return nil, &ConfigError{Field: "rate_per_second", Reason: "must be a finite number"}
	case cfg.Burst < 0:
		return nil, &ConfigError{Field: "burst", Reason: "must not be negative"}
	case cfg.IdleForget < 0:
		return nil, &ConfigError{Field: "idle_forget", Reason: "must not be negative"}
	case cfg.InflightLease < 0:
		return nil, &ConfigError{Field: "inflight_lease", Reason: "must not be negative"}
	}
	if cfg.IdleForget == 0 {
		cfg.IdleForget = 10 * time.Minute
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
	h := &Hook{cfg: cfg, now: time.Now, log: hclog.NewNullLogger(), sessions: map[string]*session{}}
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
// sessions idle for IdleForget with nothing running, at most once per half
// of the shorter of the two so the cost stays amortised.
func (h *Hook) sweep(now time.Time) {
	if now.Sub(h.lastSweep) < min(h.cfg.IdleForget, h.cfg.InflightLease)/2 {
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
		if len(s.inflight) == 0 && now.Sub(s.lastSeen) >= h.cfg.IdleForget {
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
