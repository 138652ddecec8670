package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// ApprovalRequester asks someone (a terminal user, a host UI) whether a
// command may have capabilities beyond its session's baseline.
// drivertest.FakeApprover satisfies it.
type ApprovalRequester interface {
	RequestApproval(ctx context.Context, req driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error)
}

// approvalGate turns an elevation request into an outcome: it bounds the
// wait by the approval timeout and fails closed when nobody can be asked.
type approvalGate struct {
	requester ApprovalRequester
	timeout   time.Duration
}

// newApprovalGate returns a gate asking r, waiting at most timeout (which
// must be > 0). A nil r denies every elevation.
func newApprovalGate(r ApprovalRequester, timeout time.Duration) *approvalGate {
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	return &approvalGate{requester: r, timeout: timeout}
}

// Decide asks for approval. It returns ApprovalTimeout when the requester
// does not answer within the timeout (even if it ignores ctx), and
// ApprovalDenied with an explanatory error when there is no requester or it
// failed. A cancelled parent ctx returns ctx.Err().
func (g *approvalGate) Decide(ctx context.Context, req driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error) {
	if g.requester == nil {
		return driverapi.ApprovalDenied, errors.New("no approval requester is configured, so elevations are denied")
	}
	actx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	type answer struct {
		o   driverapi.ApprovalOutcome
		err error
	}
	ch := make(chan answer, 1) // buffered: a late answer must not block the requester
	go func() {
		o, err := g.requester.RequestApproval(actx, req)
		ch <- answer{o, err}
	}()
	select {
	case a := <-ch:
		if ctx.Err() != nil {
			return driverapi.ApprovalDenied, ctx.Err()
		}
		if actx.Err() != nil {
			return driverapi.ApprovalTimeout, nil
		}
		if a.err != nil {
			return driverapi.ApprovalDenied, fmt.Errorf("approval requester failed: %w", a.err)
		}
		switch a.o {
		case driverapi.ApprovalApproved, driverapi.ApprovalApprovedOnce, driverapi.ApprovalDenied, driverapi.ApprovalTimeout:
			return a.o, nil
		}
		return driverapi.ApprovalDenied, fmt.Errorf("approval requester gave unknown outcome %d", a.o)
	case <-actx.Done():
		if ctx.Err() != nil {
			return driverapi.ApprovalDenied, ctx.Err()
		}
		return driverapi.ApprovalTimeout, nil
	}
}

// Summary is one human sentence describing what requested asks for beyond
// baseline, e.g. "this command asks for network access to all hosts".
func Summary(requested, baseline driverapi.Capabilities) string {
	var parts []string
	if extra := pathsOutside(requested.FSRead, append(append([]string{}, baseline.FSRead...), baseline.FSWrite...)); len(extra) > 0 {
		parts = append(parts, "read access to "+strings.Join(extra, ", "))
	}
	if extra := pathsOutside(requested.FSWrite, baseline.FSWrite); len(extra) > 0 {
		parts = append(parts, "write access to "+strings.Join(extra, ", "))
	}
	if !(driverapi.Capabilities{Network: requested.Network}).IsWithin(driverapi.Capabilities{Network: baseline.Network}) {
		switch requested.Network.Mode {
		case driverapi.NetworkAllowAll:
			parts = append(parts, "network access to all hosts")
		case driverapi.NetworkAllowHosts:
			parts = append(parts, "network access to "+strings.Join(requested.Network.Hosts, ", "))
		}
	}
	if requested.SpawnSubprocess && !baseline.SpawnSubprocess {
		parts = append(parts, "permission to start subprocesses")
	}
	if baseline.MaxMemoryMB != 0 && (requested.MaxMemoryMB == 0 || requested.MaxMemoryMB > baseline.MaxMemoryMB) {
		if requested.MaxMemoryMB == 0 {
			parts = append(parts, "no memory limit")
		} else {
			parts = append(parts, fmt.Sprintf("a memory limit of %d MB", requested.MaxMemoryMB))
		}
	}
	if baseline.TimeoutSecs != 0 && (requested.TimeoutSecs == 0 || requested.TimeoutSecs > baseline.TimeoutSecs) {
		parts = append(parts, fmt.Sprintf("a timeout of %d s", requested.TimeoutSecs))
	}
	switch len(parts) {
	case 0:
		return "this command asks for nothing beyond its baseline"
	case 1:
		return "this command asks for " + parts[0]
	}
	return "this command asks for " + strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

func pathsOutside(paths, roots []string) []string {
	var out []string
	for _, p := range paths {
		in := false
		for _, r := range roots {
			if driverapi.PathWithin(p, r) {
				in = true
				break
			}
		}
		if !in {
			out = append(out, p)
		}
	}
	return out
}
