package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/mcpserver"
	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// runMCP is `aleph-sandbox mcp`: an MCP server on stdio whose run_command
// tool runs commands in the sandbox, and whose process tools keep processes
// running across calls (docs/mcp.md).
func runMCP(ctx context.Context, args []string, io stdio) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "TOML config `FILE` (default: $XDG_CONFIG_HOME/aleph-sandbox/config.toml if present)")
	driver := fs.String("driver", "", "driver `NAME|PATH` (default: the platform's)")
	session := fs.String("session", "mcp", "sandbox session `ID` of every call (its workspace and grants)")
	allowSpawn := fs.Bool("allow-spawn", false, "baseline: calls may start subprocesses without asking (a shell command string asks for it); adds to sandbox.session.baseline (\"agent\" has it too)")
	allowNet := fs.String("allow-net", "", "baseline: network `HOST[,HOST...]` or all that calls get without asking")
	yes := fs.Bool("yes", false, "approve elevations beyond the baseline when the client cannot be asked (default: deny)")
	var host hostOptions
	host.register(fs, "run the calls on the aleph-sandbox serve listening at `ADDR` (unix:PATH or tcp:HOST:PORT) instead of a pipeline of this server's own")
	workspace := fs.String("workspace", "", "run every call in this existing `DIR` (the user's project) as the workspace instead of the session's own directory")
	const usageLine = "aleph-sandbox mcp [--config FILE] [--driver NAME|PATH] [--host ADDR [--ca-file FILE] [--cert-file FILE --key-file FILE]] [--session ID] [--workspace DIR] [--allow-spawn] [--allow-net HOSTS] [--yes]"
	if help, err := parseFlagsQuiet(fs, args, io, usageLine); help {
		return 0
	} else if err != nil {
		return fail(io.Err, "mcp: %v (usage: %s)", err, usageLine)
	}
	if fs.NArg() > 0 {
		return fail(io.Err, "mcp: unexpected arguments %q (usage: %s)", fs.Args(), usageLine)
	}
	// Only --host names a service here: mcp does not read
	// $ALEPH_SANDBOX_HOST, so an MCP client's configuration alone says
	// where its commands run.
	if host.addr == "" && host.any() {
		return fail(io.Err, "mcp: --ca-file, --cert-file and --key-file apply with --host tcp:HOST:PORT only")
	}
	var target hostTarget
	if host.addr != "" {
		var err error
		if target, err = parseHostTarget(host.addr); err != nil {
			return fail(io.Err, "mcp: %s", oneLine(err.Error()))
		}
	}
	var cfg core.Config
	if host.addr != "" {
		switch {
		case *cfgPath != "":
			return fail(io.Err, "mcp: --config does not apply with --host: the service's configuration does")
		case *driver != "":
			return fail(io.Err, "mcp: --driver does not apply with --host: the service's driver runs the commands")
		}
	} else {
		var err error
		if cfg, err = loadConfig(*cfgPath, "", *driver); err != nil {
			return fail(io.Err, "mcp: %s", oneLine(err.Error()))
		}
	}
	// The configured baseline (sandbox.session.baseline; with --host the
	// service applies its own), widened by the flags.
	baseline := cfg.SessionBaseline()
	baseline.SpawnSubprocess = baseline.SpawnSubprocess || *allowSpawn
	if *allowNet != "" {
		net, err := alephsandbox.ParseNet(*allowNet, nil)
		if err != nil {
			return fail(io.Err, "mcp: --allow-net: %s", oneLine(requestReason(err)))
		}
		baseline.Network = net
	}
	ws := ""
	if *workspace != "" {
		// Checked here, so that a mistake ends the server at start with
		// its reason instead of failing every call; absolute, as the
		// service takes it. What it may not be (the sandbox's own state,
		// another session's workspace) the pipeline refuses per call.
		var err error
		if ws, err = filepath.Abs(*workspace); err != nil {
			return fail(io.Err, "mcp: --workspace: %v", err)
		}
		if fi, err := os.Stat(ws); err != nil || !fi.IsDir() {
			return fail(io.Err, "mcp: --workspace: %s is not an existing directory (give the project's directory; it is not created)", ws)
		}
	}
	if host.addr != "" {
		return runMCPHost(ctx, io, target, &host.remoteFlags, mcpserver.Config{Session: *session, Baseline: baseline, Fallback: *yes, Version: cliVersion, Workspace: ws})
	}
	mc := mcpserver.Config{Session: *session, Baseline: baseline, Fallback: *yes, Version: cliVersion, Workspace: ws,
		DefaultTimeout: time.Duration(cfg.Sandbox.DefaultTimeoutSeconds) * time.Second, MaxOutputBytes: cfg.Sandbox.MaxOutputBytes}
	// The baseline goes to the pipeline too: calls within it are not
	// approvals, and so are not kept as the session's grants.
	p, err := buildPipeline(cfg, nil, io.Err, mcpserver.RuntimeOptions(mc)...)
	if err != nil {
		return fail(io.Err, "mcp: %s", oneLine(err.Error()))
	}
	defer p.Close()
	// One malformed message is answered (JSON-RPC parse or
	// invalid-request error), never the end of the server.
	t := mcpserver.NewStdioTransport(io.In, io.Out, mcpserver.DefaultMaxLineBytes)
	srv := mcpserver.New(p.sandbox, mc)
	// Before the pipeline closes: the processes the client started end
	// with the server.
	defer srv.Close()
	if err := srv.Run(ctx, t); err != nil && ctx.Err() == nil {
		return fail(io.Err, "mcp: %s", oneLine(err.Error()))
	}
	return 0
}

// runMCPHost is `mcp --host`: the service's configuration, driver,
// baseline and session grants apply. What a run_command call asks beyond
// the service's baseline comes back as an approval request: within this
// server's baseline (--allow-spawn, --allow-net) it is approved for that
// call only (the service keeps no grant of it, so no later command of the
// session inherits this server's flags); beyond it the client is asked,
// or --yes decides, and a yes there is kept as a grant of the session.
func runMCPHost(ctx context.Context, io stdio, target hostTarget, remote *remoteFlags, mc mcpserver.Config) int {
	h, err := remote.pipeline(target)
	if err != nil {
		return fail(io.Err, "mcp: %s", oneLine(err.Error()))
	}
	mc.Processes = h
	mc.Host = "unix:" + target.sock
	if target.tcp != "" {
		mc.Host, mc.HostOptions = target.String(), remote.args()
	}
	// The service's real defaults go in the tools' descriptions, as the
	// in-process server's configuration does. A service not up yet (or
	// too old to say) leaves them unsaid; the calls still work once it is.
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	timeout, maxOut, err := h.Defaults(dctx)
	cancel()
	if err == nil {
		mc.DefaultTimeout, mc.MaxOutputBytes = timeout, maxOut
	} else if hinted := remoteError(target, err); hinted != err {
		// A TCP server that refuses this client's certificate, CA or
		// token will refuse every call: said once on stderr (the MCP
		// client's log) with the option it wants, and the server still
		// starts, so the tools' errors reach the client too.
		fmt.Fprintf(io.Err, "aleph-sandbox: mcp: %s\n", oneLine(hinted.Error()))
	}
	h.Approve = mcpserver.NewApprover(mc)
	srv := mcpserver.New(h, mc)
	// The processes this server started end with it, on the service too.
	defer srv.Close()
	// One malformed message is answered (JSON-RPC parse or
	// invalid-request error), never the end of the server.
	t := mcpserver.NewStdioTransport(io.In, io.Out, mcpserver.DefaultMaxLineBytes)
	if err := srv.Run(ctx, t); err != nil && ctx.Err() == nil {
		return fail(io.Err, "mcp: %s", oneLine(err.Error()))
	}
	return 0
}
