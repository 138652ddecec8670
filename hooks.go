package alephsandbox

import (
	"context"
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

// hookKind is one of the hooks this project ships, declared once: its
// name, the configuration section it owns, the binary that serves it as a
// plugin, the configuration it reads (the JSON that plugin gets as
// ALEPH_HOOK_CONFIG, and what the in-process hook is built from) and its
// in-process constructor. Adding a hook is adding an entry to shippedHooks.
type hookKind struct {
	name    string
	section string
	plugin  string
	// config is the hook's own configuration as cfg gives it, for the
	// plugin (which runs it whatever the section's "enabled" says: listing
	// the plugin is asking for it).
	config func(cfg core.Config) (any, error)
	// build is the in-process hook, or nil when the configuration leaves it
	// out of the pipeline.
	build func(cfg core.Config, b hookBuild) (driverapi.Hook, error)
}

// hookBuild is what a constructor may use besides the configuration.
type hookBuild struct {
	logger hclog.Logger
	policy *PolicyChecker // the command policy, built once per runtime
	noRate bool
}

// shippedHooks are the in-process hooks in the pipeline's order: command
// policy first, then rate limit.
func shippedHooks() []hookKind {
	return []hookKind{
		{
			name: commandpolicy.HookName, section: "sandbox.command_policy", plugin: "aleph-hook-commandpolicy",
			config: func(cfg core.Config) (any, error) {
				c, err := CommandPolicyConfig(cfg)
				c.Enabled = true
				return c, err
			},
			build: func(cfg core.Config, b hookBuild) (driverapi.Hook, error) {
				c, err := CommandPolicyConfig(cfg)
				if err != nil || !c.Enabled {
					return nil, err
				}
				return b.policy.hook, nil
			},
		},
		{
			name: ratelimit.HookName, section: "sandbox.rate_limit", plugin: "aleph-hook-ratelimit",
			// The same type the in-process hook is built from, so the
			// plugin and the in-process hook cannot read the section
			// differently.
			config: func(cfg core.Config) (any, error) { return RateLimitConfig(cfg) },
			build: func(cfg core.Config, b hookBuild) (driverapi.Hook, error) {
				rl, err := RateLimitConfig(cfg)
				if err != nil || !rl.Enabled || b.noRate {
					return nil, err
				}
				return ratelimit.New(rl, ratelimit.WithLogger(b.logger.Named("rate_limit")))
			},
		},
	}
}

// hooksFromConfig builds the in-process hooks (shippedHooks, in order)
// and the hook plugins, in the pipeline's order.
func hooksFromConfig(cfg core.Config, b hookBuild) ([]driverapi.Hook, func(), error) {
	var hooks []driverapi.Hook
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for _, k := range shippedHooks() {
		h, err := k.build(cfg, b)
		if err != nil {
			return nil, closeAll, err
		}
		if h != nil {
			hooks = append(hooks, h)
		}
	}
	for _, path := range cfg.Sandbox.HookPlugins {
		env, err := hookPluginEnv(cfg, path)
		if err != nil {
			closeAll()
			return nil, func() {}, err
		}
		hh, err := pluginhost.NewHookHost(pluginhost.HookHostConfig{Path: path, Logger: b.logger, Env: env, CallTimeout: time.Duration(cfg.Sandbox.HookTimeoutMS) * time.Millisecond})
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
	bin := strings.TrimSuffix(filepath.Base(path), ".exe")
	for _, k := range shippedHooks() {
		if k.plugin != bin {
			continue
		}
		v, err := k.config(cfg)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("hook plugin %s: configuration: %w", path, err)
		}
		return []string{"ALEPH_HOOK_CONFIG=" + string(b)}, nil
	}
	return nil, nil
}

// MaxPolicyStdin is the most of a command's stdin the command policy
// scans, in bytes.
const MaxPolicyStdin = commandpolicy.MaxScanStdin

// PolicyChecker is the command policy of a configuration on its own, for
// "would this command be refused" questions (`policy check`, the service's
// CheckPolicy). A Runtime's PolicyChecker is the very hook its pipeline
// runs, built once.
type PolicyChecker struct {
	hook *commandpolicy.Hook
}

// NewPolicyChecker builds cfg's command policy ([sandbox.command_policy]).
// A custom rule that does not compile is logged (WithLogger), written as
// one warning line (WithWarnings), and the policy falls back to the
// curated default rules: it is never weaker than configured. Other options
// are ignored.
func NewPolicyChecker(cfg core.Config, opts ...Option) *PolicyChecker {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return newPolicyChecker(cfg, o.logger, o.warn)
}

func newPolicyChecker(cfg core.Config, logger hclog.Logger, warn io.Writer) *PolicyChecker {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if warn == nil {
		warn = io.Discard
	}
	c, err := CommandPolicyConfig(cfg)
	var errs []error
	if err != nil {
		// LoadConfig and New refuse such a section; a configuration that
		// reaches here unchecked gets the curated rules, blocking: never
		// weaker than what it asked for.
		errs = append(errs, err)
		c = commandpolicy.DefaultConfig()
	}
	h, newErrs := commandpolicy.New(c, logger.Named("command_policy"))
	for _, err := range append(errs, newErrs...) {
		// The hook has already fallen back to the curated defaults: the
		// error is worth a warning line, not a refusal.
		logger.Error("command policy rule refused", "error", err)
		fmt.Fprintf(warn, "aleph-sandbox: warning: %s; using the curated default rules\n", oneLine(err.Error()))
	}
	return &PolicyChecker{hook: h}
}

// Check is the policy's verdict on command as `sh -c COMMAND` with stdin
// would be scanned (at most MaxPolicyStdin bytes of it).
func (p *PolicyChecker) Check(ctx context.Context, command string, stdin []byte) (driverapi.Verdict, error) {
	return p.hook.Before(ctx, driverapi.HookRequest{SessionID: "policy-check", CommandID: "policy-check",
		Program: "sh", Args: []string{"-c", command}, Stdin: stdin})
}

// routedMediator starts each command's proxy on the route the driver
// reports (HostCapabilities.NetworkRoute): the driver, not the host's OS,
// decides how the command reaches the proxy, so a third-party Linux
// driver that shares the host's loopback gets a loopback listener with a
// credential, not bridge addresses nobody serves. A driver that reports no
// route gets the platform's (the bridge on Linux, loopback elsewhere), as
// before routes were reported.
type routedMediator struct {
	m      *proxy.Mediator
	driver driverapi.Driver
}

func (r routedMediator) Start(ctx context.Context, sessionID, commandID string, hosts []string, secrets map[string]string) (core.Mediation, error) {
	hc, err := r.driver.Capabilities(ctx)
	if err != nil {
		return nil, err
	}
	m := *r.m
	switch route := hc.NetworkRoute(); route {
	case driverapi.RouteNamespaceBridge:
		m.Route = proxy.RouteBridge
	case driverapi.RouteHostLoopback:
		m.Route = proxy.RouteHostLoopback
	case "":
		m.Route = proxy.RouteDefault
	default:
		return nil, fmt.Errorf("the driver reports network route %q, which this host does not know (want %q or %q)", route, driverapi.RouteNamespaceBridge, driverapi.RouteHostLoopback)
	}
	p, err := m.StartProxy(ctx, sessionID, commandID, hosts, secrets)
	if err != nil {
		return nil, err
	}
	return p, nil
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
