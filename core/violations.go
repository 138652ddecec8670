package core

import (
	"net"
	"strconv"
	"sync"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// refusalTable holds the managed proxy's refusals of the commands running
// now, by command ID, so that each command's result lists them beside
// what its driver reported. A command's proxy decides before it answers
// the command's client, so every refusal of a command that has ended is
// in its log, but for the summaries its proxy writes when it closes
// (counted decisions past the audit budget), which reach the ledger only.
type refusalTable struct {
	mu   sync.Mutex
	logs map[string]*driverapi.ViolationLog
}

// open starts the log of command id; close ends it.
func (t *refusalTable) open(id string) *driverapi.ViolationLog {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.logs == nil {
		t.logs = map[string]*driverapi.ViolationLog{}
	}
	// The proxy's refusals are bounded as the driver's are: a command
	// that asks for many hosts must not grow the log.
	l := &driverapi.ViolationLog{}
	t.logs[id] = l
	return l
}

func (t *refusalTable) close(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.logs, id)
}

// add records a refusal of the proxy of command id (none when it is not
// running: a decision that arrives after the result is in the ledger).
func (t *refusalTable) add(id string, n NetworkAudit) {
	t.mu.Lock()
	l := t.logs[id]
	t.mu.Unlock()
	if l == nil {
		return
	}
	target := n.Host
	if n.Port != 0 {
		target = net.JoinHostPort(n.Host, strconv.Itoa(int(n.Port)))
	}
	// A summary stands for Suppressed decisions like it.
	l.AddN(driverapi.ViolationNetwork, "connect", target, int64(max(n.Suppressed, 1)))
}

// mergeViolations adds the proxy's refusals to what the driver reported
// and bounds the list by sandbox.max_violations: the entries past it are
// dropped, their counts added to ViolationsDropped. The kinds stay the
// driver's: the proxy sees only what goes through it, so network is
// watched only where the driver watches the rest.
func (s *WorkspaceSandbox) mergeViolations(exit *driverapi.Exit, proxy *driverapi.ViolationLog) {
	fromProxy, proxyDropped := proxy.Snapshot()
	all := append(append([]driverapi.Violation(nil), exit.Violations...), fromProxy...)
	dropped := exit.ViolationsDropped + proxyDropped
	limit := s.cfg.Sandbox.MaxViolations
	if len(all) > limit {
		for _, v := range all[limit:] {
			dropped += v.Count
		}
		all = all[:limit]
	}
	if len(all) == 0 {
		all = nil
	}
	exit.Violations, exit.ViolationsDropped = all, dropped
}
