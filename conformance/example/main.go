// Command example is a minimal third-party aleph-sandbox driver: it runs
// commands with plain os/exec and claims only what that honestly gives
// (an exact environment), so the conformance suite skips every isolation
// case. Copy it as the skeleton of a real backend.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

const backend = "example-exec"

type driver struct{}

func (driver) Capabilities(context.Context) (driverapi.HostCapabilities, error) {
	caps := driverapi.HostCapabilities{
		Backend: backend, DriverVersion: "0.1.0", ProtocolVersion: driverapi.ProtocolVersion,
		Features: []string{driverapi.FeatureEnvIsolation}, OS: runtime.GOOS, Arch: runtime.GOARCH,
	}
	if runtime.GOOS == "windows" {
		caps.Features = nil // os/exec adds SYSTEMROOT to every Windows environment
	}
	// Say why everything else is missing: hosts show this to users.
	for _, f := range driverapi.KnownFeatures() {
		if !caps.Has(f) {
			caps.Unavailable = append(caps.Unavailable, driverapi.Unavailable{
				Feature: f, Reason: "the example driver runs commands without any isolation"})
		}
	}
	return caps, nil
}

// ProfileFor serialises the request: deterministic, and Run can check it.
func (driver) ProfileFor(_ context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	if err := driverapi.CheckWorkspaceCwd(req.Workspace, req.Cwd); err != nil {
		return driverapi.Profile{}, err // canonical paths only: never resolve them here
	}
	data, err := json.Marshal(req)
	return driverapi.NewProfile(backend, data), err
}

func (driver) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	if err := driverapi.ValidateRunSpec(spec); err != nil {
		return driverapi.Exit{}, err
	}
	var req driverapi.ProfileRequest // as ProfileFor checked and serialised it
	if err := spec.Profile.Verify(backend); err != nil {
		return driverapi.Exit{}, err
	} else if err := json.Unmarshal(spec.Profile.Data, &req); err != nil {
		return driverapi.Exit{}, err
	} else if err := driverapi.CheckWorkspaceCwd(req.Workspace, spec.Cwd); err != nil {
		return driverapi.Exit{}, err
	}
	runCtx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, spec.Program, spec.Args...)
	cmd.Env = []string{} // non-nil: nothing from this process's environment
	for _, e := range spec.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.Dir = spec.Cwd
	cmd.Stdin = bytes.NewReader(spec.Stdin) // empty: end-of-file at once
	outMax, errMax := driverapi.StreamBudgets(spec.MaxOutputBytes)
	stdout := driverapi.NewBudgetWriter(streams.Stdout, outMax)
	stderr := driverapi.NewBudgetWriter(streams.Stderr, errMax)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second // a grandchild holding the pipes must not hang Run
	ownGroup(cmd)               // cancel and timeout kill its process group (group_unix.go)
	start := time.Now()
	err := cmd.Run()
	exit := driverapi.Exit{Duration: time.Since(start), StdoutBytes: stdout.Total(), StderrBytes: stderr.Total(),
		Truncated: stdout.Truncated() || stderr.Truncated(), TimedOut: runCtx.Err() != nil}
	if ctx.Err() != nil {
		return exit, ctx.Err() // cancelled by the host
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
		return exit, err // never started, e.g. no such program
	}
	if cmd.ProcessState != nil {
		exit.ExitCode = int32(cmd.ProcessState.ExitCode())
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit.Signal = int32(ws.Signal())
			exit.ExitCode = 128 + exit.Signal
		}
	}
	return exit, nil
}

func main() { driverapi.Serve(driver{}) }
