//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap"
)

// rawRunner returns a function that runs cmd through bubblewrap alone, with
// exactly the namespace and mount flags the bwrap driver would use for it
// (no sandbox-init, no cgroup, no plugin, no core): the baseline the
// pipeline's cost is measured against. It returns nil, nil when the
// configured driver is not bwrap.
func rawRunner(ctx context.Context, cfg core.Config, cmd core.Command) (func() string, error) {
	path, _, err := core.FindDriver(cfg.Sandbox.Driver, nil)
	if err != nil {
		return nil, err
	}
	if filepath.Base(path) != core.DriverBinaryName("bwrap") {
		return nil, nil
	}
	opts, err := bwrap.ParseOptions(string(cfg.DriverOptions("linux")))
	if err != nil {
		return nil, err
	}
	d, err := bwrap.New(bwrap.Config{Options: opts, DriverBinary: path})
	if err != nil {
		return nil, err
	}
	ws := cmd.Workspace
	if ws == "" {
		ws = filepath.Join(cfg.Sandbox.WorkspaceRoot, core.SessionDirName(cmd.SessionID))
	}
	if ws, err = filepath.EvalSymlinks(ws); err != nil {
		return nil, fmt.Errorf("raw bwrap workspace: %w", err)
	}
	cwd := ws
	if cmd.Cwd != "" {
		cwd = cmd.Cwd
		if !filepath.IsAbs(cwd) {
			cwd = filepath.Join(ws, cwd)
		}
	}
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: cmd.Capabilities, Workspace: ws, Cwd: cwd})
	if err != nil {
		return nil, err
	}
	// The environment core would give the child.
	envm := map[string]string{"PATH": core.DefaultPath, "HOME": ws, "LANG": "C.UTF-8", "TERM": "dumb", "TZ": "UTC"}
	for k, v := range cmd.Env {
		envm[k] = v
	}
	env := make([]driverapi.EnvVar, 0, len(envm))
	for k, v := range envm {
		env = append(env, driverapi.EnvVar{Name: k, Value: v})
	}
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	spec := driverapi.RunSpec{Program: cmd.Program, Args: cmd.Args, Env: env, Stdin: cmd.Stdin, Cwd: cwd,
		Profile: prof, Timeout: time.Minute, MaxOutputBytes: 1 << 20, SessionID: cmd.SessionID, CommandID: "bench-raw"}
	run := func() string {
		c, release, err := d.RawBwrapCommand(ctx, spec)
		if err != nil {
			return "raw bwrap: " + oneLine(err.Error())
		}
		defer release()
		if len(cmd.Stdin) > 0 {
			c.Stdin = bytes.NewReader(cmd.Stdin)
		}
		if err := c.Run(); err != nil {
			return "raw bwrap: " + err.Error()
		}
		return ""
	}
	return run, nil
}
