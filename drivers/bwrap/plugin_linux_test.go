//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
)

func launchPlugin(t testing.TB) *driverapi.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := driverapi.LaunchDriver(ctx, driverapi.LaunchConfig{Path: driverBin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

func TestPluginRun(t *testing.T) {
	p := launchPlugin(t)
	d := p.Driver()
	ctx := context.Background()
	caps, err := d.Capabilities(ctx)
	if err != nil || caps.Backend != backend || !caps.Has(driverapi.FeatureFSWriteIsolation) {
		t.Fatalf("capabilities over the wire: %+v %v", caps, err)
	}
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	exit, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/echo", Args: []string{"over", "grpc"}, Cwd: ws, Profile: prof,
		Timeout: 10 * time.Second, MaxOutputBytes: 1024, Env: pathEnv()}, driverapi.Streams{Stdout: &out})
	if err != nil || exit.ExitCode != 0 || out.String() != "over grpc\n" {
		t.Fatalf("%v %+v %q", err, exit, out.String())
	}
}

// A section the driver refuses reaches the host as a typed ConfigError
// naming the key (SetConfig), and nothing runs on it: the driver serves, but
// reports the sandbox unavailable and refuses every profile.
func TestPluginOptionsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := `{"max_pids": 10, "colour": "red"}`
	p, err := driverapi.LaunchDriver(ctx, driverapi.LaunchConfig{Path: driverBin, Env: []string{optionsEnv + "=" + bad}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	caps, err := p.Driver().Capabilities(ctx)
	if err != nil || !caps.Supports(driverapi.CallConfig) || len(caps.Features) != 0 {
		t.Fatalf("a driver on a refused section claims %v (calls %v), %v", caps.Features, caps.Calls, err)
	}
	err = p.Driver().(driverapi.Configurable).SetConfig(ctx, []byte(bad))
	var ce *driverapi.ConfigError
	if !errors.As(err, &ce) || ce.Section != "linux" || ce.Key != "colour" {
		t.Fatalf("want ConfigError on sandbox.linux.colour, got %T %v", err, err)
	}
	ws := newWorkspace(t)
	var ue *driverapi.UnavailableError
	if _, err := p.Driver().ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws}); !errors.As(err, &ue) {
		t.Fatalf("a profile on a refused section: want UnavailableError, got %T %v", err, err)
	}

	// Control: known options start it, and SetConfig confirms them.
	good := `{"max_pids": 10, "cgroup": "none"}`
	p2, err := driverapi.LaunchDriver(ctx, driverapi.LaunchConfig{Path: driverBin, Env: []string{optionsEnv + "=" + good}})
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Kill()
	if err := p2.Driver().(driverapi.Configurable).SetConfig(ctx, []byte(good)); err != nil {
		t.Fatal(err)
	}
	caps, err = p2.Driver().Capabilities(ctx)
	if err != nil || caps.CgroupMode != "none" || caps.Details["max_pids"] != "10" || !caps.Has(driverapi.FeatureFSWriteIsolation) {
		t.Fatalf("%+v %v", caps, err)
	}
	// A different section than the process started with is refused whole.
	if err := p2.Driver().(driverapi.Configurable).SetConfig(ctx, []byte(`{"max_pids": 11, "cgroup": "none"}`)); !errors.As(err, &ce) {
		t.Fatalf("a changed section: want ConfigError, got %T %v", err, err)
	}
}

// Killing the driver process (kill -9, no cleanup of its own) takes every
// sandbox it started with it, daemons included.
func TestDriverDeathKillsSandboxes(t *testing.T) {
	p := launchPlugin(t)
	d := p.Driver()
	ctx := context.Background()
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: driverapi.Capabilities{SpawnSubprocess: true}, Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	marker := uniqueMarker()
	// The dead driver cannot remove its command cgroup; a later driver
	// sweeps it once stale. Remember what existed, to clean up after the
	// test what the killed plugin left.
	local := testDriver(t, options{})
	before := commandCgroups(local)
	done := make(chan error, 1)
	go func() {
		_, err := d.Run(ctx, driverapi.RunSpec{Program: "/bin/sh", Args: []string{"-c", daemonizeScript(marker)}, Cwd: ws,
			Profile: prof, Timeout: time.Minute, MaxOutputBytes: 1024, Env: pathEnv()}, driverapi.Streams{})
		done <- err
	}()
	n, deadline := 0, time.Now().Add(15*time.Second)
	for n < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		n = len(hostMarkerProcs(t, marker))
	}
	if n < 3 {
		t.Fatalf("control: only %d sleepers running", n)
	}
	pid := p.Pid()
	if pid <= 0 {
		t.Fatal("no plugin pid")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitNoMarker(t, marker)
	if err := <-done; err == nil {
		t.Fatal("Run succeeded although its driver died")
	}
	// Only the killed plugin's (named after it): other test processes may
	// run commands meanwhile.
	own := cgroup.Prefix + strconv.Itoa(pid) + "-"
	for dir := range commandCgroups(local) {
		if !before[dir] && strings.HasPrefix(filepath.Base(dir), own) {
			// The last processes may still be exiting: wait a bounded time.
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			for end := time.Now().Add(5 * time.Second); len(b) != 0 && time.Now().Before(end); {
				time.Sleep(10 * time.Millisecond)
				b, _ = os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			}
			if len(b) != 0 {
				t.Errorf("cgroup %s of the dead driver still has members: %q", dir, b)
			}
			_ = os.Remove(dir)
		}
	}
}
