package preparedpool

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

type key struct {
	session string
	profile int
}

type sandbox struct{ key key }

// harness is a pool of fake sandboxes that records what it destroyed.
type harness struct {
	p         *Pool[key, *sandbox]
	mu        sync.Mutex
	destroyed []*sandbox
	gone      chan *sandbox
}

func newHarness() *harness {
	h := &harness{gone: make(chan *sandbox, 64)}
	h.p = New(func(k key) string { return k.session }, func(s *sandbox) {
		h.mu.Lock()
		h.destroyed = append(h.destroyed, s)
		h.mu.Unlock()
		h.gone <- s
	})
	return h
}

func (h *harness) refill(k key, sz Sizes, auto bool) {
	h.p.Refill(k, k.session, sz, auto, nil,
		func() (*sandbox, error) { return &sandbox{key: k}, nil },
		func(error) {})
	h.p.WaitIdle()
}

var long = Sizes{PerProfile: 2, Max: 3, Idle: time.Hour}

func TestRefillCapsAndTake(t *testing.T) {
	h := newHarness()
	a, b := key{"s1", 1}, key{"s1", 2}
	h.refill(a, long, false)
	if total, keys, building := h.p.Counts(); total != 2 || keys != 1 || building != 0 {
		t.Fatalf("after a refill of a: total %d, keys %d, building %d; want 2, 1, 0", total, keys, building)
	}
	// The total cap leaves b one.
	h.refill(b, long, false)
	if total, keys, _ := h.p.Counts(); total != 3 || keys != 2 {
		t.Fatalf("after a refill of b: total %d, keys %d; want 3, 2", total, keys)
	}
	for i := 0; i < 2; i++ {
		s, ok := h.p.Take(a)
		if !ok || s.key != a {
			t.Fatalf("take %d of a: %v %v", i, s, ok)
		}
	}
	if _, ok := h.p.Take(a); ok {
		t.Fatal("a third take of a got a sandbox; two were built")
	}
	st := h.p.Stats()
	if st.Built != 3 || st.Hits != 2 || st.Misses != 1 || st.Waiting != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// In auto mode a key is prepared only once it has been run twice within
// the idle time.
func TestAutoNeedsTwoRuns(t *testing.T) {
	h := newHarness()
	a := key{"s1", 1}
	h.refill(a, long, true)
	if st := h.p.Stats(); st.Built != 0 {
		t.Fatalf("the first run of a key built %d", st.Built)
	}
	h.refill(a, long, true)
	if st := h.p.Stats(); st.Built != 2 {
		t.Fatalf("the second run of a key built %d, want 2", st.Built)
	}
}

func TestRefusedKeyNotPrepared(t *testing.T) {
	h := newHarness()
	a := key{"s1", 1}
	// As in the driver, the key's first run refills before any hand-over
	// of it is counted.
	h.refill(a, long, false)
	for i := 0; i < 2; i++ {
		if _, ok := h.p.Take(a); !ok {
			t.Fatalf("control: take %d of a found none", i)
		}
	}
	for i := 0; i < MaxRefused; i++ {
		if h.p.Refusing(a) {
			t.Fatalf("refusing after %d failed hand-overs", i)
		}
		h.p.NoteHandover(a, false)
	}
	if !h.p.Refusing(a) {
		t.Fatal("not refusing after MaxRefused failed hand-overs")
	}
	h.refill(a, long, false)
	if st := h.p.Stats(); st.Built != 2 {
		t.Fatalf("a refused key was prepared: %+v", st)
	}
	h.p.NoteHandover(a, true)
	h.refill(a, long, false)
	if st := h.p.Stats(); st.Built != 4 {
		t.Fatalf("after a good hand-over the key was not prepared: %+v", st)
	}
}

func TestForgetDestroysOnlyItsSession(t *testing.T) {
	h := newHarness()
	a, b := key{"s1", 1}, key{"s2", 1}
	h.refill(a, Sizes{PerProfile: 2, Max: 4, Idle: time.Hour}, false)
	h.refill(b, Sizes{PerProfile: 2, Max: 4, Idle: time.Hour}, false)
	h.p.Forget("s1")
	h.mu.Lock()
	destroyed := slices.Clone(h.destroyed)
	h.mu.Unlock()
	if len(destroyed) != 2 || destroyed[0].key != a || destroyed[1].key != a {
		t.Fatalf("forget s1 destroyed %v", destroyed)
	}
	if _, ok := h.p.Take(b); !ok {
		t.Fatal("forget s1 took s2's sandboxes too")
	}
	if _, ok := h.p.Take(a); ok {
		t.Fatal("a sandbox of the forgotten session is still handed out")
	}
}

func TestCloseDestroysEverythingAndPreparesNothing(t *testing.T) {
	h := newHarness()
	a := key{"s1", 1}
	h.refill(a, long, false)
	h.p.Close()
	if total, _, _ := h.p.Counts(); total != 0 || len(h.destroyed) != 2 {
		t.Fatalf("after Close: total %d, destroyed %d", total, len(h.destroyed))
	}
	h.refill(a, long, false)
	if st := h.p.Stats(); st.Built != 2 {
		t.Fatalf("a refill after Close built: %+v", st)
	}
}

func TestIdleSandboxExpires(t *testing.T) {
	h := newHarness()
	a := key{"s1", 1}
	h.refill(a, Sizes{PerProfile: 1, Max: 1, Idle: time.Millisecond}, false)
	s := <-h.gone
	if s.key != a {
		t.Fatalf("destroyed %v", s)
	}
	if st := h.p.Stats(); st.Expired != 1 || st.Waiting != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFailedBuildCounted(t *testing.T) {
	h := newHarness()
	a := key{"s1", 1}
	var mu sync.Mutex
	var got []error
	h.p.Refill(a, a.session, long, false, nil,
		func() (*sandbox, error) { return nil, errors.New("no") },
		func(err error) { mu.Lock(); got = append(got, err); mu.Unlock() })
	h.p.WaitIdle()
	mu.Lock()
	defer mu.Unlock()
	if st := h.p.Stats(); st.Failed != 2 || st.Built != 0 || len(got) != 2 {
		t.Fatalf("stats %+v, errors %v", st, got)
	}
	if total, _, _ := h.p.Counts(); total != 0 {
		t.Fatalf("failed builds still counted: %d", total)
	}
}

func TestEndingWaited(t *testing.T) {
	h := newHarness()
	done := h.p.Ending("s1")
	ended := make(chan struct{})
	go func() { h.p.WaitEnded(); close(ended) }()
	select {
	case <-ended:
		t.Fatal("WaitEnded returned while a sandbox was ending")
	default:
	}
	done()
	<-ended
}

// TestWaitingBuildSkippedOnCloseOrForget: a build waiting for its go-ahead
// (a hand-over in progress) when the pool closes, or its session is
// forgotten, builds nothing: it would only be destroyed. The control: the
// same waiting build with neither builds once let go.
func TestWaitingBuildSkippedOnCloseOrForget(t *testing.T) {
	for _, tc := range []struct {
		name   string
		end    func(h *harness)
		builds int
	}{
		{"let go", func(*harness) {}, 1},
		{"closed", func(h *harness) { h.p.Close() }, 0},
		{"forgotten", func(h *harness) { h.p.Forget("s1") }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness()
			after := make(chan struct{})
			var mu sync.Mutex
			built := 0
			h.p.Refill(key{"s1", 1}, "s1", Sizes{PerProfile: 1, Max: 1, Idle: time.Hour}, false, after,
				func() (*sandbox, error) {
					mu.Lock()
					built++
					mu.Unlock()
					return &sandbox{}, nil
				}, func(error) {})
			tc.end(h)
			close(after)
			h.p.WaitIdle()
			mu.Lock()
			defer mu.Unlock()
			if built != tc.builds {
				t.Fatalf("built %d, want %d", built, tc.builds)
			}
			if total, _, building := h.p.Counts(); building != 0 || total != tc.builds {
				t.Fatalf("counts: total %d building %d, want %d 0", total, building, tc.builds)
			}
		})
	}
}
