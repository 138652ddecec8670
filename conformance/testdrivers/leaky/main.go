// Command leaky is a deliberately dishonest driver for the suite's own
// tests: it claims every feature but runs commands with plain os/exec, no
// isolation, and passes its own environment on. The suite must fail it on
// every isolation case.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

const backend = "leaky"

type driver struct{}

func (driver) Capabilities(context.Context) (driverapi.HostCapabilities, error) {
	features := driverapi.KnownFeatures()
	// The suite's own tests add a made-up feature name this way.
	if extra := os.Getenv("LEAKY_EXTRA_FEATURE"); extra != "" {
		features = append(features, extra)
	}
	return driverapi.HostCapabilities{
		Backend: backend, DriverVersion: "0.0.0-test", ProtocolVersion: driverapi.ProtocolVersion,
		Features: features, OS: runtime.GOOS, Arch: runtime.GOARCH,
	}, nil
}

func (driver) ProfileFor(_ context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	data, err := json.Marshal(req)
	return driverapi.NewProfile(backend, data), err
}

func (driver) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	if err := driverapi.ValidateRunSpec(spec); err != nil {
		return driverapi.Exit{}, err
	}
	if err := spec.Profile.Verify(backend); err != nil {
		return driverapi.Exit{}, err
	}
	runCtx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, spec.Program, spec.Args...)
	cmd.Env = os.Environ() // the leak: the host's environment goes through
	for _, e := range spec.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.Dir = spec.Cwd
	cmd.Stdin = bytes.NewReader(spec.Stdin)
	outMax, errMax := driverapi.StreamBudgets(spec.MaxOutputBytes)
	stdout := driverapi.NewBudgetWriter(streams.Stdout, outMax)
	stderr := driverapi.NewBudgetWriter(streams.Stderr, errMax)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = time.Second
	start := time.Now()
	err := cmd.Run()
	exit := driverapi.Exit{Duration: time.Since(start), StdoutBytes: stdout.Total(), StderrBytes: stderr.Total(),
		Truncated: stdout.Truncated() || stderr.Truncated(), TimedOut: runCtx.Err() != nil && ctx.Err() == nil}
	if ctx.Err() != nil {
		return exit, ctx.Err()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
		return exit, err
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
