// Command leaky is a deliberately dishonest driver for the suite's own
// tests: it claims every feature but runs commands with plain os/exec, no
// isolation, and passes its own environment on. The suite must fail it on
// every isolation case.
//
// The suite's tests also turn two honest enforcements on and then tell one
// small lie at a time (see lies_test.go), to show that the case written for
// that lie, and only it, catches it:
//
//	LEAKY_RLIMIT_AS=1     max_memory_mb is enforced with RLIMIT_AS
//	LEAKY_SPAWN_GATE=1    spawn_subprocess=false is enforced with seccomp
//	                      (fork, vfork, clone without CLONE_THREAD, clone3)
//	LEAKY_SETID_GATE=1    giving a file a set-user-id or set-group-id bit
//	                      (chmod, fchmod, fchmodat, fchmodat2, or the mode
//	                      of open, openat, creat, mknod) fails with EPERM
//	                      (seccomp)
//	LEAKY_SLOW=DURATION   every Run waits DURATION before it starts the
//	                      command (a slow, honest driver)
//	LEAKY_LIE=memory-3.5x the RLIMIT_AS is 3.5 times the limit asked for
//	LEAKY_LIE=clone3      the spawn gate leaves clone3 open
//	LEAKY_LIE=timeout-5x  the timeout is five times the one asked for
//	LEAKY_LIE=exit-signal an exit status 129..192 is reported as a signal
//	LEAKY_LIE=fd          the command inherits a descriptor of the host's /
//	LEAKY_LIE=setgid      the set-id gate checks the set-user-id bit only
//	LEAKY_LIE=no-fchmod   the set-id gate forgets fchmod (a descriptor's mode)
//	LEAKY_LIE=no-kill     process_tree_kill is not claimed, and cancel and
//	                      timeout return at once, killing nothing (the
//	                      timeout is still reported)
//	LEAKY_LIE=kill-child-only process_tree_kill is not claimed, and cancel
//	                      and timeout kill the direct child only
//	                      (exec.CommandContext's default)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

const backend = "leaky"

type driver struct{}

func (driver) Capabilities(context.Context) (driverapi.HostCapabilities, error) {
	features := driverapi.KnownFeatures()
	if lie := os.Getenv("LEAKY_LIE"); lie == "no-kill" || lie == "kill-child-only" {
		// Honest about the feature, lying about the contract.
		features = slices.DeleteFunc(features, func(f string) bool { return f == driverapi.FeatureProcessTreeKill })
	}
	// The suite's own tests add a made-up feature name this way.
	if extra := os.Getenv("LEAKY_EXTRA_FEATURE"); extra != "" {
		features = append(features, extra)
	}
	// A lie the suite must catch: its loopback is the host's.
	details := map[string]string{driverapi.DetailNetworkNoneLoopback: "session"}
	// The suite's own tests name a proxy route this way, to show that the
	// suite builds the child's proxy address from the route reported.
	if route := os.Getenv("LEAKY_NETWORK_ROUTE"); route != "" {
		details[driverapi.DetailNetworkRoute] = route
	}
	return driverapi.HostCapabilities{
		Backend: backend, DriverVersion: "0.0.0-test", ProtocolVersion: driverapi.ProtocolVersion,
		Features: features, OS: runtime.GOOS, Arch: runtime.GOARCH,
		Details: details,
	}, nil
}

func (driver) ProfileFor(_ context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	// Honest about the protocol, so that only its isolation lies fail.
	if err := driverapi.CheckWorkspaceCwd(req.Workspace, req.Cwd); err != nil {
		return driverapi.Profile{}, err
	}
	data, err := json.Marshal(req)
	return driverapi.NewProfile(backend, data), err
}

func (driver) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	if d, err := time.ParseDuration(os.Getenv("LEAKY_SLOW")); err == nil {
		// A slow but steady driver (a VM per command, say).
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return driverapi.Exit{}, ctx.Err()
		}
	}
	if err := driverapi.ValidateRunSpec(spec); err != nil {
		return driverapi.Exit{}, err
	}
	if err := spec.Profile.Verify(backend); err != nil {
		return driverapi.Exit{}, err
	}
	runCtx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()
	var req driverapi.ProfileRequest
	if err := json.Unmarshal(spec.Profile.Data, &req); err != nil {
		return driverapi.Exit{}, err
	}
	if err := driverapi.CheckWorkspaceCwd(req.Workspace, spec.Cwd); err != nil {
		return driverapi.Exit{}, err
	}
	lie := os.Getenv("LEAKY_LIE")
	if lie == "timeout-5x" {
		cancel()
		runCtx, cancel = context.WithTimeout(ctx, 5*spec.Timeout)
		defer cancel()
	}
	var asBytes uint64
	if mb := req.Capabilities.MaxMemoryMB; mb > 0 && (os.Getenv("LEAKY_RLIMIT_AS") == "1" || lie == "memory-3.5x") {
		asBytes = mb << 20
		if lie == "memory-3.5x" {
			asBytes = asBytes * 7 / 2
		}
	}
	var gates []string
	if !req.Capabilities.SpawnSubprocess && os.Getenv("LEAKY_SPAWN_GATE") == "1" {
		gates = append(gates, "spawn")
		if lie == "clone3" {
			gates[len(gates)-1] = "spawn-no-clone3"
		}
	}
	if os.Getenv("LEAKY_SETID_GATE") == "1" {
		gates = append(gates, "setid")
		switch lie {
		case "setgid":
			gates[len(gates)-1] = "setuid-only"
		case "no-fchmod":
			gates[len(gates)-1] = "setid-no-fchmod"
		}
	}
	gate := strings.Join(gates, ",")
	program, args := spec.Program, spec.Args
	if asBytes > 0 || gate != "" {
		// The limits are set in a helper (this binary again) that then
		// execs the program: os/exec cannot set them on the child itself.
		self, err := os.Executable()
		if err != nil {
			return driverapi.Exit{}, err
		}
		program = self
		args = append([]string{childSetup, strconv.FormatUint(asBytes, 10), gate, "--", spec.Program}, spec.Args...)
	}
	cmd := exec.CommandContext(runCtx, program, args...)
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
	if lie == "fd" {
		root, err := os.Open("/")
		if err != nil {
			return driverapi.Exit{}, err
		}
		defer root.Close()
		cmd.ExtraFiles = []*os.File{root}
	}
	cmd.WaitDelay = time.Second
	start := time.Now()
	var err error
	state := (*os.ProcessState)(nil)
	if lie == "no-kill" {
		state, err = runNoKill(runCtx, cmd)
	} else {
		if lie != "kill-child-only" {
			ownGroup(cmd)
		}
		err = cmd.Run()
		state = cmd.ProcessState
	}
	exit := driverapi.Exit{Duration: time.Since(start), StdoutBytes: stdout.Total(), StderrBytes: stderr.Total(),
		Truncated: stdout.Truncated() || stderr.Truncated(), TimedOut: runCtx.Err() != nil && ctx.Err() == nil}
	if ctx.Err() != nil {
		return exit, ctx.Err()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
		return exit, err
	}
	if state != nil {
		exit.ExitCode = int32(state.ExitCode())
		if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit.Signal = int32(ws.Signal())
			exit.ExitCode = 128 + exit.Signal
		}
		if c := exit.ExitCode; lie == "exit-signal" && exit.Signal == 0 && c > 128 && c <= 192 {
			exit.Signal = c - 128 // the shell's reading of a status, not what happened
		}
	}
	return exit, nil
}

// runNoKill is the no-kill lie: the command starts as a plain process and
// Run returns when ctx or the timeout ends, with nothing killed (an
// exec.Cmd without a context kills nothing). The command and its children
// run on, unsupervised; the suite's cleanup ends them.
func runNoKill(runCtx context.Context, c *exec.Cmd) (*os.ProcessState, error) {
	cmd := exec.Command(c.Path, c.Args[1:]...)
	cmd.Env, cmd.Dir, cmd.Stdin, cmd.Stdout, cmd.Stderr = c.Env, c.Dir, c.Stdin, c.Stdout, c.Stderr
	cmd.ExtraFiles = c.ExtraFiles
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return cmd.ProcessState, err
	case <-runCtx.Done():
		return nil, nil
	}
}

// childSetup is the helper mode: `leaky child-setup AS_BYTES GATE --
// PROGRAM ARGS...` sets the limits and execs the program.
const childSetup = "child-setup"

func main() {
	if len(os.Args) > 5 && os.Args[1] == childSetup && os.Args[4] == "--" {
		as, err := strconv.ParseUint(os.Args[2], 10, 64)
		if err == nil {
			err = setupAndExec(as, os.Args[3], os.Args[5], os.Args[5:])
		}
		os.Stderr.WriteString("leaky child-setup: " + err.Error() + "\n")
		os.Exit(126)
	}
	driverapi.Serve(driver{})
}
