// Package sessionpool holds one resource per session for the Linux
// driver: a session's network namespace under network none, which the
// session's commands share. At most a fixed number are held; one is
// released once idle (no command using it) for the idle time, evicted
// when the cap is reached and it has been idle the longest, or released
// when its session is forgotten (at once, or when its last command ends).
//
// Sessions are filed under a hash of their id (Key): the id is chosen by
// the host's caller and never becomes a path or a name anywhere.
package sessionpool

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"
)

// Pool holds the resources of the sessions. It is safe for concurrent use.
type Pool[T any] struct {
	max   int
	make  func() (T, error)
	close func(T)

	mu      sync.Mutex
	idle    time.Duration
	entries map[string]*entry[T]
}

type entry[T any] struct {
	res   T
	users int       // commands using it
	last  time.Time // when the last command ended (users == 0)
	timer *time.Timer
	gone  bool // removed from the map: closed when the last user ends
}

// New returns a pool of at most max resources, each made by make when its
// session first needs one and given to close when released.
func New[T any](max int, idle time.Duration, make func() (T, error), close func(T)) *Pool[T] {
	return &Pool[T]{max: max, idle: idle, make: make, close: close}
}

// FullError: every resource held is in use (by a running command, or by
// a session sandbox the driver keeps for its session until it has been
// idle for session_idle_ms), so a command of one more session cannot get
// one.
type FullError struct{ Max int }

func (e *FullError) Error() string {
	return fmt.Sprintf("%d sessions hold a network namespace already, each with a command running or its session sandbox kept (until idle for sandbox.linux.session_idle_ms)", e.Max)
}

// Key is what a session is filed under: an opaque hash of its id.
func Key(sessionID string) string {
	h := sha256.Sum256([]byte(sessionID))
	return hex.EncodeToString(h[:])
}

// Acquire returns the resource of sessionID, made if needed, and a
// release to call once the command using it has ended (a second call is a
// no-op).
func (p *Pool[T]) Acquire(sessionID string) (T, func(), error) {
	key := Key(sessionID)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries == nil {
		p.entries = map[string]*entry[T]{}
	}
	e := p.entries[key]
	if e == nil {
		if len(p.entries) >= p.max && !p.evictLocked() {
			var zero T
			return zero, nil, &FullError{p.max}
		}
		// Made under the lock: two first commands of a session must get
		// the same resource, and making one takes milliseconds.
		res, err := p.make()
		if err != nil {
			var zero T
			return zero, nil, err
		}
		e = &entry[T]{res: res}
		p.entries[key] = e
	}
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.users++
	var once sync.Once
	return e.res, func() { once.Do(func() { p.release(key, e) }) }, nil
}

// Adopt makes res, made without a session, the resource of sessionID,
// in use by one command until release, unless the session has one
// already (ok false: res stays the caller's). A full pool gives a
// FullError, as Acquire does.
func (p *Pool[T]) Adopt(sessionID string, res T) (release func(), ok bool, err error) {
	key := Key(sessionID)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries == nil {
		p.entries = map[string]*entry[T]{}
	}
	if p.entries[key] != nil {
		return nil, false, nil
	}
	if len(p.entries) >= p.max && !p.evictLocked() {
		return nil, false, &FullError{p.max}
	}
	e := &entry[T]{res: res, users: 1}
	p.entries[key] = e
	var once sync.Once
	return func() { once.Do(func() { p.release(key, e) }) }, true, nil
}

func (p *Pool[T]) release(key string, e *entry[T]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.users--
	if e.users > 0 {
		return
	}
	if e.gone {
		p.close(e.res)
		return
	}
	e.last = time.Now()
	e.timer = time.AfterFunc(p.idle, func() { p.expire(key, e) })
}

// expire releases e if it is still idle.
func (p *Pool[T]) expire(key string, e *entry[T]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries[key] != e || e.users > 0 || e.timer == nil {
		return
	}
	delete(p.entries, key)
	p.close(e.res)
}

// evictLocked releases the resource idle the longest; false when every
// one has a command running.
func (p *Pool[T]) evictLocked() bool {
	var oldKey string
	var old *entry[T]
	for k, e := range p.entries {
		if e.users == 0 && (old == nil || e.last.Before(old.last)) {
			oldKey, old = k, e
		}
	}
	if old == nil {
		return false
	}
	if old.timer != nil {
		old.timer.Stop()
	}
	delete(p.entries, oldKey)
	p.close(old.res)
	return true
}

// Forget releases the resource of sessionID: at once when no command of
// the session uses it, else when the last one ends. The session's next
// command gets a new one.
func (p *Pool[T]) Forget(sessionID string) {
	key := Key(sessionID)
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[key]
	if e == nil {
		return
	}
	delete(p.entries, key)
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.gone = true
	if e.users == 0 {
		p.close(e.res)
	}
}

// Held returns the resources held (for tests and the log).
func (p *Pool[T]) Held() []T {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []T
	for _, e := range p.entries {
		out = append(out, e.res)
	}
	return out
}

// SetIdle changes the idle time of releases from now on (tests).
func (p *Pool[T]) SetIdle(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = d
}
