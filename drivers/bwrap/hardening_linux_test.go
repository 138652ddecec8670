//go:build linux

package bwrap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// A grant equal to or inside the workspace is dropped from the plan (the
// workspace already gives every right), so bwrap never has to mount one
// directory twice; a grant outside stays and keeps its mode.
func TestGrantWithinWorkspaceDropped(t *testing.T) {
	d := testDriver(t, Options{})
	ws := newWorkspace(t)
	sub := filepath.Join(ws, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := newWorkspace(t)
	if err := os.WriteFile(filepath.Join(outside, "f"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	caps := driverapi.Capabilities{SpawnSubprocess: true, FSRead: []string{ws, sub, outside}, FSWrite: []string{ws, sub}}
	plan, err := BuildPlan(driverapi.ProfileRequest{Workspace: ws, Cwd: ws, Capabilities: caps})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.FSWrite) != 0 || len(plan.FSRead) != 1 || plan.FSRead[0] != outside {
		t.Fatalf("grants read %v write %v, want read [%s] only", plan.FSRead, plan.FSWrite, outside)
	}
	for _, c := range []driverapi.Capabilities{
		{SpawnSubprocess: true, FSRead: []string{ws, outside}},
		{SpawnSubprocess: true, FSWrite: []string{ws}, FSRead: []string{outside}},
		{SpawnSubprocess: true, FSRead: []string{sub, outside}},
	} {
		r := drvRun(t, context.Background(), d, ws, c, nil, "/bin/sh", "-c", "echo w > sub/out && cat "+outside+"/f")
		expectOK(t, r)
		if r.stdout != "outside" {
			t.Fatalf("%+v: read grant content %q", c, r.stdout)
		}
		// The grant outside the workspace stays read-only.
		expectFail(t, drvRun(t, context.Background(), d, ws, c, nil, "/bin/sh", "-c", "echo x > "+outside+"/new"))
	}
	if b, _ := os.ReadFile(filepath.Join(sub, "out")); string(b) != "w\n" {
		t.Fatalf("workspace write did not reach the host: %q", b)
	}
	// A grant into a protected entry is still refused, not dropped.
	git := filepath.Join(ws, ".git")
	if err := os.Mkdir(git, 0o755); err != nil {
		t.Fatal(err)
	}
	var ise *driverapi.InvalidSpecError
	if _, err := BuildPlan(driverapi.ProfileRequest{Workspace: ws, Cwd: ws, Capabilities: driverapi.Capabilities{FSWrite: []string{git}}}); !errors.As(err, &ise) {
		t.Fatalf("write grant on .git: %v", err)
	}
	// A forged plan carrying such a grant is refused before bwrap runs.
	plan.FSWrite = []string{ws}
	data, err := plan.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var pe *driverapi.ProfileError
	if _, err := DecodePlan(data); !errors.As(err, &pe) || !strings.Contains(err.Error(), "lies in the workspace") {
		t.Fatalf("forged grant equal to the workspace: %v", err)
	}
}
