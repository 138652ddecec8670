package driverapi

import (
	"slices"
	"strings"
	"sync"
)

// Kinds of Violation.
const (
	// ViolationSpawn: a process start (fork, vfork, clone without
	// CLONE_THREAD) refused because the command may not spawn; Operation
	// is "process_start", Target the syscall's name.
	ViolationSpawn = "spawn"
	// ViolationSyscall: a syscall the sandbox's policy denies; Operation
	// is "syscall", Target its name.
	ViolationSyscall = "syscall"
	// ViolationNetwork: a connection the network policy refused;
	// Operation is "connect" (or "send" for an addressed datagram),
	// Target the destination: host:port, or a unix socket's path.
	ViolationNetwork = "network"
	// ViolationFilesystem: a file-system access the sandbox refused;
	// Operation names the access, Target the path.
	ViolationFilesystem = "filesystem"
)

// ViolationKinds lists every kind of Violation this protocol version
// defines.
func ViolationKinds() []string {
	return []string{ViolationSpawn, ViolationSyscall, ViolationNetwork, ViolationFilesystem}
}

// DefaultMaxViolations is the number of distinct violations a result
// carries when the configuration names none.
const DefaultMaxViolations = 32

// Violation is one thing the sandbox refused a command, counted.
type Violation struct {
	Kind      string `json:"kind"`
	Operation string `json:"operation"`
	Target    string `json:"target,omitempty"`
	Count     int64  `json:"count"`
}

// maxViolationField bounds Operation and Target: a path or a host name
// comes from the command, which must not make the result large.
const maxViolationField = 256

// ViolationLog collects a command's violations, safe for concurrent use
// (a driver records from the goroutines that answer the command's calls).
// Distinct entries past its cap are not kept; their refusals are counted
// in Dropped. The zero value keeps DefaultMaxViolations entries.
type ViolationLog struct {
	// Max is the number of distinct entries kept (0: DefaultMaxViolations;
	// negative: none).
	Max int

	mu      sync.Mutex
	entries []Violation
	dropped int64
}

// Add records one refusal.
func (l *ViolationLog) Add(kind, operation, target string) { l.AddN(kind, operation, target, 1) }

// AddN records n refusals of one kind, operation and target.
func (l *ViolationLog) AddN(kind, operation, target string, n int64) {
	if l == nil || n <= 0 {
		return
	}
	operation, target = clip(operation), clip(target)
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.entries {
		e := &l.entries[i]
		if e.Kind == kind && e.Operation == operation && e.Target == target {
			e.Count += n
			return
		}
	}
	limit := l.Max
	if limit == 0 {
		limit = DefaultMaxViolations
	}
	if len(l.entries) >= limit {
		l.dropped += n
		return
	}
	l.entries = append(l.entries, Violation{Kind: kind, Operation: operation, Target: target, Count: n})
}

// Count is how many refusals of kind were recorded, dropped ones aside.
func (l *ViolationLog) Count(kind string) int64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int64
	for _, e := range l.entries {
		if e.Kind == kind {
			n += e.Count
		}
	}
	return n
}

// Snapshot returns the entries kept, in the order first seen, and the
// number of refusals dropped past the cap.
func (l *ViolationLog) Snapshot() ([]Violation, int64) {
	if l == nil {
		return nil, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries), l.dropped
}

// clip bounds s and makes it valid UTF-8 (a path need not be, a protobuf
// string must).
func clip(s string) string {
	if len(s) > maxViolationField {
		s = s[:maxViolationField]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
