// Package drivertest holds test doubles for the driverapi contract: a fake
// driver that runs no real process, a fake approval requester, and an
// in-memory harness that puts a Driver or Hook behind real gRPC (go-plugin's
// test connection) so tests of a host cross the same wire as production.
package drivertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// FakeBackend is the backend name of FakeDriver.
const FakeBackend = "fake"

// FakeDriver is a Driver that interprets a handful of pseudo-programs
// instead of starting processes:
//
//	echo ARG...      writes the args, space-joined, and a newline to stdout
//	stderr ARG...    the same to stderr
//	cat              copies stdin to stdout
//	env              writes NAME=VALUE lines of the given env, sorted
//	exit N           exits with status N
//	signal N         reports death by signal N
//	sleep DURATION   waits (honouring the timeout and cancellation)
//	flood N [err]    writes N bytes to stdout (and N to stderr with "err")
//	crash            ends the whole plugin process (only for subprocess use)
//	fork             starts a process: without spawn_subprocess, refused as
//	                 a driver claiming spawn_refused_report reports it
//	                 (Exit.SpawnRefused 1, a line on stderr, status 1), and
//	                 as a spawn violation (violation_report)
//
// Anything else writes Stdout/Stderr and exits with ExitCode. Every Exit
// carries Details.
type FakeDriver struct {
	Caps     driverapi.HostCapabilities
	Stdout   []byte
	Stderr   []byte
	ExitCode int32
	Details  map[string]string
	// Usage is reported as every command's Exit.Usage.
	Usage driverapi.ResourceUsage
	// Violations are reported in every command's Exit.Violations.
	Violations []driverapi.Violation

	mu       sync.Mutex
	runs     int
	specs    []driverapi.RunSpec
	profiles []driverapi.ProfileRequest
}

var _ driverapi.Driver = (*FakeDriver)(nil)

// FullCapabilities is a fingerprint claiming every known feature.
func FullCapabilities() driverapi.HostCapabilities {
	return driverapi.HostCapabilities{
		Backend:         FakeBackend,
		DriverVersion:   "0.0.0-test",
		ProtocolVersion: driverapi.ProtocolVersion,
		Features:        driverapi.KnownFeatures(),
		OS:              "test",
		Arch:            "test",
	}
}

// Capabilities returns Caps, or FullCapabilities when Caps is empty.
func (f *FakeDriver) Capabilities(context.Context) (driverapi.HostCapabilities, error) {
	if f.Caps.Backend == "" {
		return FullCapabilities(), nil
	}
	return f.Caps, nil
}

// ProfileFor serialises the request deterministically.
func (f *FakeDriver) ProfileFor(_ context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	f.mu.Lock()
	f.profiles = append(f.profiles, req)
	f.mu.Unlock()
	data, err := json.Marshal(req)
	if err != nil {
		return driverapi.Profile{}, err
	}
	return driverapi.NewProfile(FakeBackend, data), nil
}

// Runs is how many times Run was called.
func (f *FakeDriver) Runs() int { f.mu.Lock(); defer f.mu.Unlock(); return f.runs }

// LastSpec is the most recent RunSpec, or the zero value.
func (f *FakeDriver) LastSpec() driverapi.RunSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.specs) == 0 {
		return driverapi.RunSpec{}
	}
	return f.specs[len(f.specs)-1]
}

// LastProfileRequest is the most recent ProfileRequest, or the zero value.
func (f *FakeDriver) LastProfileRequest() driverapi.ProfileRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.profiles) == 0 {
		return driverapi.ProfileRequest{}
	}
	return f.profiles[len(f.profiles)-1]
}

// Run interprets spec.Program as described on FakeDriver.
func (f *FakeDriver) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	f.mu.Lock()
	f.runs++
	f.specs = append(f.specs, spec)
	f.mu.Unlock()
	if err := driverapi.ValidateRunSpec(spec); err != nil {
		return driverapi.Exit{}, err
	}
	if err := spec.Profile.Verify(FakeBackend); err != nil {
		return driverapi.Exit{}, err
	}
	start := time.Now()
	outBudget, errBudget := driverapi.StreamBudgets(spec.MaxOutputBytes)
	stdout := driverapi.NewBudgetWriter(streams.Stdout, outBudget)
	stderr := driverapi.NewBudgetWriter(streams.Stderr, errBudget)
	// Every refusal it makes is a spawn one (fork), and Violations are
	// what a test says the rest were.
	exit := driverapi.Exit{Details: f.Details, Usage: f.Usage, Violations: slices.Clone(f.Violations),
		ViolationKinds: []string{driverapi.ViolationSpawn, driverapi.ViolationSyscall}}
	switch spec.Program {
	case "echo":
		fmt.Fprintln(stdout, strings.Join(spec.Args, " "))
	case "stderr":
		fmt.Fprintln(stderr, strings.Join(spec.Args, " "))
	case "cat":
		_, _ = stdout.Write(spec.Stdin)
	case "env":
		lines := make([]string, 0, len(spec.Env))
		for _, e := range spec.Env {
			lines = append(lines, e.Name+"="+e.Value)
		}
		sort.Strings(lines)
		for _, l := range lines {
			fmt.Fprintln(stdout, l)
		}
	case "exit":
		n, _ := strconv.Atoi(first(spec.Args))
		exit.ExitCode = int32(n)
	case "signal":
		n, _ := strconv.Atoi(first(spec.Args))
		exit.ExitCode, exit.Signal = int32(128+n), int32(n)
	case "sleep":
		d, _ := time.ParseDuration(first(spec.Args))
		t := time.NewTimer(d)
		defer t.Stop()
		deadline := time.NewTimer(spec.Timeout)
		defer deadline.Stop()
		select {
		case <-t.C:
		case <-deadline.C:
			exit.TimedOut, exit.ExitCode, exit.Signal = true, 137, 9
		case <-ctx.Done():
			return driverapi.Exit{}, ctx.Err()
		}
	case "flood":
		n, _ := strconv.Atoi(first(spec.Args))
		chunk := bytes.Repeat([]byte("x"), 4096)
		for w := 0; w < n; w += len(chunk) {
			c := chunk[:min(len(chunk), n-w)]
			_, _ = stdout.Write(c)
			if len(spec.Args) > 1 && spec.Args[1] == "err" {
				_, _ = stderr.Write(c)
			}
		}
	case "crash":
		os.Exit(3)
	case "fork":
		var req driverapi.ProfileRequest
		if err := json.Unmarshal(spec.Profile.Data, &req); err != nil {
			return driverapi.Exit{}, err
		}
		if !req.Capabilities.SpawnSubprocess {
			fmt.Fprintln(stderr, "fork: Operation not permitted")
			exit.ExitCode, exit.SpawnRefused = 1, 1
			exit.Violations = []driverapi.Violation{{Kind: driverapi.ViolationSpawn, Operation: "process_start", Target: "fork", Count: 1}}
		}
	default:
		_, _ = stdout.Write(f.Stdout)
		_, _ = stderr.Write(f.Stderr)
		exit.ExitCode = f.ExitCode
	}
	exit.StdoutBytes, exit.StderrBytes = stdout.Total(), stderr.Total()
	exit.Truncated = stdout.Truncated() || stderr.Truncated()
	exit.Duration = time.Since(start)
	return exit, nil
}

func first(a []string) string {
	if len(a) == 0 {
		return ""
	}
	return a[0]
}

// FakeApprover answers approval requests with a fixed outcome and records
// every request.
type FakeApprover struct {
	Outcome driverapi.ApprovalOutcome
	// Delay, when set, is waited (honouring ctx) before answering.
	Delay time.Duration
	Err   error

	mu       sync.Mutex
	requests []driverapi.ApprovalRequest
}

// RequestApproval records req and returns Outcome.
func (a *FakeApprover) RequestApproval(ctx context.Context, req driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error) {
	a.mu.Lock()
	a.requests = append(a.requests, req)
	a.mu.Unlock()
	if a.Delay > 0 {
		select {
		case <-time.After(a.Delay):
		case <-ctx.Done():
			return driverapi.ApprovalTimeout, nil
		}
	}
	return a.Outcome, a.Err
}

// Requests is every request seen so far.
func (a *FakeApprover) Requests() []driverapi.ApprovalRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]driverapi.ApprovalRequest(nil), a.requests...)
}

// Connect serves d over an in-memory gRPC connection (go-plugin's test
// connection) and returns the client side: every call crosses the real
// wire, including protobuf conversion and streaming.
func Connect(t testing.TB, d driverapi.Driver) driverapi.Driver {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{
		driverapi.PluginDriver: &driverapi.DriverPlugin{Impl: d, Name: "in-memory"},
	})
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(driverapi.PluginDriver)
	if err != nil {
		t.Fatalf("dispense driver: %v", err)
	}
	return raw.(driverapi.Driver)
}

// ConnectHook is Connect for a Hook.
func ConnectHook(t testing.TB, h driverapi.Hook) driverapi.AfterHook {
	t.Helper()
	client, _ := plugin.TestPluginGRPCConn(t, false, map[string]plugin.Plugin{
		driverapi.PluginHook: &driverapi.HookPlugin{Impl: h, Name: "in-memory"},
	})
	t.Cleanup(func() { _ = client.Close() })
	raw, err := client.Dispense(driverapi.PluginHook)
	if err != nil {
		t.Fatalf("dispense hook: %v", err)
	}
	return raw.(driverapi.AfterHook)
}
