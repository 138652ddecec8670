package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// DefaultHookCallTimeout bounds one call to a hook plugin when
// HookHostConfig.CallTimeout is zero.
const DefaultHookCallTimeout = 2 * time.Second

// HookHostConfig says which hook plugin binary a HookHost runs and how.
type HookHostConfig struct {
	// Path of the hook binary. Required.
	Path string
	// Name labels logs and errors; default: the binary's base name.
	Name string
	// SHA256 pins the binary (hex); empty means unpinned.
	SHA256 string
	// Logger receives the plugin's own log lines.
	Logger hclog.Logger
	// Env is added to the plugin's environment (for example
	// ALEPH_HOOK_CONFIG with the hook's JSON configuration).
	Env []string
	// Args are extra arguments for the plugin binary.
	Args []string
	// CallTimeout bounds each Describe, Before and After call; a plugin
	// that has not answered by then is killed. 0 means
	// DefaultHookCallTimeout.
	CallTimeout time.Duration
	// StartTimeout bounds the plugin handshake; 0 uses driverapi's default.
	StartTimeout time.Duration
}

// HookHost is a driverapi.AfterHook backed by a hook plugin process. It
// launches the plugin on first use and keeps it; a plugin that crashes,
// hangs past the call deadline or answers garbage fails that call with a
// *HookPluginError and is killed, and the next call launches a fresh one.
// Close kills it and waits until no plugin process is left.
type HookHost struct {
	cfg    HookHostConfig
	logger hclog.Logger

	mu     sync.Mutex
	proc   *driverapi.Process
	closed bool
	// kills tracks plugin processes being killed in the background, so a
	// failing call does not wait for a hung plugin's graceful shutdown but
	// Close still leaves no process behind.
	kills sync.WaitGroup
}

var _ driverapi.AfterHook = (*HookHost)(nil)

// NewHookHost checks cfg; it does not start the plugin.
func NewHookHost(cfg HookHostConfig) (*HookHost, error) {
	if cfg.Path == "" {
		return nil, &core.HookPluginError{Hook: "(none)", Op: "configure", Err: errors.New("no hook plugin path")}
	}
	if cfg.Name == "" {
		cfg.Name = strings.TrimSuffix(filepath.Base(cfg.Path), ".exe")
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultHookCallTimeout
	}
	l := cfg.Logger
	if l == nil {
		l = hclog.NewNullLogger()
	}
	return &HookHost{cfg: cfg, logger: l.Named(cfg.Name)}, nil
}

// Name is the hook plugin's name.
func (h *HookHost) Name() string { return h.cfg.Name }

// Pid is the running plugin's process id, or 0 when none runs.
func (h *HookHost) Pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil || h.proc.Exited() {
		return 0
	}
	return h.proc.Pid()
}

func (h *HookHost) get(ctx context.Context) (*driverapi.Process, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, &core.HookPluginError{Hook: h.cfg.Name, Op: "start", Err: errors.New("hook host is closed")}
	}
	if h.proc != nil && !h.proc.Exited() {
		return h.proc, nil
	}
	if h.proc != nil {
		h.logger.Warn("hook plugin process has exited; launching a new one")
		h.killLocked()
	}
	p, err := driverapi.LaunchHook(ctx, driverapi.LaunchConfig{
		Path:         h.cfg.Path,
		SHA256:       h.cfg.SHA256,
		Logger:       h.logger,
		StartTimeout: h.cfg.StartTimeout,
		Env:          h.cfg.Env,
		Args:         h.cfg.Args,
	})
	if err != nil {
		return nil, &core.HookPluginError{Hook: h.cfg.Name, Op: "start", Err: err}
	}
	if p.Hook() == nil {
		p.Kill()
		return nil, &core.HookPluginError{Hook: h.cfg.Name, Op: "start", Err: errors.New("plugin does not serve a hook")}
	}
	h.proc = p
	return p, nil
}

// killLocked forgets the current process and kills it in the background.
// h.mu must be held.
func (h *HookHost) killLocked() {
	p := h.proc
	h.proc = nil
	if p == nil {
		return
	}
	h.kills.Add(1)
	go func() {
		defer h.kills.Done()
		p.Kill()
	}()
}

// discard kills p if it is still the current process.
func (h *HookHost) discard(p *driverapi.Process) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == p {
		h.killLocked()
	}
}

// call runs fn against the plugin with the call deadline and classifies
// failures. Any failure of the plugin itself discards the process.
func call[T any](ctx context.Context, h *HookHost, op string, fn func(context.Context, *driverapi.Process) (T, error)) (T, error) {
	var zero T
	p, err := h.get(ctx)
	if err != nil {
		return zero, err
	}
	cctx, cancel := context.WithTimeout(ctx, h.cfg.CallTimeout)
	defer cancel()
	out, err := fn(cctx, p)
	if err == nil {
		return out, nil
	}
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller gave up: not the plugin's fault, keep it.
		return zero, &core.HookPluginError{Hook: h.cfg.Name, Op: op, Err: ctx.Err()}
	case errors.Is(cctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		// Whose deadline it was (ours or the caller's) does not matter: a
		// plugin that has not answered may never answer, so it is replaced
		// rather than left to fail every later call too.
		h.logger.Error("hook plugin hung; killing it", "op", op, "timeout", h.cfg.CallTimeout)
		h.discard(p)
		return zero, &core.HookPluginError{Hook: h.cfg.Name, Op: op, Err: fmt.Errorf("%w (%s)", core.ErrHookHung, h.cfg.CallTimeout)}
	case errors.Is(err, driverapi.ErrPluginDied) || p.Exited():
		h.logger.Error("hook plugin died", "op", op, "error", err)
		h.discard(p)
		return zero, &core.HookPluginError{Hook: h.cfg.Name, Op: op,
			Err: fmt.Errorf("plugin process died (it will be relaunched for the next command): %w", driverapi.ErrPluginDied)}
	}
	var ie *driverapi.InvalidSpecError
	if errors.As(err, &ie) && ie.Field == "verdict.action" {
		// A plugin that answers nonsense is not trusted with the next
		// command either.
		h.logger.Error("hook plugin answered garbage; killing it", "op", op, "error", err)
		h.discard(p)
	}
	return zero, &core.HookPluginError{Hook: h.cfg.Name, Op: op, Err: err}
}

// Describe asks the plugin for its name.
func (h *HookHost) Describe(ctx context.Context) (driverapi.HookInfo, error) {
	return call(ctx, h, "Describe", func(c context.Context, p *driverapi.Process) (driverapi.HookInfo, error) {
		return p.Hook().Describe(c)
	})
}

// Before asks the plugin for a verdict. Only allow, warn and deny are
// verdicts; anything else is an error.
func (h *HookHost) Before(ctx context.Context, req driverapi.HookRequest) (driverapi.Verdict, error) {
	var proc *driverapi.Process
	v, err := call(ctx, h, "Before", func(c context.Context, p *driverapi.Process) (driverapi.Verdict, error) {
		proc = p
		return p.Hook().Before(c, req)
	})
	if err != nil {
		return driverapi.Verdict{}, err
	}
	switch v.Action {
	case driverapi.ActionAllow, driverapi.ActionWarn, driverapi.ActionDeny:
		return v, nil
	}
	h.discard(proc)
	return driverapi.Verdict{}, &core.HookPluginError{Hook: h.cfg.Name, Op: "Before",
		Err: fmt.Errorf("plugin answered with unknown action %d", v.Action)}
}

// After tells the plugin a command it allowed has ended. Best effort: a
// plugin that is not running is not started for it.
func (h *HookHost) After(ctx context.Context, sessionID, commandID string, ran bool) {
	h.mu.Lock()
	p := h.proc
	h.mu.Unlock()
	if p == nil || p.Exited() {
		return
	}
	_, _ = call(ctx, h, "After", func(c context.Context, p *driverapi.Process) (struct{}, error) {
		p.Hook().After(c, sessionID, commandID, ran)
		return struct{}{}, c.Err()
	})
}

// Close kills the plugin and waits until no plugin process of this host is
// left. Calls after Close fail.
func (h *HookHost) Close() error {
	h.mu.Lock()
	h.closed = true
	h.killLocked()
	h.mu.Unlock()
	h.kills.Wait()
	return nil
}
