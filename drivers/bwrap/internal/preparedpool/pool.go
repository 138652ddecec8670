// Package preparedpool is the bookkeeping of the Linux driver's prepared
// sandboxes: which sandboxes wait for a command of which key (one profile
// of one session), how many are being built, the per-key and total caps,
// the auto mode's demand (a key is prepared once it has been run twice
// within the idle time), expiry after the idle time, the keys whose
// hand-overs keep failing, forget_session, Close, and the sandboxes still
// being torn down that Close and forget_session wait for. Building,
// handing over and destroying a sandbox are the driver's: the pool calls
// what it is given.
//
// A sandbox is taken out of the pool before its hand-over, so two commands
// can never be handed the same one; keys never mix sessions.
package preparedpool

import (
	"slices"
	"sync"
	"time"
)

// Stats counts what the pool did (for tests, bench and doctor).
type Stats struct {
	Hits, Misses, Built, Failed, Expired, Stale, Waiting int
}

// Sizes are the pool's caps and idle time.
type Sizes struct {
	PerProfile int           // sandboxes per key, waiting or being built
	Max        int           // sandboxes in all, waiting or being built
	Idle       time.Duration // how long one waits before it is destroyed
}

// RefillWait bounds how long a refill waits for the command whose take
// started it to be answered: a long command's pool is refilled while it
// runs, for the commands that come meanwhile.
const RefillWait = 250 * time.Millisecond

// MaxRefused is how many hand-overs of a key may fail in a row before the
// key is no longer prepared (until it has been idle for prepared_idle_ms):
// a failure that recurs would otherwise make every command pay for a
// sandbox it cannot use, on top of its own.
const MaxRefused = 3

type waiting[S any] struct {
	s     S
	timer *time.Timer
}

// Pool holds the waiting sandboxes S of keys K. It is safe for concurrent
// use.
type Pool[K comparable, S comparable] struct {
	sessionOf func(K) string
	destroy   func(S)

	mu       sync.Mutex
	idle     map[K][]waiting[S]
	building map[K]int
	seen     map[K]time.Time // last Run per key (auto mode)
	// forgotten counts forget_session calls per session: a sandbox whose
	// build began before one is destroyed when it is ready.
	forgotten map[string]int
	// refused counts the hand-overs of a key that failed in a row: from
	// MaxRefused on, the key is not prepared until it has been idle.
	refused map[K]int
	// closed: the driver is closing (Close); nothing is prepared any more.
	closed bool
	total  int // waiting + being built
	stats  Stats
	// ending counts the sandboxes whose commands have been answered and
	// which are still being torn down (Ending); ended signals when it
	// drops to zero.
	ending int
	// endingFor counts them per session (Forget waits for its own).
	endingFor map[string]int
	ended     *sync.Cond
}

// New returns an empty pool; sessionOf gives a key's session and destroy
// ends a sandbox the pool drops (expired, forgotten, closed, or built for
// a session forgotten meanwhile).
func New[K comparable, S comparable](sessionOf func(K) string, destroy func(S)) *Pool[K, S] {
	return &Pool[K, S]{sessionOf: sessionOf, destroy: destroy}
}

// Ending counts a sandbox of session whose command has been answered and
// which is being torn down; call done once it is gone. Close and Forget
// wait for it, so nothing of a command outlives them.
func (p *Pool[K, S]) Ending(session string) (done func()) {
	p.mu.Lock()
	p.addEnding(session, 1)
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		p.addEnding(session, -1)
		p.mu.Unlock()
		p.signalEnded()
	}
}

// addEnding adds n to the sandboxes of session being torn down (p.mu held).
func (p *Pool[K, S]) addEnding(session string, n int) {
	if p.endingFor == nil {
		p.endingFor = map[string]int{}
	}
	p.ending += n
	if p.endingFor[session] += n; p.endingFor[session] == 0 {
		delete(p.endingFor, session)
	}
}

// signalEnded wakes WaitEnded and WaitIdle.
func (p *Pool[K, S]) signalEnded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended != nil {
		p.ended.Broadcast()
	}
}

// WaitEnded waits until no answered sandbox is still being torn down.
func (p *Pool[K, S]) WaitEnded() { p.wait(func() bool { return p.ending == 0 }) }

// WaitIdle waits until, besides that, no sandbox is being built either.
func (p *Pool[K, S]) WaitIdle() {
	p.wait(func() bool { return p.ending == 0 && len(p.building) == 0 })
}

// wait waits until done holds (it is called with p.mu held).
func (p *Pool[K, S]) wait(done func() bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended == nil {
		p.ended = sync.NewCond(&p.mu)
	}
	for !done() {
		p.ended.Wait()
	}
}

// Stats reports the pool's counters.
func (p *Pool[K, S]) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	for _, l := range p.idle {
		s.Waiting += len(l)
	}
	return s
}

// CountStale counts a taken sandbox that no longer matched the host.
func (p *Pool[K, S]) CountStale() {
	p.mu.Lock()
	p.stats.Stale++
	p.mu.Unlock()
}

// Take removes a waiting sandbox for key from the pool; ok is false when
// none waits.
func (p *Pool[K, S]) Take(key K) (s S, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.idle[key]
	if len(l) == 0 {
		p.stats.Misses++
		return s, false
	}
	w := l[0]
	p.idle[key] = l[1:]
	if len(p.idle[key]) == 0 {
		delete(p.idle, key)
	}
	p.total--
	p.stats.Hits++
	w.timer.Stop()
	return w.s, true
}

// NoteHandover counts a hand-over of key that failed, or clears the count.
func (p *Pool[K, S]) NoteHandover(key K, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refused == nil {
		p.refused = map[K]int{}
	}
	if ok {
		delete(p.refused, key)
		return
	}
	p.refused[key]++
}

// Refusing says whether key is not prepared for now (NoteHandover).
func (p *Pool[K, S]) Refusing(key K) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused[key] >= MaxRefused
}

// Refill starts building sandboxes for key (of session) in the background
// with build, up to the per-profile and total caps. With auto a key is
// only prepared once it has been run twice within the idle time: a driver
// that runs one command (the one-shot CLI) never builds a sandbox nobody
// takes. failed is told why a build failed.
//
// The builds start once after is closed (nil: at once).
func (p *Pool[K, S]) Refill(key K, session string, sz Sizes, auto bool, after <-chan struct{}, build func() (S, error), failed func(error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if p.seen == nil {
		p.seen = map[K]time.Time{}
		p.idle = map[K][]waiting[S]{}
		p.building = map[K]int{}
		p.forgotten = map[string]int{}
		p.refused = map[K]int{}
	}
	last, seen := p.seen[key]
	idle := sz.Idle
	p.seen[key] = now
	for k, t := range p.seen {
		// Forget keys not run for a while: the map stays bounded.
		if now.Sub(t) > idle && len(p.idle[k]) == 0 && p.building[k] == 0 {
			delete(p.seen, k)
			delete(p.refused, k)
		}
	}
	if p.refused[key] >= MaxRefused || p.closed {
		return
	}
	if auto && (!seen || now.Sub(last) > idle) {
		return
	}
	want := sz.PerProfile - len(p.idle[key]) - p.building[key]
	for ; want > 0 && p.total < sz.Max; want-- {
		p.building[key]++
		p.total++
		gen := p.forgotten[session]
		go func() {
			if after != nil {
				// Bounded: a hand-over that hangs must not hold the pool.
				t := time.NewTimer(RefillWait)
				select {
				case <-after:
				case <-t.C:
				}
				t.Stop()
			}
			// A pool closed, or a session forgotten, while the build
			// waited builds nothing: it would only be destroyed.
			p.mu.Lock()
			skip := p.closed || p.forgotten[session] != gen
			p.mu.Unlock()
			var s S
			var err error
			if !skip {
				s, err = build()
				if err != nil {
					// Told while the build still counts as in flight, so
					// that WaitIdle returns only after it was told.
					failed(err)
				}
			}
			p.mu.Lock()
			p.building[key]--
			if p.building[key] == 0 {
				delete(p.building, key)
			}
			stale := p.forgotten[session] != gen || p.closed
			if !p.buildingFor(session) {
				// Nothing in flight can hold an older count: the map
				// stays as small as the builds.
				delete(p.forgotten, session)
			}
			// Close waits for builds in flight (and for what they end).
			defer p.signalEnded()
			if skip {
				p.total--
				p.mu.Unlock()
				return
			}
			if err == nil && stale {
				p.total--
				p.addEnding(session, 1)
				p.mu.Unlock()
				p.destroy(s)
				p.mu.Lock()
				p.addEnding(session, -1)
				p.mu.Unlock()
				return
			}
			if err != nil {
				p.total--
				p.stats.Failed++
				p.mu.Unlock()
				return
			}
			p.stats.Built++
			p.idle[key] = append(p.idle[key], waiting[S]{s: s, timer: time.AfterFunc(idle, func() { p.expire(key, s) })})
			p.mu.Unlock()
		}()
	}
}

// buildingFor says whether a sandbox of session is being built (p.mu held).
func (p *Pool[K, S]) buildingFor(session string) bool {
	for k := range p.building {
		if p.sessionOf(k) == session {
			return true
		}
	}
	return false
}

// expire destroys s if it is still waiting.
func (p *Pool[K, S]) expire(key K, s S) {
	p.mu.Lock()
	l := p.idle[key]
	i := slices.IndexFunc(l, func(w waiting[S]) bool { return w.s == s })
	if i < 0 {
		p.mu.Unlock()
		return
	}
	p.idle[key] = append(l[:i:i], l[i+1:]...)
	if len(p.idle[key]) == 0 {
		delete(p.idle, key)
	}
	p.total--
	p.stats.Expired++
	p.mu.Unlock()
	p.destroy(s)
}

// Close destroys every waiting sandbox, and any still being built as it
// is ready, and waits for those and for the answered ones being torn down.
// Nothing is prepared after it.
func (p *Pool[K, S]) Close() {
	p.mu.Lock()
	p.closed = true
	var gone []waiting[S]
	for k, l := range p.idle {
		gone = append(gone, l...)
		p.total -= len(l)
		delete(p.idle, k)
	}
	p.mu.Unlock()
	for _, w := range gone {
		w.timer.Stop()
		p.destroy(w.s)
	}
	// Builds in flight destroy what they build (p.closed), and answered
	// sandboxes finish ending.
	p.WaitIdle()
}

// Forget destroys the waiting sandboxes of session and waits for those of
// its sandboxes that are being torn down or built.
func (p *Pool[K, S]) Forget(session string) {
	p.mu.Lock()
	if p.forgotten != nil && p.buildingFor(session) {
		p.forgotten[session]++
	}
	var gone []waiting[S]
	for k, l := range p.idle {
		if p.sessionOf(k) == session {
			gone = append(gone, l...)
			p.total -= len(l)
			delete(p.idle, k)
			delete(p.seen, k)
		}
	}
	p.mu.Unlock()
	for _, w := range gone {
		w.timer.Stop()
		p.destroy(w.s)
	}
	// The session's commands that were answered may still hold its
	// network namespace and their cgroups for a moment, and a sandbox of
	// its still being built destroys itself when it is ready (forgotten).
	p.wait(func() bool { return p.endingFor[session] == 0 && !p.buildingFor(session) })
}

// Waiting are the sandboxes waiting now (tests look at their processes).
func (p *Pool[K, S]) Waiting() []S {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []S
	for _, l := range p.idle {
		for _, w := range l {
			out = append(out, w.s)
		}
	}
	return out
}

// Counts are the sandboxes waiting or being built, the keys with one
// waiting, and the keys with one being built.
func (p *Pool[K, S]) Counts() (total, waitingKeys, buildingKeys int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total, len(p.idle), len(p.building)
}
