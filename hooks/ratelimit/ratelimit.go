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
	"slices"
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

	// QueueWaitSeconds is how long a command past a cap (a concurrency
	// cap, or the rate) waits for its turn before it is refused. 0: no
	// queue, a command past a cap is denied at once (rule and RetryAfter
	// as above). An agent sends its commands in parallel and expects
	// them to run, not a refusal it must retry, hence a queue by default.
	QueueWaitSeconds int64 `json:"queue_wait_seconds"`
	// MaxQueuedPerSession and MaxQueuedGlobal bound how many commands
	// wait at once, in a session and overall: each waiting command holds
	// a request open, so the queue is bounded in length as well as in
	// time. 0: no bound in that dimension (the wait still bounds it).
	MaxQueuedPerSession int `json:"max_queued_per_session"`
	MaxQueuedGlobal     int `json:"max_queued_global"`
}

// DefaultIdleForgetSeconds is what IdleForgetSeconds 0 means.
const DefaultIdleForgetSeconds = 600

// DefaultConfig is the section with nothing set, the only place its
// defaults are written: 10 commands/s with bursts of 20 per session, 4 at
// once per session, 16 overall, enabled; a command past a cap waits up to
// 60 s for its turn, behind at most 64 others of its session and 256
// overall.
func DefaultConfig() Config {
	return Config{Enabled: true, RatePerSecond: 10, Burst: 20, MaxConcurrentPerSession: 4,
		MaxConcurrentGlobal: 16, IdleForgetSeconds: DefaultIdleForgetSeconds,
		QueueWaitSeconds: 60, MaxQueuedPerSession: 64, MaxQueuedGlobal: 256}
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
		{Name: "queue_wait_seconds", Type: driverapi.ConfigUint, DefaultJSON: js(d.QueueWaitSeconds),
			Description: "how long a command past a cap (concurrency or rate) waits for its turn before it is refused (resource_exhausted); 0 means no queue: refused at once (hook_denied)"},
		{Name: "max_queued_per_session", Type: driverapi.ConfigUint, DefaultJSON: js(d.MaxQueuedPerSession),
			Description: "commands waiting at once in one session; one more is refused (resource_exhausted); 0 means no bound"},
		{Name: "max_queued_global", Type: driverapi.ConfigUint, DefaultJSON: js(d.MaxQueuedGlobal),
			Description: "commands waiting at once overall; one more is refused (resource_exhausted); 0 means no bound"},
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
	case c.QueueWaitSeconds < 0:
		return bad("queue_wait_seconds", "must be >= 0 (0 = no queue: refused at once)")
	case c.QueueWaitSeconds > maxQueueWaitSeconds:
		return bad("queue_wait_seconds", fmt.Sprintf("must be <= %d (one day)", maxQueueWaitSeconds))
	case c.MaxQueuedPerSession < 0:
		return bad("max_queued_per_session", "must be >= 0 (0 = no bound)")
	case c.MaxQueuedGlobal < 0:
		return bad("max_queued_global", "must be >= 0 (0 = no bound)")
	case c.InflightLease < 0:
		return bad("inflight_lease", "must not be negative")
	}
	return nil
}

// maxQueueWaitSeconds bounds queue_wait_seconds (one day): a command
// waits, a request stays open, no longer.
const maxQueueWaitSeconds = 24 * 3600

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
	// queue holds the commands waiting for a slot, in arrival order:
	// only its head may take a slot of the session, so a session's
	// commands run in the order they came.
	queue []*waiter
}

// waiter is one waiting command; not zero-sized, so that each has its own
// address (pointers to zero-sized values may compare equal).
type waiter struct{ _ byte }

// Hook is the rate limiter. Safe for concurrent use.
type Hook struct {
	cfg        Config
	idleForget time.Duration
	queueWait  time.Duration
	now        func() time.Time
	log        hclog.Logger

	mu        sync.Mutex
	sessions  map[string]*session
	global    int
	queued    int           // commands waiting, over every session
	wake      chan struct{} // closed (and replaced) when a waiter may now go
	lastSweep time.Time
}

var (
	_ driverapi.AfterHook   = (*Hook)(nil)
	_ driverapi.WaitingHook = (*Hook)(nil)
)

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
	h := &Hook{cfg: cfg, idleForget: time.Duration(cfg.IdleForgetSeconds) * time.Second,
		queueWait: time.Duration(cfg.QueueWaitSeconds) * time.Second,
		now:       time.Now, log: hclog.NewNullLogger(), sessions: map[string]*session{}, wake: make(chan struct{})}
	for _, o := range opts {
		o(h)
	}
	return h, nil
}

// Describe names the hook.
func (h *Hook) Describe(context.Context) (driverapi.HookInfo, error) {
	return driverapi.HookInfo{Name: HookName, Version: "1", Description: fmt.Sprintf(
		"%g commands/s (burst %d) per session, %d at once per session, %d overall; waits up to %s for a turn",
		h.cfg.RatePerSecond, h.cfg.Burst, h.cfg.MaxConcurrentPerSession, h.cfg.MaxConcurrentGlobal, h.queueWait)}, nil
}

// MaxWait is how long Before may wait for a command's turn (the queue),
// which the pipeline adds to the hook's time limit.
func (h *Hook) MaxWait() time.Duration { return h.queueWait }

// sessionLocked is the state of session id, created on first use.
func (h *Hook) sessionLocked(id string, now time.Time) *session {
	s := h.sessions[id]
	if s == nil {
		s = &session{inflight: map[string]time.Time{}}
		if h.cfg.RatePerSecond > 0 {
			s.limiter = rate.NewLimiter(rate.Limit(h.cfg.RatePerSecond), h.cfg.Burst)
		}
		h.sessions[id] = s
	}
	s.lastSeen = now
	return s
}

// capLocked names the concurrency cap s is at ("" when a command of s may
// take a slot now), with the reason of a denial.
func (h *Hook) capLocked(id string, s *session) (rule, why string) {
	if c := h.cfg.MaxConcurrentPerSession; c > 0 && len(s.inflight) >= c {
		return RuleSessionConcurrent, fmt.Sprintf("session %q already runs %d commands (limit %d)", id, len(s.inflight), c)
	}
	if c := h.cfg.MaxConcurrentGlobal; c > 0 && h.global >= c {
		return RuleGlobalConcurrent, fmt.Sprintf("%d commands already run overall (limit %d)", h.global, c)
	}
	return "", ""
}

func (h *Hook) admitLocked(s *session, commandID string, now time.Time) {
	if _, ok := s.inflight[commandID]; commandID != "" && !ok {
		s.inflight[commandID] = now
		h.global++
	}
}

// releaseLocked gives back commandID's slot, if it holds one, and wakes
// the waiters.
func (h *Hook) releaseLocked(s *session, commandID string) {
	if _, ok := s.inflight[commandID]; ok {
		delete(s.inflight, commandID)
		h.global--
		h.wakeLocked()
	}
}

// wakeLocked lets every waiter look again: a slot freed, or a queue's
// head left.
func (h *Hook) wakeLocked() {
	close(h.wake)
	h.wake = make(chan struct{})
}

// Before takes a token and a concurrency slot for the command. Past a cap
// it waits its turn (queue_wait_seconds) and is refused past the queue's
// bounds with a *driverapi.LimitError naming the bound (reason
// resource_exhausted); with no queue it is denied at once with the time
// to wait before retrying.
func (h *Hook) Before(ctx context.Context, req driverapi.HookRequest) (driverapi.Verdict, error) {
	if h.queueWait > 0 {
		return h.beforeQueued(ctx, req)
	}
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep(now)
	s := h.sessionLocked(req.SessionID, now)
	// Concurrency first: a command refused for lack of a slot must not use
	// up a token.
	if rule, why := h.capLocked(req.SessionID, s); rule != "" {
		return h.deny(req, rule, h.cfg.ConcurrencyRetryAfter, why), nil
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
	h.admitLocked(s, req.CommandID, now)
	return driverapi.Verdict{Action: driverapi.ActionAllow}, nil
}

// limitKey is the full configuration key of one of this section's keys.
func limitKey(key string) string { return "sandbox." + Section + "." + key }

// beforeQueued is Before with a queue: a command past a concurrency cap
// waits, in its session's order, until a slot frees, its context ends
// (the caller went away: its place is given up, nothing kept), or the
// wait is over. A command the rate admits only later sleeps until then,
// if that is within the wait. The wait is measured on the real clock.
func (h *Hook) beforeQueued(ctx context.Context, req driverapi.HookRequest) (driverapi.Verdict, error) {
	deadline := time.Now().Add(h.queueWait)
	now := h.now()
	h.mu.Lock()
	h.sweep(now)
	s := h.sessionLocked(req.SessionID, now)
	if rule, why := h.capLocked(req.SessionID, s); rule != "" || len(s.queue) > 0 {
		if c := h.cfg.MaxQueuedPerSession; c > 0 && len(s.queue) >= c {
			h.mu.Unlock()
			h.log.Info("command refused: queue full", "session_id", req.SessionID, "command_id", req.CommandID)
			return driverapi.Verdict{}, &driverapi.LimitError{Limit: limitKey("max_queued_per_session"), Value: int64(c),
				Reason: fmt.Sprintf("session %q already has %d commands waiting for a slot", req.SessionID, len(s.queue))}
		}
		if c := h.cfg.MaxQueuedGlobal; c > 0 && h.queued >= c {
			h.mu.Unlock()
			h.log.Info("command refused: queue full", "session_id", req.SessionID, "command_id", req.CommandID)
			return driverapi.Verdict{}, &driverapi.LimitError{Limit: limitKey("max_queued_global"), Value: int64(c),
				Reason: fmt.Sprintf("%d commands already wait for a slot overall", h.queued)}
		}
		w := &waiter{}
		s.queue = append(s.queue, w)
		h.queued++
		leave := func() {
			head := s.queue[0] == w
			s.queue = slices.DeleteFunc(s.queue, func(x *waiter) bool { return x == w })
			h.queued--
			if head {
				h.wakeLocked() // the next one may be able to go
			}
		}
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		for {
			if s.queue[0] == w {
				if rule, why = h.capLocked(req.SessionID, s); rule == "" {
					leave()
					break
				}
			}
			wake := h.wake
			h.mu.Unlock()
			select {
			case <-wake:
				h.mu.Lock()
			case <-ctx.Done():
				h.mu.Lock()
				leave()
				h.mu.Unlock()
				return driverapi.Verdict{}, fmt.Errorf("rate limit: gave up waiting for a slot: %w", ctx.Err())
			case <-timer.C:
				h.mu.Lock()
				if rule, why = h.capLocked(req.SessionID, s); rule == "" {
					why = "commands queued ahead of it in its session still wait"
				}
				leave()
				h.mu.Unlock()
				h.log.Info("command refused: waited too long", "session_id", req.SessionID, "command_id", req.CommandID, "rule", rule)
				return driverapi.Verdict{}, &driverapi.LimitError{Limit: limitKey("queue_wait_seconds"), Value: h.cfg.QueueWaitSeconds,
					Reason: fmt.Sprintf("no slot within the wait: %s", why)}
			}
		}
	}
	now = h.now()
	s.lastSeen = now
	h.admitLocked(s, req.CommandID, now)
	if s.limiter == nil {
		h.mu.Unlock()
		return driverapi.Verdict{Action: driverapi.ActionAllow}, nil
	}
	r := s.limiter.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if !r.OK() || d > time.Until(deadline) {
		if r.OK() {
			r.CancelAt(now)
		}
		h.releaseLocked(s, req.CommandID)
		h.mu.Unlock()
		return driverapi.Verdict{}, &driverapi.LimitError{Limit: limitKey("rate_per_second"), Value: int64(math.Ceil(h.cfg.RatePerSecond)),
			Reason: fmt.Sprintf("session %q exceeds %g commands/s (burst %d) for longer than the wait (queue_wait_seconds = %d)",
				req.SessionID, h.cfg.RatePerSecond, h.cfg.Burst, h.cfg.QueueWaitSeconds)}
	}
	h.mu.Unlock()
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			h.mu.Lock()
			r.Cancel()
			h.releaseLocked(s, req.CommandID)
			h.mu.Unlock()
			return driverapi.Verdict{}, fmt.Errorf("rate limit: gave up waiting for the rate: %w", ctx.Err())
		}
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
	h.releaseLocked(s, commandID)
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
				h.releaseLocked(s, cid)
			}
		}
		// A session with commands waiting is kept: they hold it.
		if len(s.inflight) == 0 && len(s.queue) == 0 && now.Sub(s.lastSeen) >= h.idleForget {
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

// Queued is the number of commands waiting for their turn.
func (h *Hook) Queued() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.queued
}

// InFlight is the number of admitted commands not yet ended.
func (h *Hook) InFlight() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.global
}
