package sessionpool

import (
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLifecycle: the cap, eviction of the longest idle resource, idle
// expiry, and a forget while a command runs.
func TestLifecycle(t *testing.T) {
	var mu sync.Mutex
	var made []*os.File
	p := New(2, time.Hour, func() (*os.File, error) {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		made = append(made, f)
		mu.Unlock()
		return f, nil
	}, func(f *os.File) { f.Close() })
	closed := func(f *os.File) bool {
		_, err := f.Stat()
		return errors.Is(err, os.ErrClosed)
	}
	a, relA, err := p.Acquire("A")
	if err != nil {
		t.Fatal(err)
	}
	a2, relA2, _ := p.Acquire("A")
	if a2 != a {
		t.Fatal("two commands of one session got different resources")
	}
	b, relB, _ := p.Acquire("B")
	if b == a {
		t.Fatal("two sessions share a resource")
	}
	if _, _, err := p.Acquire("C"); !errors.As(err, new(*FullError)) {
		t.Fatalf("a third session over the cap of 2, both busy: %v", err)
	}
	relA()
	relA() // a second call of one release is a no-op
	if closed(a) {
		t.Fatal("A released while a command still uses it")
	}
	relA2()
	c, relC, err := p.Acquire("C")
	if err != nil || !closed(a) || c == a {
		t.Fatalf("C did not evict idle A: %v (A closed %v)", err, closed(a))
	}
	p.Forget("B")
	if closed(b) {
		t.Fatal("forgetting B closed the resource a command of B still uses")
	}
	relB()
	if !closed(b) {
		t.Fatal("B's resource survived its forget and its last command")
	}
	p.Forget("unknown") // not an error
	p.SetIdle(10 * time.Millisecond)
	relC()
	deadline := time.Now().Add(10 * time.Second)
	for !closed(c) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !closed(c) || len(p.Held()) != 0 {
		t.Fatalf("idle C not released: held %v", p.Held())
	}
	if Key("A") == "A" || strings.Contains(Key("../x"), "/") || len(Key("A")) != 64 {
		t.Errorf("Key %q is not an opaque hash", Key("A"))
	}
}

// TestAdopt: a resource made without a session becomes a session's, which
// its next Acquire gets; a session that has one already keeps its own and
// the adopted one stays the caller's; the cap holds.
func TestAdopt(t *testing.T) {
	open := func() *os.File {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	p := New(1, time.Hour, func() (*os.File, error) { return open(), nil }, func(f *os.File) { f.Close() })
	a := open()
	rel, ok, err := p.Adopt("A", a)
	if err != nil || !ok {
		t.Fatalf("adopt into an empty pool: %v %v", ok, err)
	}
	got, relGot, err := p.Acquire("A")
	if err != nil || got != a {
		t.Fatalf("A's next command got %v (%v), want the adopted resource", got, err)
	}
	other := open()
	defer other.Close()
	if _, ok, err := p.Adopt("A", other); ok || err != nil {
		t.Fatalf("a second resource adopted for A: %v %v", ok, err)
	}
	// Full (cap 1) and A busy: B cannot adopt.
	if _, ok, err := p.Adopt("B", other); ok || !errors.As(err, new(*FullError)) {
		t.Fatalf("adopt over the cap: %v %v", ok, err)
	}
	rel()
	relGot()
	p.Forget("A")
	if _, err := a.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Fatal("the adopted resource outlived its forgotten session")
	}
}
