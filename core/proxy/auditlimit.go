package proxy

import (
	"sort"
	"sync"
)

// Audit volume is bounded because the child controls it: every connection
// it opens to the proxy is a decision, and a loop of denied connects (or of
// connects to random subdomains) would otherwise turn into as many audit
// records, flooding the host's log and hiding the records that matter.
//
// The rule: each distinct decision (host, port, protocol, verdict, reason)
// is recorded one by one up to Limits.AuditPerTarget times, and the proxy
// records at most Limits.AuditMax decisions one by one in all. Past either
// bound, decisions are counted instead, and Close reports every count as a
// summary record (Decision.Suppressed) after the last connection has
// ended: no decision goes unaccounted for, only unitemised. Counting takes
// bounded memory: at most auditKeys distinct decisions are counted apart,
// the rest per verdict and reason with the host left empty.

// auditKeys bounds how many distinct decisions are counted apart.
const auditKeys = 4096

type auditKey struct {
	host     string
	port     uint16
	protocol Protocol
	allowed  bool
	reason   ReasonCode
}

type auditCount struct {
	recorded   int // emitted one by one
	suppressed int // counted only
	detail     string
}

// auditLimiter applies the rule above in front of a sink.
type auditLimiter struct {
	sink               func(Decision)
	perKey, total      int
	sessionID, command string

	mu      sync.Mutex
	emitted int
	keys    map[auditKey]*auditCount
	// overflow counts decisions once keys is full (host and port empty).
	overflow map[auditKey]*auditCount
	flushed  bool
}

func newAuditLimiter(sink func(Decision), perKey, total int, sessionID, commandID string) *auditLimiter {
	return &auditLimiter{
		sink: sink, perKey: perKey, total: total, sessionID: sessionID, command: commandID,
		keys: map[auditKey]*auditCount{}, overflow: map[auditKey]*auditCount{},
	}
}

// record emits d or counts it. Safe for concurrent use.
func (a *auditLimiter) record(d Decision) {
	k := auditKey{host: d.Host, port: d.Port, protocol: d.Protocol, allowed: d.Allowed, reason: d.ReasonCode}
	a.mu.Lock()
	if a.flushed {
		// Only Close flushes, once every connection has ended; nothing
		// records after it, but if something did it must not vanish.
		a.sink(d)
		a.mu.Unlock()
		return
	}
	c, ok := a.keys[k]
	if !ok {
		if len(a.keys) >= auditKeys {
			ov := auditKey{protocol: d.Protocol, allowed: d.Allowed, reason: d.ReasonCode}
			if a.overflow[ov] == nil {
				a.overflow[ov] = &auditCount{}
			}
			a.overflow[ov].suppressed++
			a.mu.Unlock()
			return
		}
		c = &auditCount{detail: d.Detail}
		a.keys[k] = c
	}
	if c.recorded >= a.perKey || a.emitted >= a.total {
		c.suppressed++
		a.mu.Unlock()
		return
	}
	c.recorded++
	a.emitted++
	// The sink is called under the lock: records of one proxy reach it in
	// the order they were counted, and a flush cannot overtake one.
	a.sink(d)
	a.mu.Unlock()
}

// flush reports what was counted, one summary record per distinct
// decision, in a stable order.
func (a *auditLimiter) flush() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.flushed = true
	emit := func(m map[auditKey]*auditCount, why string) {
		ks := make([]auditKey, 0, len(m))
		for k, c := range m {
			if c.suppressed > 0 {
				ks = append(ks, k)
			}
		}
		sort.Slice(ks, func(i, j int) bool { return keyLess(ks[i], ks[j]) })
		for _, k := range ks {
			c := m[k]
			detail := why
			if c.detail != "" {
				detail += "; " + c.detail
			}
			a.sink(Decision{
				SessionID: a.sessionID, CommandID: a.command,
				Host: k.host, Port: k.port, Protocol: k.protocol,
				Allowed: k.allowed, ReasonCode: k.reason,
				Detail: detail, Suppressed: c.suppressed,
			})
			c.suppressed = 0
		}
	}
	emit(a.keys, "summary: further identical decisions, not recorded one by one")
	emit(a.overflow, "summary: decisions for targets beyond the per-command audit budget")
}

func keyLess(a, b auditKey) bool {
	switch {
	case a.host != b.host:
		return a.host < b.host
	case a.port != b.port:
		return a.port < b.port
	case a.protocol != b.protocol:
		return a.protocol < b.protocol
	case a.allowed != b.allowed:
		return !a.allowed
	default:
		return a.reason < b.reason
	}
}
