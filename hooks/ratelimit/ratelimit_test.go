package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func before(t *testing.T, h *Hook, session, cmd string) driverapi.Verdict {
	t.Helper()
	v, err := h.Before(context.Background(), driverapi.HookRequest{SessionID: session, CommandID: cmd, Program: "true"})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestTokenBucket(t *testing.T) {
	c := newClock()
	h, err := New(Config{RatePerSecond: 2, Burst: 3}, WithClock(c.now))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if v := before(t, h, "s", fmt.Sprint(i)); v.Action != driverapi.ActionAllow {
			t.Fatalf("burst command %d: %+v", i, v)
		}
	}
	v := before(t, h, "s", "4")
	if v.Action != driverapi.ActionDeny || v.Rule != RuleRate {
		t.Fatalf("past the burst: %+v", v)
	}
	// 2/s: the next token is due in 500ms.
	if v.RetryAfter != 500*time.Millisecond || !strings.Contains(v.Reason, "retry in 500ms") {
		t.Fatalf("retry after: %v %q", v.RetryAfter, v.Reason)
	}
	// Another session has its own bucket.
	if v := before(t, h, "other", "o1"); v.Action != driverapi.ActionAllow {
		t.Fatalf("other session: %+v", v)
	}
	// A denied attempt did not use up the token: after the advertised wait,
	// exactly one command goes.
	c.add(v.RetryAfter)
	if v := before(t, h, "s", "5"); v.Action != driverapi.ActionAllow {
		t.Fatalf("after waiting: %+v", v)
	}
	if v := before(t, h, "s", "6"); v.Action != driverapi.ActionDeny {
		t.Fatalf("second after waiting: %+v", v)
	}
}

func TestConcurrencyCaps(t *testing.T) {
	c := newClock()
	h, _ := New(Config{MaxConcurrentPerSession: 2, MaxConcurrentGlobal: 3, ConcurrencyRetryAfter: 250 * time.Millisecond}, WithClock(c.now))
	ctx := context.Background()
	if before(t, h, "a", "a1").Action != driverapi.ActionAllow || before(t, h, "a", "a2").Action != driverapi.ActionAllow {
		t.Fatal("first two in a")
	}
	v := before(t, h, "a", "a3")
	if v.Action != driverapi.ActionDeny || v.Rule != RuleSessionConcurrent || v.RetryAfter != 250*time.Millisecond {
		t.Fatalf("third in a: %+v", v)
	}
	if before(t, h, "b", "b1").Action != driverapi.ActionAllow {
		t.Fatal("b1")
	}
	v = before(t, h, "c", "c1")
	if v.Action != driverapi.ActionDeny || v.Rule != RuleGlobalConcurrent {
		t.Fatalf("global cap: %+v", v)
	}
	// After releases; a second After for the same command changes nothing.
	h.After(ctx, "a", "a1", true)
	h.After(ctx, "a", "a1", true)
	h.After(ctx, "a", "unknown", false)
	if h.InFlight() != 2 {
		t.Fatalf("in flight %d", h.InFlight())
	}
	if v := before(t, h, "c", "c1"); v.Action != driverapi.ActionAllow {
		t.Fatalf("after a release: %+v", v)
	}
	if v := before(t, h, "a", "a4"); v.Action != driverapi.ActionDeny {
		t.Fatalf("global cap again: %+v", v)
	}
}

func TestIdleSessionsForgotten(t *testing.T) {
	c := newClock()
	h, _ := New(Config{RatePerSecond: 1, Burst: 1, MaxConcurrentGlobal: 2, IdleForgetSeconds: 60, InflightLease: time.Hour}, WithClock(c.now))
	for i := 0; i < 1000; i++ {
		s := fmt.Sprint("s", i)
		before(t, h, s, "x")
		h.After(context.Background(), s, "x", true)
	}
	if h.Sessions() != 1000 {
		t.Fatalf("sessions %d", h.Sessions())
	}
	// A session whose After was lost keeps its slot, and is remembered,
	// until the lease ends.
	before(t, h, "lost", "l1")
	if h.InFlight() != 1 {
		t.Fatalf("in flight %d", h.InFlight())
	}
	c.add(2 * time.Minute)
	before(t, h, "fresh", "f1")
	if n := h.Sessions(); n != 2 {
		t.Fatalf("after the idle period %d sessions remain, want the one running and the fresh one", n)
	}
	if h.InFlight() != 2 {
		t.Fatalf("a running command's slot was given back early: in flight %d", h.InFlight())
	}
	c.add(time.Hour)
	before(t, h, "later", "x1")
	// An hour on, both leases (l1 and f1, neither ever ended) are over:
	// their slots are given back and their sessions forgotten; only the
	// new session and its command remain.
	if n, f := h.Sessions(), h.InFlight(); n != 1 || f != 1 {
		t.Fatalf("after the leases: %d sessions, %d in flight; want 1 and 1", n, f)
	}
	// Forgetting is not a way around the bucket of a live session.
	if v := before(t, h, "later", "x2"); v.Action != driverapi.ActionDeny {
		t.Fatalf("second command of a session within its bucket's period: %+v", v)
	}
}

// TestLongCommandKeepsItsSlot: a command that runs longer than IdleForget
// (but within the lease) keeps counting against the caps; its After frees
// the slot (the control).
func TestLongCommandKeepsItsSlot(t *testing.T) {
	c := newClock()
	h, _ := New(Config{MaxConcurrentPerSession: 1, MaxConcurrentGlobal: 1, IdleForgetSeconds: 60}, WithClock(c.now))
	if v := before(t, h, "s", "c1"); v.Action != driverapi.ActionAllow {
		t.Fatalf("c1: %+v", v)
	}
	if v := before(t, h, "s", "c2"); v.Action != driverapi.ActionDeny || v.Rule != RuleSessionConcurrent {
		t.Fatalf("c2 while c1 runs: %+v", v)
	}
	c.add(2 * time.Minute) // c1 still running, the session idle past IdleForget
	if v := before(t, h, "s", "c3"); v.Action != driverapi.ActionDeny {
		t.Fatalf("c3 while c1 still runs, after the idle period: %+v", v)
	}
	if v := before(t, h, "other", "o1"); v.Action != driverapi.ActionDeny || v.Rule != RuleGlobalConcurrent {
		t.Fatalf("another session while c1 holds the only global slot: %+v", v)
	}
	h.After(context.Background(), "s", "c1", true)
	if v := before(t, h, "s", "c4"); v.Action != driverapi.ActionAllow {
		t.Fatalf("c4 after c1 ended: %+v", v)
	}
}

// TestLostAfterGivenBackAfterLease: a slot whose After never comes is given
// back once the lease is over, so a lost After cannot block a cap for ever.
func TestLostAfterGivenBackAfterLease(t *testing.T) {
	c := newClock()
	h, _ := New(Config{MaxConcurrentGlobal: 1, IdleForgetSeconds: 60, InflightLease: 10 * time.Minute}, WithClock(c.now))
	before(t, h, "lost", "l1")
	c.add(9 * time.Minute)
	if v := before(t, h, "s", "a"); v.Action != driverapi.ActionDeny {
		t.Fatalf("within the lease: %+v", v)
	}
	c.add(2 * time.Minute)
	if v := before(t, h, "s", "b"); v.Action != driverapi.ActionAllow {
		t.Fatalf("after the lease: %+v", v)
	}
	if n := h.Sessions(); n != 1 {
		t.Fatalf("the lost session is still remembered: %d sessions", n)
	}
}

func TestNoLimitsAllowsAll(t *testing.T) {
	h, _ := New(Config{})
	for i := 0; i < 100; i++ {
		if v := before(t, h, "s", fmt.Sprint(i)); v.Action != driverapi.ActionAllow {
			t.Fatalf("%d: %+v", i, v)
		}
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []Config{{RatePerSecond: math.NaN()}, {Burst: -1}, {IdleForgetSeconds: -1}, {RatePerSecond: -1}, {MaxConcurrentGlobal: -1}} {
		var ce *driverapi.ConfigError
		if _, err := New(cfg); !errors.As(err, &ce) || ce.Section != Section || ce.Key == "" {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	h, _ := New(Config{MaxConcurrentPerSession: 4, MaxConcurrentGlobal: 1000})
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				id := fmt.Sprint(g, "-", i)
				v, _ := h.Before(context.Background(), driverapi.HookRequest{SessionID: "s", CommandID: id})
				if v.Action == driverapi.ActionAllow {
					mu.Lock()
					allowed++
					mu.Unlock()
					h.After(context.Background(), "s", id, true)
				}
			}
		}(g)
	}
	wg.Wait()
	if allowed == 0 || h.InFlight() != 0 {
		t.Fatalf("allowed %d, in flight %d", allowed, h.InFlight())
	}
}

// TestSchemaDefaultsAreDefaultConfig: the loader fills the section from
// Schema's defaults, the hook from DefaultConfig; decoding the one gives
// the other, so the two cannot drift.
func TestSchemaDefaultsAreDefaultConfig(t *testing.T) {
	obj := map[string]json.RawMessage{}
	sc := Schema()
	if sc.Section != Section {
		t.Fatalf("section %q", sc.Section)
	}
	for _, f := range sc.Fields {
		if f.DefaultJSON == "" || f.Description == "" {
			t.Errorf("%s: no default or description", f.Name)
		}
		obj[f.Name] = json.RawMessage(f.DefaultJSON)
	}
	b, _ := json.Marshal(obj)
	got, err := ParseConfig(b)
	if err != nil || got != DefaultConfig() {
		t.Fatalf("schema defaults %s decode to %+v (%v), want %+v", b, got, err, DefaultConfig())
	}
	// Every key of Config has a schema field and the reverse.
	var keys map[string]any
	full, _ := json.Marshal(DefaultConfig())
	_ = json.Unmarshal(full, &keys)
	if len(keys) != len(sc.Fields) {
		t.Fatalf("Config keys %v, schema fields %d", keys, len(sc.Fields))
	}
	for _, f := range sc.Fields {
		if _, ok := keys[f.Name]; !ok {
			t.Errorf("schema field %s is not a key of Config", f.Name)
		}
	}
	if d, err := ParseConfig(nil); err != nil || d != DefaultConfig() {
		t.Fatalf("empty section: %+v %v", d, err)
	}
}

func TestParseConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"enabled":false,"rate_per_second":2,"burst":1,"idle_forget_seconds":30,"max_concurrent_global":0}`))
	want := DefaultConfig()
	want.Enabled, want.RatePerSecond, want.Burst, want.IdleForgetSeconds, want.MaxConcurrentGlobal = false, 2, 1, 30, 0
	if err != nil || cfg != want {
		t.Fatalf("%+v %v", cfg, err)
	}
	for in, key := range map[string]string{
		`{"per_sesion":2}`:                  "per_sesion",
		`{"idle_forget_seconds":-1}`:        "idle_forget_seconds",
		`{"burst":"x"}`:                     "burst",
		`{"rate_per_second":-0.5}`:          "rate_per_second",
		`{"max_concurrent_per_session":-1}`: "max_concurrent_per_session",
	} {
		var ce *driverapi.ConfigError
		if _, err := ParseConfig([]byte(in)); !errors.As(err, &ce) || ce.Key != key || ce.Section != Section {
			t.Errorf("%s: %v, want a ConfigError on %s", in, err, key)
		}
	}
	if _, err := ParseConfig([]byte(`{} {}`)); err == nil {
		t.Error("trailing data accepted")
	}
}

// TestZeroMeansNoLimit: 0 for a cap is no cap (a session can run more at
// once than any default would allow).
func TestZeroMeansNoLimit(t *testing.T) {
	h, err := New(Config{RatePerSecond: 0, MaxConcurrentPerSession: 0, MaxConcurrentGlobal: 0})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if v := before(t, h, "s", fmt.Sprint(i)); v.Action != driverapi.ActionAllow {
			t.Fatalf("%d: %+v", i, v)
		}
	}
	if h.InFlight() != 100 {
		t.Fatalf("in flight %d", h.InFlight())
	}
	// The control: a cap of 1 refuses the second.
	h1, _ := New(Config{MaxConcurrentPerSession: 1})
	before(t, h1, "s", "a")
	if v := before(t, h1, "s", "b"); v.Action != driverapi.ActionDeny {
		t.Fatalf("cap 1: %+v", v)
	}
}

// beforeAsync runs Before in a goroutine; the channel gets its outcome.
type outcome struct {
	v   driverapi.Verdict
	err error
}

func beforeAsync(ctx context.Context, h *Hook, session, cmd string) chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		v, err := h.Before(ctx, driverapi.HookRequest{SessionID: session, CommandID: cmd, Program: "true"})
		ch <- outcome{v, err}
	}()
	return ch
}

func waitQueued(t *testing.T, h *Hook, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.Queued() != n {
		if time.Now().After(deadline) {
			t.Fatalf("queued %d, want %d", h.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func limitOf(t *testing.T, err error) *driverapi.LimitError {
	t.Helper()
	var le *driverapi.LimitError
	if !errors.As(err, &le) {
		t.Fatalf("want a *driverapi.LimitError, got %v", err)
	}
	return le
}

// TestQueueWaitsForSlot: past the session's cap a command waits instead of
// being denied, and the waiting ones go in the order they came as slots
// free.
func TestQueueWaitsForSlot(t *testing.T) {
	h, _ := New(Config{MaxConcurrentPerSession: 1, QueueWaitSeconds: 600})
	ctx := context.Background()
	if v := before(t, h, "s", "c1"); v.Action != driverapi.ActionAllow {
		t.Fatalf("c1: %+v", v)
	}
	c2 := beforeAsync(ctx, h, "s", "c2")
	waitQueued(t, h, 1)
	c3 := beforeAsync(ctx, h, "s", "c3")
	waitQueued(t, h, 2)
	select {
	case o := <-c2:
		t.Fatalf("c2 answered while c1 holds the only slot: %+v %v", o.v, o.err)
	default:
	}
	h.After(ctx, "s", "c1", true)
	o := <-c2
	if o.err != nil || o.v.Action != driverapi.ActionAllow {
		t.Fatalf("c2 after c1 ended: %+v %v", o.v, o.err)
	}
	waitQueued(t, h, 1) // c3 still waits: c2 holds the slot
	h.After(ctx, "s", "c2", true)
	if o := <-c3; o.err != nil || o.v.Action != driverapi.ActionAllow {
		t.Fatalf("c3 after c2 ended: %+v %v", o.v, o.err)
	}
	if h.InFlight() != 1 || h.Queued() != 0 {
		t.Fatalf("in flight %d queued %d", h.InFlight(), h.Queued())
	}
}

// TestQueueBounds: one more than max_queued_per_session is refused at once
// with a LimitError naming the key; max_queued_global likewise across
// sessions; a session with room still queues (the control).
func TestQueueBounds(t *testing.T) {
	h, _ := New(Config{MaxConcurrentGlobal: 1, QueueWaitSeconds: 600, MaxQueuedPerSession: 1, MaxQueuedGlobal: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before(t, h, "a", "a1")
	beforeAsync(ctx, h, "a", "a2")
	waitQueued(t, h, 1)
	_, err := h.Before(ctx, driverapi.HookRequest{SessionID: "a", CommandID: "a3"})
	if le := limitOf(t, err); le.Limit != "sandbox.rate_limit.max_queued_per_session" || le.Value != 1 {
		t.Fatalf("a3: %+v", le)
	}
	beforeAsync(ctx, h, "b", "b1")
	waitQueued(t, h, 2)
	_, err = h.Before(ctx, driverapi.HookRequest{SessionID: "c", CommandID: "c1"})
	if le := limitOf(t, err); le.Limit != "sandbox.rate_limit.max_queued_global" || le.Value != 2 {
		t.Fatalf("c1: %+v", le)
	}
}

// TestQueueCancelFreesPlace: a waiting command whose caller goes away
// gives up its place and takes no slot; the one behind it moves up.
func TestQueueCancelFreesPlace(t *testing.T) {
	h, _ := New(Config{MaxConcurrentPerSession: 1, QueueWaitSeconds: 600, MaxQueuedPerSession: 1})
	ctx := context.Background()
	before(t, h, "s", "c1")
	cctx, cancel := context.WithCancel(ctx)
	c2 := beforeAsync(cctx, h, "s", "c2")
	waitQueued(t, h, 1)
	cancel()
	if o := <-c2; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled c2: %+v %v", o.v, o.err)
	}
	if h.Queued() != 0 || h.InFlight() != 1 {
		t.Fatalf("after the cancel: queued %d in flight %d", h.Queued(), h.InFlight())
	}
	// Its place is free: c3 may queue (the bound is 1), and runs when c1 ends.
	c3 := beforeAsync(ctx, h, "s", "c3")
	waitQueued(t, h, 1)
	h.After(ctx, "s", "c1", true)
	if o := <-c3; o.err != nil || o.v.Action != driverapi.ActionAllow {
		t.Fatalf("c3: %+v %v", o.v, o.err)
	}
	// The cancelled command never held a slot: only c3 runs.
	if h.InFlight() != 1 {
		t.Fatalf("in flight %d, want 1 (c3)", h.InFlight())
	}
	h.After(ctx, "s", "c2", false) // After for a command never admitted does nothing
	if h.InFlight() != 1 {
		t.Fatalf("in flight %d after c2's stray After", h.InFlight())
	}
}

// TestQueueWaitOver: a command still without a slot when the wait is over
// is refused naming queue_wait_seconds, and leaves the queue.
func TestQueueWaitOver(t *testing.T) {
	h, _ := New(Config{MaxConcurrentPerSession: 1, QueueWaitSeconds: 1})
	before(t, h, "s", "c1")
	_, err := h.Before(context.Background(), driverapi.HookRequest{SessionID: "s", CommandID: "c2"})
	le := limitOf(t, err)
	if le.Limit != "sandbox.rate_limit.queue_wait_seconds" || le.Value != 1 || !strings.Contains(le.Reason, "limit 1") {
		t.Fatalf("c2: %+v", le)
	}
	if h.Queued() != 0 || h.InFlight() != 1 {
		t.Fatalf("queued %d in flight %d", h.Queued(), h.InFlight())
	}
	if h.MaxWait() != time.Second {
		t.Fatalf("MaxWait %v", h.MaxWait())
	}
}

// TestQueueWaitsForRate: past the burst, a command the rate admits within
// the wait sleeps until then and runs; one it admits only after the wait
// is refused naming rate_per_second, without using up a token.
func TestQueueWaitsForRate(t *testing.T) {
	h, _ := New(Config{RatePerSecond: 50, Burst: 1, QueueWaitSeconds: 1})
	for i := 0; i < 3; i++ {
		if v := before(t, h, "s", fmt.Sprint(i)); v.Action != driverapi.ActionAllow {
			t.Fatalf("%d: %+v", i, v)
		}
	}
	slow, _ := New(Config{RatePerSecond: 0.01, Burst: 1, QueueWaitSeconds: 1})
	before(t, slow, "s", "1")
	_, err := slow.Before(context.Background(), driverapi.HookRequest{SessionID: "s", CommandID: "2"})
	if le := limitOf(t, err); le.Limit != "sandbox.rate_limit.rate_per_second" {
		t.Fatalf("2: %+v", le)
	}
	if slow.InFlight() != 1 {
		t.Fatalf("in flight %d: the refused command kept a slot", slow.InFlight())
	}
}

// TestDefaultConfigQueues: the defaults queue (an agent's parallel
// commands wait rather than fail).
func TestDefaultConfigQueues(t *testing.T) {
	d := DefaultConfig()
	if d.QueueWaitSeconds <= 0 || d.MaxQueuedPerSession < 32 || d.MaxQueuedGlobal < d.MaxQueuedPerSession {
		t.Fatalf("defaults do not queue: %+v", d)
	}
}
