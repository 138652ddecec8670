package alephsandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/core/proxy"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/commandpolicy"
	"github.com/aleph-sandbox/aleph-sandbox/hooks/ratelimit"
	"github.com/aleph-sandbox/aleph-sandbox/pluginhost"
)

func goos() string { return runtime.GOOS }

// hooksFromConfig builds the in-process hooks (command policy first, then
// rate limit) and the hook plugins, in the pipeline's order.
func hooksFromConfig(cfg core.Config, logger hclog.Logger, warn io.Writer, noRate bool) ([]driverapi.Hook, func(), error) {
	var hooks []driverapi.Hook
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	cp := cfg.Sandbox.CommandPolicy
	if cp.Enabled {
		h, errs := commandpolicy.New(CommandPolicyConfig(cp), logger.Named("command_policy"))
		for _, err := range errs {
			// The hook has already fallen back to the curated defaults: the
			// error is worth a warning line, not a refusal.
			logger.Error("command policy rule refused", "error", err)
			fmt.Fprintf(warn, "aleph-sandbox: warning: %s; using the curated default rules\n", oneLine(err.Error()))
		}
		hooks = append(hooks, h)
	}
	rl, err := RateLimitConfig(cfg)
	if err != nil {
		return nil, closeAll, err
	}
	if rl.Enabled && !noRate {
		h, err := ratelimit.New(rl, ratelimit.WithLogger(logger.Named("rate_limit")))
		if err != nil {
			return nil, closeAll, err
		}
		hooks = append(hooks, h)
	}
	for _, path := range cfg.Sandbox.HookPlugins {
		env, err := hookPluginEnv(cfg, path)
		if err != nil {
			closeAll()
			return nil, func() {}, err
		}
		hh, err := pluginhost.NewHookHost(pluginhost.HookHostConfig{Path: path, Logger: logger, Env: env, CallTimeout: time.Duration(cfg.Sandbox.HookTimeoutMS) * time.Millisecond})
		if err != nil {
			closeAll()
			return nil, func() {}, err
		}
		hooks = append(hooks, hh)
		closers = append(closers, func() { _ = hh.Close() })
	}
	return hooks, closeAll, nil
}

// hookPluginEnv is what a hook plugin is started with: the shipped hooks
// (known by their binary's name) get their section of the configuration as
// ALEPH_HOOK_CONFIG, in the JSON their -config-json flag reads; other
// plugins get nothing. Listing a shipped hook as a plugin runs it: its
// section's "enabled" says only whether it also runs in-process.
func hookPluginEnv(cfg core.Config, path string) ([]string, error) {
	var v any
	switch strings.TrimSuffix(filepath.Base(path), ".exe") {
	case "aleph-hook-commandpolicy":
		c := CommandPolicyConfig(cfg.Sandbox.CommandPolicy)
		c.Enabled = true
		v = c
	case "aleph-hook-ratelimit":
		// The same type the in-process hook is built from, so the plugin
		// and the in-process hook cannot read the section differently.
		rl, err := RateLimitConfig(cfg)
		if err != nil {
			return nil, err
		}
		v = rl
	default:
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("hook plugin %s: configuration: %w", path, err)
	}
	return []string{"ALEPH_HOOK_CONFIG=" + string(b)}, nil
}

// CommandPolicyConfig maps the [sandbox.command_policy] section onto the
// hook's own configuration type (the CLI's `policy check` runs the same).
func CommandPolicyConfig(c core.CommandPolicyConfig) commandpolicy.Config {
	out := commandpolicy.Config{Enabled: c.Enabled, Enforcement: c.Enforcement, UseDefaultRules: c.UseDefaultRules}
	for _, r := range c.CustomRules {
		out.CustomRules = append(out.CustomRules, commandpolicy.Rule{Name: r.Name, Regex: r.Regex, Action: r.Action, Description: r.Description})
	}
	return out
}

// mediatorFromConfig is the managed proxy for AllowHosts commands.
func mediatorFromConfig(cfg core.Config) *proxy.Mediator {
	m := &proxy.Mediator{TLSIntercept: cfg.Sandbox.Network.TLSIntercept}
	for _, si := range cfg.Sandbox.Network.SecretInjections {
		m.Injections = append(m.Injections, proxy.SecretInjection{Host: si.Host, Header: si.Header, Secret: si.Secret, Format: si.Format})
	}
	return m
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}
