package service

import (
	"context"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// serveLimits are the server's bounds from cfg's [serve] table, with the
// sandbox's defaults a client is told of (sayDefaults).
func serveLimits(sc core.ServeConfig, cfg core.Config) core.ServeLimits {
	l := sc.Limits(cfg.Sandbox.MaxOutputBytes)
	l.DefaultTimeout = time.Duration(cfg.Sandbox.DefaultTimeoutSeconds) * time.Second
	return l
}

// sayDefaults fills in the service's defaults a client states to its own
// users (mcp --host writes them in its tools' descriptions, as the
// in-process server writes its configuration's): the time limit and the
// output budget of a command that names none, and the output ceiling.
func (s *Server) sayDefaults(resp *hostv1.CapabilitiesResponse) {
	resp.DefaultTimeoutMs = s.limits.DefaultTimeout.Milliseconds()
	resp.MaxOutputBytes = s.limits.MaxOutputBytes
	def := s.limits.DefaultOutputBytes
	if def <= 0 || def > s.limits.MaxOutputBytes {
		// A request naming none gets the ceiling (Server.command).
		def = s.limits.MaxOutputBytes
	}
	resp.DefaultMaxOutputBytes = def
}

// meteredHost is the host as the process table runs it: a process's usage
// (CPU time, peak RSS) is counted in /metrics when it ends, as an Execute
// call's is when it answers, whether or not anyone waits for it.
type meteredHost struct {
	core.Executor
	m *Metrics
}

func (h meteredHost) Execute(ctx context.Context, cmd core.Command) (*core.Output, error) {
	out, err := h.Executor.Execute(ctx, cmd)
	if err == nil && out != nil {
		u := core.UsageOf(out.Exit.Usage)
		h.m.used(&hostv1.CommandUsage{CpuMs: u.CPUMS, MaxRssKb: u.MaxRSSKB, UserMs: u.UserMS, SystemMs: u.SystemMS})
		h.m.violated(ViolationsToPB(out.Exit.Violations), out.Exit.ViolationsDropped)
	}
	return out, err
}
