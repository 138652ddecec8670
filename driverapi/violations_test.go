package driverapi_test

import (
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// TestViolationLogBound: distinct entries are counted, kept up to the cap
// and counted as dropped past it; fields are bounded and valid UTF-8.
func TestViolationLogBound(t *testing.T) {
	l := &driverapi.ViolationLog{Max: 2}
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Add(driverapi.ViolationSyscall, "syscall", "mount")
		}()
	}
	wg.Wait()
	l.Add(driverapi.ViolationSpawn, "process_start", "clone")
	l.AddN(driverapi.ViolationNetwork, "connect", "192.0.2.1:80", 3)
	l.Add(driverapi.ViolationSyscall, "syscall", "mount")
	got, dropped := l.Snapshot()
	if len(got) != 2 || got[0] != (driverapi.Violation{Kind: "syscall", Operation: "syscall", Target: "mount", Count: 11}) ||
		got[1].Target != "clone" || got[1].Count != 1 || dropped != 3 {
		t.Fatalf("got %+v dropped %d", got, dropped)
	}
	if l.Count(driverapi.ViolationSyscall) != 11 {
		t.Fatalf("count %d", l.Count(driverapi.ViolationSyscall))
	}
	var long driverapi.ViolationLog
	long.Add(driverapi.ViolationNetwork, "connect", strings.Repeat("é", 1000)+"\xff")
	v, _ := long.Snapshot()
	if len(v) != 1 || len(v[0].Target) > 256+3 || !utf8.ValidString(v[0].Target) {
		t.Fatalf("target not bounded or not UTF-8: %d bytes", len(v[0].Target))
	}
	var none *driverapi.ViolationLog
	none.Add("spawn", "x", "y")
	if v, d := none.Snapshot(); v != nil || d != 0 {
		t.Fatal("nil log kept something")
	}
}
