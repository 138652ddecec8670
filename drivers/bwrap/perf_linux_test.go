//go:build linux

package bwrap

import (
	"context"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/internal/cgroup"
)

// Back-to-back commands (the primed v1 move, the fast removal poll) each
// leave no cgroup behind, and each ran in one (positive control).
func TestBackToBackCommandsLeaveNoCgroups(t *testing.T) {
	d := testDriver(t, options{})
	if d.probe().cg.Mode() == cgroup.None {
		t.Skip("no writable cgroups here")
	}
	ctx := context.Background()
	ws := newWorkspace(t)
	prof, err := d.ProfileFor(ctx, driverapi.ProfileRequest{Workspace: ws, Cwd: ws})
	if err != nil {
		t.Fatal(err)
	}
	spec := driverapi.RunSpec{Program: "/bin/true", Cwd: ws, Profile: prof, Timeout: 30 * time.Second,
		MaxOutputBytes: 1 << 20, Env: pathEnv()}
	for i := 0; i < 15; i++ {
		exit, err := d.Run(ctx, spec, driverapi.Streams{})
		if err != nil || exit.ExitCode != 0 {
			t.Fatalf("run %d: %+v %v", i, exit, err)
		}
		cgroupGone(t, d, exit)
	}
}
