package core

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func (h *hookEntry) label(ctx context.Context, timeout time.Duration) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.name != "" {
		return h.name, nil
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	info, err := callWithDeadline(dctx, func(c context.Context) (driverapi.HookInfo, error) { return h.hook.Describe(c) })
	if err != nil {
		return fmt.Sprintf("hook#%d", h.idx), err
	}
	if info.Name == "" {
		info.Name = fmt.Sprintf("hook#%d", h.idx)
	}
	h.name = info.Name
	return h.name, nil
}

// callWithDeadline runs f and gives up at ctx's deadline even if f ignores
// ctx: a stuck in-process hook must not hold a command forever.
func callWithDeadline[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		// A panicking in-process hook fails its command (closed), not the host.
		defer func() {
			if p := recover(); p != nil {
				var zero T
				ch <- res{zero, fmt.Errorf("panic: %v", p)}
			}
		}()
		v, err := f(ctx)
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		if r.err == nil && ctx.Err() != nil {
			var zero T
			return zero, ctx.Err()
		}
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func (s *WorkspaceSandbox) hookRequest(sid, cid, cwd string, cmd Command) driverapi.HookRequest {
	names := make([]string, 0, len(cmd.Env)+len(cmd.Secrets))
	for n := range cmd.Env {
		names = append(names, n)
	}
	for n := range cmd.Secrets {
		names = append(names, n)
	}
	sort.Strings(names)
	req := driverapi.HookRequest{
		// Copies: a hook must not be able to change what then runs.
		SessionID: sid, CommandID: cid, Program: cmd.Program, Args: append([]string(nil), cmd.Args...),
		Cwd: cwd, Capabilities: cloneCaps(cmd.Capabilities), EnvNames: names,
	}
	// Hooks scan stdin (the "sh -s" script path) as text, bounded. Bytes
	// that are not UTF-8 become spaces: a shell runs the text around them
	// all the same, so one stray byte must not hide the whole script from
	// the policy.
	if in := cmd.Stdin; len(in) > 0 {
		if len(in) > driverapi.MaxHookStdinBytes {
			in = trimPartialRune(in[:driverapi.MaxHookStdinBytes])
		}
		req.Stdin = bytes.ToValidUTF8(in, []byte(" ")) // a copy
	}
	return req
}

// runHooks runs the before-hooks in order and returns those that allowed
// (for After).
func (s *WorkspaceSandbox) runHooks(ctx context.Context, r *run, sid, cwd string, cmd Command) ([]*hookEntry, error) {
	if len(s.hooks) == 0 {
		return nil, nil
	}
	timeout := time.Duration(s.cfg.Sandbox.HookTimeoutMS) * time.Millisecond
	req := s.hookRequest(sid, r.rec.CommandID, cwd, cmd)
	var allowed []*hookEntry
	for _, h := range s.hooks {
		name, err := h.label(ctx, timeout)
		if err != nil {
			return allowed, &HookError{Hook: name, Err: fmt.Errorf("describe: %w", hookCause(err, timeout))}
		}
		limit := timeout
		if wh, ok := h.hook.(driverapi.WaitingHook); ok {
			// A queue's wait is not a hook that fails to answer.
			limit += wh.MaxWait()
		}
		hctx, cancel := context.WithTimeout(ctx, limit)
		v, err := callWithDeadline(hctx, func(c context.Context) (driverapi.Verdict, error) { return h.hook.Before(c, req) })
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return allowed, ctx.Err()
			}
			// A capacity limit the hook enforces (its queue is full, or
			// the wait is over): resource_exhausted naming the limit, not
			// a failing hook. Nothing runs either way.
			var le *driverapi.LimitError
			if errors.As(err, &le) {
				return allowed, fmt.Errorf("hook %s: %w", name, le)
			}
			return allowed, &HookError{Hook: name, Err: hookCause(err, timeout)}
		}
		v.Hook = name
		switch v.Action {
		case driverapi.ActionAllow:
			allowed = append(allowed, h)
			r.verdicts = append(r.verdicts, v)
		case driverapi.ActionWarn:
			allowed = append(allowed, h)
			r.verdicts = append(r.verdicts, v)
			r.rec.Reason = ReasonHookWarned
			s.logger.Warn("hook warned", "hook", name, "rule", v.Rule, "reason", v.Reason, "command_id", r.rec.CommandID)
		case driverapi.ActionDeny:
			r.verdicts = append(r.verdicts, v)
			return allowed, &DeniedError{Code: ReasonHookDenied, Reason: v.Reason, Rule: v.Rule, Hook: name, RetryAfter: v.RetryAfter}
		default:
			return allowed, &HookError{Hook: name, Err: fmt.Errorf("unknown verdict action %d", v.Action)}
		}
	}
	return allowed, nil
}

func hookCause(err error, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s (sandbox.hook_timeout_ms): %w", timeout, err)
	}
	return err
}

func (s *WorkspaceSandbox) afterHooks(ctx context.Context, allowed []*hookEntry, sid, cid string, ran *bool) {
	if len(allowed) == 0 {
		return
	}
	// After must run even when the command's context was cancelled: a hook
	// holding a concurrency slot would otherwise leak it.
	timeout := time.Duration(s.cfg.Sandbox.HookTimeoutMS) * time.Millisecond
	base := context.WithoutCancel(ctx)
	for _, h := range allowed {
		ah, ok := h.hook.(driverapi.AfterHook)
		if !ok {
			continue
		}
		actx, cancel := context.WithTimeout(base, timeout)
		_, _ = callWithDeadline(actx, func(c context.Context) (struct{}, error) { ah.After(c, sid, cid, *ran); return struct{}{}, nil })
		cancel()
	}
}
