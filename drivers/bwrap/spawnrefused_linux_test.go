//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The refused fork of a command without spawn is counted by the driver
// (notify_linux.go) and reported in Exit.SpawnRefused, on every exec path:
// the raw child of a sandbox built for its command, the plain sandbox-init
// child (the terminal path), a prepared sandbox's waiting child, the
// allow_hosts chain and the Landlock tier.

// spawnAttempts are commands that start a process; each must fail without
// spawn, having really run (its own error text shows it ran).
func spawnAttempts(t *testing.T) map[string][]string {
	t.Helper()
	m := map[string][]string{
		"sh background": {"/bin/sh", "-c", "true & wait"},
	}
	// The system's python: the sandbox sees the system directories.
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		m["python subprocess"] = []string{"/usr/bin/python3", "-c", "import subprocess; subprocess.run(['true'])"}
	} else {
		t.Logf("/usr/bin/python3 not installed: its case is not run (%v)", err)
	}
	return m
}

// spawnRun runs argv through d with caps on the path run chooses.
type spawnRun func(t *testing.T, caps driverapi.Capabilities, argv []string) drvResult

// checkSpawnRefused runs the attempts without spawn (refused, counted, the
// command ran), with spawn (the positive control: it works, nothing
// counted), and a command that never forks (nothing counted).
func checkSpawnRefused(t *testing.T, run spawnRun, extra driverapi.Capabilities) {
	t.Helper()
	noSpawn, spawn := extra, extra
	noSpawn.SpawnSubprocess, spawn.SpawnSubprocess = false, true
	for name, argv := range spawnAttempts(t) {
		r := run(t, noSpawn, argv)
		if r.err != nil {
			t.Fatalf("%s without spawn: driver error %v", name, r.err)
		}
		if r.exit.ExitCode == 0 {
			t.Errorf("%s without spawn: exit 0 (stdout %q stderr %q)", name, r.stdout, r.stderr)
		}
		if r.exit.SpawnRefused < 1 {
			t.Errorf("%s without spawn: spawn_refused %d, want >= 1 (stderr %q)", name, r.exit.SpawnRefused, r.stderr)
		}
		// The command itself ran and met the refusal: its own message,
		// not sandbox-init's.
		if r.stderr == "" || strings.Contains(r.stderr, "sandbox-init") {
			t.Errorf("%s without spawn: stderr %q does not show the command running", name, r.stderr)
		}
		r = run(t, spawn, argv)
		if r.err != nil || r.exit.ExitCode != 0 || r.exit.SpawnRefused != 0 {
			t.Errorf("%s with spawn (control): err=%v exit=%d spawn_refused=%d stderr=%q", name, r.err, r.exit.ExitCode, r.exit.SpawnRefused, r.stderr)
		}
	}
	// A command that starts no process (threads are not processes: the
	// Go runtime of sandbox-init and many programs start some).
	r := run(t, noSpawn, []string{"/bin/sh", "-c", "echo no fork"})
	if r.err != nil || r.exit.ExitCode != 0 || r.exit.SpawnRefused != 0 || r.stdout != "no fork\n" {
		t.Errorf("no fork: err=%v exit=%d spawn_refused=%d stdout=%q stderr=%q", r.err, r.exit.ExitCode, r.exit.SpawnRefused, r.stdout, r.stderr)
	}
}

func runOn(d *Driver, ws string) spawnRun {
	return func(t *testing.T, caps driverapi.Capabilities, argv []string) drvResult {
		t.Helper()
		return drvRun(t, context.Background(), d, ws, caps, nil, argv[0], argv[1:]...)
	}
}

func TestSpawnRefusedDirect(t *testing.T) {
	d := testDriver(t, options{Prepared: preparedOff})
	checkSpawnRefused(t, runOn(d, newWorkspace(t)), driverapi.Capabilities{})
}

func TestSpawnRefusedPrepared(t *testing.T) {
	needPreparable(t)
	d := testDriver(t, options{Prepared: preparedAlways})
	ws := newWorkspace(t)
	checkSpawnRefused(t, runOn(d, ws), driverapi.Capabilities{})
	// The runs really went through prepared sandboxes.
	r := drvRun(t, context.Background(), d, ws, driverapi.Capabilities{}, nil, "/bin/sh", "-c", "true & wait")
	if r.exit.Details["prepared"] != "1" || r.exit.SpawnRefused < 1 {
		t.Fatalf("prepared=%q spawn_refused=%d: want a prepared sandbox that counted", r.exit.Details["prepared"], r.exit.SpawnRefused)
	}
}

func TestSpawnRefusedTerminal(t *testing.T) {
	d := testDriver(t, options{})
	ws := newWorkspace(t)
	run := func(t *testing.T, caps driverapi.Capabilities, argv []string) drvResult {
		t.Helper()
		ctx := context.Background()
		prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: caps, Workspace: ws, Cwd: ws})
		if err != nil {
			return drvResult{err: err}
		}
		var out bytes.Buffer
		exit, err := d.RunStream(ctx, driverapi.RunSpec{
			Program: argv[0], Args: argv[1:], Env: pathEnv(), Cwd: ws, Profile: prof,
			Timeout: 20 * time.Second, MaxOutputBytes: 1 << 20, CommandID: t.Name(),
			Tty: &driverapi.WindowSize{Rows: 24, Cols: 80},
		}, driverapi.StreamInput{}, driverapi.Streams{Stdout: &out, Stderr: &out})
		// One stream on a terminal: the command's words are on it.
		s := strings.ReplaceAll(out.String(), "\r\n", "\n")
		return drvResult{exit: exit, err: err, stdout: s, stderr: s}
	}
	checkSpawnRefused(t, func(t *testing.T, caps driverapi.Capabilities, argv []string) drvResult {
		t.Helper()
		r := run(t, caps, argv)
		if argv[len(argv)-1] == "echo no fork" {
			// The terminal's stream is stdout and stderr at once.
			r.stderr = ""
		}
		return r
	}, driverapi.Capabilities{})
}

func TestSpawnRefusedAllowHosts(t *testing.T) {
	d := testDriver(t, options{})
	ctx := context.Background()
	caps, _ := d.Capabilities(ctx)
	if !caps.Has(driverapi.FeatureNetworkViaProxy) {
		if !hasUnavailable(caps, driverapi.FeatureNetworkViaProxy) {
			t.Fatalf("network_via_proxy neither claimed nor explained: %+v", caps)
		}
		t.Skipf("allow_hosts is not available here: %+v", caps.Unavailable)
	}
	ws := newWorkspace(t)
	sock := fakeProxy(t)
	run := func(t *testing.T, req driverapi.Capabilities, argv []string) drvResult {
		t.Helper()
		prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: req, Workspace: ws, Cwd: ws, Proxy: &driverapi.ProxyEndpoint{UnixSocket: sock}})
		if err != nil {
			return drvResult{err: err}
		}
		var out, errb lockedBuf
		exit, err := d.Run(ctx, driverapi.RunSpec{Program: argv[0], Args: argv[1:], Cwd: ws, Profile: prof,
			Timeout: 30 * time.Second, MaxOutputBytes: 1 << 16, Env: pathEnv()}, driverapi.Streams{Stdout: &out, Stderr: &errb})
		return drvResult{exit: exit, err: err, stdout: out.String(), stderr: errb.String()}
	}
	checkSpawnRefused(t, run, driverapi.Capabilities{Network: driverapi.NetworkPolicy{Mode: driverapi.NetworkAllowHosts, Hosts: []string{"example.com"}}})
}

// Named TestTier* so that scripts/test-nonamespaces.sh runs it against a
// host that refuses namespaces.
func TestTierSpawnRefused(t *testing.T) {
	d := tierDriver(t, options{})
	checkSpawnRefused(t, runOn(d, newWorkspace(t)), driverapi.Capabilities{})
}
