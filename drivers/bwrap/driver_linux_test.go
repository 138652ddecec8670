//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// driverBin is the aleph-driver-bwrap binary built by TestMain: it serves
// the plugin tests and is the sandbox-init bound into every sandbox.
var driverBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "aleph-bwrap-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	driverBin = filepath.Join(dir, "aleph-driver-bwrap")
	// Both binaries, side by side as installed: the plugin then runs the
	// small aleph-sandbox-init; in-process tests use the driver binary's
	// own sandbox-init mode (InitBinary: driverBin), so both are exercised.
	build := exec.Command("go", "build", "-buildvcs=false", "-o", dir+"/",
		"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-driver-bwrap",
		"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox-init",
		"github.com/aleph-sandbox/aleph-sandbox/core/proxy/testproxy") // testproxy_linux_test.go
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build driver:", err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	// The binary is bound into sandboxes run as other users too.
	_ = os.Chmod(dir, 0o755)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testDriver returns a driver using the test-built sandbox-init.
//
// ALEPH_TEST_PREPARED (auto, always or off) sets the prepared-sandbox mode
// of every test that does not choose its own: `make test-prepared` runs the
// package with every command handed to a prepared sandbox.
func testDriver(t testing.TB, opts options) *Driver {
	t.Helper()
	if m := os.Getenv("ALEPH_TEST_PREPARED"); m != "" && opts.Prepared == "" {
		opts.Prepared = preparedMode(m)
	}
	if os.Getenv("ALEPH_TEST_SESSION") == "on" && opts.SessionSandbox == "" {
		opts.SessionSandbox = sessionSandboxAlways
	}
	d, err := newDriver(config{Options: opts, InitBinary: driverBin, DriverBinary: driverBin})
	if err != nil {
		t.Fatal(err)
	}
	// As the plugin does when its host stops it: prepared sandboxes, and
	// their cgroups, end with the test instead of with the test binary.
	t.Cleanup(d.Close)
	return d
}

// workspace makes a fresh canonical workspace directory.
func newWorkspace(t testing.TB) string {
	t.Helper()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

type drvResult struct {
	exit   driverapi.Exit
	stdout string
	stderr string
	err    error
}

// run runs program in ws with caps through d.
func drvRun(t testing.TB, ctx context.Context, d *Driver, ws string, caps driverapi.Capabilities, env []driverapi.EnvVar, program string, args ...string) drvResult {
	t.Helper()
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws})
	if err != nil {
		return drvResult{err: err}
	}
	if env == nil {
		env = []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}, {Name: "HOME", Value: ws}}
	}
	var out, errb bytes.Buffer
	exit, err := d.Run(ctx, driverapi.RunSpec{
		Program: program, Args: args, Env: env, Cwd: ws, Profile: prof,
		Timeout: 20 * time.Second, MaxOutputBytes: 1 << 20, CommandID: t.Name(),
	}, driverapi.Streams{Stdout: &out, Stderr: &errb})
	return drvResult{exit: exit, stdout: out.String(), stderr: errb.String(), err: err}
}

// sh runs a shell snippet with subprocesses allowed.
func drvSh(t testing.TB, d *Driver, ws string, script string) drvResult {
	t.Helper()
	return drvRun(t, context.Background(), d, ws, driverapi.Capabilities{SpawnSubprocess: true}, nil, "/bin/sh", "-c", script)
}

func expectOK(t *testing.T, r drvResult) {
	t.Helper()
	if r.err != nil || r.exit.ExitCode != 0 {
		t.Fatalf("want success, got err=%v exit=%+v stdout=%q stderr=%q", r.err, r.exit, r.stdout, r.stderr)
	}
}

func expectFail(t *testing.T, r drvResult) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("driver error %v (want the command itself to fail)", r.err)
	}
	if r.exit.ExitCode == 0 {
		t.Fatalf("want failure, got exit 0 stdout=%q stderr=%q", r.stdout, r.stderr)
	}
}

func TestSmoke(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	r := drvSh(t, d, ws, "echo hello; echo err >&2; exit 3")
	if r.err != nil || r.exit.ExitCode != 3 || r.stdout != "hello\n" || r.stderr != "err\n" {
		t.Fatalf("got %+v", r)
	}
	_ = strings.TrimSpace
}

func TestChooseInit(t *testing.T) {
	if got := chooseInit(driverBin); got != filepath.Join(filepath.Dir(driverBin), initBinaryName) {
		t.Fatalf("installed sibling not chosen: %s", got)
	}
	// A sibling others can write to is not trusted.
	dir := t.TempDir()
	exe := filepath.Join(dir, "aleph-driver-bwrap")
	sib := filepath.Join(dir, initBinaryName)
	for _, p := range []string{exe, sib} {
		if err := os.WriteFile(p, []byte("#!/bin/true\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(dir, 0o755)
	if got := chooseInit(exe); got != sib {
		t.Fatalf("control: trusted sibling not chosen: %s", got)
	}
	os.Chmod(sib, 0o777)
	if got := chooseInit(exe); got != exe {
		t.Fatalf("world-writable sibling chosen")
	}
	os.Remove(sib)
	if err := os.Symlink(exe, sib); err != nil {
		t.Fatal(err)
	}
	if got := chooseInit(exe); got != exe {
		t.Fatalf("symlinked sibling chosen")
	}
	os.Remove(sib)
	if got := chooseInit(exe); got != exe {
		t.Fatalf("missing sibling: %s", got)
	}
}
